// The fast CPU path's one dispatch table: which fast kernel (fast_kernels.h) covers an op. Each
// kernel says no to what it does not cover, and the caller falls back to the reference.
#include "backends/cpu/fast_kernels.h"

namespace tg::detail {

bool cpu_fast_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in,
                   std::vector<TensorData>& out) {
  if (n.kind == OpKind::BatchNormTraining) return n.outputs.size() == 3 && fast::norm(g, n, in, out);
  if (n.kind == OpKind::MaxPool2dWithIndices) return n.outputs.size() == 2 && fast::pool(g, n, in, out);
  if (n.outputs.size() != 1) return false;
  if (fast::half_op(n, in, out)) return true;  // autocast's bf16 / f16 matmul, conv and casts
  switch (n.kind) {
    case OpKind::MatMul:
      return fast::matmul(n, in, out, &g);
    case OpKind::Conv2d:
      return fast::conv2d(n, in, out, &g);
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::Relu: case OpKind::Neg:
    case OpKind::Abs: case OpKind::Square: case OpKind::Sqrt: case OpKind::Exp:
    case OpKind::Tanh: case OpKind::Sigmoid: case OpKind::Silu: case OpKind::Gelu: case OpKind::Erf:
      return fast::elementwise(n, in, out);
    case OpKind::Conv2dDataGrad: case OpKind::Conv2dWeightGrad:
      return fast::conv2d_grad(n, in, out);
    case OpKind::ConvTranspose2d: {
      // The data gradient of the convolution it transposes (same weights, same layouts, the
      // result's shape given): oneDNN's backward-data, where the reference loop took ~10 s for
      // one 256-channel 14x14 image of Mask R-CNN's mask head. Explicit padding and an output
      // padding below the stride only (then the forward conv maps the result back to x).
      const auto& d = std::get<ConvDesc>(n.attr);
      const Shape& rs = g.type(n.outputs[0]).shape;
      if (d.padding != PaddingStyle::explicit_ || !rs.is_static() || in.size() != 2) return false;
      for (size_t i = 0; i < d.output_padding.size(); ++i)
        if (d.output_padding[i] >= (i < d.stride.size() ? d.stride[i] : 1)) return false;
      Node grad = n;
      grad.kind = OpKind::Conv2dDataGrad;
      ConvGradDesc gd;
      gd.conv = d;
      gd.conv.output_padding.clear();
      gd.result_shape = rs.dims();
      grad.attr = gd;
      return fast::conv2d_grad(grad, in, out);
    }
    case OpKind::MaxPool2d: case OpKind::AvgPool2d: case OpKind::MaxPool2dGrad: case OpKind::AvgPool2dGrad:
      return fast::pool(g, n, in, out);
    case OpKind::BatchNorm: case OpKind::LayerNorm: case OpKind::Softmax: case OpKind::LogSoftmax:
    case OpKind::SoftmaxCrossEntropy:
      return fast::norm(g, n, in, out);
    case OpKind::ReduceSum: case OpKind::ReduceMean: case OpKind::ReduceMax: case OpKind::ReduceMin:
    case OpKind::SumToLike:
      return fast::reduce(g, n, in, out);
    case OpKind::ReduceAny: case OpKind::ReduceAll:
      return fast::reduce_bool(g, n, in, out);
    case OpKind::Reshape: case OpKind::BroadcastTo: case OpKind::BroadcastLike: case OpKind::Transpose:
    case OpKind::Concat: case OpKind::Select: case OpKind::Cast: case OpKind::Greater:
    case OpKind::GreaterEqual: case OpKind::Less: case OpKind::LessEqual: case OpKind::Equal:
    case OpKind::NotEqual: case OpKind::Rsqrt: case OpKind::Tile: case OpKind::StridedSlice:
      return fast::shape_op(g, n, in, out);
    case OpKind::Gather: case OpKind::Scatter:
      return fast::indexing(n, in, out);
    default:
      return false;
  }
}

}  // namespace tg::detail
