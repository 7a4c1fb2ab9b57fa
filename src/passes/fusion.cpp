#include "passes/fusion.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/env.h"
#include "passes/reduce_stitch.h"

namespace tg::detail {

bool fusion_disabled() {
  return env_flag("TGRAPH_NO_FUSION");
}

bool elementwise_kernel_op(const GraphImpl& g, const Node& n) {
  const OpDef& d = op_def(n.kind);
  if (n.outputs.size() != 1) return false;
  return d.has(kElementwise) || n.kind == OpKind::BroadcastTo || n.kind == OpKind::BroadcastLike;
}

bool fusible_elementwise(const GraphImpl& g, const Node& n) {
  return n.control_deps.empty() && elementwise_kernel_op(g, n);
}

namespace {

bool is_broadcast(OpKind k) { return k == OpKind::BroadcastTo || k == OpKind::BroadcastLike; }

// ---- stencil stitching (FusionOptions::stitch_stencils) ----

bool contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
bool contains(const std::vector<size_t>& v, size_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }
void add_once(std::vector<int32_t>& v, int32_t x) {
  if (!contains(v, x)) v.push_back(x);
}

// True when node n (or a node of its regions) has a control dependency on one of `ids`.
bool must_follow(const GraphImpl& g, const Node& n, const std::vector<int32_t>& ids) {
  for (int32_t d : n.control_deps)
    if (contains(ids, d)) return true;
  for (int32_t b : n.regions)
    for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes)
      if (must_follow(g, g.nodes[static_cast<size_t>(id)], ids)) return true;
  return false;
}

// The step as an elementwise group (step_group), a lone op's result an output only when used.
bool as_group(const GraphImpl& g, const Step& s, const std::vector<int32_t>& uses, FusionGroup& out) {
  if (!step_group(g, s, out)) return false;
  if (!s.fused() && uses[static_cast<size_t>(out.outputs[0])] == 0) out.outputs.clear();
  return true;
}

// Reads of value v by the members of a group.
int32_t reads_in(const GraphImpl& g, const FusionGroup& grp, int32_t v) {
  int32_t r = 0;
  for (int32_t id : grp.nodes)
    for (int32_t x : g.nodes[static_cast<size_t>(id)].inputs) r += x == v;
  return r;
}

// Group a followed by group b, which reads every output of a (they become internal).
FusionGroup merged(const GraphImpl& g, const FusionGroup& a, const FusionGroup& b) {
  FusionGroup m{a.nodes, a.inputs, b.outputs};
  m.nodes.insert(m.nodes.end(), b.nodes.begin(), b.nodes.end());
  for (int32_t v : b.inputs)
    if (!contains(a.outputs, v)) add_once(m.inputs, v);
  return m;
}

// True unless value v and group grp both have static shapes of different sizes.
bool same_size(const GraphImpl& g, const FusionGroup& grp, int32_t v) {
  const Shape &a = group_shape(g, grp), &b = g.type(v).shape;
  return !a.is_static() || !b.is_static() || a.num_elements() == b.num_elements();
}

// Replaces (prologue groups, views, stencil, views, epilogue groups) by one stitched step placed
// where the last of them was; a stencil with neither becomes a stitched step of its own. Moving
// the earlier pieces later is safe: the prologue's results are read only inside it and by the
// stencil (through views used once), nothing between the stencil and the epilogue reads its
// result, and nothing in between must follow a piece by control dependency. Several groups
// join a prologue or epilogue when each one's outputs are read only by the next (plan_fusion
// closes a group when an op of another shape or an unrelated one comes next in the block).
class Stitcher {
 public:
  Stitcher(const Module& m, FusionPlan& plan)
      : g_(m.graph),
        plan_(plan),
        steps_(plan.steps),
        n_(steps_.size()),
        uses_(use_counts(m)),
        taken_(n_, false) {
    for (size_t i = 0; i < n_; ++i)
      for (int32_t id : step_nodes(steps_[i]))
        for (int32_t v : g_.nodes[static_cast<size_t>(id)].outputs) producer_[v] = i;
  }

  void run() {
    std::vector<std::shared_ptr<StencilStitch>> placed(n_);
    for (size_t i = 0; i < n_; ++i) {
      if (steps_[i].fused() || steps_[i].stitch || taken_[i]) continue;
      const Node& sn = g_.nodes[static_cast<size_t>(steps_[i].node)];
      if (sn.kind != OpKind::Stencil || !sn.control_deps.empty()) continue;
      auto st = std::make_shared<StencilStitch>();
      st->stencil = steps_[i].node;
      std::vector<size_t> idx{i};
      prologue(*st, idx, sn.inputs[0]);
      const int32_t y = epilogue(*st, idx, i, sn.outputs[0]);
      std::sort(idx.begin(), idx.end());
      if (!ordered(idx)) continue;
      if (st->prologue.nodes.empty()) add_once(st->inputs, sn.inputs[0]);
      for (int32_t v : st->prologue.inputs) add_once(st->inputs, v);
      add_once(st->inputs, sn.inputs[1]);
      // The result is an output when read outside the epilogue (or with no epilogue).
      if (uses_[static_cast<size_t>(y)] > reads_in(g_, st->epilogue, y) || st->epilogue.nodes.empty())
        st->outputs.push_back(y);
      for (int32_t v : st->epilogue.inputs)
        if (v != y) add_once(st->inputs, v);
      for (int32_t v : st->epilogue.outputs) add_once(st->outputs, v);
      for (size_t j : idx) {
        st->pieces.push_back(steps_[j]);
        taken_[j] = true;
      }
      placed[idx.back()] = st;
      plan_.decisions.push_back("stencil stitched with a prologue of " +
                                std::to_string(st->prologue.nodes.size()) + " and an epilogue of " +
                                std::to_string(st->epilogue.nodes.size()) + " ops");
    }
    std::vector<Step> out;
    for (size_t i = 0; i < n_; ++i) {
      if (placed[i])
        out.push_back(Step{-1, {}, placed[i], nullptr});
      else if (!taken_[i])
        out.push_back(std::move(steps_[i]));
    }
    steps_ = std::move(out);
  }

 private:
  bool group_at(size_t j, FusionGroup& out) const {
    return !taken_[j] && as_group(g_, steps_[j], uses_, out);
  }
  bool lone_view(size_t j) const {
    if (taken_[j] || steps_[j].fused() || steps_[j].stitch) return false;
    const Node& n = g_.nodes[static_cast<size_t>(steps_[j].node)];
    return is_value_view(n.kind) && n.control_deps.empty();
  }
  // The first step after `from` that reads v (n_ when none).
  size_t first_reader(int32_t v, size_t from) const {
    for (size_t j = from + 1; j < n_; ++j) {
      if (steps_[j].fused()) {
        if (contains(steps_[j].group.inputs, v)) return j;
        continue;
      }
      std::vector<int32_t> r;
      node_reads(g_, g_.nodes[static_cast<size_t>(steps_[j].node)], r);
      if (contains(r, v)) return j;
    }
    return n_;
  }

  // The group whose only output is the source (through views used once), grown by the groups
  // only it reads.
  void prologue(StencilStitch& st, std::vector<size_t>& idx, int32_t v) {
    std::vector<size_t> views;
    std::vector<int32_t> view_nodes;
    while (uses_[static_cast<size_t>(v)] == 1 && producer_.count(v) && lone_view(producer_.at(v))) {
      const size_t p = producer_.at(v);
      views.push_back(p);
      view_nodes.insert(view_nodes.begin(), steps_[p].node);
      v = g_.nodes[static_cast<size_t>(steps_[p].node)].inputs[0];
    }
    FusionGroup grp;
    if (uses_[static_cast<size_t>(v)] != 1 || !producer_.count(v) || !group_at(producer_.at(v), grp) ||
        grp.outputs != std::vector<int32_t>{v})
      return;
    idx.push_back(producer_.at(v));
    for (bool grew = true; grew;) {
      grew = false;
      for (int32_t in : grp.inputs) {
        FusionGroup q;
        if (!producer_.count(in) || contains(idx, producer_.at(in)) || !group_at(producer_.at(in), q))
          continue;
        bool only = same_size(g_, q, v);
        for (int32_t o : q.outputs) only &= uses_[static_cast<size_t>(o)] == reads_in(g_, grp, o);
        if (!only) continue;
        idx.push_back(producer_.at(in));
        grp = merged(g_, q, grp);
        grew = true;
        break;
      }
    }
    st.prologue = std::move(grp);
    st.source_views = view_nodes;
    idx.insert(idx.end(), views.begin(), views.end());
  }

  // The first step reading the result (through views used once) when it is a group computed at
  // the result's elements, grown by the next groups while each reads all of the last one's
  // outputs alone. Returns the value the epilogue reads (the stencil's output or its view).
  int32_t epilogue(StencilStitch& st, std::vector<size_t>& idx, size_t i, int32_t y) {
    std::vector<size_t> views;
    std::vector<int32_t> view_nodes;
    int32_t r = y;
    size_t k = first_reader(r, i);
    while (k < n_ && uses_[static_cast<size_t>(r)] == 1 && lone_view(k) &&
           g_.nodes[static_cast<size_t>(steps_[k].node)].inputs[0] == r) {
      views.push_back(k);
      view_nodes.push_back(steps_[k].node);
      r = g_.nodes[static_cast<size_t>(steps_[k].node)].outputs[0];
      k = first_reader(r, k);
    }
    FusionGroup grp;
    if (k >= n_ || !group_at(k, grp) || grp.outputs.empty() || !contains(grp.inputs, r) ||
        !same_size(g_, grp, r))
      return y;
    idx.push_back(k);
    for (;;) {
      const size_t next = first_reader(grp.outputs[0], k);
      FusionGroup q;
      if (next >= n_ || !group_at(next, q) || q.outputs.empty() || !same_size(g_, q, r)) break;
      bool only = true;
      for (int32_t o : grp.outputs) only &= uses_[static_cast<size_t>(o)] == reads_in(g_, q, o);
      if (!only) break;
      idx.push_back(next);
      grp = merged(g_, grp, q);
      k = next;
    }
    st.epilogue = std::move(grp);
    st.result_views = view_nodes;
    idx.insert(idx.end(), views.begin(), views.end());
    return r;
  }

  // Nothing between the first and the last piece has to run after one of them.
  bool ordered(const std::vector<size_t>& idx) const {
    std::vector<int32_t> piece_nodes;
    for (size_t j : idx)
      for (int32_t id : step_nodes(steps_[j])) piece_nodes.push_back(id);
    for (size_t j = idx.front() + 1; j < idx.back(); ++j)
      if (!contains(idx, j))
        for (int32_t id : step_nodes(steps_[j]))
          if (must_follow(g_, g_.nodes[static_cast<size_t>(id)], piece_nodes)) return false;
    return true;
  }

  const GraphImpl& g_;
  FusionPlan& plan_;
  std::vector<Step>& steps_;
  const size_t n_;
  const std::vector<int32_t> uses_;
  std::vector<bool> taken_;
  std::unordered_map<int32_t, size_t> producer_;
};

}  // namespace

void node_reads(const GraphImpl& g, const Node& n, std::vector<int32_t>& out) {
  out.insert(out.end(), n.inputs.begin(), n.inputs.end());
  for (int32_t b : n.regions) {
    const Block& blk = g.blocks[static_cast<size_t>(b)];
    for (int32_t id : blk.nodes) node_reads(g, g.nodes[static_cast<size_t>(id)], out);
    out.insert(out.end(), blk.results.begin(), blk.results.end());
  }
}

std::vector<int32_t> step_nodes(const Step& s) {
  if (s.stitch || s.reduce) {
    std::vector<int32_t> all;
    for (const Step& p : s.stitch ? s.stitch->pieces : s.reduce->pieces) {
      std::vector<int32_t> q = step_nodes(p);
      all.insert(all.end(), q.begin(), q.end());
    }
    return all;
  }
  return s.fused() ? s.group.nodes : std::vector<int32_t>{s.node};
}

bool step_group(const GraphImpl& g, const Step& s, FusionGroup& out) {
  if (s.is_group()) {
    out = s.group;
    return true;
  }
  if (s.fused() || s.pinned || !fusible_elementwise(g, g.nodes[static_cast<size_t>(s.node)])) return false;
  const Node& n = g.nodes[static_cast<size_t>(s.node)];
  out = FusionGroup{{s.node}, {}, {n.outputs[0]}};
  for (int32_t v : n.inputs) add_once(out.inputs, v);
  return true;
}

const Shape& group_shape(const GraphImpl& g, const FusionGroup& grp) {
  return g.type(g.nodes[static_cast<size_t>(grp.nodes.back())].outputs[0]).shape;
}

bool is_value_view(OpKind k) { return k == OpKind::Reshape || k == OpKind::ExpandDims || k == OpKind::Squeeze; }

bool is_start_value(const Node& n) {
  return n.inputs.empty() && n.control_deps.empty() &&
         (n.kind == OpKind::Placeholder || n.kind == OpKind::Constant || n.kind == OpKind::Variable);
}

int64_t full_size_bytes(const GraphImpl& g, const std::vector<int32_t>& vals, int64_t elements) {
  int64_t b = 0;
  for (int32_t v : vals) {
    const TensorType& t = g.type(v);
    if (t.shape.ranked() && t.shape.is_static() && t.shape.num_elements() == elements)
      b += elements * static_cast<int64_t>(dtype_size(t.dtype));
  }
  return b;
}

std::vector<int32_t> step_inputs(const GraphImpl& g, const Step& s) {
  if (s.stitch) return s.stitch->inputs;
  if (s.reduce) return s.reduce->inputs;
  if (s.fused()) return s.group.inputs;
  std::vector<int32_t> r;
  node_reads(g, g.nodes[static_cast<size_t>(s.node)], r);
  return r;
}

void drop_unread_outputs(const Module& m, int32_t block, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  for (bool changed = true; changed;) {
    changed = false;
    // A group that recomputes a value does not read it (plan_reads counts the steps as planned).
    const std::vector<int32_t> reads = plan_reads(m, block, plan);
    auto unread = [&](int32_t v) { return reads[static_cast<size_t>(v)] <= 0; };
    std::vector<Step> kept;
    for (Step& s : plan.steps) {
      if (s.is_group()) {
        auto& o = s.group.outputs;
        const size_t before = o.size();
        o.erase(std::remove_if(o.begin(), o.end(), unread), o.end());
        changed |= o.size() != before;
        if (o.empty()) {
          plan.decisions.push_back("group of " + std::to_string(s.group.nodes.size()) + " dropped: all it computed is recomputed where it is read");
          continue;
        }
        if (o.size() != before) {
          // Members only the dropped outputs needed go too, and the operands only they read
          // (a cast that loaded an activation for a reader that now computes it itself).
          std::vector<int32_t> live = group_cone(g, s.group, o);
          if (live.size() != s.group.nodes.size()) {
            s.group.nodes = std::move(live);
            s.group.inputs = outside_reads(g, s.group.nodes);
          }
        }
      } else if (!s.fused() && fusible_elementwise(g, g.nodes[static_cast<size_t>(s.node)]) &&
                 unread(g.nodes[static_cast<size_t>(s.node)].outputs[0])) {
        plan.decisions.push_back(std::string(op_name(g.nodes[static_cast<size_t>(s.node)].kind)) +
                                 " dropped: recomputed where it is read");
        changed = true;
        continue;
      }
      kept.push_back(std::move(s));
    }
    plan.steps = std::move(kept);
  }
}

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
      plan.steps.push_back(Step{open.nodes[0], {}, nullptr, nullptr});
    } else {
      // Outputs: member values with uses beyond the members' own reads.
      std::vector<int32_t> inner(g.values.size(), 0);
      for (int32_t id : open.nodes)
        for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) ++inner[static_cast<size_t>(v)];
      for (int32_t id : open.nodes) {
        int32_t v = g.nodes[static_cast<size_t>(id)].outputs[0];
        if (uses[static_cast<size_t>(v)] > inner[static_cast<size_t>(v)]) open.outputs.push_back(v);
      }
      plan.steps.push_back(Step{-1, open, nullptr, nullptr});
      plan.decisions.push_back("group of " + std::to_string(open.nodes.size()) + " closed: " + why);
    }
    open = FusionGroup{};
    members.clear();
  };

  std::vector<int32_t> reads;
  for (int32_t id : g.blocks[static_cast<size_t>(block)].nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    // Its regions' reads count too: control flow that reads a member inside a branch must not
    // be placed before the group.
    reads.clear();
    node_reads(g, n, reads);
    bool reads_open = false;
    for (int32_t v : reads) reads_open |= members.count(v) != 0;
    for (int32_t d : n.control_deps)
      reads_open |= std::find(open.nodes.begin(), open.nodes.end(), d) != open.nodes.end();
    const Shape& shape = g.type(n.outputs.empty() ? -1 : n.outputs[0]).shape;
    const bool pinned = options.pin && options.pin(g, uses, n);
    bool can = !off && !pinned && fusible_elementwise(g, n);
    // A broadcast joins only as a loader of an outside value: inside the kernel every
    // member is computed at the output's index, which a broadcast of a member cannot use.
    if (can && is_broadcast(n.kind) && members.count(n.inputs[0])) can = false;
    // A loader brings an outside value into the group: a broadcast, or a cast (the f32 view
    // of a half-stored activation that HalfStorage puts right before each reader).
    const bool loader = is_broadcast(n.kind) || (n.kind == OpKind::Cast && !members.count(n.inputs[0]));
    if (can && !open.nodes.empty() && !(shape == open_shape)) {
      if (reads_open) close("next op has another shape (" + shape.str() + " vs " + open_shape.str() + ")");
      else close("next op is unrelated");
    } else if (can && !open.nodes.empty() && !reads_open && !loader) {
      // A loader at the group's shape joins even though it reads no member: explicit
      // broadcasts and casts precede the op that uses them, so closing here would cut every
      // chain with a per-channel operand (a batch norm's y) into one kernel per op.
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
    if (reads_open) close(std::string("consumer ") + op_name(n.kind) + (pinned ? " is pinned" : " is not elementwise"));
    plan.steps.push_back(Step{id, {}, nullptr, nullptr, pinned});
  }
  close("end of block");
  if (options.stitch_stencils && !off) Stitcher(m, plan).run();
  if (options.stitch_reductions && !off && !reduce_fusion_disabled()) {
    recompute_producers(m, block, plan);
    stitch_reductions(m, block, plan);
    // Once stitches compute what they read, a group may have become the last reader of a
    // value it did not gain by recomputing before (no fewer bytes): now its write goes away.
    recompute_producers(m, block, plan);
    absorb_consumers(m, block, plan);
    narrow_widened_outputs(m, block, plan);
    drop_unread_outputs(m, block, plan);  // groups left unread are not readers to plan for
    recompute_shared_producers(m, block, plan);
    drop_unread_outputs(m, block, plan);
    batch_source_steps(m, block, plan);
  }
  return plan;
}

}  // namespace tg::detail
