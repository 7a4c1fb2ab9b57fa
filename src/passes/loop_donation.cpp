#include "passes/loop_donation.h"

#include <algorithm>
#include <set>
#include <unordered_map>

namespace tg::detail {
namespace {

// A step whose outputs come from one generated elementwise kernel (Run::group in the CUDA
// backend): a fused group, or a lone elementwise op.
bool elementwise_step(const GraphImpl& g, const Step& s) {
  if (s.fused()) return s.is_group();
  return elementwise_kernel_op(g, g.nodes[static_cast<size_t>(s.node)]);
}

}  // namespace

LoopDonation plan_loop_donation(const GraphImpl& g, const std::vector<int32_t>& blocks,
                                const std::vector<const FusionPlan*>& plans, size_t first_param,
                                size_t first_result, bool allow_in_place) {
  const Block& first = g.blocks[static_cast<size_t>(blocks.front())];
  const Block& last = g.blocks[static_cast<size_t>(blocks.back())];
  const size_t states = last.results.size() - first_result;
  LoopDonation d;
  d.into.assign(states, -1);
  d.old.resize(states);

  // A later block's params are bound to the previous block's results.
  std::unordered_map<int32_t, int32_t> bound;
  for (size_t b = 1; b < blocks.size(); ++b) {
    const Block& prev = g.blocks[static_cast<size_t>(blocks[b - 1])];
    const Block& cur = g.blocks[static_cast<size_t>(blocks[b])];
    for (size_t p = 0; p < cur.params.size(); ++p) bound[cur.params[p]] = prev.results[p];
  }
  auto trace = [&](int32_t v) {
    for (auto it = bound.find(v); it != bound.end(); it = bound.find(v)) v = it->second;
    return v;
  };

  // The trip's steps in run order, and the step computing each value (the first: later groups
  // may recompute it inside, passes/fusion_recompute.cpp).
  std::vector<const Step*> steps;
  std::unordered_map<int32_t, size_t> made_at;
  for (const FusionPlan* p : plans)
    for (const Step& s : p->steps) {
      for (int32_t id : step_nodes(s))
        for (int32_t v : g.nodes[static_cast<size_t>(id)].outputs) made_at.emplace(v, steps.size());
      steps.push_back(&s);
    }

  if (first_result == 1) {
    const int32_t p = trace(last.results[0]);
    if (made_at.count(p)) d.predicate = p;
  }
  if (!allow_in_place) return d;

  std::vector<std::set<int32_t>> old(states);
  std::vector<int32_t> src(states);
  for (size_t k = 0; k < states; ++k) {
    old[k].insert(first.params[first_param + k]);
    for (size_t b = 0; b < blocks.size(); ++b) {
      const Block& blk = g.blocks[static_cast<size_t>(blocks[b])];
      if (b > 0)
        for (int32_t p : blk.params)
          if (old[k].count(bound.at(p))) old[k].insert(p);
      for (int32_t id : blk.nodes) {
        const Node& n = g.nodes[static_cast<size_t>(id)];
        if (op_def(n.kind).has(kView) && old[k].count(n.inputs[0])) old[k].insert(n.outputs[0]);
      }
    }
    src[k] = trace(last.results[first_result + k]);
  }

  for (size_t k = 0; k < states; ++k) {
    d.old[k].assign(old[k].begin(), old[k].end());
    auto at = made_at.find(src[k]);
    if (at == made_at.end() || !elementwise_step(g, *steps[at->second])) continue;
    // One state per value: the others copy it from there at the end of the trip.
    if (std::find(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(k), src[k]) !=
        src.begin() + static_cast<std::ptrdiff_t>(k))
      continue;
    bool safe = true;
    // Nothing after the producing step reads the old contents...
    for (size_t j = at->second + 1; j < steps.size() && safe; ++j)
      for (int32_t id : step_nodes(*steps[j])) {
        const Node& n = g.nodes[static_cast<size_t>(id)];
        if (op_def(n.kind).has(kView)) continue;  // no read: its result is in old[k] if it matters
        std::vector<int32_t> reads;
        node_reads(g, n, reads);
        for (int32_t r : reads) safe &= !old[k].count(r);
      }
    // ...nor does the end of the trip, copying them into another state.
    for (size_t j = 0; j < states; ++j) safe &= j == k || !old[k].count(src[j]);
    if (safe) d.into[k] = src[k];
  }
  return d;
}

}  // namespace tg::detail
