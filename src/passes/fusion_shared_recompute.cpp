// Recomputing a shared producer in all its readers (FusionOptions::stitch_reductions, after the
// reductions are stitched). recompute_producers decides reader by reader, so a group read by
// two kernels is kept whenever each alone would read more by recomputing it: ReLU's gradient
// select(y <= 0, 0, g) reads two tensors to write one, and the batch norm's sums and its dx each
// read that one -- five passes, where both recomputing it from g and y read four and the
// select's kernel goes (ResNet's backward has 33 of them). Here the choice is made for all the
// readers at once: when every reader of the group's outputs is a group or a stitched
// reduction over the same shape, and what they would read more in all is less than what the
// group reads and writes, each takes the group's members in (a stitch into its prologue) and
// drop_unread_outputs removes the group.
#include <algorithm>
#include <memory>
#include <string>

#include "passes/fusion.h"
#include "passes/reduce_stitch.h"

namespace tg::detail {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The shape a stitch's reductions read at (their inputs' shape).
const Shape* stitch_shape(const GraphImpl& g, const ReduceStitch& st) {
  if (st.reductions.empty()) return nullptr;
  return &g.type(g.nodes[static_cast<size_t>(st.reductions[0])].inputs[0]).shape;
}

}  // namespace

void recompute_shared_producers(const Module& m, int32_t block, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    FusionGroup p;
    if (!plan.steps[i].is_group() || !step_group(g, plan.steps[i], p)) continue;
    const Shape& ps = group_shape(g, p);
    if (!ps.ranked() || !ps.is_static() || p.nodes.size() > 16) continue;  // cheap producers only
    const std::vector<int32_t> reads = plan_reads(m, block, plan);
    // Its readers: later steps reading any of its outputs; all must be able to take it in.
    std::vector<size_t> readers;
    bool ok = true;
    int32_t counted = 0, expected = 0;
    for (int32_t v : p.outputs) expected += reads[static_cast<size_t>(v)];
    for (size_t j = i + 1; j < plan.steps.size() && ok; ++j) {
      const Step& s = plan.steps[j];
      const std::vector<int32_t> in = step_inputs(g, s);
      int32_t here = 0;
      for (int32_t v : p.outputs) here += contains(in, v);
      if (!here) continue;
      counted += here;
      if (s.is_group()) ok = group_shape(g, s.group) == ps;
      else if (s.reduce) {
        ok = stitch_shape(g, *s.reduce) && *stitch_shape(g, *s.reduce) == ps;
        for (int32_t v : p.outputs) ok &= !contains(s.reduce->epilogue.inputs, v);
      }
      else ok = false;
      readers.push_back(j);
    }
    if (!ok || readers.size() < 2 || counted != expected) continue;  // read elsewhere (a target, a library call)
    // Bytes: the group reads its inputs and writes its outputs; each reader would read the
    // group's inputs it does not read already instead of the outputs it reads.
    const int64_t n = ps.num_elements();
    const int64_t cost = full_size_bytes(g, p.inputs, n) + full_size_bytes(g, p.outputs, n);
    int64_t added = 0;
    for (size_t j : readers) {
      const std::vector<int32_t> in = step_inputs(g, plan.steps[j]);
      std::vector<int32_t> gained, lost;
      for (int32_t v : p.inputs)
        if (!contains(in, v)) gained.push_back(v);
      for (int32_t v : p.outputs)
        if (contains(in, v)) lost.push_back(v);
      added += full_size_bytes(g, gained, n) - full_size_bytes(g, lost, n);
    }
    if (added >= cost) continue;
    // Each reader as it would be with the group's members in; all or none.
    std::vector<Step> rewritten;
    for (size_t j : readers) {
      const Step& s = plan.steps[j];
      if (s.is_group()) {
        FusionGroup c = s.group;
        c.nodes = merge_members(p.nodes, c.nodes);
        c.inputs = outside_reads(g, c.nodes);
        if (c.nodes.size() > kMaxGroupMembers || c.inputs.size() > static_cast<size_t>(kMaxFusedOperands)) ok = false;
        rewritten.push_back(Step{-1, std::move(c), nullptr, nullptr});
        continue;
      }
      auto st = std::make_shared<ReduceStitch>(*s.reduce);
      FusionGroup& pro = st->prologue;
      const bool had_prologue = !pro.nodes.empty();
      pro.nodes = merge_members(p.nodes, pro.nodes);
      pro.inputs = outside_reads(g, pro.nodes);
      for (int32_t r : st->reductions) {  // a reduction reading an output of p now reads the prologue's
        const int32_t x = g.nodes[static_cast<size_t>(r)].inputs[0];
        if (contains(p.outputs, x) && !contains(pro.outputs, x)) pro.outputs.push_back(x);
      }
      std::vector<int32_t> inputs;
      for (int32_t v : st->inputs)
        if (!contains(p.outputs, v)) inputs.push_back(v);
      st->inputs = merge_members(inputs, pro.inputs);
      if (pro.nodes.size() > kMaxGroupMembers || st->inputs.size() > static_cast<size_t>(kMaxFusedOperands)) ok = false;
      // The unfused pieces: the prologue group first.
      if (had_prologue) st->pieces[0] = Step{-1, pro, nullptr, nullptr};
      else st->pieces.insert(st->pieces.begin(), Step{-1, pro, nullptr, nullptr});
      Step r;
      r.reduce = std::move(st);
      rewritten.push_back(std::move(r));
    }
    if (!ok) continue;
    for (size_t k = 0; k < readers.size(); ++k) plan.steps[readers[k]] = std::move(rewritten[k]);
    plan.decisions.push_back("group of " + std::to_string(p.nodes.size()) + " recomputed by its " +
                             std::to_string(readers.size()) + " readers (" + std::to_string(cost - added) +
                             " bytes fewer)");
  }
}

}  // namespace tg::detail
