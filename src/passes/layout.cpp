#include "passes/layout.h"

#include "ops/builder.h"
#include "ops/op_def.h"
#include "passes/rewrite.h"

namespace tg::detail {
namespace {

const std::vector<int64_t> kToNhwc{0, 2, 3, 1}, kToNchw{0, 3, 1, 2};

// The transpose node that produces v; null when v is not a transpose's result.
const Node* transpose_of(const GraphImpl& g, int32_t v) {
  const Node* p = g.producer(v);
  return p && p->kind == OpKind::Transpose ? p : nullptr;
}

// A transpose's permutation with axes counted from the end made non-negative.
std::vector<int64_t> perm_of(const Node& transpose) {
  std::vector<int64_t> perm = std::get<AxesDesc>(transpose.attr).axes;
  const int64_t r = static_cast<int64_t>(perm.size());
  for (int64_t& a : perm)
    if (a < 0) a += r;
  return perm;
}

std::vector<Tensor> rewrite(Graph& g, const Node& n, const std::vector<Tensor>& in) {
  const GraphImpl& G = g.impl();
  const OpDef& def = op_def(n.kind);
  // nchw convolution and pooling: the same op channels-last between two transposes.
  if (n.kind == OpKind::Conv2d || n.kind == OpKind::MaxPool2d || n.kind == OpKind::AvgPool2d) {
    if (in[0].shape().rank() != 4) return {};
    Tensor x = g.transpose(in[0], kToNhwc);
    Tensor y;
    if (n.kind == OpKind::Conv2d) {
      ConvDesc d = std::get<ConvDesc>(n.attr);
      if (d.data_layout != Layout::nchw) return {};
      d.data_layout = Layout::nhwc;  // the weights keep their layout
      y = g.conv2d(x, in[1], d);
    } else {
      PoolDesc d = std::get<PoolDesc>(n.attr);
      if (d.data_layout != Layout::nchw) return {};
      d.data_layout = Layout::nhwc;
      y = n.kind == OpKind::MaxPool2d ? g.max_pool2d(x, d) : g.avg_pool2d(x, d);
    }
    return {g.transpose(y, kToNchw)};
  }
  // Elementwise ops with an operand that is a transpose: op(T(a), b) = T(op(a, T^-1(b))). The
  // other operands must be the same transpose of equally shaped values, rank 0 (broadcast
  // either way), constants (their transpose folds), or broadcasts of rank-4 values (the
  // broadcast of the transposed value: a per-channel bias stays small).
  if (def.has(kElementwise) && !def.has(kStateful) && n.outputs.size() == 1 && !in.empty()) {
    std::vector<int64_t> perm;
    Shape inner;
    for (const Tensor& t : in)
      if (const Node* tp = t.shape().rank() == 4 ? transpose_of(G, t.id()) : nullptr) {
        perm = perm_of(*tp);
        inner = G.type(tp->inputs[0]).shape;
        break;
      }
    if (perm.size() != 4) return {};
    std::vector<int64_t> inv(4, -1);
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t a = perm[static_cast<size_t>(i)];
      if (a < 0 || a >= 4 || inv[static_cast<size_t>(a)] >= 0) return {};
      inv[static_cast<size_t>(a)] = i;
    }
    std::vector<Tensor> args;
    for (const Tensor& t : in) {
      if (t.shape().rank() == 0) {
        args.push_back(t);
        continue;
      }
      if (t.shape().rank() != 4) return {};
      const Node* tp = transpose_of(G, t.id());
      const Node* p = G.producer(t.id());
      if (tp) {
        if (perm_of(*tp) != perm || !(G.type(tp->inputs[0]).shape == inner)) return {};
        args.emplace_back(&g.impl(), tp->inputs[0]);
      } else if (p && p->kind == OpKind::Constant) {
        args.push_back(g.transpose(t, inv));
      } else if (p && p->kind == OpKind::BroadcastTo && G.type(p->inputs[0]).shape.rank() == 4 &&
                 t.shape().is_static()) {
        const Tensor src(&g.impl(), p->inputs[0]);
        std::vector<int64_t> shape(4);
        for (size_t i = 0; i < 4; ++i) shape[i] = t.shape()[inv[i]];
        args.push_back(g.broadcast_to(g.transpose(src, inv), shape));
      } else {
        return {};
      }
    }
    return {g.transpose(make(g, n.kind, args, n.attr), perm)};
  }
  // Inference batch norm of a transpose: the same normalisation along the channel axis's place
  // before the transpose (its statistics and scales are per channel, untouched), then the
  // transpose; so a conv -> batch norm -> relu chain (a PyTorch model's) keeps no transposes.
  if (n.kind == OpKind::BatchNorm && in.size() == 5 && n.outputs.size() == 1) {
    const Node* tp = in[0].shape().rank() == 4 ? transpose_of(G, in[0].id()) : nullptr;
    const auto* nd = std::get_if<NormDesc>(&n.attr);
    if (!tp || !nd) return {};
    const std::vector<int64_t> perm = perm_of(*tp);
    const int64_t ax = nd->axis < 0 ? nd->axis + 4 : nd->axis;
    if (perm.size() != 4 || ax < 0 || ax >= 4) return {};
    NormDesc d = *nd;
    d.axis = perm[static_cast<size_t>(ax)];
    return {g.transpose(make(g, n.kind, {Tensor(&g.impl(), tp->inputs[0]), in[1], in[2], in[3], in[4]}, d), perm)};
  }
  // Keep-dims reductions of a transpose: the reduction over the matching axes, then the transpose.
  if (def.has(kReduction) && n.kind != OpKind::SumToLike && n.outputs.size() == 1 && in.size() == 1) {
    const auto* rd = std::get_if<ReduceDesc>(&n.attr);
    const Node* tp = transpose_of(G, in[0].id());
    if (!rd || !rd->keep_dims || !tp || rd->axes.empty()) return {};
    const std::vector<int64_t> perm = perm_of(*tp);
    const int64_t r = static_cast<int64_t>(perm.size());
    ReduceDesc d = *rd;
    for (int64_t& a : d.axes) {
      const int64_t k = a < 0 ? a + r : a;
      if (k < 0 || k >= r) return {};
      a = perm[static_cast<size_t>(k)];
    }
    return {g.transpose(make(g, n.kind, {Tensor(&g.impl(), tp->inputs[0])}, d), perm)};
  }
  return {};
}

}  // namespace

bool ChannelsLast::run(Module& m) { return rewrite_nodes(m, {0}, rewrite); }

}  // namespace tg::detail
