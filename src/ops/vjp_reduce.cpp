// Gradient rules of reductions, scans and linear algebra.
#include "ops/vjp.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;

Tensor count_of(VjpContext& c, const std::vector<int64_t>& axes) {
  Graph& g = c.g;
  Tensor x = c.in[0];
  if (x.shape().is_static()) {
    double n = 1;
    for (int64_t a : normalized_axes(axes, x.rank())) n *= static_cast<double>(x.shape()[a]);
    return g.scalar(n, x.dtype());
  }
  return g.reduce_sum(filled_like(g, x, 1.0), axes, true);  // counted at run time
}

V sum_vjp(VjpContext& c) {
  const auto& d = c.attr<ReduceDesc>();
  return {broadcast_back(c.g, c.dout[0], c.in[0], d.axes, d.keep_dims)};
}
V mean_vjp(VjpContext& c) {
  const auto& d = c.attr<ReduceDesc>();
  Tensor gb = broadcast_back(c.g, c.dout[0], c.in[0], d.axes, d.keep_dims);
  return {c.g.div(gb, count_of(c, d.axes))};
}
V variance_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<ReduceDesc>();
  Tensor x = c.in[0];
  Tensor mean = broadcast_back(g, g.reduce_mean(x, d.axes, true), x, d.axes, true);
  Tensor gb = broadcast_back(g, c.dout[0], x, d.axes, d.keep_dims);
  return {g.div(g.mul(g.mul(gb, g.sub(x, mean)), g.scalar(2.0, x.dtype())), count_of(c, d.axes))};
}
// max/min: the gradient is shared equally among the elements that attain the extreme.
V extreme_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<ReduceDesc>();
  Tensor x = c.in[0];
  Tensor yb = broadcast_back(g, c.out[0], x, d.axes, d.keep_dims);
  Tensor hit = g.cast(g.equal(x, yb), x.dtype());
  Tensor ties = broadcast_back(g, g.reduce_sum(hit, d.axes, true), x, d.axes, true);
  Tensor gb = broadcast_back(g, c.dout[0], x, d.axes, d.keep_dims);
  return {g.div(g.mul(gb, hit), ties)};
}
// prod: d/dx_i = prod / x_i (inputs with zeros get the quotient's inf/NaN; documented).
V prod_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<ReduceDesc>();
  Tensor x = c.in[0];
  Tensor yb = broadcast_back(g, c.out[0], x, d.axes, d.keep_dims);
  Tensor gb = broadcast_back(g, c.dout[0], x, d.axes, d.keep_dims);
  return {g.div(g.mul(gb, yb), x)};
}
V logsumexp_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<ReduceDesc>();
  Tensor x = c.in[0];
  Tensor yb = broadcast_back(g, c.out[0], x, d.axes, d.keep_dims);
  Tensor gb = broadcast_back(g, c.dout[0], x, d.axes, d.keep_dims);
  return {g.mul(gb, g.exp(g.sub(x, yb)))};
}
// cumsum: each input feeds every later (or earlier, reversed) output: a reversed cumsum.
V cumsum_vjp(VjpContext& c) {
  const auto& d = c.attr<CumulativeDesc>();
  return {c.g.cumsum(c.dout[0], d.axis, d.exclusive, !d.reverse)};
}

V matmul_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<MatmulDesc>();
  Tensor a = c.in[0], b = c.in[1], dy = c.dout[0];
  // y = op(a) op(b). d op(a) = dy op(b)^T, d op(b) = op(a)^T dy; then undo op().
  Tensor da = d.transpose_a ? g.matmul(b, dy, d.transpose_b, true) : g.matmul(dy, b, false, !d.transpose_b);
  Tensor db = d.transpose_b ? g.matmul(dy, a, true, d.transpose_a) : g.matmul(a, dy, !d.transpose_a, false);
  return {unbroadcast(g, da, a), unbroadcast(g, db, b)};
}
V band_part_vjp(VjpContext& c) {
  const auto& d = c.attr<BandPartDesc>();
  return {c.g.band_part(c.dout[0], d.num_lower, d.num_upper)};
}

}  // namespace

void register_reduce_vjps(VjpTable& t) {
  auto set = [&](OpKind kind, VjpFn f) { t[static_cast<size_t>(kind)] = f; };
  set(OpKind::ReduceSum, sum_vjp);
  set(OpKind::ReduceMean, mean_vjp);
  set(OpKind::ReduceVariance, variance_vjp);
  set(OpKind::ReduceMax, extreme_vjp);
  set(OpKind::ReduceMin, extreme_vjp);
  set(OpKind::ReduceProd, prod_vjp);
  set(OpKind::ReduceLogSumExp, logsumexp_vjp);
  set(OpKind::CumSum, cumsum_vjp);
  set(OpKind::MatMul, matmul_vjp);
  set(OpKind::BandPart, band_part_vjp);
}

}  // namespace tg::detail
