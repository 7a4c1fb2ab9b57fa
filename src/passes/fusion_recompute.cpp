// Recomputing producers (FusionOptions::stitch_reductions, the CUDA backend): a fused group
// reading values that an earlier group wrote at its own shape computes them itself, from that
// group's inputs, when that reads fewer bytes of its size (or as many, when it is the values'
// last reader, so their write goes away). Generated elementwise kernels are bound by memory, not
// arithmetic: a batch norm's backward wrote x - mean, xhat and three products full size for the
// dx kernel to read back, where x and dy are all that kernel needs. Outputs that nothing reads
// any more are dropped afterwards (drop_unread_outputs), and groups left with none.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "passes/fusion.h"

namespace tg::detail {
namespace {


bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

std::vector<int32_t> group_cone(const GraphImpl& g, const FusionGroup& p, const std::vector<int32_t>& want) {
  return group_cone_from(g, p, want, {});
}

std::vector<int32_t> group_cone_from(const GraphImpl& g, const FusionGroup& p, const std::vector<int32_t>& want,
                                     const std::vector<int32_t>& available) {
  std::unordered_set<int32_t> need(want.begin(), want.end());
  std::vector<int32_t> out;
  for (auto it = p.nodes.rbegin(); it != p.nodes.rend(); ++it) {
    const Node& n = g.nodes[static_cast<size_t>(*it)];
    if (!need.count(n.outputs[0])) continue;
    out.push_back(*it);
    for (int32_t v : n.inputs)
      if (!contains(available, v) || contains(want, v)) need.insert(v);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<int32_t> outside_reads(const GraphImpl& g, const std::vector<int32_t>& nodes) {
  std::unordered_set<int32_t> made;
  std::vector<int32_t> out;
  for (int32_t id : nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    for (int32_t v : n.inputs)
      if (!made.count(v) && !contains(out, v)) out.push_back(v);
    made.insert(n.outputs.begin(), n.outputs.end());
  }
  return out;
}

std::vector<int32_t> merge_members(const std::vector<int32_t>& first, const std::vector<int32_t>& then) {
  std::vector<int32_t> out;
  for (const auto* list : {&first, &then})
    for (int32_t id : *list)
      if (!contains(out, id)) out.push_back(id);
  return out;
}

std::vector<int32_t> plan_reads(const Module& m, int32_t block, const FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  std::vector<int32_t> reads = use_counts(m);
  for (int32_t id : g.blocks[static_cast<size_t>(block)].nodes)
    for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) --reads[static_cast<size_t>(v)];
  for (const Step& s : plan.steps)
    for (int32_t v : step_inputs(g, s)) ++reads[static_cast<size_t>(v)];
  return reads;
}

void recompute_producers(const Module& m, int32_t block, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  std::vector<int32_t> reads = plan_reads(m, block, plan);
  std::unordered_map<int32_t, size_t> made;  // value -> the step writing it
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    FusionGroup grp;
    if (step_group(g, plan.steps[i], grp))
      for (int32_t v : grp.outputs) made.emplace(v, i);
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    FusionGroup c;
    if (!step_group(g, plan.steps[i], c)) continue;
    const Shape cs = group_shape(g, c);
    if (!cs.ranked() || !cs.is_static()) continue;
    // Bytes, not tensors: a group reads two bf16 activations rather than the f32 value an
    // autocast graph computed from them (full_size_bytes).
    auto full_bytes = [&](int32_t v) { return full_size_bytes(g, {v}, cs.num_elements()); };
    // At a tie (recomputing reads as many bytes as reading the values), recomputing pays only
    // when the values' write goes away: when c is their last reader, or when every other reader
    // is a later group at c's shape that can take the cone too (each then meets the same tie,
    // the last of them as the last reader). Two groups reading a batch norm's xhat, the
    // backward's sum and its dx, each had waited for the other.
    auto later_readers_recompute = [&](size_t at, const std::vector<int32_t>& want, const std::vector<int32_t>& cone) {
      for (int32_t v : want) {
        int32_t found = 0;
        for (size_t k = at + 1; k < plan.steps.size(); ++k) {
          const std::vector<int32_t> in = step_inputs(g, plan.steps[k]);
          if (!contains(in, v)) continue;
          FusionGroup o;
          if (!step_group(g, plan.steps[k], o) || !(group_shape(g, o) == cs) ||
              cone.size() + o.nodes.size() > kMaxGroupMembers ||
              outside_reads(g, merge_members(cone, o.nodes)).size() > static_cast<size_t>(kMaxFusedOperands))
            return false;
          ++found;
        }
        if (found + 1 != reads[static_cast<size_t>(v)]) return false;  // read elsewhere too
      }
      return true;
    };
    bool changed = false;
    for (bool grew = true; grew;) {
      grew = false;
      // c's full-size inputs, by the earlier group writing them at c's shape.
      std::map<size_t, std::vector<int32_t>> by_producer;
      for (int32_t v : c.inputs) {
        auto it = made.find(v);
        if (it != made.end() && it->second < i && g.type(v).shape == cs) by_producer[it->second].push_back(v);
      }
      // All of them at once, else each alone (of dy and xhat, one group's outputs, xhat costs a
      // read of x to recompute, dy three tensors: xhat is recomputed, dy read).
      std::vector<std::pair<size_t, std::vector<int32_t>>> candidates;
      for (const auto& [j, all] : by_producer) {
        candidates.emplace_back(j, all);
        if (all.size() > 1)
          for (int32_t v : all) candidates.emplace_back(j, std::vector<int32_t>{v});
      }
      for (const auto& [j, want] : candidates) {
        FusionGroup p;
        if (!step_group(g, plan.steps[j], p) || !(group_shape(g, p) == cs)) continue;
        // From p's inputs, or from what p writes anyway (its other outputs: dy in bf16 rather
        // than recomputed from the two gradients and the mask that made it), whichever reads less.
        auto added_by = [&](const std::vector<int32_t>& cone) {
          int64_t b = 0;
          for (int32_t v : outside_reads(g, cone))
            if (!contains(c.inputs, v)) b += full_bytes(v);
          return b;
        };
        std::vector<int32_t> cone = group_cone(g, p, want);
        int64_t added = added_by(cone);
        std::vector<int32_t> others;
        for (int32_t v : p.outputs)
          if (!contains(want, v)) others.push_back(v);
        if (!others.empty()) {
          std::vector<int32_t> cut = group_cone_from(g, p, want, others);
          if (const int64_t b = added_by(cut); b < added) {
            cone = std::move(cut);
            added = b;
          }
        }
        int64_t saved = 0;
        bool last_reader = true;
        for (int32_t v : want) {
          last_reader &= reads[static_cast<size_t>(v)] == 1;
          saved += full_bytes(v);
        }
        if (added > saved || (added == saved && !last_reader && !later_readers_recompute(i, want, cone)) ||
            cone.size() + c.nodes.size() > kMaxGroupMembers)
          continue;
        const std::vector<int32_t> members = merge_members(cone, c.nodes);
        std::vector<int32_t> inputs = outside_reads(g, members);
        if (inputs.size() > static_cast<size_t>(kMaxFusedOperands)) continue;  // no kernel would take it
        for (int32_t v : c.inputs) --reads[static_cast<size_t>(v)];
        c.nodes = members;
        c.inputs = std::move(inputs);
        for (int32_t v : c.inputs) ++reads[static_cast<size_t>(v)];
        plan.decisions.push_back("group of " + std::to_string(c.nodes.size()) + " recomputes " +
                                 std::to_string(cone.size()) + " members of an earlier group instead of reading " +
                                 std::to_string(want.size()) + " of its outputs");
        grew = changed = true;
        break;  // the producers of c's new inputs are looked at again
      }
    }
    if (changed) plan.steps[i] = Step{-1, std::move(c), nullptr, nullptr};
  }
}

}  // namespace tg::detail
