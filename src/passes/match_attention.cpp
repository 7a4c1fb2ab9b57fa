// Attention spelled out (passes/match_attention.h): softmax(q k^T * c + mask) v written as two
// batched matmuls around a softmax, as Hugging Face's "eager" attention, torch.onnx exports and
// hand-written transformer code give it, becomes one scaled_dot_product_attention node, which a
// backend with a fused kernel runs without the scores ever reaching memory.
//
// Matched, from the second matmul up (views between any two steps are looked through: reshape,
// expand_dims, squeeze, a broadcast_to or identity that keeps the shape):
//   o = matmul(p, v)                     p read by nothing else, no transposed a
//   p = softmax(x, last axis)
//   x = s [* c | / c] [+ mask]           c a scalar constant, mask broadcast to x
//   s = matmul(q, k^T)                   transpose_b, or b any [.., D, Lk] (transposed here)
// The intermediate scores are read by nothing else. q, k, v go to the attention op at the rank
// of the scores' last view (rank 4: [B, H, L, D], so a [B, 1, Lq, Lk] mask keeps its
// broadcasting), reshaped from the matmuls' operands; the result is reshaped to o's shape.
#include "passes/match_attention.h"

#include <cmath>
#include <optional>
#include <vector>

#include "ops/builder.h"
#include "passes/rewrite.h"
#include "tgraph/graph.h"

namespace tg::detail {
namespace {

const Node* producer(const GraphImpl& g, int32_t v) {
  const int32_t id = g.values[static_cast<size_t>(v)].node;
  return id < 0 ? nullptr : &g.nodes[static_cast<size_t>(id)];
}

// A view that keeps the elements in order: reshape, expand_dims, squeeze, identity, or a
// broadcast_to that changes nothing.
bool order_view(const GraphImpl& g, const Node& n) {
  if (!n.control_deps.empty() || n.inputs.empty() || n.outputs.size() != 1) return false;
  switch (n.kind) {
    case OpKind::Reshape: case OpKind::ExpandDims: case OpKind::Squeeze: case OpKind::Identity:
      return true;
    case OpKind::BroadcastTo:
      return g.type(n.inputs[0]).shape == g.type(n.outputs[0]).shape;
    default:
      return false;
  }
}

struct Walk {
  const GraphImpl& g;
  const std::vector<int32_t>& uses;
  // Steps up through views from v, each read only once (a view read elsewhere is kept: its
  // value is needed anyway, and the chain must die with the match); returns the first non-view.
  int32_t through_views(int32_t v) const {
    for (const Node* p = producer(g, v); p && order_view(g, *p); p = producer(g, v)) {
      if (!single(v)) break;
      v = p->inputs[0];
    }
    return v;
  }
  // A scalar constant (through broadcasts of it): its value.
  std::optional<double> scalar(int32_t v) const {
    for (const Node* p = producer(g, v); p; p = producer(g, v)) {
      if (p->kind == OpKind::Constant) {
        if (p->data.num_elements() != 1) return std::nullopt;
        return p->data.at(0);
      }
      if (p->kind != OpKind::BroadcastTo && !order_view(g, *p)) return std::nullopt;
      v = p->inputs[0];
    }
    return std::nullopt;
  }
  // (A value an earlier match made is not counted: not single.)
  bool single(int32_t v) const { return static_cast<size_t>(v) < uses.size() && uses[static_cast<size_t>(v)] == 1; }
};

bool static_shape(const Shape& s) { return s.ranked() && s.is_static(); }

}  // namespace

bool MatchAttention::run(Module& m) {
  const std::vector<int32_t> uses = use_counts(m);
  const GraphImpl& G = m.graph;
  Walk w{G, uses};
  return rewrite_nodes(m, [&](Graph& g, const Node& o, const std::vector<Tensor>&) -> std::vector<Tensor> {
    if (o.kind != OpKind::MatMul || !o.control_deps.empty()) return {};
    const MatmulDesc od = std::get<MatmulDesc>(o.attr);
    if (od.transpose_a) return {};
    // p = softmax(x) over the last axis, read only by this matmul.
    const int32_t p = w.through_views(o.inputs[0]);
    const Node* sm = producer(G, p);
    if (!sm || sm->kind != OpKind::Softmax || !w.single(p) || !sm->control_deps.empty()) return {};
    const Shape ps = G.type(p).shape;  // copies: building below grows the node and value lists
    if (!static_shape(ps) || ps.rank() < 3) return {};
    const int64_t axis = std::get<AxisDesc>(sm->attr).axis;
    if (axis != -1 && axis != ps.rank() - 1) return {};
    // x = s [* c | / c] [+ mask]: from v (read once, through views) to the matmul s, with the
    // scale met on the way; nullptr when v is not such a chain.
    auto scores = [&](int32_t v, double& scale) -> const Node* {
      if (!w.single(v)) return nullptr;
      v = w.through_views(v);
      const Node* n = producer(G, v);
      if (n && (n->kind == OpKind::Mul || n->kind == OpKind::Div) && w.single(v) && n->control_deps.empty()) {
        std::optional<double> c = w.scalar(n->inputs[1]);
        int32_t rest = n->inputs[0];
        if (!c && n->kind == OpKind::Mul) c = w.scalar(n->inputs[0]), rest = n->inputs[1];
        if (!c || *c == 0 || !std::isfinite(*c) || !w.single(rest)) return nullptr;
        scale = n->kind == OpKind::Mul ? *c : 1.0 / *c;
        v = w.through_views(rest);
        n = producer(G, v);
      }
      if (!n || n->kind != OpKind::MatMul || !w.single(v) || !n->control_deps.empty()) return nullptr;
      return n;
    };
    double scale = 1.0;
    std::optional<int32_t> mask;
    const Node* n = scores(sm->inputs[0], scale);
    if (!n) {
      const int32_t x = w.through_views(sm->inputs[0]);
      const Node* add = producer(G, x);
      if (!add || add->kind != OpKind::Add || !w.single(sm->inputs[0]) || !w.single(x) || !add->control_deps.empty())
        return {};
      for (int side = 0; side < 2 && !n; ++side) {
        scale = 1.0;
        if ((n = scores(add->inputs[static_cast<size_t>(side)], scale))) mask = add->inputs[static_cast<size_t>(1 - side)];
      }
      if (!n) return {};
      // The mask before its broadcasts (the op broadcasts it against the scores the same way).
      for (const Node* b = producer(G, *mask); b && (b->kind == OpKind::BroadcastTo || b->kind == OpKind::Identity);
           b = producer(G, *mask))
        mask = b->inputs[0];
    }
    const MatmulDesc sd = std::get<MatmulDesc>(n->attr);
    const int32_t q_in = n->inputs[0], k_in = n->inputs[1];
    if (sd.transpose_a) return {};
    const TensorType qt = G.type(q_in), bt = G.type(k_in), vt = G.type(o.inputs[1]);
    if (!static_shape(qt.shape) || !static_shape(bt.shape) || !static_shape(vt.shape) || qt.shape.rank() < 3 ||
        bt.shape.rank() != qt.shape.rank() || vt.shape.rank() != qt.shape.rank())
      return {};
    if (!is_float(qt.dtype) || bt.dtype != qt.dtype || vt.dtype != qt.dtype) return {};
    // Batch dims equal (no broadcasting among q, k, v), and the rank of the scores' views.
    const int64_t r = qt.shape.rank();
    for (int64_t i = 0; i + 2 < r; ++i)
      if (bt.shape[i] != qt.shape[i] || vt.shape[i] != qt.shape[i]) return {};
    const int64_t Lq = qt.shape[r - 2], D = qt.shape[r - 1];
    const int64_t Lk = sd.transpose_b ? bt.shape[r - 2] : bt.shape[r - 1];
    if ((sd.transpose_b ? bt.shape[r - 1] : bt.shape[r - 2]) != D) return {};
    const int64_t Dv = od.transpose_b ? vt.shape[r - 2] : vt.shape[r - 1];
    if ((od.transpose_b ? vt.shape[r - 1] : vt.shape[r - 2]) != Lk) return {};
    // The rank the attention runs at: that of the softmax (the mask broadcasts against it).
    std::vector<int64_t> batch(ps.dims().begin(), ps.dims().end() - 2);
    if (ps[ps.rank() - 2] != Lq || ps[ps.rank() - 1] != Lk) return {};
    int64_t nb = 1, qb = 1;
    for (int64_t d : batch) nb *= d;
    for (int64_t i = 0; i + 2 < r; ++i) qb *= qt.shape[i];
    if (nb != qb) return {};
    if (mask) {
      const Shape& ms = G.type(*mask).shape;
      if (!static_shape(ms) || ms.rank() > ps.rank() || !is_float(G.type(*mask).dtype)) return {};
    }
    auto at = [&](int32_t v, bool swap, int64_t rows, int64_t cols) {  // [batch..., rows, cols]
      Tensor t(&m.graph, v);
      if (swap) {
        std::vector<int64_t> perm;
        for (int64_t i = 0; i < r; ++i) perm.push_back(i);
        std::swap(perm[static_cast<size_t>(r - 2)], perm[static_cast<size_t>(r - 1)]);
        t = g.transpose(t, perm);
      }
      std::vector<int64_t> dims = batch;
      dims.push_back(rows);
      dims.push_back(cols);
      return t.shape().dims() == dims ? t : g.reshape(t, dims);
    };
    Tensor q = at(q_in, false, Lq, D);
    Tensor k = at(k_in, !sd.transpose_b, Lk, D);
    Tensor v = at(o.inputs[1], od.transpose_b, Lk, Dv);
    std::optional<Tensor> mt;
    if (mask) mt = Tensor(&m.graph, *mask);
    Tensor y = g.scaled_dot_product_attention(q, k, v, mt, AttentionDesc{scale, false});
    const Shape os = G.type(o.outputs[0]).shape;
    return {y.shape() == os ? y : g.reshape(y, os.dims())};
  });
}

}  // namespace tg::detail
