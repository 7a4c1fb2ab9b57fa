// Buffer planning on ResNet-50 inference (NHWC, f32): the arena the planner lays out for one
// run against the naive sum of all intermediates. Compiles only; runs nothing.
// Usage: resnet50_plan [batch]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tgraph/tgraph.h>

#include "resnet50_graph.h"

int main(int argc, char** argv) {
  int64_t batch = argc > 1 ? std::atoll(argv[1]) : 1;
  tg::Graph g;
  bench::ResNet50 b{g};
  tg::Tensor x = g.placeholder({batch, 224, 224, 3}, tg::f32, "images");
  tg::Tensor y = g.reshape(g.global_avg_pool2d(b.features(x)), {batch, 2048});
  y = g.add(g.matmul(y, b.weight({2048, 1000}, 0, 0, "fc")), b.weight({1000}, 0, 0, "fc_b"));
  tg::Executable exe = g.compile({{x, x.type()}}, {g.softmax(y)}, {}, {.device = tg::Device::cpu()});
  double mib = 1024.0 * 1024.0;
  std::printf("resnet50 batch %lld: %lld ops; planned arena %.1f MiB; naive sum of intermediates %.1f MiB (%.1fx less)\n",
              static_cast<long long>(batch), static_cast<long long>(g.num_nodes()),
              exe.planned_arena_bytes() / mib, exe.naive_intermediate_bytes() / mib,
              static_cast<double>(exe.naive_intermediate_bytes()) / static_cast<double>(exe.planned_arena_bytes()));
  return 0;
}
