#pragma once
// ResNet-50's layers as plain tgraph ops, for the benchmarks that want its graph rather than the
// nn layers: NHWC with zero variables (resnet50_plan: buffer planning) or NCHW / OIHW with random
// constants and inference batch norms, as torch.export hands a model over (specialize_passes).
#include <cstdint>
#include <string>

#include <tgraph/tgraph.h>

namespace bench {

struct ResNet50 {
  tg::Graph& g;
  bool torch_like = false;  // NCHW, OIHW constants; else NHWC, HWIO variables
  uint64_t seed = 1;
  int n = 0;

  tg::Tensor weight(tg::Shape s, double lo, double hi, const std::string& what) {
    if (torch_like) return g.constant(tg::TensorData::uniform(std::move(s), lo, hi, tg::f32, seed++));
    return g.variable(tg::TensorData::zeros(std::move(s)), what + std::to_string(n++));
  }
  int64_t channels(const tg::Tensor& x) const { return x.shape()[torch_like ? 1 : 3]; }
  tg::Tensor conv_bn(tg::Tensor x, int64_t k, int64_t out, int64_t stride, bool relu) {
    const int64_t in = channels(x);
    tg::ConvDesc d;
    d.stride = {stride, stride};
    if (torch_like) {
      d.explicit_padding = {k / 2, k / 2, k / 2, k / 2};
      d.data_layout = tg::Layout::nchw;
      d.weights_layout = tg::Layout::oihw;
    } else {
      d.padding = tg::PaddingStyle::same;
    }
    tg::Tensor y = g.conv2d(x, weight(torch_like ? tg::Shape{out, in, k, k} : tg::Shape{k, k, in, out}, -0.1, 0.1, "w"), d);
    y = g.batch_norm(y, weight({out}, -0.1, 0.1, "mean"), weight({out}, 0.5, 1.5, "var"),
                     weight({out}, 0.5, 1.5, "gamma"), weight({out}, -0.1, 0.1, "beta"), torch_like ? 1 : -1, 1e-5);
    return relu ? g.relu(y) : y;
  }
  tg::Tensor bottleneck(tg::Tensor x, int64_t width, int64_t stride) {
    const int64_t out = width * 4;
    tg::Tensor skip = (channels(x) != out || stride != 1) ? conv_bn(x, 1, out, stride, false) : x;
    tg::Tensor y = conv_bn(x, 1, width, 1, true);
    y = conv_bn(y, 3, width, stride, true);
    y = conv_bn(y, 1, out, 1, false);
    return g.relu(g.add(y, skip));
  }
  /// The stem's convolution and pooling, then the four stages of bottlenecks.
  tg::Tensor features(tg::Tensor images) {
    tg::Tensor y = conv_bn(images, 7, 64, 2, true);
    tg::PoolDesc pool;
    pool.kernel = {3, 3};
    pool.stride = {2, 2};
    if (torch_like) {
      pool.explicit_padding = {1, 1, 1, 1};
      pool.data_layout = tg::Layout::nchw;
    } else {
      pool.padding = tg::PaddingStyle::same;
    }
    y = g.max_pool2d(y, pool);
    const int64_t blocks[] = {3, 4, 6, 3}, widths[] = {64, 128, 256, 512};
    for (int s = 0; s < 4; ++s)
      for (int64_t i = 0; i < blocks[s]; ++i) y = bottleneck(y, widths[s], (i == 0 && s > 0) ? 2 : 1);
    return y;
  }
};

}  // namespace bench
