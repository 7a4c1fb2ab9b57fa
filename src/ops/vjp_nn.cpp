// Gradient rules of normalisation, softmax, losses and attention, built from primitive ops.
// Convolution and pooling are in vjp_conv.cpp.
#include <cmath>

#include "ops/vjp.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;
Tensor k(VjpContext& c, double v) { return c.g.scalar(v, c.in[0].dtype()); }

int64_t norm_axis(VjpContext& c, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    throw Error(std::string("[gradients] ") + op_name(c.node.kind) + ": axis " + std::to_string(axis) +
                " is out of range for rank " + std::to_string(rank));
  return a;
}

// Every axis of a rank-r tensor but `axis`.
std::vector<int64_t> other_axes(int64_t rank, int64_t axis) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis) r.push_back(i);
  return r;
}

// A per-channel parameter [C] reshaped to broadcast against x along `axis`: [1, .., C, .., 1].
Tensor per_channel(Graph& g, Tensor p, Tensor x, int64_t axis) {
  std::vector<int64_t> dims(static_cast<size_t>(x.rank()), 1);
  dims[static_cast<size_t>(axis)] = p.shape().dim(0);
  return g.reshape(p, dims);
}

// Sums t over every axis but `axis`: the gradient of a per-channel parameter, shape [C].
Tensor sum_to_channel(Graph& g, Tensor t, int64_t axis) {
  std::vector<int64_t> axes = other_axes(t.rank(), axis);
  return axes.empty() ? t : g.reduce_sum(t, axes);
}

// Mean over `axes` kept as size-1 dims (identity when there are none).
Tensor mean_over(Graph& g, Tensor t, const std::vector<int64_t>& axes) {
  return axes.empty() ? t : g.reduce_mean(t, axes, true);
}

// Number of elements of x over `axes` (a scalar, or counted at run time for dynamic shapes).
Tensor count_over(Graph& g, Tensor x, const std::vector<int64_t>& axes) {
  if (x.shape().is_static()) {
    double n = 1;
    for (int64_t a : axes) n *= static_cast<double>(x.shape()[a]);
    return g.scalar(n, x.dtype());
  }
  return axes.empty() ? g.scalar(1.0, x.dtype()) : g.reduce_sum(filled_like(g, x, 1.0), axes, true);
}

// Input gradient of xhat = (x - mean(x)) * inv over `axes`, given dxhat:
// inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
Tensor normalized_dx(Graph& g, Tensor dxhat, Tensor xhat, Tensor inv, const std::vector<int64_t>& axes) {
  Tensor t = g.sub(g.sub(dxhat, mean_over(g, dxhat, axes)), g.mul(xhat, mean_over(g, g.mul(dxhat, xhat), axes)));
  return g.mul(inv, t);
}

// batch_norm with given statistics: y = (x - mean) * rsqrt(var + eps) * gamma + beta.
V batch_norm_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<NormDesc>();
  Tensor x = c.in[0], mean = c.in[1], var = c.in[2], gamma = c.in[3], dy = c.dout[0];
  int64_t ax = norm_axis(c, d.axis, x.rank());
  Tensor inv_c = g.rsqrt(g.add(var, k(c, d.epsilon)));
  Tensor inv = per_channel(g, inv_c, x, ax);
  Tensor xc = g.sub(x, per_channel(g, mean, x, ax));
  Tensor dyg = g.mul(dy, per_channel(g, gamma, x, ax));
  Tensor dx = g.mul(dyg, inv);
  Tensor dvar = g.mul(sum_to_channel(g, g.mul(dyg, xc), ax), g.mul(g.mul(inv_c, g.square(inv_c)), k(c, -0.5)));
  return {dx, g.neg(sum_to_channel(g, dx, ax)), dvar, sum_to_channel(g, g.mul(g.mul(dy, xc), inv), ax),
          sum_to_channel(g, dy, ax)};
}

// A cotangent that is the zero fill of an output no gradient reaches (gradients.cpp).
bool zero_fill(const Tensor& t) {
  const GraphImpl& G = *t.graph_impl();
  const Node* p = G.producer(t.id());
  if (p && (p->kind == OpKind::BroadcastTo || p->kind == OpKind::BroadcastLike)) p = G.producer(p->inputs[0]);
  if (!p || p->kind != OpKind::Constant || p->data.empty()) return false;
  for (int64_t i = 0; i < p->data.num_elements(); ++i)
    if (p->data.at(i) != 0.0) return false;
  return true;
}

// batch_norm_training: statistics of the batch, so the gradient flows through them too;
// outputs 1 and 2 (the batch mean and biased variance) may carry gradients of their own (a
// training step's usually do not: those terms, full-size elementwise work, are left out).
V batch_norm_training_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<NormDesc>();
  Tensor x = c.in[0], gamma = c.in[1], dy = c.dout[0];
  int64_t ax = norm_axis(c, d.axis, x.rank());
  std::vector<int64_t> axes = other_axes(x.rank(), ax);
  Tensor inv_c = g.rsqrt(g.add(c.out[2], k(c, d.epsilon)));
  Tensor inv = per_channel(g, inv_c, x, ax);
  Tensor xc = g.sub(x, per_channel(g, c.out[1], x, ax));
  Tensor xhat = g.mul(xc, inv);
  // gamma is constant over the reduced axes, so normalized_dx's two means of dy * gamma are gamma
  // times the two sums the parameters' gradients need anyway: two reductions over x's size, not
  // four (dx = gamma * inv * (dy - mean(dy) - xhat * mean(dy * xhat)), as PyTorch computes it).
  // (The sums keep their dims, so what is computed from them reads the reductions' results
  // directly, not through views: a stitched reduction takes those per-channel ops as its epilogue.)
  auto sum_kept = [&](Tensor t) { return axes.empty() ? t : g.reduce_sum(t, axes, true); };
  Tensor sum_dy = sum_kept(dy), sum_dy_xhat = sum_kept(g.mul(dy, xhat));
  Tensor n = count_over(g, x, axes);
  Tensor mean_dy = g.div(sum_dy, n), mean_dy_xhat = g.div(sum_dy_xhat, n);
  // (gamma and inv broadcast apart: their product over C alone would be a kernel launch of its own.)
  Tensor dx = g.mul(g.mul(g.sub(g.sub(dy, mean_dy), g.mul(xhat, mean_dy_xhat)), inv), per_channel(g, gamma, x, ax));
  // mean = sum(x) / N, var = sum((x - mean)^2) / N.
  const bool via_mean = !zero_fill(c.dout[1]), via_var = !zero_fill(c.dout[2]);
  if (via_mean || via_var) {
    Tensor from_mean = per_channel(g, c.dout[1], x, ax);
    Tensor from_var = g.mul(per_channel(g, c.dout[2], x, ax), g.mul(xc, k(c, 2.0)));
    Tensor from_stats = via_mean && via_var ? g.add(from_mean, from_var) : via_mean ? from_mean : from_var;
    dx = g.add(dx, g.div(from_stats, n));
  }
  const std::vector<int64_t> c_shape{x.shape().dim(ax)};
  return {dx, g.reshape(sum_dy_xhat, c_shape), g.reshape(sum_dy, c_shape)};
}

// layer_norm over dims [axis, rank); gamma and beta broadcast right-aligned.
V layer_norm_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<NormDesc>();
  Tensor x = c.in[0], gamma = c.in[1], beta = c.in[2], dy = c.dout[0];
  int64_t ax = norm_axis(c, d.axis, x.rank());
  std::vector<int64_t> axes;
  for (int64_t i = ax; i < x.rank(); ++i) axes.push_back(i);
  Tensor inv = g.rsqrt(g.add(g.reduce_variance(x, axes, true), k(c, d.epsilon)));
  Tensor xhat = g.mul(g.sub(x, g.reduce_mean(x, axes, true)), inv);
  Tensor dx = normalized_dx(g, g.mul(dy, gamma), xhat, inv, axes);
  return {dx, unbroadcast(g, g.mul(dy, xhat), gamma), unbroadcast(g, dy, beta)};
}

// group_norm: the channel dim is split into [groups, C/groups]; statistics per (image, group).
V group_norm_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<NormDesc>();
  Tensor x = c.in[0], gamma = c.in[1], dy = c.dout[0];
  int64_t ax = norm_axis(c, d.axis, x.rank());
  std::vector<int64_t> xd = x.shape().dims(), rd;
  int dyn = 0;
  for (int64_t v : xd) dyn += v < 0;
  if (xd[static_cast<size_t>(ax)] < 0 || dyn > 1)
    throw Error("[gradients] group_norm: needs a static channel dim and at most one dynamic dim, x is " +
                x.shape().str());
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i == ax) {
      rd.push_back(d.groups);
      rd.push_back(xd[static_cast<size_t>(i)] / d.groups);
    } else {
      rd.push_back(xd[static_cast<size_t>(i)]);
    }
  }
  std::vector<int64_t> axes;  // every dim of the split form but the batch and the group
  for (int64_t i = 1; i < static_cast<int64_t>(rd.size()); ++i)
    if (i != ax) axes.push_back(i);
  Tensor xr = g.reshape(x, rd);
  Tensor inv = g.rsqrt(g.add(g.reduce_variance(xr, axes, true), k(c, d.epsilon)));
  Tensor xhat_r = g.mul(g.sub(xr, g.reduce_mean(xr, axes, true)), inv);
  Tensor dxhat_r = g.reshape(g.mul(dy, per_channel(g, gamma, x, ax)), rd);
  Tensor dx = g.reshape(normalized_dx(g, dxhat_r, xhat_r, inv, axes), xd);
  Tensor xhat = g.reshape(xhat_r, xd);
  return {dx, sum_to_channel(g, g.mul(dy, xhat), ax), sum_to_channel(g, dy, ax)};
}

V softmax_vjp(VjpContext& c) {
  Graph& g = c.g;
  int64_t ax = c.attr<AxisDesc>().axis;
  Tensor y = c.out[0], dy = c.dout[0];
  return {g.mul(y, g.sub(dy, g.reduce_sum(g.mul(dy, y), {ax}, true)))};
}
V log_softmax_vjp(VjpContext& c) {
  Graph& g = c.g;
  int64_t ax = c.attr<AxisDesc>().axis;
  Tensor dy = c.dout[0];
  return {g.sub(dy, g.mul(g.exp(c.out[0]), g.reduce_sum(dy, {ax}, true)))};
}

// The gradient of a loss per element-line: dout per line (none), or dout / count (mean).
Tensor loss_scale(VjpContext& c, Tensor per_line_like, bool lines_have_axis, int64_t ax) {
  Graph& g = c.g;
  const auto& d = c.attr<LossDesc>();
  Tensor dl = c.dout[0];
  if (d.reduction == LossReduction::none) return lines_have_axis ? g.expand_dims(dl, {ax}) : dl;
  if (d.reduction == LossReduction::sum) return dl;
  std::vector<int64_t> all;
  for (int64_t i = 0; i < per_line_like.rank(); ++i) all.push_back(i);
  return g.div(dl, g.reshape(count_over(g, per_line_like, all), {}));
}

// loss per line = -sum(labels * log_softmax(logits)):
// d/dlogits = softmax(logits) * sum(labels) - labels, d/dlabels = -log_softmax(logits).
V softmax_cross_entropy_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor logits = c.in[0], labels = c.in[1];
  int64_t ax = norm_axis(c, c.attr<LossDesc>().axis, logits.rank());
  Tensor ls = g.log_softmax(logits, ax);
  Tensor dl = loss_scale(c, g.reduce_sum(logits, {ax}), true, ax);
  Tensor dlogits = g.mul(dl, g.sub(g.mul(g.exp(ls), g.reduce_sum(labels, {ax}, true)), labels));
  return {unbroadcast(g, dlogits, logits), unbroadcast(g, g.neg(g.mul(dl, ls)), labels)};
}

V mse_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor a = c.in[0], b = c.in[1];
  Tensor dl = loss_scale(c, a, false, 0);
  Tensor da = g.mul(g.mul(g.sub(a, b), k(c, 2.0)), dl);
  return {unbroadcast(g, da, a), unbroadcast(g, g.neg(da), b)};
}

// y = P v with P = softmax(S), S = q k^T * scale (+ mask; masked scores -inf). Fully masked
// rows give P = 0 (as the forward op) and no gradient.
V attention_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<AttentionDesc>();
  Tensor q = c.in[0], kk = c.in[1], v = c.in[2], dy = c.dout[0];
  double scale = d.scale;
  if (scale == 0) {
    int64_t D = q.shape().dim(-1);
    if (D < 0) throw Error("[gradients] scaled_dot_product_attention: the default scale needs a static head dim");
    scale = 1.0 / std::sqrt(static_cast<double>(D));
  }
  Tensor minus_inf = k(c, -INFINITY);
  Tensor s = g.mul(g.matmul(q, kk, false, true), k(c, scale));
  Tensor mask = c.in.size() > 3 ? c.in[3] : Tensor();
  if (mask.valid()) s = is_float(mask.dtype()) ? g.add(s, mask) : g.select(mask, s, minus_inf);
  if (d.causal) s = g.select(g.greater(g.band_part(filled_like(g, s, 1.0), -1, 0), k(c, 0.5)), s, minus_inf);
  Tensor p = g.softmax(s, -1);
  p = g.select(g.is_nan(p), k(c, 0.0), p);
  Tensor dv = g.matmul(p, dy, true, false);
  Tensor dp = g.matmul(dy, v, false, true);
  Tensor ds = g.mul(p, g.sub(dp, g.reduce_sum(g.mul(dp, p), {-1}, true)));
  Tensor dq = g.mul(g.matmul(ds, kk), k(c, scale));
  Tensor dk = g.mul(g.matmul(ds, q, true, false), k(c, scale));
  V r{unbroadcast(g, dq, q), unbroadcast(g, dk, kk), unbroadcast(g, dv, v)};
  if (mask.valid()) r.push_back(is_float(mask.dtype()) ? unbroadcast(g, ds, mask) : Tensor());
  return r;
}

}  // namespace

void register_nn_vjps(VjpTable& t) {
  auto set = [&](OpKind kind, VjpFn f) { t[static_cast<size_t>(kind)] = f; };
  set(OpKind::BatchNorm, batch_norm_vjp);
  set(OpKind::BatchNormTraining, batch_norm_training_vjp);
  set(OpKind::LayerNorm, layer_norm_vjp);
  set(OpKind::GroupNorm, group_norm_vjp);
  set(OpKind::Softmax, softmax_vjp);
  set(OpKind::LogSoftmax, log_softmax_vjp);
  set(OpKind::SoftmaxCrossEntropy, softmax_cross_entropy_vjp);
  set(OpKind::Mse, mse_vjp);
  set(OpKind::Attention, attention_vjp);
}

}  // namespace tg::detail
