#include "passes/fusion.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_set>

namespace tg::detail {

bool fusion_disabled() {
  const char* v = std::getenv("TGRAPH_NO_FUSION");
  return v && std::strcmp(v, "1") == 0;
}

bool fusible_elementwise(const GraphImpl& g, const Node& n) {
  const OpDef& d = op_def(n.kind);
  if (n.outputs.size() != 1 || !n.control_deps.empty()) return false;
  if (n.kind == OpKind::ShiftLeft || n.kind == OpKind::ShiftRight) return false;  // not generated yet
  return d.has(kElementwise) || n.kind == OpKind::BroadcastTo || n.kind == OpKind::BroadcastLike;
}

namespace {

bool is_broadcast(OpKind k) { return k == OpKind::BroadcastTo || k == OpKind::BroadcastLike; }

}  // namespace

FusionPlan plan_fusion(const Module& m, int32_t block) {
  const GraphImpl& g = m.graph;
  FusionPlan plan;
  const bool off = fusion_disabled();
  FusionGroup open;
  std::unordered_set<int32_t> members;  // value ids computed inside the open group
  Shape open_shape;

  // Uses of each value outside a given group are needed to pick the group's outputs.
  std::vector<int32_t> uses = use_counts(m);
  auto close = [&](const std::string& why) {
    if (open.nodes.empty()) return;
    if (open.nodes.size() == 1) {
      plan.steps.push_back(Step{open.nodes[0], {}});
    } else {
      // Outputs: member values with uses beyond the members' own reads.
      std::vector<int32_t> inner(g.values.size(), 0);
      for (int32_t id : open.nodes)
        for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) ++inner[static_cast<size_t>(v)];
      for (int32_t id : open.nodes) {
        int32_t v = g.nodes[static_cast<size_t>(id)].outputs[0];
        if (uses[static_cast<size_t>(v)] > inner[static_cast<size_t>(v)]) open.outputs.push_back(v);
      }
      plan.steps.push_back(Step{-1, open});
      plan.decisions.push_back("group of " + std::to_string(open.nodes.size()) + " closed: " + why);
    }
    open = FusionGroup{};
    members.clear();
  };

  for (int32_t id : g.blocks[static_cast<size_t>(block)].nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    bool reads_open = false;
    for (int32_t v : n.inputs) reads_open |= members.count(v) != 0;
    for (int32_t d : n.control_deps)
      reads_open |= std::find(open.nodes.begin(), open.nodes.end(), d) != open.nodes.end();
    const Shape& shape = g.type(n.outputs.empty() ? -1 : n.outputs[0]).shape;
    bool can = !off && fusible_elementwise(g, n);
    // A broadcast joins only as a loader of an outside value: inside the kernel every
    // member is computed at the output's index, which a broadcast of a member cannot use.
    if (can && is_broadcast(n.kind) && members.count(n.inputs[0])) can = false;
    if (can && !open.nodes.empty() && !(shape == open_shape)) {
      if (reads_open) close("next op has another shape (" + shape.str() + " vs " + open_shape.str() + ")");
      else close("next op is unrelated");
    } else if (can && !open.nodes.empty() && !reads_open) {
      close("next op is unrelated");
    }
    if (can) {
      if (open.nodes.empty()) open_shape = shape;
      open.nodes.push_back(id);
      for (int32_t v : n.inputs)
        if (!members.count(v) && std::find(open.inputs.begin(), open.inputs.end(), v) == open.inputs.end())
          open.inputs.push_back(v);
      members.insert(n.outputs[0]);
      continue;
    }
    if (reads_open) close(std::string("consumer ") + op_name(n.kind) + " is not elementwise");
    plan.steps.push_back(Step{id, {}});
  }
  close("end of block");
  return plan;
}

}  // namespace tg::detail
