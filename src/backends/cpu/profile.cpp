#include "backends/cpu/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

namespace tg::detail {
namespace {

struct Entry {
  double seconds = 0;
  long long calls = 0;
};

// Prints the table when the program exits (a static's destructor).
struct Profile {
  std::mutex mu;
  std::map<std::string, Entry> entries;
  ~Profile() { print("TGRAPH_PROFILE=1"); }
  void print(const std::string& title) {
    if (entries.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(entries.begin(), entries.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (auto& r : rows)
      if (r.first != "run (total)") total += r.second.seconds;
    std::fprintf(stderr, "[tgraph] profile (%s): %.3f s in steps\n", title.c_str(), total);
    std::fprintf(stderr, "  %-44s %10s %9s %10s %6s\n", "kind", "total ms", "calls", "us/call", "%");
    for (auto& [what, e] : rows)
      std::fprintf(stderr, "  %-44s %10.1f %9lld %10.1f %6.1f\n", what.c_str(), e.seconds * 1e3, e.calls,
                   e.seconds * 1e6 / static_cast<double>(e.calls), total > 0 ? 100 * e.seconds / total : 0.0);
  }
};

Profile& profile() {
  static Profile p;
  return p;
}

}  // namespace

void cpu_profile_flush(const std::string& title) {
  if (!cpu_profiling()) return;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.print(title);
  p.entries.clear();
}

bool cpu_profiling() {
  static const bool on = [] {
    const char* v = std::getenv("TGRAPH_PROFILE");
    bool b = v && *v && *v != '0';
    if (b) (void)profile();  // constructed first, so destroyed (and printed) after other statics' use
    return b;
  }();
  return on;
}

bool profiling_shapes() {
  static const bool on = [] {
    const char* v = std::getenv("TGRAPH_PROFILE");
    return v && std::string(v) == "2";
  }();
  return on;
}

bool profiling_first_runs() {
  static const bool on = [] {
    const char* v = std::getenv("TGRAPH_PROFILE");
    return v && std::string(v) == "first";
  }();
  return on;
}

void cpu_profile_add(const std::string& what, double seconds) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  Entry& e = p.entries[what];
  e.seconds += seconds;
  ++e.calls;
}

}  // namespace tg::detail
