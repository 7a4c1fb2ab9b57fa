#include "passes/fusion.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace tg::detail {

bool fusion_disabled() {
  const char* v = std::getenv("TGRAPH_NO_FUSION");
  return v && std::strcmp(v, "1") == 0;
}

bool fusible_elementwise(const GraphImpl& g, const Node& n) {
  const OpDef& d = op_def(n.kind);
  if (n.outputs.size() != 1 || !n.control_deps.empty()) return false;
  return d.has(kElementwise) || n.kind == OpKind::BroadcastTo || n.kind == OpKind::BroadcastLike;
}

namespace {

bool is_broadcast(OpKind k) { return k == OpKind::BroadcastTo || k == OpKind::BroadcastLike; }

// ---- stencil stitching (FusionOptions::stitch_stencils) ----

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
bool contains(const std::vector<size_t>& v, size_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
void add_once(std::vector<int32_t>& v, int32_t x) {
  if (!contains(v, x)) v.push_back(x);
}
bool is_view(OpKind k) { return k == OpKind::Reshape || k == OpKind::ExpandDims || k == OpKind::Squeeze; }

// Every value node n reads, with the reads of its regions (a node may read enclosing values).
void node_reads(const GraphImpl& g, const Node& n, std::vector<int32_t>& out) {
  out.insert(out.end(), n.inputs.begin(), n.inputs.end());
  for (int32_t b : n.regions) {
    const Block& blk = g.blocks[static_cast<size_t>(b)];
    for (int32_t id : blk.nodes) node_reads(g, g.nodes[static_cast<size_t>(id)], out);
    out.insert(out.end(), blk.results.begin(), blk.results.end());
  }
}

std::vector<int32_t> step_nodes(const Step& s) { return s.fused() ? s.group.nodes : std::vector<int32_t>{s.node}; }

// True when node n (or a node of its regions) has a control dependency on one of `ids`.
bool must_follow(const GraphImpl& g, const Node& n, const std::vector<int32_t>& ids) {
  for (int32_t d : n.control_deps)
    if (contains(ids, d)) return true;
  for (int32_t b : n.regions)
    for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes)
      if (must_follow(g, g.nodes[static_cast<size_t>(id)], ids)) return true;
  return false;
}

// The step as an elementwise group (a lone elementwise op is a group of one), or nothing.
bool as_group(const GraphImpl& g, const Step& s, const std::vector<int32_t>& uses, FusionGroup& out) {
  if (s.stitch) return false;
  if (s.fused()) {
    out = s.group;
    return true;
  }
  const Node& n = g.nodes[static_cast<size_t>(s.node)];
  if (!fusible_elementwise(g, n)) return false;
  out = FusionGroup{{s.node}, {}, {}};
  for (int32_t v : n.inputs) add_once(out.inputs, v);
  if (uses[static_cast<size_t>(n.outputs[0])] > 0) out.outputs.push_back(n.outputs[0]);
  return true;
}

// Replaces (prologue group, views, stencil, views, epilogue group) by one stitched step placed
// where the last of them was. Moving the earlier pieces later is safe: the prologue's result is
// read only by the stencil (through views used once), nothing between the stencil and the
// epilogue reads its result, and nothing in between must follow a piece by control dependency.
void stitch_stencils(const Module& m, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  const std::vector<int32_t> uses = use_counts(m);
  std::vector<Step>& steps = plan.steps;
  const size_t n = steps.size();
  std::unordered_map<int32_t, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (int32_t id : step_nodes(steps[i]))
      for (int32_t v : g.nodes[static_cast<size_t>(id)].outputs) producer[v] = i;
  std::vector<bool> taken(n, false);
  std::vector<std::shared_ptr<StencilStitch>> placed(n);
  auto lone_view = [&](size_t i) {
    return !steps[i].fused() && !steps[i].stitch && is_view(g.nodes[static_cast<size_t>(steps[i].node)].kind) &&
           g.nodes[static_cast<size_t>(steps[i].node)].control_deps.empty();
  };
  auto first_reader = [&](int32_t v, size_t from) {
    for (size_t j = from + 1; j < n; ++j) {
      if (steps[j].fused()) {
        if (contains(steps[j].group.inputs, v)) return j;
        continue;
      }
      std::vector<int32_t> r;
      node_reads(g, g.nodes[static_cast<size_t>(steps[j].node)], r);
      if (contains(r, v)) return j;
    }
    return n;
  };
  for (size_t i = 0; i < n; ++i) {
    if (steps[i].fused() || steps[i].stitch || taken[i]) continue;
    const Node& sn = g.nodes[static_cast<size_t>(steps[i].node)];
    if (sn.kind != OpKind::Stencil || !sn.control_deps.empty()) continue;
    auto st = std::make_shared<StencilStitch>();
    st->stencil = steps[i].node;
    std::vector<size_t> idx{i};
    {  // prologue: the group whose only output is the source, through views used once
      std::vector<size_t> views;
      std::vector<int32_t> view_nodes;
      int32_t v = sn.inputs[0];
      while (uses[static_cast<size_t>(v)] == 1 && producer.count(v) && !taken[producer[v]]) {
        const size_t p = producer[v];
        if (lone_view(p)) {
          views.push_back(p);
          view_nodes.insert(view_nodes.begin(), steps[p].node);
          v = g.nodes[static_cast<size_t>(steps[p].node)].inputs[0];
          continue;
        }
        FusionGroup grp;
        if (as_group(g, steps[p], uses, grp) && grp.outputs == std::vector<int32_t>{v}) {
          st->prologue = std::move(grp);
          st->source_views = view_nodes;
          idx.push_back(p);
          idx.insert(idx.end(), views.begin(), views.end());
        }
        break;
      }
    }
    int32_t y = sn.outputs[0];
    {  // epilogue: the first step reading the result, through views used once
      std::vector<size_t> views;
      std::vector<int32_t> view_nodes;
      int32_t r = y;
      size_t k = first_reader(r, i);
      while (k < n && uses[static_cast<size_t>(r)] == 1 && !taken[k] && lone_view(k) &&
             g.nodes[static_cast<size_t>(steps[k].node)].inputs[0] == r) {
        views.push_back(k);
        view_nodes.push_back(steps[k].node);
        r = g.nodes[static_cast<size_t>(steps[k].node)].outputs[0];
        k = first_reader(r, k);
      }
      FusionGroup grp;
      auto same_size = [&](const FusionGroup& e) {  // computed at the result's elements (when known here)
        const Shape &a = g.type(g.nodes[static_cast<size_t>(e.nodes.back())].outputs[0]).shape, &b = g.type(r).shape;
        return !a.is_static() || !b.is_static() || a.num_elements() == b.num_elements();
      };
      if (k < n && !taken[k] && as_group(g, steps[k], uses, grp) && !grp.outputs.empty() && contains(grp.inputs, r) &&
          same_size(grp)) {
        st->epilogue = std::move(grp);
        st->result_views = view_nodes;
        idx.push_back(k);
        idx.insert(idx.end(), views.begin(), views.end());
        y = r;
      }
    }
    if (st->prologue.nodes.empty() && st->epilogue.nodes.empty()) continue;
    std::sort(idx.begin(), idx.end());
    std::vector<int32_t> piece_nodes;
    for (size_t j : idx)
      for (int32_t id : step_nodes(steps[j])) piece_nodes.push_back(id);
    bool ordered = true;
    for (size_t j = idx.front() + 1; j < idx.back() && ordered; ++j)
      if (!contains(idx, j))
        for (int32_t id : step_nodes(steps[j])) ordered &= !must_follow(g, g.nodes[static_cast<size_t>(id)], piece_nodes);
    if (!ordered) continue;
    if (st->prologue.nodes.empty()) add_once(st->inputs, sn.inputs[0]);
    for (int32_t v : st->prologue.inputs) add_once(st->inputs, v);
    add_once(st->inputs, sn.inputs[1]);
    if (st->epilogue.nodes.empty()) {
      st->outputs.push_back(y);
    } else {
      int32_t inner = 0;  // reads of the result by epilogue members; more uses: it is an output too
      for (int32_t id : st->epilogue.nodes)
        for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) inner += v == y;
      if (uses[static_cast<size_t>(y)] > inner) st->outputs.push_back(y);
      for (int32_t v : st->epilogue.inputs)
        if (v != y) add_once(st->inputs, v);
      for (int32_t v : st->epilogue.outputs) add_once(st->outputs, v);
    }
    for (size_t j : idx) {
      st->pieces.push_back(steps[j]);
      taken[j] = true;
    }
    placed[idx.back()] = st;
    plan.decisions.push_back("stencil stitched with a prologue of " + std::to_string(st->prologue.nodes.size()) +
                             " and an epilogue of " + std::to_string(st->epilogue.nodes.size()) + " ops");
  }
  std::vector<Step> out;
  for (size_t i = 0; i < n; ++i) {
    if (placed[i]) out.push_back(Step{-1, {}, placed[i]});
    else if (!taken[i]) out.push_back(std::move(steps[i]));
  }
  steps = std::move(out);
}

}  // namespace

FusionPlan plan_fusion(const Module& m, int32_t block, const FusionOptions& options) {
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
      plan.steps.push_back(Step{open.nodes[0], {}, nullptr});
    } else {
      // Outputs: member values with uses beyond the members' own reads.
      std::vector<int32_t> inner(g.values.size(), 0);
      for (int32_t id : open.nodes)
        for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) ++inner[static_cast<size_t>(v)];
      for (int32_t id : open.nodes) {
        int32_t v = g.nodes[static_cast<size_t>(id)].outputs[0];
        if (uses[static_cast<size_t>(v)] > inner[static_cast<size_t>(v)]) open.outputs.push_back(v);
      }
      plan.steps.push_back(Step{-1, open, nullptr});
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
    plan.steps.push_back(Step{id, {}, nullptr});
  }
  close("end of block");
  if (options.stitch_stencils && !off) stitch_stencils(m, plan);
  return plan;
}

}  // namespace tg::detail
