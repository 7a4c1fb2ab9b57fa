// The cuDNN convolution choices' store (conv_choices.h).
#include "backends/cuda/conv_choices.h"

#include <exception>
#include <sstream>

#include "backends/cpu/profile.h"
#include "backends/cuda/library_plans.h"
#include "core/env.h"

namespace tg::detail::conv_choices {
namespace {

// The choice made at the batch size nearest `batch` (by ratio) within a factor of `max_ratio`:
// beyond 4 the best kernels differ (a batch of 1 against 32 ran 1.3x slower with 32's algorithms
// on the H200), and the heuristics are asked instead (a first run may still take one of any
// ratio provisionally: provisional_choice). Not ok when there is none.
Choice nearest_batch(const std::map<int64_t, Choice>& known, int64_t batch, double max_ratio = 4.0) {
  Choice best;
  double best_ratio = max_ratio + 1e-9;
  for (const auto& [b, c] : known) {
    if (!c.ok || b <= 0 || batch <= 0) continue;
    const double r = b > batch ? double(b) / double(batch) : double(batch) / double(b);
    if (r <= best_ratio) best = c, best_ratio = r;
  }
  return best;
}

}  // namespace

Choices& choices() {
  static Choices* c = new Choices;
  return *c;
}

std::string ran_key(const std::string& family, const Choice& c) {
  return family + "|" + std::to_string(c.algo) + "|" + std::to_string(static_cast<int>(c.math));
}

std::string choice_text(const Choice& c) {
  return std::to_string(c.algo) + ' ' + std::to_string(int(c.math)) + ' ' + std::to_string(c.workspace);
}

Choice parse_choice(const std::string& text) {
  std::istringstream in(text);
  int algo = -1, math = -1;
  size_t ws = 0;
  if (!(in >> algo >> math >> ws) || algo < 0 || algo > 64 || math < 0 || math > 3 || ws > kMaxWorkspace) return {};
  return Choice{true, algo, static_cast<cudnnMathType_t>(math), ws};
}

void adopt(const std::string& key, const Choice& choice) {
  cache().try_emplace(key, choice);
  const size_t bar = key.rfind("|n");
  int64_t batch = 0;
  try {
    batch = bar == std::string::npos ? 0 : std::stoll(key.substr(bar + 2));
  } catch (const std::exception&) {
  }
  if (batch > 0) families()[key.substr(0, bar)].try_emplace(batch, choice);
}

std::string disk_key(const std::string& saved) { return env_flag("TGRAPH_CUDNN_FIND") ? saved + "|find" : saved; }

Choice known_choice(const std::string& key, const std::string& saved, const std::string& family, int64_t batch,
                    bool& exact) {
  exact = false;
  if (auto it = cache().find(key); it != cache().end()) {
    exact = true;
    return it->second;
  }
  if (choices().no_reuse.count(key)) return {};
  if (const Choice c = parse_choice(library_choice_from_disk(disk_key(saved))); c.ok) {
    if (profiling_first_runs()) cpu_profile_add("cuda first run: convolution: cuDNN choice read from the disk cache", 0.0);
    families()[family].try_emplace(batch, c);  // this batch size's own answer, for other sizes to reuse
    return c;
  }
  if (env_flag("TGRAPH_CUDNN_FIND") || env_flag("TGRAPH_CUDNN_PER_BATCH")) return {};
  auto f = families().find(family);
  return f == families().end() ? Choice{} : nearest_batch(f->second, batch);
}

Choice provisional_choice(const std::string& family, int64_t batch) {
  if (env_flag("TGRAPH_CUDNN_FIND") || env_flag("TGRAPH_CUDNN_PER_BATCH")) return {};
  auto f = families().find(family);
  if (f == families().end()) return {};
  const Choice c = nearest_batch(f->second, batch, 1e18);
  return c.ok && ran().count(ran_key(family, c)) ? c : Choice{};
}

}  // namespace tg::detail::conv_choices
