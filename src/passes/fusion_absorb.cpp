// Absorbing consumers (FusionOptions::stitch_reductions, the CUDA backend): an elementwise step
// whose every operand is ready where the group producing the latest of them runs joins that
// group. The linear sweep closes a group at the first op that cannot join it, so a chain cut by
// an unrelated op (a batch norm's per-channel arithmetic between its dx chain and the cast of
// dx to bf16) became two kernels with a full-size tensor between them; moved up into the
// producer, the consumer reads that tensor in registers, and the write goes away when nothing
// else reads it (drop_unread_outputs). The bytes either step reads otherwise stay the same.
#include <unordered_map>

#include "passes/fusion.h"

namespace tg::detail {

void absorb_consumers(const Module& m, int32_t block, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  std::vector<Step>& steps = plan.steps;
  std::unordered_map<int32_t, size_t> made;  // value -> the step computing it
  for (size_t i = 0; i < steps.size(); ++i) {
    FusionGroup grp;
    if (step_group(g, steps[i], grp)) {
      for (int32_t v : grp.outputs) made[v] = i;
      continue;
    }
    for (int32_t id : step_nodes(steps[i]))
      for (int32_t v : g.nodes[static_cast<size_t>(id)].outputs) made.emplace(v, i);
  }
  std::vector<bool> gone(steps.size(), false);
  for (size_t i = 0; i < steps.size(); ++i) {
    FusionGroup c;
    if (!step_group(g, steps[i], c)) continue;
    // The latest step computing one of c's operands, and whether it is a group of c's shape.
    size_t j = 0;
    bool found = false;
    for (int32_t v : c.inputs)
      if (auto it = made.find(v); it != made.end() && (!found || it->second > j)) {
        j = it->second;
        found = true;
      }
    if (!found || gone[j] || j >= i) continue;
    FusionGroup p;
    if (!step_group(g, steps[j], p) || !(group_shape(g, p) == group_shape(g, c))) continue;
    const std::vector<int32_t> members = merge_members(p.nodes, c.nodes);
    std::vector<int32_t> inputs = outside_reads(g, members);
    if (members.size() > kMaxGroupMembers || inputs.size() > static_cast<size_t>(kMaxFusedOperands)) continue;
    FusionGroup joined{members, std::move(inputs), p.outputs};
    for (int32_t v : c.outputs) {
      joined.outputs.push_back(v);
      made[v] = j;
    }
    plan.decisions.push_back("group of " + std::to_string(c.nodes.size()) + " joins the group of " +
                             std::to_string(p.nodes.size()) + " computing its operands");
    steps[j] = Step{-1, std::move(joined), nullptr, nullptr};
    gone[i] = true;
  }
  std::vector<Step> kept;
  for (size_t i = 0; i < steps.size(); ++i)
    if (!gone[i]) kept.push_back(std::move(steps[i]));
  steps = std::move(kept);
}

}  // namespace tg::detail
