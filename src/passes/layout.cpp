#include "passes/layout.h"

#include "ops/builder.h"
#include "passes/dce.h"
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

// An nchw operand of an op about to run nhwc, transposed; a broadcast of a per-channel value
// (a reduction's gradient) is transposed while small and broadcast after.
Tensor to_nhwc(Graph& g, const Tensor& t) {
  const GraphImpl& G = g.impl();
  const Node* p = G.producer(t.id());
  if (p && p->kind == OpKind::BroadcastTo && t.shape().is_static() && t.shape().rank() == 4) {
    Tensor src(&g.impl(), p->inputs[0]);
    if (src.shape().rank() == 4 || src.shape().num_elements() == 1) {
      src = src.shape().rank() == 4 ? g.transpose(src, kToNhwc) : g.reshape(src, std::vector<int64_t>{});
      const Shape& s = t.shape();
      return g.broadcast_to(src, {s[0], s[2], s[3], s[1]});
    }
  }
  return g.transpose(t, kToNhwc);
}

std::vector<Tensor> rewrite(Graph& g, const Node& n, const std::vector<Tensor>& in) {
  const GraphImpl& G = g.impl();
  const OpDef& def = op_def(n.kind);
  // nchw convolution and pooling: the same op channels-last between two transposes.
  if (n.kind == OpKind::Conv2d || n.kind == OpKind::MaxPool2d || n.kind == OpKind::AvgPool2d) {
    if (in[0].shape().rank() != 4) return {};
    Tensor x = to_nhwc(g, in[0]);
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
  // Max pooling with indices alike: an index is h*W+w within its image and channel in either
  // layout, so both outputs transpose back.
  if (n.kind == OpKind::MaxPool2dWithIndices && in.size() == 1 && in[0].shape().rank() == 4) {
    PoolDesc d = std::get<PoolDesc>(n.attr);
    if (d.data_layout != Layout::nchw) return {};
    d.data_layout = Layout::nhwc;
    std::vector<Tensor> r = make_multi(g, n.kind, {to_nhwc(g, in[0])}, d);
    for (Tensor& t : r) t = g.transpose(t, kToNchw);
    return r;
  }
  // Their gradients alike (a training graph's backward): the data gradient's dy and the
  // weight gradient's dy and x channels-last, the weights and their gradient as they are.
  if (n.kind == OpKind::Conv2dDataGrad || n.kind == OpKind::Conv2dWeightGrad) {
    ConvGradDesc d = std::get<ConvGradDesc>(n.attr);
    if (d.conv.data_layout != Layout::nchw || in[0].shape().rank() != 4) return {};
    d.conv.data_layout = Layout::nhwc;
    Tensor dy = to_nhwc(g, in[0]);
    if (n.kind == OpKind::Conv2dWeightGrad) return {make(g, n.kind, {dy, to_nhwc(g, in[1])}, d)};
    if (d.result_shape.size() != 4) return {};
    d.result_shape = {d.result_shape[0], d.result_shape[2], d.result_shape[3], d.result_shape[1]};
    return {g.transpose(make(g, n.kind, {dy, in[1]}, d), kToNchw)};
  }
  if (n.kind == OpKind::MaxPool2dGrad || n.kind == OpKind::AvgPool2dGrad) {
    PoolDesc d = std::get<PoolDesc>(n.attr);
    if (d.data_layout != Layout::nchw || in[0].shape().rank() != 4 || in[1].shape().rank() != 4) return {};
    d.data_layout = Layout::nhwc;
    return {g.transpose(make(g, n.kind, {to_nhwc(g, in[0]), to_nhwc(g, in[1])}, d), kToNchw)};
  }
  // Elementwise ops with an operand that is a transpose: op(T(a), b) = T(op(a, T^-1(b))). The
  // other operands must be the same transpose of equally shaped values, rank 0 (broadcast
  // either way), constants (their transpose folds), or broadcasts of rank-4 values (the
  // broadcast of the transposed value: a per-channel bias stays small) or of single values.
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
      } else if (p && p->kind == OpKind::BroadcastTo && t.shape().is_static() &&
                 (G.type(p->inputs[0]).shape.rank() == 4 || G.type(p->inputs[0]).shape.num_elements() == 1)) {
        // a broadcast rank-4 value (transposed while small) or a broadcast single value
        Tensor src(&g.impl(), p->inputs[0]);
        src = src.shape().rank() == 4 ? g.transpose(src, inv) : g.reshape(src, std::vector<int64_t>{});
        std::vector<int64_t> shape(4);
        for (size_t i = 0; i < 4; ++i) shape[i] = t.shape()[inv[i]];
        args.push_back(g.broadcast_to(src, shape));
      } else {
        return {};
      }
    }
    return {g.transpose(make(g, n.kind, args, n.attr), perm)};
  }
  // Batch norm of a transpose, inference or training: the same normalisation along the channel
  // axis's place before the transpose (statistics and scales are per channel, untouched), then
  // the transpose of the normalised output; so a conv -> batch norm -> relu chain (a PyTorch
  // model's) keeps no transposes. (CUDA decomposes the training one first: its reductions and
  // elementwise ops move as below.)
  if ((n.kind == OpKind::BatchNorm && in.size() == 5 && n.outputs.size() == 1) ||
      (n.kind == OpKind::BatchNormTraining && in.size() == 3 && n.outputs.size() == 3)) {
    const Node* tp = in[0].shape().rank() == 4 ? transpose_of(G, in[0].id()) : nullptr;
    const auto* nd = std::get_if<NormDesc>(&n.attr);
    if (!tp || !nd) return {};
    const std::vector<int64_t> perm = perm_of(*tp);
    const int64_t ax = nd->axis < 0 ? nd->axis + 4 : nd->axis;
    if (perm.size() != 4 || ax < 0 || ax >= 4) return {};
    NormDesc d = *nd;
    d.axis = perm[static_cast<size_t>(ax)];
    std::vector<Tensor> args = in;
    args[0] = Tensor(&g.impl(), tp->inputs[0]);
    std::vector<Tensor> r = make_multi(g, n.kind, args, d);
    r[0] = g.transpose(r[0], perm);
    return r;
  }
  // Reductions of a transpose: the reduction over the matching axes, then the transpose (keep
  // dims), or nothing more when the axes kept are in the same order on both sides (batch-norm
  // statistics: nchw [0,2,3] is nhwc [0,1,2], both leaving [C]).
  if (def.has(kReduction) && n.kind != OpKind::SumToLike && n.outputs.size() == 1 && in.size() == 1) {
    const auto* rd = std::get_if<ReduceDesc>(&n.attr);
    const Node* tp = transpose_of(G, in[0].id());
    if (!rd || !tp || rd->axes.empty()) return {};
    const std::vector<int64_t> perm = perm_of(*tp);
    const int64_t r = static_cast<int64_t>(perm.size());
    ReduceDesc d = *rd;
    std::vector<bool> reduced(static_cast<size_t>(r), false);
    for (int64_t& a : d.axes) {
      const int64_t k = a < 0 ? a + r : a;
      if (k < 0 || k >= r) return {};
      reduced[static_cast<size_t>(k)] = true;
      a = perm[static_cast<size_t>(k)];
    }
    const Tensor x(&g.impl(), tp->inputs[0]);
    if (d.keep_dims) return {g.transpose(make(g, n.kind, {x}, d), perm)};
    int64_t last = -1;
    for (int64_t k = 0; k < r; ++k) {
      if (reduced[static_cast<size_t>(k)]) continue;
      if (perm[static_cast<size_t>(k)] < last) return {};
      last = perm[static_cast<size_t>(k)];
    }
    return {make(g, n.kind, {x}, d)};
  }
  return {};
}

}  // namespace

bool ChannelsLast::run(Module& m) { return rewrite_nodes(m, {0}, rewrite); }

std::vector<std::vector<int64_t>> free_output_layouts(Module& m) {
  std::vector<std::vector<int64_t>> perms(m.targets.size());
  bool changed = false;
  for (size_t i = 0; i < m.targets.size(); ++i) {
    const Node* tp = transpose_of(m.graph, m.targets[i]);
    if (!tp || !tp->control_deps.empty() || perm_of(*tp) != kToNchw) continue;
    m.targets[i] = tp->inputs[0];
    perms[i] = kToNchw;
    changed = true;
  }
  if (changed) DeadCodeElimination().run(m);
  return perms;
}

}  // namespace tg::detail
