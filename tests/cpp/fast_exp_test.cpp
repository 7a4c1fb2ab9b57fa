// fast_exp.h's e^x, tanh, sigmoid and SiLU without libm, against the reference's formulas
// (std:: functions in double, rounded to f32): a sweep of floats over the whole range (every
// 997th bit pattern, both signs), the edge between tanh's pieces, and specials. A result may
// differ from the reference's only by one ulp, and only rarely (values within 1e-15 of a
// rounding boundary).
#include "backends/cpu/fast_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "test_util.h"

#include "ops/elementwise_formulas.h"

namespace {

namespace fast = tg::detail::fast;

std::vector<float> sweep() {
  std::vector<float> x;
  for (uint32_t b = 0; b < 0x7f800000u; b += 997) {
    x.push_back(float_from_bits(b));
    x.push_back(float_from_bits(b | 0x80000000u));
  }
  for (float e : {0.125f, 88.72f, 88.73f, 103.97f, 87.3f, 709.0f, 700.0f, 20.0f, 1e-30f}) {
    for (float s : {1.f, -1.f}) {
      x.push_back(s * e);
      x.push_back(std::nextafter(s * e, 0.f));
      x.push_back(std::nextafter(s * e, s * 1000.f));
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.f, -0.f, inf, -inf, std::numeric_limits<float>::denorm_min()}) x.push_back(v);
  return x;
}

// Runs the loop over the sweep and compares with ref (double) rounded to float.
template <class Ref>
void check(void (*f32)(const float*, float*, int64_t), Ref ref, const char* name) {
  SCOPED_TRACE(name);
  std::vector<float> x = sweep();
  std::vector<float> y(x.size());
  f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  size_t off_by_one = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(ref(static_cast<double>(x[i])));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(y[i])) << x[i];
      continue;
    }
    if (y[i] == want) continue;
    ++off_by_one;
    ASSERT_TRUE(std::isfinite(want) && std::isfinite(y[i])) << x[i] << ": " << y[i] << " vs " << want;
    ASSERT_EQ(std::abs(float_bits(y[i]) - float_bits(want)), 1) << x[i] << ": " << y[i] << " vs " << want;
  }
  EXPECT_LE(off_by_one, 4u) << "of " << x.size();
  float nan = std::numeric_limits<float>::quiet_NaN(), out = 0;
  f32(&nan, &out, 1);
  EXPECT_TRUE(std::isnan(out));
}

TEST(FastExp, ExpMatchesStdExp) {
  check(fast::exp_f32, [](double v) { return std::exp(v); }, "exp");
}

TEST(FastExp, TanhMatchesStdTanh) {
  check(fast::tanh_f32, [](double v) { return std::tanh(v); }, "tanh");
  float x[] = {-0.f, 1e-40f}, y[2];
  fast::tanh_f32(x, y, 2);
  EXPECT_TRUE(std::signbit(y[0]));  // tanh(-0) = -0
  EXPECT_EQ(y[1], 1e-40f);          // denormals pass through
}

TEST(FastExp, SigmoidAndSiluMatchTheReference) {
  check(fast::sigmoid_f32, [](double v) { return tg::detail::sigmoid(v); }, "sigmoid");
  check(fast::silu_f32, [](double v) { return v * tg::detail::sigmoid(v); }, "silu");
}


TEST(FastExp, GeluTanhAndItsGradientMatchTheReference) {
  check(fast::gelu_tanh_f32, [](double v) { return tg::detail::gelu_tanh(v); }, "gelu_tanh");
  // the stable form is the textbook one where that does not cancel, and stays accurate where it does
  for (double v : {-0.5, 0.3, 2.0, 4.0}) {
    const double k = std::sqrt(2.0 / M_PI);
    EXPECT_NEAR(tg::detail::gelu_tanh(v), 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))), 1e-15);
  }
  EXPECT_NEAR(tg::detail::gelu_tanh(-6.0) / (-6.0 * std::exp(-2.0 * 0.7978845608028654 * (6.0 + 0.044715 * 216.0))),
              1.0, 1e-6);  // x sigmoid(2u) ~ x e^(2u) far left, where 1 + tanh(u) would be all rounding
  // the gradient on random pairs (dy, x) of moderate size
  std::vector<float> dy(100000), x(100000), y(100000);
  uint32_t s = 12345;
  auto next = [&] { s = s * 1664525u + 1013904223u; return static_cast<float>(s >> 8) / 16777216.0f; };
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = (next() - 0.5f) * 16.0f;
    dy[i] = (next() - 0.5f) * 4.0f;
  }
  fast::gelu_tanh_grad_f32(dy.data(), x.data(), y.data(), static_cast<int64_t>(x.size()));
  size_t off = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = static_cast<float>(dy[i] * tg::detail::gelu_tanh_derivative(x[i]));
    if (y[i] == want) continue;
    ++off;
    ASSERT_EQ(std::abs(float_bits(y[i]) - float_bits(want)), 1) << x[i] << " " << dy[i];
  }
  EXPECT_LE(off, 2u);
}

}  // namespace
