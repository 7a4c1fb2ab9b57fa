// Gradient rules of the core shape ops.
#include "ops/vjp.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;

// Reshapes a gradient back to x's shape; with more than one dynamic dim, every dim is taken
// from x itself at run time (a shape source).
Tensor reshape_back(VjpContext& c, Tensor grad, Tensor x) {
  if (grad.shape() == x.shape() && x.shape().is_static()) return grad;
  std::vector<int64_t> dims = x.shape().dims();
  int dyn = 0;
  for (int64_t d : dims) dyn += d < 0;
  if (dyn <= 1) return c.g.reshape(grad, dims);
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = dim_from_source(static_cast<int64_t>(i));
  return c.g.reshape(grad, dims, {x});
}

V none_vjp(VjpContext&) { return {Tensor()}; }
// Shape sources (inputs 1..) get no gradient: only their shapes are read.
V reshape_vjp(VjpContext& c) {
  V g(c.in.size());
  g[0] = reshape_back(c, c.dout[0], c.in[0]);
  return g;
}
V transpose_vjp(VjpContext& c) {
  const auto& perm = c.attr<AxesDesc>().axes;
  std::vector<int64_t> inv(perm.size());
  int64_t r = static_cast<int64_t>(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i] < 0 ? perm[i] + r : perm[i])] = static_cast<int64_t>(i);
  return {c.g.transpose(c.dout[0], inv)};
}
V broadcast_vjp(VjpContext& c) {
  V g(c.in.size());
  g[0] = unbroadcast(c.g, c.dout[0], c.in[0]);
  return g;
}
V broadcast_like_vjp(VjpContext& c) { return {unbroadcast(c.g, c.dout[0], c.in[0]), Tensor()}; }
V sum_to_like_vjp(VjpContext& c) { return {c.g.broadcast_like(c.dout[0], c.in[0]), Tensor()}; }
V concat_vjp(VjpContext& c) {
  int64_t axis = c.attr<AxisDesc>().axis;
  std::vector<int64_t> sizes;
  for (const Tensor& t : c.in) {
    int64_t s = t.shape().dim(axis);
    if (s < 0) throw Error("[gradients] concat: inputs need a static size along the concat axis, got " + t.shape().str());
    sizes.push_back(s);
  }
  return c.g.split(c.dout[0], sizes, axis);
}
V split_vjp(VjpContext& c) { return {c.g.concat(c.dout, c.attr<SplitDesc>().axis)}; }
// A sized_op's sizes get no gradient (integers); x's: reshaped back, summed back over what was
// broadcast, or a constant padding's window sliced out with the forward's own amounts.
V sized_vjp(VjpContext& c) {
  const auto& d = c.attr<SizedDesc>();
  V g(c.in.size());
  if (d.op == SizedKind::reshape) {
    g[0] = reshape_back(c, c.dout[0], c.in[0]);
    return g;
  }
  if (d.op == SizedKind::broadcast_to) {  // both dynamic alike ([-1, -1]) yet broadcast: summed back
    g[0] = c.g.sum_to_like(c.dout[0], c.in[0]);
    return g;
  }
  if (d.op == SizedKind::pad && d.pad.mode == PadMode::constant && c.in[0].shape().ranked()) {
    const int64_t r = c.in[0].rank();
    const Tensor pads = c.in[1];
    const Tensor before = c.g.slice(pads, {0}, {r});
    const Tensor end = c.g.add(before, c.g.cast(c.g.shape_of(c.in[0]), pads.dtype()));
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
    const Tensor ones = c.g.constant(TensorData::full(Shape({r}), 1.0, pads.dtype()));
    g[0] = c.g.slice_sized(c.dout[0], before, end, ones, axes);
    return g;
  }
  throw Error("[gradients] sized_op (" + enum_name(d.op) +
              "): no gradient rule for this kind with sizes computed in the graph (reshape, broadcast_to and "
              "constant pad have one)");
}

}  // namespace

void register_shape_vjps(VjpTable& t) {
  auto set = [&](OpKind kind, VjpFn f) { t[static_cast<size_t>(kind)] = f; };
  set(OpKind::StopGradient, none_vjp);
  set(OpKind::Reshape, reshape_vjp);
  set(OpKind::ExpandDims, reshape_vjp);
  set(OpKind::Squeeze, reshape_vjp);
  set(OpKind::Transpose, transpose_vjp);
  set(OpKind::BroadcastTo, broadcast_vjp);
  set(OpKind::BroadcastLike, broadcast_like_vjp);
  set(OpKind::SumToLike, sum_to_like_vjp);
  set(OpKind::Concat, concat_vjp);
  set(OpKind::Split, split_vjp);
  set(OpKind::SizedOp, sized_vjp);
}

}  // namespace tg::detail
