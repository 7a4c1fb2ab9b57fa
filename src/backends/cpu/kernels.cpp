#include "backends/cpu/kernels.h"

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <mutex>
#include <set>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/reference.h"
#include "core/env.h"
#include "ops/op_def.h"

namespace tg::detail {
namespace {

// TGRAPH_LOG_FALLBACK=1 prints to stderr, once per op kind, each op that the fast path declined
// (so it ran in the double-precision reference interpreter).
bool log_fallback() {
  static const bool on = env_flag("TGRAPH_LOG_FALLBACK");
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

thread_local const std::vector<TensorData>* current_planned = nullptr;

}  // namespace

TensorData cpu_output(size_t i, Shape shape, DType dtype) {
  if (current_planned && i < current_planned->size()) {
    const TensorData& p = (*current_planned)[i];
    if (!p.empty() && p.dtype() == dtype && p.shape() == shape) return p;
  }
  return TensorData(std::move(shape), dtype);
}

PlannedOutputs::PlannedOutputs(const std::vector<TensorData>* planned) : saved_(current_planned) {
  current_planned = planned;
}
PlannedOutputs::~PlannedOutputs() { current_planned = saved_; }

std::vector<TensorData> cpu_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& inputs,
                                 const std::vector<TensorData>* planned) {
  PlannedOutputs scope(planned);
  std::vector<TensorData> out;
  // Empty results need no kernel: a softmax of [2^40, 0] would otherwise walk 2^40 empty rows
  // (found by fuzz_graph_build). Ops with state, effects or regions always run.
  const OpDef& def = op_def(n.kind);
  if (!n.outputs.empty() && !def.has(kStateful) && !def.has(kSideEffects) && !def.has(kHasRegions) &&
      !def.has(kSource)) {
    bool empty = true;  // by the node's static types (dynamic ones: the kernel decides)
    for (int32_t v : n.outputs) empty &= g.type(v).shape.is_static() && g.type(v).shape.num_elements() == 0;
    if (empty) {
      for (int32_t v : n.outputs) out.emplace_back(g.type(v).shape, g.type(v).dtype);
      return out;
    }
  }
  if (!cpu_fast_eval(g, n, inputs, out)) {
    if (log_fallback()) note_fallback(n, inputs);
    out = reference_eval(g, n, inputs);
  }
  // A kernel that allocated (or aliased an input) hands its result over to the arena, so the
  // bytes the plan gave this value are the ones later readers see.
  if (planned)
    for (size_t i = 0; i < out.size() && i < planned->size(); ++i) {
      const TensorData& p = (*planned)[i];
      if (p.empty() || out[i].data() == p.data() || !(out[i].type() == p.type())) continue;
      std::memcpy(const_cast<void*>(p.data()), out[i].data(), p.nbytes());
      out[i] = p;
    }
  return out;
}

}  // namespace tg::detail
