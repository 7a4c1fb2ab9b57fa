// Narrowing widened outputs (FusionOptions::stitch_reductions, the CUDA backend): a group whose
// output is a widening cast of a value it has at hand (the f32 view of a bf16 gradient that an
// autocast graph's batch norm backward reads three times) writes the narrow value instead, and
// every reader casts it itself. The cast is recomputed bit for bit where it is read, so nothing
// changes but the bytes: at bf16 -> f32 the write halves and so does each read. recompute_producers
// cannot find this on its own: it weighs one reader at a time against the producer's inputs,
// and a reader that computed the cast from the narrow value would add a write to the producer
// that only pays off once every reader does.
#include <algorithm>
#include <memory>
#include <unordered_map>

#include "passes/fusion.h"
#include "passes/reduce_stitch.h"

namespace tg::detail {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The member of group p computing v, if it is a cast from a narrower value of v's shape.
const Node* widening_cast(const GraphImpl& g, const FusionGroup& p, int32_t v) {
  for (int32_t id : p.nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (n.outputs[0] != v) continue;
    if (n.kind != OpKind::Cast) return nullptr;
    const TensorType& from = g.type(n.inputs[0]);
    const TensorType& to = g.type(v);
    if (!(from.shape == to.shape) || dtype_size(from.dtype) >= dtype_size(to.dtype)) return nullptr;
    return &n;
  }
  return nullptr;
}

// Group c computing the cast itself: the cast's node joins it first, the narrow value replaces
// the wide one among its operands.
void cast_inside(const GraphImpl& g, FusionGroup& c, int32_t cast_node) {
  c.nodes = merge_members({cast_node}, c.nodes);
  c.inputs = outside_reads(g, c.nodes);
}

}  // namespace

void narrow_widened_outputs(const Module& m, int32_t block, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  std::vector<Step>& steps = plan.steps;
  std::vector<int32_t> reads = plan_reads(m, block, plan);
  for (size_t i = 0; i < steps.size(); ++i) {
    FusionGroup p;
    if (!step_group(g, steps[i], p)) continue;
    bool changed = false;
    for (int32_t v : std::vector<int32_t>(p.outputs)) {
      const Node* cast = widening_cast(g, p, v);
      if (!cast) continue;
      const int32_t u = cast->inputs[0];
      const int32_t cast_node = static_cast<int32_t>(cast - g.nodes.data());
      // Every reader must be a later step that can compute the cast: an elementwise group (or
      // lone elementwise op), or a stitched reduction reading v in its prologue or as the input
      // of its reductions. Anything else (a library op, a value leaving the block) needs v written.
      std::vector<size_t> readers;
      bool ok = true;
      for (size_t j = i + 1; j < steps.size() && ok; ++j) {
        if (!contains(step_inputs(g, steps[j]), v)) continue;
        FusionGroup c;
        if (step_group(g, steps[j], c)) {
          ok = c.inputs.size() <= static_cast<size_t>(kMaxFusedOperands) && c.nodes.size() < kMaxGroupMembers;
        } else if (const auto& r = steps[j].reduce) {
          ok = !contains(r->epilogue.inputs, v) && r->prologue.nodes.size() < kMaxGroupMembers;
          for (int32_t id : r->reductions) {
            const Node& red = g.nodes[static_cast<size_t>(id)];
            ok &= std::find(red.inputs.begin() + 1, red.inputs.end(), v) == red.inputs.end();
          }
        } else {
          ok = false;
        }
        readers.push_back(j);
      }
      if (!ok || readers.empty() || reads[static_cast<size_t>(v)] != static_cast<int32_t>(readers.size())) continue;
      for (size_t j : readers) {
        FusionGroup c;
        if (step_group(g, steps[j], c)) {
          cast_inside(g, c, cast_node);
          steps[j] = Step{-1, std::move(c), nullptr, nullptr};
          continue;
        }
        auto r = std::make_shared<ReduceStitch>(*steps[j].reduce);
        bool read_by_reduction = false;
        for (int32_t id : r->reductions) read_by_reduction |= g.nodes[static_cast<size_t>(id)].inputs[0] == v;
        const bool had_prologue = !r->prologue.nodes.empty();
        cast_inside(g, r->prologue, cast_node);
        if (read_by_reduction) r->prologue.outputs = merge_members(r->prologue.outputs, {v});
        std::vector<int32_t> inputs;
        for (int32_t x : r->inputs)
          if (x != v) inputs.push_back(x);
        r->inputs = merge_members(inputs, {u});
        // The same unfused: the prologue group comes first among the pieces.
        if (had_prologue) r->pieces.front() = Step{-1, r->prologue, nullptr, nullptr};
        else r->pieces.insert(r->pieces.begin(), Step{-1, r->prologue, nullptr, nullptr});
        steps[j].reduce = std::move(r);
      }
      p.outputs.erase(std::find(p.outputs.begin(), p.outputs.end(), v));
      if (!contains(p.inputs, u) && !contains(p.outputs, u)) p.outputs.push_back(u);
      changed = true;
      reads = plan_reads(m, block, plan);
      plan.decisions.push_back("group of " + std::to_string(p.nodes.size()) + " writes a value before its widening cast; " +
                               std::to_string(readers.size()) + " readers cast it themselves");
    }
    if (!changed) continue;
    if (p.outputs.empty()) {  // a lone cast of a value written elsewhere: every reader casts it now
      steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      continue;
    }
    p.nodes = group_cone(g, p, p.outputs);
    p.inputs = outside_reads(g, p.nodes);
    steps[i] = Step{-1, std::move(p), nullptr, nullptr};
  }
}

}  // namespace tg::detail
