// Buffer planning on ResNet-50 inference (NHWC, f32): the arena the planner lays out for one
// run against the naive sum of all intermediates. Compiles only; runs nothing.
// Usage: resnet50_plan [batch]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tgraph/tgraph.h>

namespace {

struct Builder {
  tg::Graph& g;
  int n = 0;
  tg::Tensor var(tg::Shape s, const std::string& what) {
    return g.variable(tg::TensorData::zeros(std::move(s)), what + std::to_string(n++));
  }
  tg::Tensor conv_bn(tg::Tensor x, int64_t k, int64_t out, int64_t stride, bool relu) {
    int64_t in = x.shape()[3];
    tg::Tensor y = g.conv2d(x, var({k, k, in, out}, "w"),
                            {.stride = {stride, stride}, .padding = tg::PaddingStyle::same});
    y = g.batch_norm(y, var({out}, "mean"), var({out}, "var"), var({out}, "gamma"), var({out}, "beta"));
    return relu ? g.relu(y) : y;
  }
  tg::Tensor bottleneck(tg::Tensor x, int64_t width, int64_t stride) {
    int64_t out = width * 4;
    tg::Tensor skip = (x.shape()[3] != out || stride != 1) ? conv_bn(x, 1, out, stride, false) : x;
    tg::Tensor y = conv_bn(x, 1, width, 1, true);
    y = conv_bn(y, 3, width, stride, true);
    y = conv_bn(y, 1, out, 1, false);
    return g.relu(g.add(y, skip));
  }
};

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = argc > 1 ? std::atoll(argv[1]) : 1;
  tg::Graph g;
  Builder b{g};
  tg::Tensor x = g.placeholder({batch, 224, 224, 3}, tg::f32, "images");
  tg::Tensor y = b.conv_bn(x, 7, 64, 2, true);
  y = g.max_pool2d(y, {.kernel = {3, 3}, .stride = {2, 2}, .padding = tg::PaddingStyle::same});
  const int64_t blocks[] = {3, 4, 6, 3}, widths[] = {64, 128, 256, 512};
  for (int s = 0; s < 4; ++s)
    for (int64_t i = 0; i < blocks[s]; ++i) y = b.bottleneck(y, widths[s], (i == 0 && s > 0) ? 2 : 1);
  y = g.reshape(g.global_avg_pool2d(y), {batch, 2048});
  y = g.add(g.matmul(y, b.var({2048, 1000}, "fc")), b.var({1000}, "fc_b"));
  tg::Executable exe = g.compile({{x, x.type()}}, {g.softmax(y)}, {}, {.device = tg::Device::cpu()});
  double mib = 1024.0 * 1024.0;
  std::printf("resnet50 batch %lld: %lld ops; planned arena %.1f MiB; naive sum of intermediates %.1f MiB (%.1fx less)\n",
              static_cast<long long>(batch), static_cast<long long>(g.num_nodes()),
              exe.planned_arena_bytes() / mib, exe.naive_intermediate_bytes() / mib,
              static_cast<double>(exe.naive_intermediate_bytes()) / static_cast<double>(exe.planned_arena_bytes()));
  return 0;
}
