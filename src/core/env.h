#pragma once
// tgraph's environment switches (TGRAPH_NO_FUSION=1 and the like, every one in
// docs/switches.md): on only when set to "1". CompileOptions::switches sets them for one
// executable instead: its compile and its runs see those values first (SwitchScope, per thread).
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

namespace tg::detail {

/// This thread's overrides (an executable's CompileOptions::switches while it compiles or runs).
inline const std::map<std::string, std::string>*& switch_overrides() {
  thread_local const std::map<std::string, std::string>* current = nullptr;
  return current;
}

/// The value of switch `name`: this thread's override, else the environment; nullptr if unset.
inline const char* env_value(const char* name) {
  if (const auto* o = switch_overrides()) {
    auto it = o->find(name);
    if (it != o->end()) return it->second.c_str();
  }
  return std::getenv(name);
}

/// True when switch `name` is "1".
inline bool env_flag(const char* name) {
  const char* v = env_value(name);
  return v && std::strcmp(v, "1") == 0;
}

/// Installs `overrides` (may be empty) for this thread until destroyed; nests.
class SwitchScope {
 public:
  explicit SwitchScope(const std::map<std::string, std::string>& overrides) : prev_(switch_overrides()) {
    if (!overrides.empty()) switch_overrides() = &overrides;
  }
  ~SwitchScope() { switch_overrides() = prev_; }
  SwitchScope(const SwitchScope&) = delete;
  SwitchScope& operator=(const SwitchScope&) = delete;

 private:
  const std::map<std::string, std::string>* prev_;
};

/// The switches CompileOptions::switches may set (docs/switches.md; tests/check_switches.py
/// keeps the two lists equal). Throws tg::Error naming them when `name` is not one.
void check_switch_name(const std::string& name);

}  // namespace tg::detail
