// Gradient rules of convolution and pooling: each is one of the gradient ops (conv*_data_grad,
// conv*_weight_grad, *_pool2d_grad), whose reference kernels are the exact adjoints of the
// forward op. The gradient ops need the shape of the tensor they produce, so it must be ranked.
#include "ops/vjp.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;

Shape ranked_shape(VjpContext& c, Tensor t, const char* what) {
  if (!t.shape().ranked())
    throw Error(std::string("[gradients] ") + op_name(c.node.kind) + ": " + what + " must be ranked");
  return t.shape();
}

V conv2d_vjp(VjpContext& c) {
  const auto& d = c.attr<ConvDesc>();
  Tensor x = c.in[0], w = c.in[1], dy = c.dout[0];
  return {c.g.conv2d_data_grad(dy, w, ranked_shape(c, x, "x"), d),
          c.g.conv2d_weight_grad(dy, x, ranked_shape(c, w, "w"), d)};
}
V conv3d_vjp(VjpContext& c) {
  const auto& d = c.attr<ConvDesc>();
  Tensor x = c.in[0], w = c.in[1], dy = c.dout[0];
  return {c.g.conv3d_data_grad(dy, w, ranked_shape(c, x, "x"), d),
          c.g.conv3d_weight_grad(dy, x, ranked_shape(c, w, "w"), d)};
}
// conv_transpose2d(x, w) is conv2d_data_grad(x, w) of the conv from its output to x; so its
// data gradient is that forward conv, and its weight gradient is conv2d_weight_grad with the
// roles swapped (the conv's "dy" is x, its input is our dy). output_padding only sizes the
// transposed op's output; the conv itself does not take it.
V conv_transpose2d_vjp(VjpContext& c) {
  ConvDesc d = c.attr<ConvDesc>();
  d.output_padding.clear();
  Tensor x = c.in[0], w = c.in[1], dy = c.dout[0];
  return {c.g.conv2d(dy, w, d), c.g.conv2d_weight_grad(x, dy, ranked_shape(c, w, "w"), d)};
}

V max_pool_vjp(VjpContext& c) { return {c.g.max_pool2d_grad(c.dout[0], c.in[0], c.attr<PoolDesc>())}; }
V avg_pool_vjp(VjpContext& c) { return {c.g.avg_pool2d_grad(c.dout[0], c.in[0], c.attr<PoolDesc>())}; }

}  // namespace

void register_conv_vjps(VjpTable& t) {
  auto set = [&](OpKind kind, VjpFn f) { t[static_cast<size_t>(kind)] = f; };
  set(OpKind::Conv2d, conv2d_vjp);
  set(OpKind::Conv3d, conv3d_vjp);
  set(OpKind::ConvTranspose2d, conv_transpose2d_vjp);
  set(OpKind::MaxPool2d, max_pool_vjp);
  set(OpKind::MaxPool2dWithIndices, max_pool_vjp);  // values only: indices are integers
  set(OpKind::AvgPool2d, avg_pool_vjp);
}

}  // namespace tg::detail
