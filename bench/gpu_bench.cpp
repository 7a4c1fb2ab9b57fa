// GPU figures of the CUDA backend (issue 6), run on the GPU machine beside
// bench/gpu_bench_torch.py. Device time from CUDA events, warm-up, median of many runs,
// inputs already on the device.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <tgraph/tgraph.h>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/matmul_fp8.h"
#include "backends/cuda/matmul_lt.h"
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

namespace {

// Stencil (issue 7): the 5-point Laplacian on an 8192^2 f32 image in sum, max and argmax modes
// (constant 3x3 weights, zero boundary), the same with run-time weights and stitched with an
// elementwise prologue and epilogue (relu(lap(x*0.5+1))*2: the same bytes), and the 7-point
// Laplacian on a 512^3 f32 volume. One read and one write of the image is the floor.
// Then both Laplacians under candidate kernel shapes around the default (TGRAPH_STENCIL_CONFIG:
// `tile` is the shared-memory kernel; v / r outputs per thread along x / the slide dim, tx threads along x,
// mb the __launch_bounds__ blocks per SM, sd the slide dim), to pick the default from.
void bench_stencil() {
  const tg::CompileOptions gpu{.device = tg::Device::cuda(0)};
  unsetenv("TGRAPH_STENCIL_CONFIG");
  auto report = [](const char* what, double ms, double bytes) {
    double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("stencil %s: %.3f ms (%.0f GB/s, %.1f%% of 4260 GB/s; floor %.3f ms)\n", what, ms, gbs, gbs / 4260 * 100,
                bytes / 4.26e12 * 1e3);
  };
  const int64_t n = 8192;
  const std::vector<double> lap2 = {0, 1, 0, 1, -4, 1, 0, 1, 0};
  std::vector<tg::TensorData> img{tg::TensorData::uniform({1, 1, n, n}, -1, 1, tg::f32, 21)};
  const double bytes2 = 2.0 * n * n * 4;
  for (tg::Reduction r : {tg::Reduction::sum, tg::Reduction::max, tg::Reduction::argmax}) {
    tg::Graph g;
    tg::Tensor x = g.placeholder({1, 1, n, n}, tg::f32);
    tg::StencilDesc d;
    d.reduction = r;
    tg::Tensor y = g.stencil(x, g.constant(tg::TensorData::from_vector({1, 1, 3, 3}, tg::f32, lap2)), d);
    const char* what = r == tg::Reduction::sum ? "5-point Laplacian 8192^2 f32 (sum)"
                       : r == tg::Reduction::max ? "3x3 weighted max 8192^2 f32"
                                                 : "3x3 weighted argmax 8192^2 f32 (i32 out)";
    report(what, device_ms(g.compile({{x, x.type()}}, {y}, {}, gpu), img, 50), bytes2);
  }
  {
    tg::Graph g;
    tg::Tensor x = g.placeholder({1, 1, n, n}, tg::f32), w = g.placeholder({1, 1, 3, 3}, tg::f32);
    std::vector<tg::TensorData> in{img[0], tg::TensorData::from_vector({1, 1, 3, 3}, tg::f32, lap2)};
    report("3x3 sum, run-time weights, 8192^2 f32",
           device_ms(g.compile({{x, x.type()}, {w, w.type()}}, {g.stencil(x, w)}, {}, gpu), in, 50), bytes2);
  }
  {
    tg::Graph g;
    tg::Tensor x = g.placeholder({1, 1, n, n}, tg::f32);
    tg::Tensor s = g.add(g.mul(x, g.scalar(0.5)), g.scalar(1.0));
    tg::Tensor y = g.stencil(s, g.constant(tg::TensorData::from_vector({1, 1, 3, 3}, tg::f32, lap2)));
    tg::Tensor z = g.mul(g.relu(y), g.scalar(2.0));
    report("relu(lap(x*0.5+1))*2 stitched, 8192^2 f32", device_ms(g.compile({{x, x.type()}}, {z}, {}, gpu), img, 50),
           bytes2);
  }
  {
    const int64_t m = 512;
    std::vector<double> lap3(27, 0.0);
    lap3[4] = lap3[10] = lap3[12] = lap3[14] = lap3[16] = lap3[22] = 1;
    lap3[13] = -6;
    tg::Graph g;
    tg::Tensor x = g.placeholder({1, m, m, m}, tg::f32);
    tg::Tensor y = g.stencil(x, g.constant(tg::TensorData::from_vector({1, 3, 3, 3}, tg::f32, lap3)));
    std::vector<tg::TensorData> vol{tg::TensorData::uniform({1, m, m, m}, -1, 1, tg::f32, 22)};
    report("7-point Laplacian 512^3 f32", device_ms(g.compile({{x, x.type()}}, {y}, {}, gpu), vol, 30),
           2.0 * m * m * m * 4);
    const char* configs3[] = {"tile",          "v=4,r=8,tx=32,mb=0", "v=4,r=8,tx=32,mb=4", "v=4,r=4,tx=32,mb=4",
                              "v=4,r=8,tx=64,mb=3", "v=8,r=8,tx=32,mb=3"};
    for (const char* cfg : configs3) {
      setenv("TGRAPH_STENCIL_CONFIG", cfg, 1);
      const std::string what = std::string("7-point Laplacian 512^3 f32 [") + cfg + "]";
      report(what.c_str(), device_ms(g.compile({{x, x.type()}}, {y}, {}, gpu), vol, 30), 2.0 * m * m * m * 4);
    }
    unsetenv("TGRAPH_STENCIL_CONFIG");
  }
  {
    tg::Graph g;
    tg::Tensor x = g.placeholder({1, 1, n, n}, tg::f32);
    tg::Tensor y = g.stencil(x, g.constant(tg::TensorData::from_vector({1, 1, 3, 3}, tg::f32, lap2)));
    const char* configs2[] = {"tile",          "v=4,r=4,tx=32,mb=0", "v=4,r=2,tx=32,mb=4", "v=4,r=8,tx=32,mb=4",
                              "v=4,r=4,tx=32,mb=6", "v=8,r=2,tx=32,mb=4", "v=4,r=4,tx=64,mb=4"};
    for (const char* cfg : configs2) {
      setenv("TGRAPH_STENCIL_CONFIG", cfg, 1);
      const std::string what = std::string("5-point Laplacian 8192^2 f32 [") + cfg + "]";
      report(what.c_str(), device_ms(g.compile({{x, x.type()}}, {y}, {}, gpu), img, 50), bytes2);
    }
    unsetenv("TGRAPH_STENCIL_CONFIG");
  }
}

}  // namespace

namespace {

// A ResNet basic block forward, relu(x + conv(relu(conv(x)))), 3x3 convolutions 64 -> 64 on
// [32,56,56,64] NHWC, in each CompileOptions::precision: bf16 / f16 autocast casts x and the
// (constant, so folded at compile time) weights once and computes the convolutions in half.
void bench_autocast_conv_block() {
  tg::Graph g;
  tg::Tensor x = g.placeholder({32, 56, 56, 64}, tg::f32);
  const tg::ConvDesc same{.stride = {1, 1}, .padding = tg::PaddingStyle::same};
  tg::Tensor w1 = g.constant(tg::TensorData::uniform({3, 3, 64, 64}, -0.05, 0.05, tg::f32, 31));
  tg::Tensor w2 = g.constant(tg::TensorData::uniform({3, 3, 64, 64}, -0.05, 0.05, tg::f32, 32));
  tg::Tensor y = g.relu(g.add(x, g.conv2d(g.relu(g.conv2d(x, w1, same)), w2, same)));
  std::vector<tg::TensorData> in{tg::TensorData::uniform({32, 56, 56, 64}, -1, 1, tg::f32, 33)};
  const double flops = 2 * 2.0 * 32 * 56 * 56 * 64 * 64 * 9;
  const char* names[] = {"f32", "tf32", "bf16", "f16"};
  for (tg::Precision p : {tg::Precision::f32, tg::Precision::tf32, tg::Precision::bf16, tg::Precision::f16}) {
    double ms = device_ms(g.compile({{x, x.type()}}, {y}, {}, {.device = tg::Device::cuda(0), .precision = p}), in, 30);
    std::printf("ResNet basic block fwd [32,56,56,64] %s: %.3f ms (%.0f TFLOP/s in the convolutions)\n",
                names[static_cast<int>(p)], ms, flops / (ms * 1e-3) / 1e12);
  }
}

}  // namespace

// The weight and bias gradients of a Linear layer, dW = x^T dy and db = sum(dy, 0), for 16,384
// rows of 1,024 inputs and 4,096 outputs: with the bias gradient folded into the matmul
// (cuBLASLt's bias-gradient epilogue) and without (TGRAPH_NO_EPILOGUE=1: a reduction kernel
// reads dy again).
void bench_bias_grad() {
  const int64_t m = 16384, k = 1024, n = 4096;
  for (tg::DType t : {tg::bf16, tg::f32})
    for (bool fold : {true, false}) {
      if (!fold) setenv("TGRAPH_NO_EPILOGUE", "1", 1);
      tg::Graph g;
      tg::Tensor x = g.placeholder({m, k}, t), dy = g.placeholder({m, n}, t);
      std::vector<tg::TensorData> in{tg::TensorData::uniform({m, k}, -1, 1, t, 31),
                                     tg::TensorData::uniform({m, n}, -1, 1, t, 32)};
      tg::Executable e = g.compile({{x, x.type()}, {dy, dy.type()}},
                                   {g.matmul(x, dy, true, false), g.reduce_sum(dy, {0})}, {},
                                   {.device = tg::Device::cuda(0), .precision = tg::Precision::f32});
      long long before = tg::detail::matmul_epilogue_launches();
      double ms = device_ms(e, in, 20);
      unsetenv("TGRAPH_NO_EPILOGUE");
      std::printf("Linear weight+bias gradient %s [%lld x %lld]^T [%lld x %lld] + sum(dy, 0), %s: %.3f ms "
                  "(%.0f TFLOP/s; epilogue launches %lld)\n",
                  tg::dtype_name(t), static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(m),
                  static_cast<long long>(n), fold ? "bias gradient in the matmul" : "TGRAPH_NO_EPILOGUE=1", ms,
                  2.0 * m * k * n / (ms * 1e-3) / 1e12, tg::detail::matmul_epilogue_launches() - before);
    }
}

// FP8 against bf16 matmuls (issue 26): scaled_matmul of f8e4m3 operands (b stored [n, k], the
// layout FP8 kernels take; per-tensor scales) with a bf16 result, beside the bf16 matmul of the
// same shape, on square GEMMs and BERT-base's feed-forward at batch 32 x 128 tokens. Peer:
// torch._scaled_mm in gpu_bench_torch.py (same sizes).
void bench_fp8_matmul() {
  const int64_t shapes[][3] = {{4096, 4096, 4096}, {8192, 8192, 8192}, {4096, 3072, 768}, {4096, 768, 3072}};
  for (const auto& s : shapes) {
    const int64_t m = s[0], n = s[1], k = s[2];
    const double flop = 2.0 * m * n * k;
    tg::Graph g;
    tg::Tensor a8 = g.placeholder({m, k}, tg::f8e4m3), b8 = g.placeholder({n, k}, tg::f8e4m3);
    tg::Tensor sa = g.placeholder(tg::Shape{}, tg::f32), sb = g.placeholder(tg::Shape{}, tg::f32);
    tg::Tensor a16 = g.placeholder({m, k}, tg::bf16), b16 = g.placeholder({n, k}, tg::bf16);
    std::vector<tg::TensorData> in8{tg::TensorData::uniform({m, k}, -4, 4, tg::f8e4m3, 41),
                                    tg::TensorData::uniform({n, k}, -4, 4, tg::f8e4m3, 42),
                                    tg::TensorData::scalar(0.5, tg::f32), tg::TensorData::scalar(0.25, tg::f32)};
    std::vector<tg::TensorData> in16{tg::TensorData::uniform({m, k}, -1, 1, tg::bf16, 43),
                                     tg::TensorData::uniform({n, k}, -1, 1, tg::bf16, 44)};
    const tg::CompileOptions gpu{.device = tg::Device::cuda(0)};
    const long long before = tg::detail::fp8_matmul_launches();
    tg::Executable e8 = g.compile({{a8, a8.type()}, {b8, b8.type()}, {sa, sa.type()}, {sb, sb.type()}},
                                  {g.scaled_matmul(a8, b8, sa, sb, tg::bf16, false, true)}, {}, gpu);
    const double ms8 = device_ms(e8, in8, 30);
    const long long fp8 = tg::detail::fp8_matmul_launches() - before;
    const double ms16 = device_ms(g.compile({{a16, a16.type()}, {b16, b16.type()}}, {g.matmul(a16, b16, false, true)},
                                            {}, gpu),
                                  in16, 30);
    std::printf("matmul [%lld x %lld] x [%lld x %lld]^T: fp8 e4m3 -> bf16 %.3f ms (%.0f TFLOP/s, %lld FP8 launches), "
                "bf16 %.3f ms (%.0f TFLOP/s): fp8 %.2fx bf16\n",
                static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n),
                static_cast<long long>(k), ms8, flop / (ms8 * 1e-3) / 1e12, fp8, ms16, flop / (ms16 * 1e-3) / 1e12,
                ms16 / ms8);
  }
}

// Training-mode batch norm on [64,56,56,256] f32 NHWC (205 MB): the decomposed form forward,
// and forward + backward (dx, dgamma, dbeta of sum(y * dy)); PyTorch's peer calls cuDNN's batch
// norm. Also with TGRAPH_NO_REDUCE_FUSION=1 (no stitched reductions, no recomputation:
// docs/fusion.md), to show what they do. Passes over 205 MB: forward 3 (x for the statistics, x
// read and y written), forward + backward 7 (x and dy for the statistics and dbeta, again for
// dgamma and the backward's means, again with dx written): 0.144 / 0.337 ms at 4.26 TB/s.
void bench_batch_norm() {
  const tg::Shape s{64, 56, 56, 256};
  for (bool stitched : {true, false})
    for (bool backward : {false, true}) {
      if (!stitched) setenv("TGRAPH_NO_REDUCE_FUSION", "1", 1);
      tg::Graph g;
      tg::Tensor x = g.placeholder(s, tg::f32), dy = g.placeholder(s, tg::f32);
      tg::Tensor gamma = g.placeholder({256}, tg::f32), beta = g.placeholder({256}, tg::f32);
      std::vector<tg::Tensor> t = g.batch_norm_training(x, gamma, beta, -1, 1e-5);
      std::vector<tg::Tensor> outs{t[0], t[1], t[2]};
      if (backward) {
        auto gr = g.gradients(g.reduce_sum(g.mul(t[0], dy)), {x, gamma, beta});
        outs = {gr[x], gr[gamma], gr[beta], t[1], t[2]};
      }
      std::vector<tg::TensorData> in{tg::TensorData::uniform(s, -1, 1, tg::f32, 41), tg::TensorData::uniform(s, -1, 1, tg::f32, 42),
                                     tg::TensorData::uniform({256}, 0.5, 1.5, tg::f32, 43),
                                     tg::TensorData::uniform({256}, -0.5, 0.5, tg::f32, 44)};
      tg::Executable e = g.compile({{x, x.type()}, {dy, dy.type()}, {gamma, gamma.type()}, {beta, beta.type()}}, outs, {},
                                   {.device = tg::Device::cuda(0)});
      std::printf("batch norm training [64,56,56,256] f32 NHWC, %s%s: %.3f ms\n",
                  backward ? "forward + backward (dx, dgamma, dbeta)" : "forward (y, mean, var)",
                  stitched ? "" : " [TGRAPH_NO_REDUCE_FUSION=1]", device_ms(e, in, 20));
      unsetenv("TGRAPH_NO_REDUCE_FUSION");
    }
}

// Layer norm over the last dim of [8192, 1024] f32 (32 MB), forward and forward + backward (dx,
// dgamma, dbeta of sum(y * dy)): the row statistics (a warp per row) and the column sums of the
// backward (dgamma, dbeta) as stitched reductions. PyTorch's peer: F.layer_norm.
void bench_layer_norm() {
  const tg::Shape s{8192, 1024};
  for (bool backward : {false, true}) {
    tg::Graph g;
    tg::Tensor x = g.placeholder(s, tg::f32), dy = g.placeholder(s, tg::f32);
    tg::Tensor gamma = g.placeholder({1024}, tg::f32), beta = g.placeholder({1024}, tg::f32);
    tg::Tensor y = g.layer_norm(x, gamma, beta, -1, 1e-5);
    std::vector<tg::Tensor> outs{y};
    if (backward) {
      auto gr = g.gradients(g.reduce_sum(g.mul(y, dy)), {x, gamma, beta});
      outs = {gr[x], gr[gamma], gr[beta]};
    }
    std::vector<tg::TensorData> in{tg::TensorData::uniform(s, -1, 1, tg::f32, 61), tg::TensorData::uniform(s, -1, 1, tg::f32, 62),
                                   tg::TensorData::uniform({1024}, 0.5, 1.5, tg::f32, 63),
                                   tg::TensorData::uniform({1024}, -0.5, 0.5, tg::f32, 64)};
    tg::Executable e = g.compile({{x, x.type()}, {dy, dy.type()}, {gamma, gamma.type()}, {beta, beta.type()}}, outs, {},
                                 {.device = tg::Device::cuda(0)});
    std::printf("layer norm [8192,1024] f32, %s: %.3f ms\n", backward ? "forward + backward (dx, dgamma, dbeta)" : "forward",
                device_ms(e, in, 20));
  }
}

// Broadcasting elementwise kernels on the batch-norm shape [64,56,56,256] f32: a same-shape
// product (flat), a per-channel one ([256]: the innermost dim) and a per-image one
// ([64,1,1,1]); each reads x and writes y (411 MB), so the floor is 0.096 ms at 4.26 TB/s.
void bench_broadcast() {
  const tg::Shape s{64, 56, 56, 256};
  const double bytes = 2.0 * static_cast<double>(s.num_elements()) * 4;
  for (const auto& [what, other] : std::vector<std::pair<const char*, tg::Shape>>{
           {"x*y (same shape)", s}, {"x*g (per channel)", tg::Shape{256}}, {"x*g (per image)", tg::Shape{64, 1, 1, 1}}}) {
    tg::Graph g;
    tg::Tensor x = g.placeholder(s, tg::f32), y = g.placeholder(other, tg::f32);
    tg::Executable e = g.compile({{x, x.type()}, {y, y.type()}}, {g.mul(x, y)}, {}, {.device = tg::Device::cuda(0)});
    std::vector<tg::TensorData> in{tg::TensorData::uniform(s, -1, 1, tg::f32, 51), tg::TensorData::uniform(other, -1, 1, tg::f32, 52)};
    const double ms = device_ms(e, in, 20);
    const double moved = bytes + (other == s ? bytes / 2 : 0);
    std::printf("broadcast %-20s [64,56,56,256] f32: %.3f ms (%.2f TB/s)\n", what, ms, moved / ms / 1e9);
  }
}

// A transformer-style MLP block trained one step, bf16: y = act(x w1 + b1) w2 + b2 on 8,192 rows
// of 1,024 features through 4,096 hidden units, forward and backward (dx, dw1, db1, dw2, db2 of
// sum(y * dy)), act gelu_tanh or relu. Six GEMMs of 68.7 GFLOP each (412 GFLOP: 0.53 ms at
// 780 TFLOP/s). With the cuBLASLt epilogues: the forward's bias + activation (gelu also storing
// the pre-activation), the backward's activation gradient (DGELU) and both bias gradients in
// the GEMMs; TGRAPH_NO_EPILOGUE=1: the same as generated elementwise kernels and reductions;
// relu also with TGRAPH_DRELU=1 (relu's gradient in the GEMM too, opt-in: matmul_epilogue.h).
// PyTorch's peer: the same in eager mode and torch.compile.
void bench_mlp() {
  const int64_t rows = 8192, d = 1024, hidden = 4096;
  const tg::DType t = tg::bf16;
  for (bool gelu : {true, false})
    for (int mode : {0, 1, 2}) {  // epilogues, none, relu's DRELU too
      const bool fold = mode != 1;
      if (mode == 2 && gelu) continue;
      if (!fold) setenv("TGRAPH_NO_EPILOGUE", "1", 1);
      if (mode == 2) setenv("TGRAPH_DRELU", "1", 1);
      tg::Graph g;
      tg::Tensor x = g.placeholder({rows, d}, t), dy = g.placeholder({rows, d}, t);
      tg::Tensor w1 = g.placeholder({d, hidden}, t), b1 = g.placeholder({hidden}, t);
      tg::Tensor w2 = g.placeholder({hidden, d}, t), b2 = g.placeholder({d}, t);
      tg::Tensor pre = g.add(g.matmul(x, w1), b1);
      tg::Tensor y = g.add(g.matmul(gelu ? g.gelu_tanh(pre) : g.relu(pre), w2), b2);
      auto gr = g.gradients(g.reduce_sum(g.mul(y, dy)), {x, w1, b1, w2, b2});
      std::vector<tg::TensorData> in{tg::TensorData::uniform({rows, d}, -1, 1, t, 71),
                                     tg::TensorData::uniform({rows, d}, -1, 1, t, 72),
                                     tg::TensorData::uniform({d, hidden}, -0.03, 0.03, t, 73),
                                     tg::TensorData::uniform({hidden}, -0.5, 0.5, t, 74),
                                     tg::TensorData::uniform({hidden, d}, -0.03, 0.03, t, 75),
                                     tg::TensorData::uniform({d}, -0.5, 0.5, t, 76)};
      tg::Executable e = g.compile({{x, x.type()}, {dy, dy.type()}, {w1, w1.type()}, {b1, b1.type()},
                                    {w2, w2.type()}, {b2, b2.type()}},
                                   {y, gr[x], gr[w1], gr[b1], gr[w2], gr[b2]}, {}, {.device = tg::Device::cuda(0)});
      long long before = tg::detail::matmul_epilogue_launches();
      const double ms = device_ms(e, in, 20);
      unsetenv("TGRAPH_NO_EPILOGUE");
      unsetenv("TGRAPH_DRELU");
      std::printf("MLP %s [8192,1024]->4096->1024 bf16 forward + backward, %s: %.3f ms (%.0f TFLOP/s; epilogue "
                  "launches %lld)\n",
                  gelu ? "gelu_tanh" : "relu",
                  mode == 0 ? "cuBLASLt epilogues" : mode == 1 ? "TGRAPH_NO_EPILOGUE=1" : "TGRAPH_DRELU=1", ms,
                  6 * 2.0 * rows * d * hidden / (ms * 1e-3) / 1e12, tg::detail::matmul_epilogue_launches() - before);
    }
}

// scaled_dot_product_attention at BERT's shapes (f16, 12 heads of 64), three ways: cuDNN's fused
// kernel, tgraph's own (kernels_attention.cu, the stand-in while cuDNN builds a cold shape's
// plan) and the decomposition; device time of the captured call and its FLOP rate. Then a cold
// shape's first call (compile + first run, wall clock; a scale of its own, so no plan of this
// process or the compile cache fits): with the stand-in, and waiting for cuDNN's plan.
void bench_attention() {
  const std::vector<std::array<int64_t, 3>> shapes{{1, 128, 0}, {16, 128, 0}, {8, 512, 0}, {16, 128, 1}};
  const std::vector<std::pair<const char*, std::map<std::string, std::string>>> ways{
      {"cuDNN", {{"TGRAPH_NO_INTERIM_ATTENTION", "1"}}},
      {"tgraph's kernel", {{"TGRAPH_OWN_ATTENTION", "1"}}},
      {"decomposed", {{"TGRAPH_NO_FUSED_ATTENTION", "1"}}}};
  for (const auto& [b, L, masked] : shapes) {
    tg::Graph g;
    const tg::Shape s({b, 12, L, 64});
    tg::Tensor q = g.placeholder(s, tg::f16), k = g.placeholder(s, tg::f16), v = g.placeholder(s, tg::f16);
    tg::Tensor m = g.placeholder({b, 1, L, L}, tg::f16);
    tg::Tensor y = g.scaled_dot_product_attention(q, k, v, masked ? std::optional<tg::Tensor>(m) : std::nullopt);
    std::vector<tg::TensorData> in;
    for (int i = 0; i < 3; ++i) in.push_back(tg::TensorData::uniform(s, -1, 1, tg::f16, 80 + static_cast<uint64_t>(i)));
    std::vector<std::pair<tg::Tensor, tg::TensorType>> feeds{{q, q.type()}, {k, k.type()}, {v, v.type()}};
    if (masked) {
      in.push_back(tg::TensorData::uniform({b, 1, L, L}, -2, 0, tg::f16, 83));
      feeds.emplace_back(m, m.type());
    }
    const double flop = 4.0 * static_cast<double>(b) * 12 * L * L * 64;
    for (const auto& [name, switches] : ways) {
      tg::Executable e = g.compile(feeds, {y}, {}, {.device = tg::Device::cuda(0), .switches = switches});
      const long long own_before = tg::detail::cudnn_attention_own_calls();
      const double ms = median(tg::detail::cuda_time_replays(e.impl(), in, 5, 50));
      // Which kernel ran is asserted, not assumed: a switch that did not reach the run once
      // made "tgraph's kernel" time cuDNN's.
      const bool own_ran = tg::detail::cudnn_attention_own_calls() > own_before;
      if (own_ran != (switches.count("TGRAPH_OWN_ATTENTION") > 0))
        throw tg::Error(std::string("[bench] attention, ") + name + ": tgraph's kernel " + (own_ran ? "ran" : "did not run"));
      std::printf("attention f16 %lld x 12 x %lld x 64%s, %s: %.4f ms (%.1f TFLOP/s)\n", static_cast<long long>(b),
                  static_cast<long long>(L), masked ? " + bias [b,1,L,L]" : "", name, ms, flop / (ms * 1e-3) / 1e12);
    }
  }
  for (int stand_in = 1; stand_in >= 0; --stand_in) {
    const int64_t L = 96 + 8 * stand_in;  // a length and a scale this bench alone uses
    tg::Graph g;
    const tg::Shape s({16, 12, L, 64});
    tg::Tensor q = g.placeholder(s, tg::f16), k = g.placeholder(s, tg::f16), v = g.placeholder(s, tg::f16);
    tg::Tensor y = g.scaled_dot_product_attention(q, k, v, std::nullopt, tg::AttentionDesc{0.1171 + stand_in * 1e-4, false});
    std::vector<tg::TensorData> in;
    for (int i = 0; i < 3; ++i) in.push_back(tg::TensorData::uniform(s, -1, 1, tg::f16, 90 + static_cast<uint64_t>(i)));
    std::map<std::string, std::string> sw;
    if (!stand_in) sw["TGRAPH_NO_INTERIM_ATTENTION"] = "1";
    const auto t0 = std::chrono::steady_clock::now();
    tg::Executable e = g.compile({{q, q.type()}, {k, k.type()}, {v, v.type()}}, {y}, {},
                                 {.device = tg::Device::cuda(0), .switches = sw});
    e.run(in);
    const double first = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tg::detail::cudnn_attention_settle();
    const auto t1 = std::chrono::steady_clock::now();
    e.run(in);
    const double second = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    std::printf("attention f16 16 x 12 x %lld x 64 at a cold shape, %s: first call (compile + run) %.1f ms, the "
                "call after the plan is built %.1f ms; stand-in calls so far %lld\n",
                static_cast<long long>(L), stand_in ? "tgraph's kernel standing in" : "waiting for cuDNN's plan", first,
                second, tg::detail::cudnn_attention_stand_ins());
  }
}

int main(int argc, char** argv) {
  // `bench_gpu batch_norm stencil`: only those parts (while_loop, gather_nd, stencil,
  // autocast_conv_block, bias_grad, batch_norm, layer_norm, broadcast, mlp, fp8_matmul, attention); no arguments: everything.
  if (argc > 1) {
    const std::map<std::string, void (*)()> parts{{"while_loop", bench_while_loop},
                                                 {"gather_nd", bench_gather_nd},
                                                 {"stencil", bench_stencil},
                                                 {"autocast_conv_block", bench_autocast_conv_block},
                                                 {"bias_grad", bench_bias_grad},
                                                 {"batch_norm", bench_batch_norm},
                                                 {"layer_norm", bench_layer_norm},
                                                 {"broadcast", bench_broadcast},
                                                 {"mlp", bench_mlp},
                                                 {"fp8_matmul", bench_fp8_matmul},
                                                 {"attention", bench_attention}};
    for (int i = 1; i < argc; ++i) {
      auto it = parts.find(argv[i]);
      if (it == parts.end()) {
        std::fprintf(stderr, "bench_gpu: no part named %s\n", argv[i]);
        return 2;
      }
      it->second();
    }
    return 0;
  }
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
  bench_stencil();
  bench_autocast_conv_block();
  bench_bias_grad();
  bench_batch_norm();
  bench_layer_norm();
  bench_broadcast();
  bench_fp8_matmul();
  return 0;
}
