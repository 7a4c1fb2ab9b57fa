// The 8-bit floats on CUDA against the CPU: casts bit for bit (every code, random floats,
// saturation, NaN), data movement, and scaled_matmul on cuBLASLt's FP8 kernels (counted, so a
// silent fallback to the widened path fails) and on the widened path where FP8 kernels do
// not take the shape.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cuda/matmul_fp8.h"
#include "tgraph/tgraph.h"
#include "gpu/gpu_test_util.h"

using namespace tg;

namespace {

// The bytes of two tensors of an 8-bit dtype, compared as codes (NaN codes must match too).
void expect_same_bytes(const TensorData& got, const TensorData& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  for (int64_t i = 0; i < want.num_elements(); ++i) ASSERT_EQ(g[i], w[i]) << what << " at " << i;
}

}  // namespace

TEST(CudaFloat8, CastsMatchTheCpuBitForBit) {
  for (DType t : {f8e4m3, f8e5m2}) {
    // Every code decoded, and floats across both formats' ranges (subnormals, ties, overflow,
    // infinities, NaN) encoded.
    TensorData codes(Shape{256}, u8);
    for (int i = 0; i < 256; ++i) codes.set(i, i);
    TensorData x = TensorData::uniform(Shape{4096}, -70000, 70000, f32, 7);
    const float specials[] = {0.f, -0.f, 448.f, 464.f, -500.f, 57344.f, 61440.f, 1e-3f, 2e-3f, 1.0625f, 1.1875f,
                              std::ldexp(1.f, -9), std::ldexp(1.f, -10), std::ldexp(3.f, -10), std::ldexp(1.f, -16),
                              std::ldexp(1.f, -17), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
    for (size_t i = 0; i < std::size(specials); ++i) x.set(static_cast<int64_t>(i), specials[i]);
    for (int64_t i = 100; i < 2100; ++i) x.set(i, x.at(i) * 1e-5);  // small values: subnormals
    Graph g;
    Tensor pc = g.placeholder(Shape{256}, u8, "codes"), px = g.placeholder(Shape{4096}, f32, "x");
    Tensor decoded = g.cast(g.bitcast(pc, t), f32);
    Tensor encoded = g.cast(px, t);
    Tensor as_half = g.cast(g.cast(px, t), bf16);  // through the 8-bit type inside one kernel
    auto feeds = std::vector<std::pair<Tensor, TensorType>>{{pc, pc.type()}, {px, px.type()}};
    auto want = g.compile(feeds, {decoded, encoded, as_half}, {}, {.device = Device::cpu()}).run({codes, x});
    auto got = g.compile(feeds, {decoded, encoded, as_half}, {}, {.device = Device::cuda(0)}).run({codes, x});
    const std::string what = dtype_name(t);
    gputest::expect_close(got[0], want[0], 0, what + " decoded");
    expect_same_bytes(got[1], want[1], what + " encoded");
    gputest::expect_close(got[2], want[2], 0, what + " via bf16");
    // Saturation, as the host rounds: 464 and infinity become the largest finite value.
    EXPECT_EQ(want[1].at(3), 448.0);  // E4M3: saturated; E5M2: rounded down (spacing 64 there)
    EXPECT_EQ(want[1].at(16), t == f8e4m3 ? 448.0 : 57344.0);
  }
}

TEST(CudaFloat8, DataMovementKeepsTheBytes) {
  gputest::differential(
      "transpose / concat / reshape of f8e4m3",
      [](Graph& g, std::vector<Tensor>& x) {
        Tensor a = g.cast(x[0], f8e4m3), b = g.cast(x[1], f8e4m3);
        Tensor t = g.transpose(a, {1, 0});
        Tensor c = g.concat({a, b}, 0);
        return std::vector<Tensor>{g.cast(t, f32), g.cast(g.reshape(c, {-1}), f32)};
      },
      {TensorData::uniform(Shape{24, 40}, -300, 300, f32, 1), TensorData::uniform(Shape{8, 40}, -2, 2, f32, 2)}, 0);
}

// Hopper's FP8 tensor cores sum products with fewer bits than f32 (measured: errors up to about
// 2^-13 of the sum of |products|, against the CPU's f32 sum), so operands in [-1, 1] and scales
// up to 1 keep that sum near 16 and the tolerance near 3e-3: a wrong layout or scale is off by
// whole units.
TEST(CudaFloat8, ScaledMatmulRunsOnFp8KernelsInEveryLayout) {
  const long long before = detail::fp8_matmul_launches();
  for (DType out : {f32, bf16, f16})
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const int64_t m = 40, k = 64, n = 48;
      std::vector<TensorData> in = {TensorData::uniform(ta ? Shape{k, m} : Shape{m, k}, -1, 1, f32, 11),
                                    TensorData::uniform(tb ? Shape{n, k} : Shape{k, n}, -1, 1, f32, 12),
                                    TensorData::uniform(Shape{}, 0.5, 1, f32, 13), TensorData::uniform(Shape{1}, 0.5, 1, f32, 14)};
      const double tol = out == bf16 ? 1.2e-2 : 3e-3;
      gputest::differential(
          std::string("scaled_matmul ") + dtype_name(out) + (ta ? " ta" : "") + (tb ? " tb" : ""),
          [&](Graph& g, std::vector<Tensor>& x) {
            Tensor a = g.cast(x[0], f8e4m3), b = g.cast(x[1], layout == 3 ? f8e5m2 : f8e4m3);
            return std::vector<Tensor>{g.scaled_matmul(a, b, x[2], x[3], out, ta, tb)};
          },
          in, tol);
    }
  // Two runs of each of the 12 executables, captured once and replayed once: 12 launches
  // recorded into graphs plus the eager first runs.
  EXPECT_GE(detail::fp8_matmul_launches() - before, 12);
}

TEST(CudaFloat8, ScaledMatmulOfOtherShapesIsWidened) {
  const long long before = detail::fp8_matmul_launches();
  gputest::differential(
      "scaled_matmul k = 20",
      [](Graph& g, std::vector<Tensor>& x) {
        return std::vector<Tensor>{
            g.scaled_matmul(g.cast(x[0], f8e4m3), g.cast(x[1], f8e4m3), x[2], x[3], f32, false, true)};
      },
      {TensorData::uniform(Shape{5, 20}, -3, 3, f32, 21), TensorData::uniform(Shape{7, 20}, -3, 3, f32, 22),
       TensorData::uniform(Shape{}, 0.5, 2, f32, 23), TensorData::uniform(Shape{}, 0.5, 2, f32, 24)},
      1e-5);
  EXPECT_EQ(detail::fp8_matmul_launches(), before);
}
