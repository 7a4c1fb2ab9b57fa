// Stitched reductions (passes/reduce_stitch.h). Runs after recompute_producers, so a reduction's
// input is often computed by a group that something else no longer needs; the stitch takes the
// members computing it (their cone) as its prologue, and the group's write of it goes away
// (drop_unread_outputs). Reductions of one geometry whose inputs are ready at the first of them
// join its stitch, so their common reads are shared. Then the first later group computed at the
// results (through views of them) with operands ready at the stitch becomes its epilogue.
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

// An open stitch while planning: where it runs, its reductions, the cone of each.
struct Open {
  size_t at = 0;
  Shape shape;
  std::vector<bool> red;
  std::vector<int32_t> reductions;
  std::vector<std::pair<size_t, std::vector<int32_t>>> cones;  // (producer step, members)
  bool prologue = false;
  std::vector<size_t> taken;   // plan steps of the reductions
  std::vector<int32_t> reads;  // values the kernel will read (at most kMaxFusedOperands)
};

// The values of `a` and those of `b` not among them.
std::vector<int32_t> joined(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  for (int32_t v : b)
    if (!contains(a, v)) a.push_back(v);
  return a;
}

bool is_view(OpKind k) { return k == OpKind::Reshape || k == OpKind::ExpandDims || k == OpKind::Squeeze; }

int64_t elements(const GraphImpl& g, int32_t v) {
  const Shape& s = g.type(v).shape;
  return s.ranked() && s.is_static() ? s.num_elements() : -1;
}

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

void stitch_reductions(const Module& m, int32_t block, FusionPlan& plan) {
  const GraphImpl& g = m.graph;
  std::vector<Step>& steps = plan.steps;
  const std::vector<int32_t> reads = plan_reads(m, block, plan);
  std::unordered_map<int32_t, size_t> made;  // value -> the first step computing it
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].is_group()) {
      for (int32_t v : steps[i].group.outputs) made.emplace(v, i);
    } else {
      for (int32_t id : step_nodes(steps[i]))
        for (int32_t v : g.nodes[static_cast<size_t>(id)].outputs) made.emplace(v, i);
    }
  }
  // Values read by a matmul stay read by their own reduce_sum step: the CUDA backend folds a
  // reduce_sum of a weight gradient's dy into the matmul (the bias-gradient epilogue).
  std::vector<int32_t> matmul_operands;
  for (const Step& s : steps)
    if (!s.fused() && g.nodes[static_cast<size_t>(s.node)].kind == OpKind::MatMul)
      for (int32_t v : g.nodes[static_cast<size_t>(s.node)].inputs) matmul_operands.push_back(v);
  auto ready_at = [&](const std::vector<int32_t>& vals, size_t at) {
    for (int32_t v : vals) {
      auto it = made.find(v);
      if (it != made.end() && it->second >= at) return false;
    }
    return true;
  };

  std::vector<Open> open;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].fused()) continue;
    const Node& r = g.nodes[static_cast<size_t>(steps[i].node)];
    if (!stitchable_reduction(g, r)) continue;
    const int32_t x = r.inputs[0];
    if (r.kind == OpKind::ReduceSum && contains(matmul_operands, x)) continue;
    const Shape& xs = g.type(x).shape;
    // The prologue: the members of the group computing x, when nothing else reads x.
    std::vector<int32_t> cone;
    size_t producer = 0;
    if (auto it = made.find(x); it != made.end() && reads[static_cast<size_t>(x)] == 1) {
      const Step& p = steps[it->second];
      FusionGroup grp;
      if (p.is_group()) grp = p.group;
      else if (!p.fused() && fusible_elementwise(g, g.nodes[static_cast<size_t>(p.node)])) grp.nodes = {p.node};
      if (!grp.nodes.empty() && g.type(g.nodes[static_cast<size_t>(grp.nodes.back())].outputs[0]).shape == xs) {
        cone = group_cone(g, grp, {x});
        producer = it->second;
      }
    }
    // What it reads: its input (or the cone's inputs), and a sum_to_like's `like` (for its shape).
    std::vector<int32_t> needs = cone.empty() ? std::vector<int32_t>{x} : outside_reads(g, cone);
    needs = joined(needs, std::vector<int32_t>(r.inputs.begin() + 1, r.inputs.end()));
    const std::vector<bool> red = reduced_dims(r, xs, g.type(r.outputs[0]).shape);
    Open* join = nullptr;
    for (Open& o : open)
      if (o.shape == xs && o.red == red && o.reductions.size() < static_cast<size_t>(kStitchReductions) &&
          ready_at(needs, o.at) && joined(o.reads, needs).size() <= static_cast<size_t>(kMaxFusedOperands)) {
        join = &o;
        break;
      }
    if (!join) {
      if (needs.size() > static_cast<size_t>(kMaxFusedOperands)) continue;
      open.push_back(Open{i, xs, red, {}, {}, false, {}, {}});
      join = &open.back();
    }
    join->reads = joined(join->reads, needs);
    join->reductions.push_back(steps[i].node);
    join->taken.push_back(i);
    if (!cone.empty()) {
      join->cones.emplace_back(producer, cone);
      join->prologue = true;
    }
  }

  std::map<size_t, std::shared_ptr<ReduceStitch>> placed;
  std::map<size_t, std::vector<size_t>> hoisted;  // constants an epilogue reads, run right before its stitch
  std::vector<bool> removed(steps.size(), false);
  // A constant computed later in the plan can move before the stitch (it reads nothing).
  auto constant_step = [&](int32_t v) -> std::optional<size_t> {
    auto it = made.find(v);
    if (it == made.end() || steps[it->second].fused()) return std::nullopt;
    const Node& n = g.nodes[static_cast<size_t>(steps[it->second].node)];
    if (n.kind != OpKind::Constant || !n.control_deps.empty() || !n.inputs.empty()) return std::nullopt;
    return it->second;
  };
  for (Open& o : open) {
    if (!o.prologue && o.reductions.size() < 2) continue;  // nothing to gain
    auto st = std::make_shared<ReduceStitch>();
    std::stable_sort(o.cones.begin(), o.cones.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& c : o.cones) st->prologue.nodes = merge_members(st->prologue.nodes, c.second);
    st->prologue.inputs = outside_reads(g, st->prologue.nodes);
    st->reductions = o.reductions;
    for (int32_t id : o.reductions) {
      const Node& r = g.nodes[static_cast<size_t>(id)];
      const int32_t x = r.inputs[0];
      const bool inside = std::any_of(st->prologue.nodes.begin(), st->prologue.nodes.end(), [&](int32_t p) {
        return g.nodes[static_cast<size_t>(p)].outputs[0] == x;
      });
      if (inside) {
        if (!contains(st->prologue.outputs, x)) st->prologue.outputs.push_back(x);
      } else if (!contains(st->inputs, x)) {
        st->inputs.push_back(x);
      }
      st->inputs = joined(st->inputs, std::vector<int32_t>(r.inputs.begin() + 1, r.inputs.end()));  // sum_to_like's like
      st->outputs.push_back(r.outputs[0]);
    }
    for (int32_t v : st->prologue.inputs)
      if (!contains(st->inputs, v)) st->inputs.push_back(v);
    if (!st->prologue.nodes.empty()) st->pieces.push_back(Step{-1, st->prologue, nullptr, nullptr});
    for (int32_t id : o.reductions) st->pieces.push_back(Step{id, {}, nullptr, nullptr});
    for (size_t t : o.taken) removed[t] = true;
    // The epilogue: the first later group computed at the results (read directly or through
    // views), whose other operands are ready here and per output or scalars.
    int64_t outer = 1;
    for (int64_t d = 0; d < o.shape.rank(); ++d)
      if (!o.red[static_cast<size_t>(d)]) outer *= o.shape[d];
    std::map<int32_t, size_t> alias;  // value -> the result it holds
    for (size_t k = 0; k < st->outputs.size(); ++k) alias[st->outputs[k]] = k;
    std::vector<size_t> view_steps;
    for (size_t j = o.at + 1; j < steps.size(); ++j) {
      if (removed[j]) continue;
      const Step& s = steps[j];
      if (!s.fused()) {
        const Node& n = g.nodes[static_cast<size_t>(s.node)];
        if (is_view(n.kind) && n.control_deps.empty() && alias.count(n.inputs[0])) {
          alias[n.outputs[0]] = alias.at(n.inputs[0]);
          view_steps.push_back(j);
        }
        continue;
      }
      if (!s.is_group()) continue;
      bool reads_result = false, fits = elements(g, g.nodes[static_cast<size_t>(s.group.nodes.back())].outputs[0]) == outer;
      for (int32_t id : s.group.nodes) fits &= elements(g, g.nodes[static_cast<size_t>(id)].outputs[0]) == outer;
      std::vector<size_t> constants;
      for (int32_t v : s.group.inputs) {
        if (alias.count(v)) {
          reads_result = true;
          continue;
        }
        fits &= elements(g, v) == outer || elements(g, v) == 1;
        if (ready_at({v}, o.at)) continue;
        if (auto c = constant_step(v); c && !removed[*c]) constants.push_back(*c);
        else fits = false;
      }
      if (!reads_result || !fits) continue;
      std::vector<int32_t> epilogue_reads;
      for (int32_t v : s.group.inputs)
        if (!alias.count(v)) epilogue_reads.push_back(v);
      if (joined(st->inputs, epilogue_reads).size() > static_cast<size_t>(kMaxFusedOperands) ||
          st->outputs.size() + s.group.outputs.size() > static_cast<size_t>(kStitchOutputs))
        break;
      for (size_t c : constants) {
        hoisted[o.at].push_back(c);
        removed[c] = true;
      }
      st->epilogue = s.group;
      for (int32_t v : s.group.inputs) {
        if (auto a = alias.find(v); a != alias.end()) st->aliases.emplace_back(v, a->second);
        else if (!contains(st->inputs, v)) st->inputs.push_back(v);
      }
      for (size_t vs : view_steps) {
        st->views.push_back(steps[vs].node);
        st->pieces.push_back(steps[vs]);
        removed[vs] = true;
      }
      st->pieces.push_back(s);
      st->outputs.insert(st->outputs.end(), s.group.outputs.begin(), s.group.outputs.end());
      removed[j] = true;
      break;
    }
    placed[o.at] = st;
    plan.decisions.push_back(std::to_string(o.reductions.size()) + " reductions stitched with a prologue of " +
                             std::to_string(st->prologue.nodes.size()) + " ops and an epilogue of " +
                             std::to_string(st->epilogue.nodes.size()));
  }
  if (placed.empty()) return;
  std::vector<Step> out;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (auto it = placed.find(i); it != placed.end()) {
      for (size_t c : hoisted[i]) out.push_back(steps[c]);
      Step s;
      s.reduce = it->second;
      out.push_back(std::move(s));
    } else if (!removed[i]) {
      out.push_back(std::move(steps[i]));
    }
  }
  steps = std::move(out);
}

}  // namespace tg::detail
