#pragma once
// tgraph's environment switches (TGRAPH_NO_FUSION=1 and the like): on only when set to "1".
#include <cstdlib>
#include <cstring>

namespace tg::detail {

/// True when environment variable `name` is set to "1".
inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace tg::detail
