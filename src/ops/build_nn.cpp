// Builders of convolution, pooling, normalisation, softmax, losses and attention. Operands are
// promoted to one dtype; parameters (gamma, beta, statistics) are cast to x's dtype; the
// descriptor is checked by the op's inference rule, so a bad one throws at the call.
#include "ops/builder.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace {

std::pair<Tensor, Tensor> promote(Graph& g, OpKind k, Tensor a, Tensor b, const char* an, const char* bn) {
  use(g, a, k, an);
  use(g, b, k, bn);
  DType t = promote_types(a.dtype(), b.dtype());
  return {cast_if(g, a, t), cast_if(g, b, t)};
}

Tensor conv(Graph& g, OpKind k, Tensor x, Tensor w, const ConvDesc& d) {
  auto [a, b] = promote(g, k, x, w, "x", "w");
  return make(g, k, {a, b}, d);
}

Tensor conv_grad(Graph& g, OpKind k, Tensor dy, Tensor other, const Shape& result, const ConvDesc& d,
                 bool data) {
  if (!result.ranked()) throw Error(op_tag(k) + (data ? "input_shape" : "weights_shape") + " must be ranked");
  auto [a, b] = promote(g, k, dy, other, "dy", data ? "w" : "x");
  return make(g, k, {a, b}, ConvGradDesc{d, result.dims()});
}

Tensor pool_grad(Graph& g, OpKind k, Tensor dy, Tensor x, const PoolDesc& d) {
  use(g, dy, k, "dy");
  use(g, x, k, "x");
  return make(g, k, {cast_if(g, dy, x.dtype()), x}, d);
}

// Global pooling is a reduction over the two spatial axes, kept as size-1 dims.
Tensor global_pool(Graph& g, bool avg, Tensor x, Layout layout) {
  std::string tag = avg ? "[global_avg_pool2d] " : "[global_max_pool2d] ";
  use(g, x, avg ? OpKind::ReduceMean : OpKind::ReduceMax, "x");
  if (layout != Layout::nhwc && layout != Layout::nchw)
    throw Error(tag + "layout " + enum_name(layout) + " is not nhwc or nchw");
  if (x.rank() != 4) throw Error(tag + "needs a rank-4 input, x is " + x.shape().str());
  std::vector<int64_t> axes =
      layout == Layout::nhwc ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 3};
  return avg ? g.reduce_mean(x, axes, true) : g.reduce_max(x, axes, true);
}

// x followed by the parameters cast to x's dtype.
std::vector<Tensor> with_params(Graph& g, OpKind k, Tensor x,
                                std::initializer_list<std::pair<Tensor, const char*>> params) {
  use(g, x, k, "x");
  std::vector<Tensor> in{x};
  for (const auto& [p, name] : params) {
    use(g, p, k, name);
    in.push_back(cast_if(g, p, x.dtype()));
  }
  return in;
}

// Batch dims of an attention operand, broadcast to `batch` when shapes are static.
Tensor broadcast_batch(Graph& g, Tensor t, const Shape& batch) {
  if (t.rank() < 2) return t;
  std::vector<int64_t> dims = batch.dims();
  dims.push_back(t.shape().dim(-2));
  dims.push_back(t.shape().dim(-1));
  return broadcast_if(g, OpKind::Attention, t, Shape(dims));
}

}  // namespace

Tensor Graph::conv2d(Tensor x, Tensor w, const ConvDesc& d) { return conv(*this, OpKind::Conv2d, x, w, d); }
Tensor Graph::conv3d(Tensor x, Tensor w, const ConvDesc& d) { return conv(*this, OpKind::Conv3d, x, w, d); }
Tensor Graph::conv_transpose2d(Tensor x, Tensor w, const ConvDesc& d) {
  return conv(*this, OpKind::ConvTranspose2d, x, w, d);
}
Tensor Graph::conv2d_data_grad(Tensor dy, Tensor w, Shape input_shape, const ConvDesc& d) {
  return conv_grad(*this, OpKind::Conv2dDataGrad, dy, w, input_shape, d, true);
}
Tensor Graph::conv2d_weight_grad(Tensor dy, Tensor x, Shape weights_shape, const ConvDesc& d) {
  return conv_grad(*this, OpKind::Conv2dWeightGrad, dy, x, weights_shape, d, false);
}
Tensor Graph::conv3d_data_grad(Tensor dy, Tensor w, Shape input_shape, const ConvDesc& d) {
  return conv_grad(*this, OpKind::Conv3dDataGrad, dy, w, input_shape, d, true);
}
Tensor Graph::conv3d_weight_grad(Tensor dy, Tensor x, Shape weights_shape, const ConvDesc& d) {
  return conv_grad(*this, OpKind::Conv3dWeightGrad, dy, x, weights_shape, d, false);
}

Tensor Graph::max_pool2d(Tensor x, const PoolDesc& d) { return make(*this, OpKind::MaxPool2d, {x}, d); }
std::pair<Tensor, Tensor> Graph::max_pool2d_with_indices(Tensor x, const PoolDesc& d) {
  auto out = make_multi(*this, OpKind::MaxPool2dWithIndices, {x}, d);
  return {out[0], out[1]};
}
Tensor Graph::avg_pool2d(Tensor x, const PoolDesc& d) { return make(*this, OpKind::AvgPool2d, {x}, d); }
Tensor Graph::max_pool2d_grad(Tensor dy, Tensor x, const PoolDesc& d) {
  return pool_grad(*this, OpKind::MaxPool2dGrad, dy, x, d);
}
Tensor Graph::avg_pool2d_grad(Tensor dy, Tensor x, const PoolDesc& d) {
  return pool_grad(*this, OpKind::AvgPool2dGrad, dy, x, d);
}
Tensor Graph::global_avg_pool2d(Tensor x, Layout layout) { return global_pool(*this, true, x, layout); }
Tensor Graph::global_max_pool2d(Tensor x, Layout layout) { return global_pool(*this, false, x, layout); }

Tensor Graph::batch_norm(Tensor x, Tensor mean, Tensor var, Tensor gamma, Tensor beta, int64_t axis,
                         double epsilon) {
  auto in = with_params(*this, OpKind::BatchNorm, x,
                        {{mean, "mean"}, {var, "var"}, {gamma, "gamma"}, {beta, "beta"}});
  return make(*this, OpKind::BatchNorm, in, NormDesc{axis, epsilon, 1});
}
std::vector<Tensor> Graph::batch_norm_training(Tensor x, Tensor gamma, Tensor beta, int64_t axis,
                                               double epsilon) {
  auto in = with_params(*this, OpKind::BatchNormTraining, x, {{gamma, "gamma"}, {beta, "beta"}});
  return make_multi(*this, OpKind::BatchNormTraining, in, NormDesc{axis, epsilon, 1});
}
Tensor Graph::layer_norm(Tensor x, Tensor gamma, Tensor beta, int64_t axis, double epsilon) {
  auto in = with_params(*this, OpKind::LayerNorm, x, {{gamma, "gamma"}, {beta, "beta"}});
  return make(*this, OpKind::LayerNorm, in, NormDesc{axis, epsilon, 1});
}
Tensor Graph::group_norm(Tensor x, Tensor gamma, Tensor beta, int64_t groups, int64_t axis, double epsilon) {
  auto in = with_params(*this, OpKind::GroupNorm, x, {{gamma, "gamma"}, {beta, "beta"}});
  return make(*this, OpKind::GroupNorm, in, NormDesc{axis, epsilon, groups});
}

Tensor Graph::softmax(Tensor x, int64_t axis) { return make(*this, OpKind::Softmax, {x}, AxisDesc{axis}); }
Tensor Graph::log_softmax(Tensor x, int64_t axis) {
  return make(*this, OpKind::LogSoftmax, {x}, AxisDesc{axis});
}

Tensor Graph::softmax_cross_entropy(Tensor logits, Tensor labels, int64_t axis, LossReduction reduction) {
  auto [a, b] = promote_broadcast(*this, OpKind::SoftmaxCrossEntropy, logits, labels);
  return make(*this, OpKind::SoftmaxCrossEntropy, {a, b}, LossDesc{axis, reduction});
}
Tensor Graph::mse(Tensor a, Tensor b, LossReduction reduction) {
  auto [x, y] = promote_broadcast(*this, OpKind::Mse, a, b);
  return make(*this, OpKind::Mse, {x, y}, LossDesc{-1, reduction});
}

// q, k and v are promoted to one dtype and their batch dims broadcast; a float mask is cast to
// that dtype. The mask is not broadcast: kernels read it broadcast, which is what keeps a
// [B, H, L, L] tensor from being materialised.
Tensor Graph::scaled_dot_product_attention(Tensor q, Tensor k, Tensor v, std::optional<Tensor> mask,
                                           const AttentionDesc& d) {
  const OpKind K = OpKind::Attention;
  use(*this, q, K, "q");
  use(*this, k, K, "k");
  use(*this, v, K, "v");
  DType t = promote_types(promote_types(q.dtype(), k.dtype()), v.dtype());
  std::vector<Tensor> in{cast_if(*this, q, t), cast_if(*this, k, t), cast_if(*this, v, t)};
  if (q.rank() >= 2 && k.rank() >= 2 && v.rank() >= 2) {
    auto batch_of = [](Tensor x) {
      Shape s = x.shape();
      return Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2));
    };
    auto batch = broadcast_shapes(batch_of(q), batch_of(k));
    if (batch) batch = broadcast_shapes(*batch, batch_of(v));
    if (batch)
      for (Tensor& x : in) x = broadcast_batch(*this, x, *batch);
  }
  if (mask) {
    use(*this, *mask, K, "mask");
    in.push_back(is_float(mask->dtype()) ? cast_if(*this, *mask, t) : *mask);
  }
  return make(*this, K, in, d);
}

}  // namespace tg
