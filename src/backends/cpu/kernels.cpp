#include "backends/cpu/kernels.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/reference.h"
#include "ops/op_def.h"

namespace tg::detail {
namespace {

// TGRAPH_LOG_FALLBACK=1 prints to stderr, once per op kind, each op that the fast path declined
// (so it ran in the double-precision reference interpreter).
bool log_fallback() {
  static const bool on = [] {
    const char* v = std::getenv("TGRAPH_LOG_FALLBACK");
    return v && *v && *v != '0';
  }();
  return on;
}

void note_fallback(const Node& n, const std::vector<TensorData>& inputs) {
  static std::mutex mu;
  static std::set<OpKind> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(n.kind).second) return;
  std::string types;
  for (const TensorData& t : inputs) types += (types.empty() ? "" : ", ") + t.type().str();
  std::fprintf(stderr, "[tgraph] reference fallback: %s(%s)\n", op_def(n.kind).name, types.c_str());
}

}  // namespace

std::vector<TensorData> cpu_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& inputs) {
  std::vector<TensorData> out;
  if (cpu_fast_eval(g, n, inputs, out)) return out;
  if (log_fallback()) note_fallback(n, inputs);
  return reference_eval(g, n, inputs);
}

}  // namespace tg::detail
