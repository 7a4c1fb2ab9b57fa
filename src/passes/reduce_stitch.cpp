// Stitched reductions (passes/reduce_stitch.h). Runs after recompute_producers, so a reduction's
// input is often computed by a group that something else no longer needs; the stitch takes the
// members computing it (their cone) as its prologue, and the group's write of it goes away
// (drop_unread_outputs). Reductions of one geometry whose inputs are ready at the first of them
// join its stitch, so their common reads are shared. Then the later groups computed at the
// results (through views of them) with operands ready at the stitch become its epilogue.
#include "passes/reduce_stitch.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "core/env.h"
#include "ops/infer.h"

namespace tg::detail {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

int64_t elements(const GraphImpl& g, int32_t v) {
  const Shape& s = g.type(v).shape;
  return s.ranked() && s.is_static() ? s.num_elements() : -1;
}

// A stitch while planning: where it runs, its geometry, its reductions and the cone of each.
struct Open {
  size_t at = 0;
  Shape shape;
  std::vector<bool> red;
  std::vector<int32_t> reductions;
  std::vector<std::pair<size_t, std::vector<int32_t>>> cones;  // (producer step, members)
  std::vector<size_t> taken;   // plan steps of the reductions
  std::vector<int32_t> reads;  // values the kernel will read (at most kMaxFusedOperands)
};

// One pass over a block's plan: opens stitches at reductions (joining siblings), builds each
// with its prologue and epilogue, then rewrites the plan's steps.
class ReductionStitcher {
 public:
  ReductionStitcher(const Module& m, int32_t block, FusionPlan& plan)
      : g_(m.graph), plan_(plan), steps_(plan.steps), reads_(plan_reads(m, block, plan)), removed_(steps_.size(), false) {
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].is_group()) {
        for (int32_t v : steps_[i].group.outputs) made_.emplace(v, i);
      } else {
        for (int32_t id : step_nodes(steps_[i]))
          for (int32_t v : g_.nodes[static_cast<size_t>(id)].outputs) made_.emplace(v, i);
      }
    }
    // Values read by a matmul stay read by their own reduce_sum step: the CUDA backend folds a
    // reduce_sum of a weight gradient's dy into the matmul (the bias-gradient epilogue).
    for (const Step& s : steps_)
      if (!s.fused() && g_.nodes[static_cast<size_t>(s.node)].kind == OpKind::MatMul)
        for (int32_t v : g_.nodes[static_cast<size_t>(s.node)].inputs) matmul_operands_.push_back(v);
  }

  void run() {
    std::vector<Open> open = open_stitches();
    for (Open& o : open) {
      if (o.cones.empty() && o.reductions.size() < 2) continue;  // nothing to gain
      auto st = std::make_shared<ReduceStitch>(build(o));
      absorb_epilogue(o, *st);
      placed_[o.at] = st;
      plan_.decisions.push_back(std::to_string(o.reductions.size()) + " reductions stitched with a prologue of " +
                                std::to_string(st->prologue.nodes.size()) + " ops and an epilogue of " +
                                std::to_string(st->epilogue.nodes.size()));
    }
    if (placed_.empty()) return;
    std::vector<Step> out;
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (auto it = placed_.find(i); it != placed_.end()) {
        for (size_t c : hoisted_[i]) out.push_back(steps_[c]);
        Step s;
        s.reduce = it->second;
        out.push_back(std::move(s));
      } else if (!removed_[i]) {
        out.push_back(std::move(steps_[i]));
      }
    }
    steps_ = std::move(out);
  }

 private:
  bool ready_at(const std::vector<int32_t>& vals, size_t at) const {
    for (int32_t v : vals) {
      if (auto h = hoisted_at_.find(v); h != hoisted_at_.end() && h->second <= at) continue;  // runs before that stitch
      auto it = made_.find(v);
      if (it != made_.end() && it->second >= at) return false;
    }
    return true;
  }


  // A step computed later in the plan that can move before a stitch at `at`: a constant or a
  // variable (is_start_value; the optimizer's momentum buffers are variables an epilogue reads),
  // or a view of a value ready there (a batch norm's dbeta, the [C] view of a sum an earlier
  // stitch made).
  std::optional<size_t> movable_step(int32_t v, size_t at) const {
    auto it = made_.find(v);
    if (it == made_.end() || steps_[it->second].fused()) return std::nullopt;
    const Node& n = g_.nodes[static_cast<size_t>(steps_[it->second].node)];
    if (is_start_value(n) && n.kind != OpKind::Placeholder) return it->second;  // placeholders: ready_at
    if (n.control_deps.empty() && is_value_view(n.kind) && n.outputs.size() == 1 && ready_at({n.inputs[0]}, at))
      return it->second;
    return std::nullopt;
  }

  // True when no step after o's place and before step i reads a result of o's reductions.
  bool results_unread_between(const Open& o, size_t i) const {
    std::vector<int32_t> results;
    for (int32_t r : o.reductions) results.push_back(g_.nodes[static_cast<size_t>(r)].outputs[0]);
    for (size_t j = o.at + 1; j < i; ++j)
      for (int32_t v : step_inputs(g_, steps_[j]))
        if (contains(results, v)) return false;
    return true;
  }

  // Every stitchable reduction opens a stitch or joins the first open one of its geometry where
  // its inputs are ready and the operands still fit.
  std::vector<Open> open_stitches() const {
    std::vector<Open> open;
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (steps_[i].fused()) continue;
      const Node& r = g_.nodes[static_cast<size_t>(steps_[i].node)];
      if (!stitchable_reduction(g_, r)) continue;
      const int32_t x = r.inputs[0];
      if (r.kind == OpKind::ReduceSum && contains(matmul_operands_, x)) continue;
      const Shape& xs = g_.type(x).shape;
      // The prologue: the members of the group computing x, when nothing else reads x.
      std::vector<int32_t> cone;
      size_t producer = 0;
      FusionGroup grp;
      if (auto it = made_.find(x); it != made_.end() && reads_[static_cast<size_t>(x)] == 1 &&
                                   step_group(g_, steps_[it->second], grp) && group_shape(g_, grp) == xs) {
        cone = group_cone(g_, grp, {x});
        producer = it->second;
        // From the group's inputs, or from what the group writes anyway for other readers (a
        // batch norm's dz, which the residual's gradient reads too, rather than recomputing it
        // from the two gradients and relu's output), whichever reads fewer bytes.
        std::vector<int32_t> kept;
        for (int32_t v : grp.outputs)
          if (v != x && reads_[static_cast<size_t>(v)] > 0) kept.push_back(v);
        if (!kept.empty()) {
          std::vector<int32_t> cut = group_cone_from(g_, grp, {x}, kept);
          if (full_size_bytes(g_, outside_reads(g_, cut), xs.num_elements()) <
              full_size_bytes(g_, outside_reads(g_, cone), xs.num_elements())) cone = std::move(cut);
        }
      }
      // What it reads: its input (or the cone's inputs), and a sum_to_like's `like` (for its shape).
      const std::vector<int32_t> needs =
          merge_members(cone.empty() ? std::vector<int32_t>{x} : outside_reads(g_, cone),
                        std::vector<int32_t>(r.inputs.begin() + 1, r.inputs.end()));
      const std::vector<bool> red = reduced_dims(r, xs, g_.type(r.outputs[0]).shape);
      Open* join = nullptr;
      for (Open& o : open) {
        if (!(o.shape == xs && o.red == red && o.reductions.size() < static_cast<size_t>(kStitchReductions) &&
              merge_members(o.reads, needs).size() <= static_cast<size_t>(kMaxFusedOperands)))
          continue;
        if (ready_at(needs, o.at)) {
          join = &o;
          break;
        }
        // Its operands are made after the stitch (a per-channel view of the mean that the
        // backward's order puts between two sums of one batch norm): the stitch moves down to
        // this reduction when nothing in between reads what it computes.
        if (ready_at(needs, i) && results_unread_between(o, i)) {
          o.at = i;
          join = &o;
          break;
        }
      }
      if (!join) {
        if (needs.size() > static_cast<size_t>(kMaxFusedOperands)) continue;
        open.push_back(Open{i, xs, red, {}, {}, {}, {}});
        join = &open.back();
      }
      join->reads = merge_members(join->reads, needs);
      join->reductions.push_back(steps_[i].node);
      join->taken.push_back(i);
      if (!cone.empty()) join->cones.emplace_back(producer, cone);
    }
    return open;
  }

  // The stitch of an open one: its prologue (the cones in plan order), inputs, outputs, pieces.
  ReduceStitch build(Open& o) {
    ReduceStitch st;
    std::stable_sort(o.cones.begin(), o.cones.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& c : o.cones) st.prologue.nodes = merge_members(st.prologue.nodes, c.second);
    st.prologue.inputs = outside_reads(g_, st.prologue.nodes);
    st.reductions = o.reductions;
    for (int32_t id : o.reductions) {
      const Node& r = g_.nodes[static_cast<size_t>(id)];
      const int32_t x = r.inputs[0];
      const bool inside = std::any_of(st.prologue.nodes.begin(), st.prologue.nodes.end(), [&](int32_t p) {
        return g_.nodes[static_cast<size_t>(p)].outputs[0] == x;
      });
      if (inside) st.prologue.outputs = merge_members(st.prologue.outputs, {x});
      else st.inputs = merge_members(st.inputs, {x});
      st.inputs = merge_members(st.inputs, std::vector<int32_t>(r.inputs.begin() + 1, r.inputs.end()));  // sum_to_like's like
      st.outputs.push_back(r.outputs[0]);
    }
    st.inputs = merge_members(st.inputs, st.prologue.inputs);
    if (!st.prologue.nodes.empty()) st.pieces.push_back(Step{-1, st.prologue, nullptr, nullptr});
    for (int32_t id : o.reductions) st.pieces.push_back(Step{id, {}, nullptr, nullptr});
    for (size_t t : o.taken) removed_[t] = true;
    // Results are made at the stitch now (a sibling may have come from far later): a later
    // stitch's epilogue may read them.
    for (int32_t v : st.outputs) made_[v] = o.at;
    return st;
  }

  // The epilogue: every later group computed at the results (read directly, through views, or
  // from an earlier epilogue group's outputs), whose other operands are per output or scalars,
  // ready at the stitch (constants move there), while they fit the kernel. A batch norm has
  // several: rsqrt(var + eps), the running statistics' updates, the optimizer's updates of
  // gamma and beta from the backward's sums; each had been a kernel of its own over C elements
  // (four launches a layer, more time than their work).
  void absorb_epilogue(const Open& o, ReduceStitch& st) {
    int64_t outer = 1;
    for (int64_t d = 0; d < o.shape.rank(); ++d)
      if (!o.red[static_cast<size_t>(d)]) outer *= o.shape[d];
    std::map<int32_t, size_t> alias;  // value -> the result it holds
    for (size_t k = 0; k < st.outputs.size(); ++k) alias[st.outputs[k]] = k;
    std::vector<int32_t> computed;  // outputs of the epilogue so far (computed in the kernel)
    std::vector<size_t> view_steps;
    for (size_t j = o.at + 1; j < steps_.size(); ++j) {
      if (removed_[j]) continue;
      const Step& s = steps_[j];
      if (!s.fused()) {
        const Node& n = g_.nodes[static_cast<size_t>(s.node)];
        if (is_value_view(n.kind) && n.control_deps.empty() && alias.count(n.inputs[0])) {
          alias[n.outputs[0]] = alias.at(n.inputs[0]);
          view_steps.push_back(j);
        }
        continue;
      }
      if (!s.is_group()) continue;
      bool reads_result = false, fits = true;
      for (int32_t id : s.group.nodes) fits &= elements(g_, g_.nodes[static_cast<size_t>(id)].outputs[0]) == outer;
      std::vector<size_t> constants;
      std::vector<int32_t> operands;  // what it reads besides the results and the epilogue's values
      for (int32_t v : s.group.inputs) {
        if (alias.count(v) || contains(computed, v)) {
          reads_result = true;
          continue;
        }
        operands.push_back(v);
        fits &= elements(g_, v) == outer || elements(g_, v) == 1;
        if (ready_at({v}, o.at)) continue;
        if (auto c = movable_step(v, o.at); c && !removed_[*c]) constants.push_back(*c);
        else fits = false;
      }
      if (!reads_result || !fits) continue;
      const std::vector<int32_t> inputs = merge_members(st.inputs, operands);
      if (inputs.size() > static_cast<size_t>(kMaxFusedOperands) ||
          st.outputs.size() + s.group.outputs.size() > static_cast<size_t>(kStitchOutputs) ||
          st.epilogue.nodes.size() + s.group.nodes.size() > static_cast<size_t>(kMaxGroupMembers))
        return;
      for (size_t c : constants) {
        hoisted_[o.at].push_back(c);
        removed_[c] = true;
        for (int32_t v : g_.nodes[static_cast<size_t>(steps_[c].node)].outputs) hoisted_at_.emplace(v, o.at);
      }
      // The group joins the epilogue: its members after the earlier ones, its inputs but those
      // the epilogue computes, its outputs all kept (read after the stitch).
      // (A member recomputed in two groups is computed once.)
      FusionGroup& e = st.epilogue;
      e.nodes = merge_members(e.nodes, s.group.nodes);
      for (int32_t v : s.group.inputs)
        if (!contains(computed, v) && !contains(e.inputs, v)) e.inputs.push_back(v);
      for (int32_t v : s.group.outputs)
        if (!contains(e.outputs, v)) e.outputs.push_back(v);
      for (int32_t id : s.group.nodes)
        for (int32_t v : g_.nodes[static_cast<size_t>(id)].outputs) computed.push_back(v), made_[v] = o.at;
      for (int32_t v : s.group.inputs)
        if (auto a = alias.find(v); a != alias.end() &&
            std::find(st.aliases.begin(), st.aliases.end(), std::pair<int32_t, size_t>(v, a->second)) == st.aliases.end())
          st.aliases.emplace_back(v, a->second);
      st.inputs = inputs;
      for (size_t vs : view_steps) {
        st.views.push_back(steps_[vs].node);
        st.pieces.push_back(steps_[vs]);
        removed_[vs] = true;
      }
      view_steps.clear();
      st.pieces.push_back(s);
      for (int32_t v : s.group.outputs)
        if (!contains(st.outputs, v)) st.outputs.push_back(v);
      removed_[j] = true;
    }
  }

  const GraphImpl& g_;
  FusionPlan& plan_;
  std::vector<Step>& steps_;
  const std::vector<int32_t> reads_;
  std::unordered_map<int32_t, size_t> made_;  // value -> the first step computing it
  std::vector<int32_t> matmul_operands_;
  std::vector<bool> removed_;
  std::map<size_t, std::shared_ptr<ReduceStitch>> placed_;
  std::map<size_t, std::vector<size_t>> hoisted_;  // constants and views an epilogue reads, run right before its stitch
  std::unordered_map<int32_t, size_t> hoisted_at_;   // their values -> that stitch's step
};

}  // namespace

bool reduce_fusion_disabled() { return env_flag("TGRAPH_NO_REDUCE_FUSION"); }

bool stitchable_reduction(const GraphImpl& g, const Node& n) {
  switch (n.kind) {
    case OpKind::ReduceSum: case OpKind::ReduceMean: case OpKind::ReduceMax: case OpKind::ReduceMin:
    case OpKind::ReduceProd: case OpKind::ReduceVariance: case OpKind::SumToLike: break;
    default: return false;
  }
  if (!n.control_deps.empty() || n.inputs.empty() || n.outputs.size() != 1) return false;
  const TensorType &t = g.type(n.inputs[0]), &o = g.type(n.outputs[0]);
  return is_float(t.dtype) && o.dtype == t.dtype && t.shape.ranked() && t.shape.is_static() && t.shape.rank() <= 8 &&
         t.shape.num_elements() > 0 && o.shape.ranked() && o.shape.is_static();
}

std::vector<bool> reduced_dims(const Node& n, const Shape& in, const Shape& out) {
  const int64_t rank = in.rank();
  std::vector<bool> red(static_cast<size_t>(rank), false);
  if (n.kind == OpKind::SumToLike) {
    const int64_t lead = rank - out.rank();
    for (int64_t d = 0; d < rank; ++d) red[static_cast<size_t>(d)] = d < lead || out[d - lead] == 1;
  } else {
    const auto& desc = std::get<ReduceDesc>(n.attr);
    if (desc.axes.empty()) std::fill(red.begin(), red.end(), true);
    for (int64_t a : desc.axes)
      if (auto ax = normalize_axis(a, rank)) red[static_cast<size_t>(*ax)] = true;
  }
  for (int64_t d = 0; d < rank; ++d)
    if (in[d] == 1) red[static_cast<size_t>(d)] = false;  // a size-1 dim is the same either way
  return red;
}

void stitch_reductions(const Module& m, int32_t block, FusionPlan& plan) { ReductionStitcher(m, block, plan).run(); }

}  // namespace tg::detail
