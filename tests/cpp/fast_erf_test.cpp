// fast_erf.h's erf without libm, against std::erf: a sweep of floats over the whole range (every
// 997th bit pattern, both signs), the edges between its pieces, specials, and the GELU loop.
#include "backends/cpu/fast_erf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "test_util.h"

namespace {

using tg::detail::fast::erf_f32;
using tg::detail::fast::erf_fast;
using tg::detail::fast::gelu_f32;

TEST(FastErf, MatchesStdErfRoundedToFloat) {
  std::vector<float> x;
  for (uint32_t b = 0; b < 0x7f800000u; b += 997) {
    x.push_back(float_from_bits(b));
    x.push_back(float_from_bits(b | 0x80000000u));
  }
  for (double e : {1.25, 5.0, 3.125}) {  // the pieces' edges, and a float either side
    x.push_back(static_cast<float>(e));
    x.push_back(std::nextafter(static_cast<float>(e), 0.f));
    x.push_back(std::nextafter(static_cast<float>(e), 10.f));
  }
  std::vector<float> y(x.size());
  erf_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  size_t off_by_one = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(std::erf(static_cast<double>(x[i])));
    ASSERT_EQ(y[i], static_cast<float>(erf_fast(x[i]))) << "the loop and the scalar form differ at " << x[i];
    ASSERT_NEAR(erf_fast(x[i]), std::erf(static_cast<double>(x[i])), 2e-12) << x[i];
    if (y[i] != want) {
      ++off_by_one;
      ASSERT_EQ(std::abs(float_bits(y[i]) - float_bits(want)), 1) << x[i];
    }
  }
  EXPECT_LE(off_by_one, x.size() / 100000) << "of " << x.size();  // 4 in 10^8 over all floats
}

TEST(FastErf, Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{0.f, -0.f, inf, -inf, std::nanf(""), 1e-45f, -1e-45f, 30.f, -30.f};
  std::vector<float> y(x.size());
  erf_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(float_bits(y[0]), float_bits(0.f));
  EXPECT_EQ(float_bits(y[1]), float_bits(-0.f));
  EXPECT_EQ(y[2], 1.f);
  EXPECT_EQ(y[3], -1.f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], static_cast<float>(std::erf(1e-45)));
  EXPECT_EQ(y[6], static_cast<float>(std::erf(-1e-45)));
  EXPECT_EQ(y[7], 1.f);
  EXPECT_EQ(y[8], -1.f);
}

// erfc keeps its relative accuracy into the tail (where GELU of negative inputs lives).
TEST(FastErf, ErfcIsRelativelyAccurate) {
  for (double a = 0; a < 9.5; a += 1.0 / 1024) {
    const double want = std::erfc(a);
    ASSERT_NEAR(tg::detail::fast::erf_pair(a).erfc, want, 1e-12 * want) << a;
  }
  EXPECT_EQ(tg::detail::fast::erf_pair(9.5).erfc, 0.0);
  EXPECT_EQ(tg::detail::fast::erf_pair(20.0).erf, 1.0);
}

// The exact GELU, 0.5 x (1 + erf(x / sqrt 2)), against that formula in double with erfc for
// negative x (so the tail is exact, not cancelled): within 1 ulp; against the plain formula
// (the reference op's) within 1e-15 absolute.
TEST(FastErf, GeluMatchesTheDoubleFormula) {
  std::vector<float> x;
  for (int i = -260000; i <= 200000; ++i) x.push_back(static_cast<float>(i * 5e-5 * (1 + (i % 7) * 0.15)));
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  std::vector<float> y(x.size());
  gelu_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  size_t off = 0;
  for (size_t i = 0; i + 2 < x.size(); ++i) {
    const double v = x[i], r2 = std::sqrt(2.0);
    const float want = static_cast<float>(0.5 * v * (v < 0 ? std::erfc(-v / r2) : 1.0 + std::erf(v / r2)));
    if (y[i] != want) {
      ++off;
      ASSERT_LE(std::abs(float_bits(y[i]) - float_bits(want)), 1) << x[i];
    }
    ASSERT_NEAR(y[i], 0.5 * v * (1.0 + std::erf(v / r2)), 1e-15 + 1e-7 * std::abs(v)) << x[i];
  }
  EXPECT_LE(off, x.size() / 100000);
  EXPECT_EQ(y[y.size() - 2], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y.back()));  // -inf * (1 + -1) = -inf * 0, as the formula gives
}

}  // namespace
