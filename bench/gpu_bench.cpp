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

namespace {

// while_loop with a tiny body (x = x*0.5+1 on 1024 floats, i += 1 while i < n), n = 10,000:
// microseconds per iteration of the captured CUDA graph (a device-side WHILE node, no host
// round trip), beside the uncaptured run that reads the predicate on the host each iteration.
void bench_while_loop() {
  const int iterations = 10000;
  tg::Graph g;
  tg::Tensor x = g.placeholder({1024}, tg::f32), n = g.placeholder(tg::Shape{}, tg::i32);
  auto r = g.while_loop(
      {x, g.scalar(0, tg::i32)},
      [&](tg::Graph& s, std::vector<tg::Tensor> v) { return std::pair{s.less(v[1], n), v}; },
      [&](tg::Graph& s, std::vector<tg::Tensor> v) {
        return std::vector{s.add(s.mul(v[0], s.scalar(0.5)), s.scalar(1.0)), s.add(v[1], s.scalar(1, tg::i32))};
      });
  tg::Executable e = g.compile({{x, x.type()}, {n, n.type()}}, {r[0], r[1]}, {}, {.device = tg::Device::cuda(0)});
  std::vector<tg::TensorData> in{tg::TensorData::uniform({1024}, -1, 1, tg::f32, 5),
                                 tg::TensorData::scalar(iterations, tg::i32)};
  double captured = 0;
  try {
    captured = median(tg::detail::cuda_time_replays(e.impl(), in, 3, 21));
  } catch (const tg::Error& err) {
    std::printf("while_loop bench: %s\n", err.what());
    return;
  }
  double host = median(tg::detail::cuda_time_runs(e.impl(), in, 1, 3));
  std::printf("while_loop x=x*0.5+1 on 1024 f32, %d iterations: %.2f us per iteration captured (device WHILE "
              "node), %.2f us per iteration with the predicate read on the host\n",
              iterations, captured * 1e3 / iterations, host * 1e3 / iterations);
}

// gather_nd embedding lookup (issue 7): 1,048,576 rows of 256 f32 picked from a
// 1,048,576-row table by random i32 ids. Bytes moved: the rows read and written plus the ids;
// the figure to reach is 85% of the H200's 4.26 TB/s copy bandwidth.
void bench_gather_nd() {
  const int64_t rows = int64_t{1} << 20, dim = 256, table_rows = int64_t{1} << 20;
  tg::Graph g;
  tg::Tensor table = g.placeholder({table_rows, dim}, tg::f32), ids = g.placeholder({rows, 1}, tg::i32);
  tg::Executable e = g.compile({{table, table.type()}, {ids, ids.type()}}, {g.gather_nd(table, ids)}, {},
                               {.device = tg::Device::cuda(0)});
  tg::TensorData id_data({rows, 1}, tg::i32);
  uint64_t s = 12345;
  for (int64_t i = 0; i < rows; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    static_cast<int32_t*>(id_data.data())[i] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(table_rows));
  }
  std::vector<tg::TensorData> in{tg::TensorData::uniform({table_rows, dim}, -1, 1, tg::f32, 9), id_data};
  double ms = device_ms(e, in, 50);
  double bytes = 2.0 * rows * dim * 4 + rows * 4.0, gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("gather_nd embedding 1M x 256 f32 from a 1M-row table: %.3f ms (%.0f GB/s, %.1f%% of 4260 GB/s)\n", ms,
              gbs, gbs / 4260 * 100);
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
  bench_while_loop();
  bench_gather_nd();
  return 0;
}
