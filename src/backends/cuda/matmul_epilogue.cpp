#include "backends/cuda/matmul_epilogue.h"

#include <algorithm>

#include "core/env.h"

namespace tg::detail {

bool epilogue_disabled() {
  return env_flag("TGRAPH_NO_EPILOGUE");
}

bool drelu_enabled() { return env_flag("TGRAPH_DRELU"); }

bool bias_fits(const Shape& bias, const Shape& out) {
  if (!bias.ranked() || !out.ranked() || bias.rank() < 1 || out.rank() < 2 || bias.rank() > out.rank()) return false;
  for (int64_t i = 0; i + 1 < bias.rank(); ++i)
    if (bias[i] != 1) return false;
  return bias.dim(-1) == out.dim(-1);
}

namespace {

bool epilogue_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// The matmul a value comes from, directly or through one reshape view (nullptr otherwise).
const Node* matmul_through_view(const GraphImpl& g, int32_t v) {
  const Node* p = g.producer(v);
  if (p && is_value_view(p->kind) && p->control_deps.empty()) p = g.producer(p->inputs[0]);
  return p && p->kind == OpKind::MatMul ? p : nullptr;
}

}  // namespace

bool epilogue_pinned(const GraphImpl& g, const std::vector<int32_t>& uses, const Node& n) {
  if ((n.kind != OpKind::GeluTanhGrad && n.kind != OpKind::ReluGrad) || !n.control_deps.empty() ||
      epilogue_disabled())
    return false;
  const TensorType &dy = g.type(n.inputs[0]), &h = g.type(n.inputs[1]);
  // Only what can fold is pinned (a pinned op loses fusion): a lone-use result of a 2-D matmul
  // (the aux forms take one batch) in the same block, free to move up to it.
  const Node* mm = matmul_through_view(g, n.inputs[0]);
  if (!mm || !mm->control_deps.empty() || mm->block != n.block || g.type(mm->outputs[0]).shape.rank() != 2 ||
      uses[static_cast<size_t>(mm->outputs[0])] != 1 || uses[static_cast<size_t>(n.inputs[0])] != 1 ||
      !epilogue_dtype(dy.dtype) || dy != h || !dy.shape.ranked() || !dy.shape.is_static() || dy.shape.rank() < 2)
    return false;
  if (n.kind == OpKind::GeluTanhGrad) return dy.shape.dim(-1) % 8 == 0;  // aux: the gelu's input
  // relu_grad reads relu's result; the mask comes from the forward's epilogue (a bias add, then
  // relu), its leading dimension in bits a multiple of 128. Opt-in: slower than the generated
  // relu_grad kernel on the H200 (matmul_epilogue.h).
  if (!drelu_enabled()) return false;
  const Node* relu = g.producer(n.inputs[1]);
  if (!relu || relu->block != n.block) return false;
  const Node* add = relu->kind == OpKind::Relu ? g.producer(relu->inputs[0]) : nullptr;
  return add && add->kind == OpKind::Add && dy.shape.dim(-1) % 128 == 0;
}

namespace {

bool is_broadcast(OpKind k) { return k == OpKind::BroadcastTo || k == OpKind::BroadcastLike; }

// True when a pinned relu_grad reads relu result r: the forward then stores relu's mask.
bool mask_read(const GraphImpl& g, const std::vector<int32_t>& uses, int32_t r) {
  for (const Node& n : g.nodes)
    if (n.kind == OpKind::ReluGrad && n.inputs[1] == r && epilogue_pinned(g, uses, n)) return true;
  return false;
}

// The epilogue when the nodes `seen` (of whole plan steps after the matmul with result y) are
// exactly [broadcast of the bias], add, [relu | gelu_tanh], leaving only the last result for
// later steps; kind none otherwise.
EpilogueMatch match_nodes(const GraphImpl& g, const std::vector<int32_t>& uses, int32_t y,
                          const std::vector<int32_t>& seen) {
  EpilogueMatch none;
  auto in_seen = [&](const Node* n) {
    return n && std::find(seen.begin(), seen.end(), static_cast<int32_t>(n - g.nodes.data())) != seen.end();
  };
  const Node* add = nullptr;
  for (int32_t id : seen) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (std::find(n.inputs.begin(), n.inputs.end(), y) != n.inputs.end()) add = &n;
  }
  if (!add || add->kind != OpKind::Add || add->inputs.size() != 2 || !add->control_deps.empty()) return none;
  const TensorType& yt = g.type(y);
  const int32_t sum = add->outputs[0];
  int32_t bias = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
  if (bias == y || g.type(sum) != yt) return none;  // the sum must have y's shape and dtype
  size_t pattern = 1;
  if (const Node* b = g.producer(bias); b && is_broadcast(b->kind)) {
    // The graph builder broadcasts the bias explicitly: read its source instead.
    if (in_seen(b)) {
      if (uses[static_cast<size_t>(bias)] != 1 || !b->control_deps.empty()) return none;
      ++pattern;
    }
    bias = b->inputs[0];
  } else if (in_seen(b)) {
    return none;
  }
  if (g.type(bias).dtype != yt.dtype || !bias_fits(g.type(bias).shape, yt.shape)) return none;
  EpilogueMatch m;
  m.bias = bias;
  m.output = sum;
  m.kind = MatmulShape::Epilogue::bias;
  if (seen.size() == pattern + 1) {
    const Node& act = g.nodes[static_cast<size_t>(seen.back())];
    m.kind = act.kind == OpKind::Relu       ? MatmulShape::Epilogue::relu_bias
             : act.kind == OpKind::GeluTanh ? MatmulShape::Epilogue::gelu_tanh_bias
                                            : MatmulShape::Epilogue::none;
    if (m.kind == MatmulShape::Epilogue::none || &act == add || act.inputs.size() != 1 || act.inputs[0] != sum ||
        !act.control_deps.empty() || g.type(act.outputs[0]) != yt)
      return none;
    if (uses[static_cast<size_t>(sum)] != 1) {
      // The sum is read elsewhere too (a backward): gelu's aux epilogue stores it beside the
      // result, with a leading dimension cuBLASLt wants a multiple of 8.
      if (m.kind != MatmulShape::Epilogue::gelu_tanh_bias || yt.shape.dim(-1) % 8 != 0) return none;
      m.kind = MatmulShape::Epilogue::gelu_tanh_aux_bias;
      m.aux = sum;
    } else if (m.kind == MatmulShape::Epilogue::relu_bias && mask_read(g, uses, act.outputs[0])) {
      // The backward's relu_grad folds into its matmul (DRELU) reading relu's mask: store it.
      m.kind = MatmulShape::Epilogue::relu_aux_bias;
      m.aux = act.outputs[0];
    }
    m.output = act.outputs[0];
  } else if (seen.size() != pattern) {
    return none;
  }
  return m;
}

}  // namespace

EpilogueMatch match_epilogue(const GraphImpl& g, const std::vector<int32_t>& uses, const FusionPlan& plan,
                             size_t step) {
  EpilogueMatch best;
  const Step& s = plan.steps[step];
  if (s.stitch || s.fused()) return best;
  const Node& mm = g.nodes[static_cast<size_t>(s.node)];
  if (mm.kind != OpKind::MatMul) return best;
  int32_t y = mm.outputs[0];
  const TensorType yt = g.type(y);
  if (yt.dtype != DType::f32 && yt.dtype != DType::f16 && yt.dtype != DType::bf16) return best;
  // Static shapes only (dynamic ones would need the broadcast checked per run); the add must be
  // the matmul result's only reader (a target counts as a use).
  if (!yt.shape.ranked() || !yt.shape.is_static() || uses[static_cast<size_t>(y)] != 1) return best;
  // Linear on [.., in] inputs reshapes the 2-D result before the add: a view of the same
  // buffer, and the bias still runs along its last dim.
  size_t first = 1;
  if (step + 1 < plan.steps.size() && !plan.steps[step + 1].fused() && !plan.steps[step + 1].stitch) {
    const Node& v = g.nodes[static_cast<size_t>(plan.steps[step + 1].node)];
    if ((v.kind == OpKind::Reshape || v.kind == OpKind::ExpandDims || v.kind == OpKind::Squeeze) &&
        v.inputs[0] == y && v.control_deps.empty() && g.type(v.outputs[0]).shape.is_static() &&
        g.type(v.outputs[0]).shape.rank() >= 2 && g.type(v.outputs[0]).shape.dim(-1) == yt.shape.dim(-1) &&
        uses[static_cast<size_t>(v.outputs[0])] == 1) {
      y = v.outputs[0];
      first = 2;
    }
  }
  // The longest run of whole steps (at most three: broadcast, add, activation when unfused)
  // that is exactly the pattern.
  std::vector<int32_t> seen;
  for (size_t k = first; k < first + 3 && step + k < plan.steps.size(); ++k) {
    const Step& t = plan.steps[step + k];
    if (t.stitch || t.reduce) break;
    if (t.fused()) seen.insert(seen.end(), t.group.nodes.begin(), t.group.nodes.end());
    else seen.push_back(t.node);
    EpilogueMatch m = match_nodes(g, uses, y, seen);
    if (m.kind != MatmulShape::Epilogue::none) {
      m.steps = k;
      best = m;
    }
  }
  // The graph's use counts are not the plan's: a later group may recompute the sum (or the
  // activation) from the matmul's result, which the epilogue then never writes.
  for (size_t j = 0; j < plan.steps.size() && best.kind != MatmulShape::Epilogue::none; ++j) {
    if (j > step && j <= step + best.steps) continue;
    for (int32_t v : step_inputs(g, plan.steps[j]))
      if (v == mm.outputs[0] || v == y) return EpilogueMatch{};
  }
  return best;
}

FusionOptions cuda_fusion_options() {
  return FusionOptions{.stitch_stencils = true, .stitch_reductions = true, .pin = epilogue_pinned};
}

EpilogueMatch match_activation_grad(const GraphImpl& g, const std::vector<int32_t>& uses, const FusionPlan& plan,
                                    size_t step) {
  EpilogueMatch none;
  const Step& s = plan.steps[step];
  if (s.fused()) return none;
  const Node& mm = g.nodes[static_cast<size_t>(s.node)];
  if (mm.kind != OpKind::MatMul || !mm.control_deps.empty()) return none;
  // The pinned gelu_tanh_grad / relu_grad reading this matmul's result (through a view, maybe)
  // comes later in the plan, not always next: autodiff puts other gradients' matmuls between. It
  // moves to the matmul when its other operand is ready there: no step between computes it.
  EpilogueMatch m;
  int32_t aux = -1;
  bool relu = false;
  for (size_t j = step + 1; j < plan.steps.size() && m.output < 0; ++j) {
    const Step& t = plan.steps[j];
    if (t.fused()) continue;
    const Node& n = g.nodes[static_cast<size_t>(t.node)];
    if (is_value_view(n.kind) && n.inputs[0] == mm.outputs[0]) {
      m.moved.push_back(j);  // the view of the result that the gelu_tanh_grad reads
    } else if (t.pinned && epilogue_pinned(g, uses, n) && matmul_through_view(g, n.inputs[0]) == &mm) {
      aux = n.inputs[1];
      relu = n.kind == OpKind::ReluGrad;
      m.output = n.outputs[0];
      m.moved.push_back(j);
    }
  }
  if (m.output < 0) return none;
  for (size_t j = step + 1; j < m.moved.back(); ++j)
    for (int32_t id : step_nodes(plan.steps[j]))
      for (int32_t v : g.nodes[static_cast<size_t>(id)].outputs)
        if (v == aux) return none;
  m.kind = relu ? MatmulShape::Epilogue::drelu : MatmulShape::Epilogue::dgelu_tanh;
  m.aux = aux;
  m.computed = m.moved.size();
  return m;
}

namespace {

// Values a plan step reads, and the results of the nodes it must follow (its control
// dependencies); false for steps whose reads are not all listed (control flow reads outer values
// from its bodies).
bool step_reads(const GraphImpl& g, const Step& s, std::vector<int32_t>& out) {
  auto add_node = [&](int32_t id) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::IfElse || n.kind == OpKind::ForLoop || n.kind == OpKind::WhileLoop) return false;
    out.insert(out.end(), n.inputs.begin(), n.inputs.end());
    for (int32_t d : n.control_deps) {  // node ids: what the moved steps must not run after
      const std::vector<int32_t>& made = g.nodes[static_cast<size_t>(d)].outputs;
      out.insert(out.end(), made.begin(), made.end());
    }
    return true;
  };
  if (s.stitch || s.reduce) {
    const std::vector<int32_t> in = step_inputs(g, s);
    out.insert(out.end(), in.begin(), in.end());
    return true;
  }
  if (s.fused()) {
    for (int32_t id : s.group.nodes)
      if (!add_node(id)) return false;
    return true;
  }
  return add_node(s.node);
}

}  // namespace

EpilogueMatch match_bias_grad(const GraphImpl& g, const FusionPlan& plan, size_t step) {
  EpilogueMatch none;
  const Step& s = plan.steps[step];
  if (s.stitch || s.fused()) return none;
  const Node& mm = g.nodes[static_cast<size_t>(s.node)];
  if (mm.kind != OpKind::MatMul || !mm.control_deps.empty()) return none;
  const auto& d = std::get<MatmulDesc>(mm.attr);
  const int32_t dy = mm.inputs[1];
  const TensorType &xt = g.type(mm.inputs[0]), &dt = g.type(dy), &yt = g.type(mm.outputs[0]);
  // A weight gradient x^T dy of 2-D static operands, in a dtype cuBLASLt reduces.
  if (!d.transpose_a || d.transpose_b || yt.dtype != xt.dtype || yt.dtype != dt.dtype) return none;
  if (yt.dtype != DType::f32 && yt.dtype != DType::f16 && yt.dtype != DType::bf16) return none;
  for (const TensorType* t : {&xt, &dt})
    if (!t->shape.ranked() || !t->shape.is_static() || t->shape.rank() != 2) return none;
  // The lone reduce_sum of dy over its rows, anywhere in the block's plan.
  size_t j = plan.steps.size();
  for (size_t i = 0; i < plan.steps.size() && j == plan.steps.size(); ++i) {
    const Step& t = plan.steps[i];
    if (i == step || t.stitch || t.fused()) continue;
    const Node& r = g.nodes[static_cast<size_t>(t.node)];
    if (r.kind != OpKind::ReduceSum || r.inputs[0] != dy || !r.control_deps.empty()) continue;
    const auto& rd = std::get<ReduceDesc>(r.attr);
    if (rd.axes.size() == 1 && (rd.axes[0] == 0 || rd.axes[0] == -2) && g.type(r.outputs[0]).dtype == yt.dtype &&
        g.type(r.outputs[0]).shape.is_static() && g.type(r.outputs[0]).shape.num_elements() == dt.shape[1])
      j = i;
  }
  if (j == plan.steps.size()) return none;
  EpilogueMatch m;
  m.output = mm.outputs[0];
  m.kind = MatmulShape::Epilogue::bias_grad;
  m.grad = g.nodes[static_cast<size_t>(plan.steps[j].node)].outputs[0];
  m.grad_step = j;
  m.moved = {j};
  m.computed = 1;
  if (j < step) {
    // Computed before the matmul in the plan: the reduction and the views of its result right
    // after it move to the matmul, provided no step in between reads any of them.
    std::vector<int32_t> produced{m.grad};
    size_t i = j + 1;
    for (; i < step; ++i) {
      const Step& t = plan.steps[i];
      if (t.stitch || t.fused()) break;
      const Node& v = g.nodes[static_cast<size_t>(t.node)];
      if (!is_value_view(v.kind) || v.inputs[0] != produced.back() || !v.control_deps.empty()) break;
      produced.push_back(v.outputs[0]);
      m.moved.push_back(i);
    }
    for (; i < step; ++i) {
      std::vector<int32_t> reads;
      if (!step_reads(g, plan.steps[i], reads)) return none;
      for (int32_t v : reads)
        if (std::find(produced.begin(), produced.end(), v) != produced.end()) return none;
    }
  }
  return m;
}

std::vector<EpilogueMatch> match_epilogues(const Module& m, const FusionPlan& plan) {
  std::vector<EpilogueMatch> r(plan.steps.size());
  if (epilogue_disabled()) return r;
  std::vector<int32_t> uses = use_counts(m);
  std::vector<bool> taken(plan.steps.size(), false);  // a moved step folds into one matmul only
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    r[i] = match_epilogue(m.graph, uses, plan, i);
    if (r[i].kind != MatmulShape::Epilogue::none) continue;
    if (EpilogueMatch d = match_activation_grad(m.graph, uses, plan, i); d.kind != MatmulShape::Epilogue::none) {
      for (size_t k : d.moved) taken[k] = true;
      r[i] = std::move(d);
      continue;
    }
    EpilogueMatch b = match_bias_grad(m.graph, plan, i);
    if (b.kind == MatmulShape::Epilogue::none || taken[b.grad_step]) continue;
    // Not into a step another match already replaces, nor one that replaces others.
    bool clash = r[b.grad_step].kind != MatmulShape::Epilogue::none;
    for (size_t k = 0; k < i && !clash; ++k)
      clash = r[k].kind != MatmulShape::Epilogue::none && b.grad_step > k && b.grad_step <= k + r[k].steps;
    if (clash) continue;
    for (size_t k : b.moved) taken[k] = true;
    r[i] = std::move(b);
  }
  // drelu reads the mask of a relu the forward's epilogue computed in this plan; without that the
  // relu_grad runs as a kernel of its own.
  for (EpilogueMatch& e : r) {
    if (e.kind != MatmulShape::Epilogue::drelu) continue;
    bool stored = false;
    for (const EpilogueMatch& f : r) stored |= f.kind == MatmulShape::Epilogue::relu_aux_bias && f.aux == e.aux;
    if (!stored) e = EpilogueMatch{};
  }
  for (const EpilogueMatch& e : r)
    for (size_t k : e.moved) r[k].runs_at_matmul = true;
  return r;
}

}  // namespace tg::detail
