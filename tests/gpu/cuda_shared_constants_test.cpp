// A dynamic executable's per-size copies share their weights' device copy (shared_constants.h):
// run at a second size, its 1 MB weight is not uploaded again, and both sizes still match the
// CPU; a second executable built from other bytes of the same size gets its own copy.
#include <gtest/gtest.h>

#include "backends/cuda/shared_constants.h"
#include "gpu/gpu_test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

TEST(CudaSharedConstants, PerSizeCopiesShareTheirWeights) {
  Graph g;
  Tensor x = g.placeholder({-1, 512}, f32, "x");
  Tensor w = g.constant(TensorData::uniform({512, 512}, -1, 1, f32, 5));  // 1 MiB
  Tensor y = g.relu(g.matmul(x, w));
  const auto feeds = std::vector<std::pair<Tensor, TensorType>>{{x, TensorType({-1, 512}, f32)}};
  Executable gpu = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
  Executable cpu = g.compile(feeds, {y}, {}, {.device = Device::cpu()});
  const long long before = detail::shared_constant_bytes_reused();
  for (int64_t rows : {4, 9, 4}) {
    TensorData in = TensorData::uniform({rows, 512}, -1, 1, f32, static_cast<uint64_t>(rows));
    gputest::expect_close(gpu.run({in})[0], cpu.run({in})[0], 1e-4, "rows " + std::to_string(rows));
  }
  EXPECT_GE(detail::shared_constant_bytes_reused() - before, 512 * 512 * 4);  // the size-9 copy's

  Graph h;  // other bytes, same size: not shared
  Tensor x2 = h.placeholder({4, 512}, f32, "x");
  Tensor y2 = h.matmul(x2, h.constant(TensorData::uniform({512, 512}, -1, 1, f32, 6)));
  const long long mid = detail::shared_constant_bytes_reused();
  TensorData in = TensorData::uniform({4, 512}, -1, 1, f32, 7);
  gputest::expect_close(h.compile({{x2, x2.type()}}, {y2}, {}, {.device = Device::cuda(0)}).run({in})[0],
                        h.compile({{x2, x2.type()}}, {y2}, {}, {.device = Device::cpu()}).run({in})[0], 1e-4, "other");
  EXPECT_EQ(detail::shared_constant_bytes_reused(), mid);
}
