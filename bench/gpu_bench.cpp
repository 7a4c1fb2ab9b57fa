// GPU figures of the CUDA backend (issue 6), run on the GPU machine beside
// bench/gpu_bench_torch.py. Device time from CUDA events, warm-up, median of many runs,
// inputs already on the device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <tgraph/tgraph.h>

#include "runtime/executable_impl.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double device_ms(const tg::Executable& e, const std::vector<tg::TensorData>& in, int iters) {
  return median(tg::detail::cuda_time_runs(e.impl(), in, 5, iters));
}

}  // namespace

int main() {
  const tg::CompileOptions gpu{.device = tg::Device::cuda(0)};
  {  // gelu(x*a+b)*c on 64M f32: 4 reads + 1 write
    const int64_t n = int64_t{64} << 20;
    tg::Graph g;
    tg::Tensor x = g.placeholder({n}, tg::f32), a = g.placeholder({n}, tg::f32), b = g.placeholder({n}, tg::f32),
               c = g.placeholder({n}, tg::f32);
    tg::Tensor y = g.mul(g.gelu(g.add(g.mul(x, a), b)), c);
    std::vector<tg::TensorData> in;
    for (int i = 0; i < 4; ++i) in.push_back(tg::TensorData::uniform({n}, -1, 1, tg::f32, static_cast<uint64_t>(i)));
    auto feeds = std::vector<std::pair<tg::Tensor, tg::TensorType>>{{x, x.type()}, {a, a.type()}, {b, b.type()}, {c, c.type()}};
    double ms = device_ms(g.compile(feeds, {y}, {}, gpu), in, 50);
    double gbs = 5.0 * n * 4 / (ms * 1e-3) / 1e9;
    std::printf("elementwise gelu(x*a+b)*c 64M f32: %.3f ms (%.0f GB/s, floor at 4260 GB/s: %.3f ms)\n", ms, gbs,
                5.0 * n * 4 / 4.26e12 * 1e3);
  }
  {  // bf16 GEMM 8192^3
    const int64_t n = 8192;
    tg::Graph g;
    tg::Tensor a = g.placeholder({n, n}, tg::bf16), b = g.placeholder({n, n}, tg::bf16);
    tg::Tensor y = g.matmul(a, b);
    std::vector<tg::TensorData> in{tg::TensorData::uniform({n, n}, -1, 1, tg::bf16, 1),
                                   tg::TensorData::uniform({n, n}, -1, 1, tg::bf16, 2)};
    double ms = device_ms(g.compile({{a, a.type()}, {b, b.type()}}, {y}, {}, gpu), in, 20);
    std::printf("bf16 GEMM 8192^3: %.3f ms (%.0f TFLOP/s)\n", ms, 2.0 * n * n * n / (ms * 1e-3) / 1e12);
  }
  for (bool fuse : {true, false}) {  // 1,000 tiny elementwise ops
    if (!fuse) setenv("TGRAPH_NO_FUSION", "1", 1);
    tg::Graph g;
    tg::Tensor x = g.placeholder({4}, tg::f32);
    tg::Tensor y = x;
    for (int i = 0; i < 1000; ++i) y = (i % 2) ? g.add(y, x) : g.mul(y, g.scalar(0.999));
    tg::Executable e = g.compile({{x, x.type()}}, {y}, {}, gpu);
    std::vector<tg::TensorData> in{tg::TensorData::uniform({4}, -1, 1, tg::f32, 3)};
    for (int i = 0; i < 5; ++i) e.run(in);
    std::vector<double> wall;
    for (int i = 0; i < 30; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      e.run(in);
      wall.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    auto cs = tg::detail::cuda_graph_stats(e.impl());
    std::printf("1000-op tiny graph (%s): %.1f us per run (host wall, incl. copies; CUDA graph replays %d%s%s), "
                "uncaptured device time %.1f us\n",
                fuse ? "fused" : "TGRAPH_NO_FUSION=1", median(wall), cs.replays, cs.error.empty() ? "" : ": ",
                cs.error.c_str(), device_ms(e, in, 20) * 1e3);
    unsetenv("TGRAPH_NO_FUSION");
  }
  return 0;
}
