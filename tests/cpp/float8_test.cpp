// The 8-bit floats f8e4m3 / f8e5m2: the host conversions against a brute-force nearest-code
// search, casts and data movement in compiled graphs, arithmetic refused with the op and
// shapes named, scaled_matmul against a double reference in every layout and result dtype,
// its errors, and an executable holding 8-bit constants saved and loaded.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "core/float8.h"
#include "tgraph/tgraph.h"

using namespace tg;
using tg::detail::float8_format;
using tg::detail::float8_to_float;
using tg::detail::float_to_float8;

namespace {

// The code nearest to x among the finite codes (ties to the even code), saturating beyond the
// largest: what rounding to nearest even with saturation means, searched by brute force.
uint8_t nearest_code(float x, DType t) {
  const auto& f = float8_format(t);
  if (std::isnan(x)) return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | f.nan);
  double best = INFINITY;
  int code = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = float8_to_float(static_cast<uint8_t>(c), f);
    if (!std::isfinite(v) || std::signbit(v) != std::signbit(x)) continue;
    const double d = std::fabs(static_cast<double>(v) - std::min<double>(std::fabs(x), f.max) * (x < 0 ? -1 : 1));
    if (d < best || (d == best && (c & 1) == 0)) best = d, code = c;
  }
  return static_cast<uint8_t>(code);
}

std::vector<std::pair<Tensor, TensorType>> feeds_of(const std::vector<Tensor>& ph) {
  std::vector<std::pair<Tensor, TensorType>> f;
  for (const Tensor& t : ph) f.emplace_back(t, t.type());
  return f;
}

}  // namespace

TEST(Float8, KnownValues) {
  const auto &e4 = detail::kE4M3, &e5 = detail::kE5M2;
  EXPECT_EQ(float_to_float8(448.f, e4), 0x7e);
  EXPECT_EQ(float_to_float8(1e9f, e4), 0x7e);  // saturated
  EXPECT_EQ(float_to_float8(-INFINITY, e4), 0xfe);
  EXPECT_EQ(float_to_float8(1.0f, e4), 0x38);
  EXPECT_EQ(float_to_float8(1.0625f, e4), 0x38);  // tie: to the even code
  EXPECT_EQ(float_to_float8(1.1875f, e4), 0x3a);
  EXPECT_EQ(float_to_float8(std::ldexp(1.f, -9), e4), 0x01);  // the smallest subnormal
  EXPECT_EQ(float_to_float8(std::ldexp(1.f, -10), e4), 0x00);  // tie with 0
  EXPECT_EQ(float_to_float8(57344.f, e5), 0x7b);
  EXPECT_EQ(float_to_float8(INFINITY, e5), 0x7b);
  EXPECT_TRUE(std::isnan(float8_to_float(0x7f, e4)));
  EXPECT_EQ(float8_to_float(0x7e, e4), 448.f);
  EXPECT_TRUE(std::isinf(float8_to_float(0x7c, e5)));
  EXPECT_TRUE(std::isnan(float8_to_float(0x7d, e5)));
  EXPECT_EQ(float8_to_float(0x01, e5), std::ldexp(1.f, -16));
  EXPECT_TRUE(std::signbit(float8_to_float(0x80, e4)));
}

TEST(Float8, EveryCodeRoundTripsAndRandomFloatsRoundToTheNearestCode) {
  for (DType t : {f8e4m3, f8e5m2}) {
    const auto& f = float8_format(t);
    for (int c = 0; c < 256; ++c) {
      const float v = float8_to_float(static_cast<uint8_t>(c), f);
      if (std::isnan(v) || std::isinf(v)) continue;
      EXPECT_EQ(float_to_float8(v, f), c) << dtype_name(t) << " code " << c;
    }
    std::mt19937 rng(3);
    for (int i = 0; i < 20000; ++i) {
      // Log-uniform magnitudes from below the subnormals to past the largest value.
      const float mag = std::exp2(std::uniform_real_distribution<float>(-20, 17)(rng));
      const float x = (rng() & 1) ? -mag : mag;
      ASSERT_EQ(float_to_float8(x, f), nearest_code(x, t)) << dtype_name(t) << " " << x;
    }
  }
}

TEST(Float8, CastsAndDataMovementInCompiledGraphs) {
  Graph g;
  Tensor x = g.placeholder(Shape{6, 5}, f32, "x");
  Tensor q = g.cast(x, f8e4m3);
  Tensor moved = g.concat({g.transpose(q, {1, 0}), g.reshape(q, {5, 6})}, 0);
  Tensor back = g.cast(moved, f32);
  Tensor e5 = g.cast(g.cast(x, f8e5m2), bf16);
  TensorData xv = TensorData::uniform(Shape{6, 5}, -500, 500, f32, 5);
  auto out = g.compile(feeds_of({x}), {back, e5, q}).run({xv});
  ASSERT_EQ(out[2].dtype(), f8e4m3);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      const float want = float8_to_float(float_to_float8(static_cast<float>(xv.at(i * 5 + j)), detail::kE4M3),
                                         detail::kE4M3);
      EXPECT_EQ(out[0].at(j * 6 + i), want);          // transposed
      EXPECT_EQ(out[0].at(30 + i * 5 + j), want);     // reshaped, after it
      EXPECT_EQ(out[2].at(i * 5 + j), want);
      EXPECT_EQ(out[1].at(i * 5 + j),
                float8_to_float(float_to_float8(static_cast<float>(xv.at(i * 5 + j)), detail::kE5M2), detail::kE5M2));
    }
}

TEST(Float8, ArithmeticIsRefusedNamingTheOpAndShapes) {
  Graph g;
  Tensor a = g.cast(g.placeholder(Shape{2, 3}, f32, "a"), f8e4m3);
  try {
    g.add(a, a);
    FAIL() << "add took f8e4m3";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[add]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2,3] f8e4m3"), std::string::npos) << m;
    EXPECT_NE(m.find("cast to f16, bf16 or f32"), std::string::npos) << m;
  }
  EXPECT_THROW(g.matmul(a, g.transpose(a, {1, 0})), Error);
  EXPECT_THROW(g.reduce_sum(a, {0}), Error);
}

TEST(Float8, ScaledMatmulMatchesADoubleReference) {
  const int64_t m = 7, k = 32, n = 9;
  for (DType out : {f32, bf16, f16})
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const DType tb8 = layout == 2 ? f8e5m2 : f8e4m3;
      Graph g;
      Tensor a = g.placeholder(ta ? Shape{k, m} : Shape{m, k}, f32, "a");
      Tensor b = g.placeholder(tb ? Shape{n, k} : Shape{k, n}, f32, "b");
      Tensor sa = g.placeholder(Shape{}, f32, "sa"), sb = g.placeholder(Shape{1}, f32, "sb");
      Tensor y = g.scaled_matmul(g.cast(a, f8e4m3), g.cast(b, tb8), sa, sb, out, ta, tb);
      ASSERT_EQ(y.shape(), Shape({m, n}));
      ASSERT_EQ(y.dtype(), out);
      std::vector<TensorData> in = {TensorData::uniform(a.shape(), -4, 4, f32, 1), TensorData::uniform(b.shape(), -4, 4, f32, 2),
                                    TensorData::scalar(0.75, f32), TensorData::full(Shape{1}, 1.5, f32)};
      auto got = g.compile(feeds_of({a, b, sa, sb}), {y}).run(in)[0];
      const auto &fa = detail::kE4M3, &fb = float8_format(tb8);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double av = float8_to_float(float_to_float8(static_cast<float>(in[0].at(ta ? p * m + i : i * k + p)), fa), fa);
            const double bv = float8_to_float(float_to_float8(static_cast<float>(in[1].at(tb ? j * k + p : p * n + j)), fb), fb);
            acc += av * bv;
          }
          const double want = 0.75 * 1.5 * acc;
          const double tol = out == f32 ? 1e-5 : out == f16 ? 1e-3 : 8e-3;
          ASSERT_NEAR(got.at(i * n + j), want, tol * (1 + std::fabs(want)))
              << dtype_name(out) << " layout " << layout << " at " << i << "," << j;
        }
    }
}

TEST(Float8, ScaledMatmulErrorsNameTheOperands) {
  Graph g;
  Tensor a4 = g.cast(g.placeholder(Shape{4, 16}, f32, "a"), f8e4m3);
  Tensor b5 = g.cast(g.placeholder(Shape{16, 8}, f32, "b"), f8e5m2);
  Tensor a5 = g.cast(g.placeholder(Shape{4, 16}, f32, "c"), f8e5m2);
  Tensor s = g.placeholder(Shape{}, f32, "s"), v = g.placeholder(Shape{4}, f32, "v");
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { g.scaled_matmul(a5, b5, s, s); }).find("f8e5m2 times f8e5m2"), std::string::npos);
  EXPECT_NE(message([&] { g.scaled_matmul(a4, b5, v, s); }).find("scales must be f32 with one element"),
            std::string::npos);
  EXPECT_NE(message([&] { g.scaled_matmul(a4, b5, s, s, i32); }).find("f32, f16 or bf16"), std::string::npos);
  EXPECT_NE(message([&] { g.scaled_matmul(a4, b5, s, s, f32, true); }).find("inner dimensions differ"),
            std::string::npos);
  EXPECT_NE(message([&] { g.scaled_matmul(g.cast(a4, f32), b5, s, s); }).find("must be 8-bit floats"),
            std::string::npos);
  EXPECT_NE(message([&] { g.scaled_matmul(g.reshape(a4, {1, 4, 16}), b5, s, s); }).find("rank 2"), std::string::npos);
}

TEST(Float8, ExecutablesWithEightBitConstantsSaveAndLoad) {
  Graph g;
  Tensor x = g.placeholder(Shape{3, 16}, f32, "x");
  TensorData w = TensorData::uniform(Shape{4, 16}, -2, 2, f32, 9).cast(f8e4m3);
  Tensor y = g.scaled_matmul(g.cast(x, f8e4m3), g.constant(w), g.scalar(2.0, f32), g.scalar(0.5, f32), f32, false, true);
  Executable e = g.compile(feeds_of({x}), {y});
  const auto path = std::filesystem::temp_directory_path() / "tgraph_float8_test.tgx";
  e.save(path.string());
  Executable loaded = Executable::load(path.string());
  std::filesystem::remove(path);
  TensorData xv = TensorData::uniform(Shape{3, 16}, -3, 3, f32, 10);
  auto a = e.run({xv})[0], b = loaded.run({xv})[0];
  for (int64_t i = 0; i < a.num_elements(); ++i) EXPECT_EQ(a.at(i), b.at(i));
  EXPECT_NE(a.at(0), 0.0);
}
