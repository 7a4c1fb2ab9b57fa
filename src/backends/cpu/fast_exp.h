#pragma once
// e^x, tanh, sigmoid and SiLU in double that loops vectorise (no libm call, no branch: both
// pieces computed, one selected), for the f32 kernels, as fast_erf.h does for erf. Errors stay
// far under half a float ulp (below 1e-15 relative), so rounded results are the reference's
// (std:: functions in double, rounded once) but for values within that of a rounding boundary
// (tests/cpp/fast_exp_test.cpp counts them).
//   e^y:     y clamped to [-700, 709] (beyond, e^y is 0 or inf in float alike); y = k ln2 + r,
//            |r| <= ln2/2, ln2 in two parts (k ln2_hi exact); e^r by its Taylor series to
//            r^12 (truncation below 2e-16); 2^k from exponent bits (fast_exp2.h). NaN stays NaN;
//            below -745.2 the result is 0 and above 709.8 inf, exactly, as std::exp's.
//   sigmoid: 1 / (1 + e^-|x|), or e^-|x| / (1 + e^-|x|) for x < 0, the reference's formulas.
//   tanh:    |x| < 0.125: its odd Taylor series to x^15 (no cancellation near 0); else
//            (1 - e) / (1 + e) with e = e^(-2|x|); the sign of x.
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/fast_exp2.h"

namespace tg::detail::fast {

// (fast_erf.h keeps its own e^(-a^2): its argument is bounded, so it needs neither the clamps
// nor the r^12 term, and GELU is 20% faster without them.)
[[gnu::always_inline]] inline double exp_fast(double y) {
  const double c = y < -700.0 ? -700.0 : y > 709.0 ? 709.0 : y;
  const double k = round_nearest(c * 1.4426950408889634);
  const double r = (c - k * 0.6931471803691238) - k * 1.9082149292705877e-10;
  double p = 1.0 / 479001600;
  p = std::fma(p, r, 1.0 / 39916800);
  p = std::fma(p, r, 1.0 / 3628800);
  p = std::fma(p, r, 1.0 / 362880);
  p = std::fma(p, r, 1.0 / 40320);
  p = std::fma(p, r, 1.0 / 5040);
  p = std::fma(p, r, 1.0 / 720);
  p = std::fma(p, r, 1.0 / 120);
  p = std::fma(p, r, 1.0 / 24);
  p = std::fma(p, r, 1.0 / 6);
  p = std::fma(p, r, 0.5);
  p = std::fma(p, r, 1.0);
  p = std::fma(p, r, 1.0);
  // exactly 0 and inf past the double range (so -inf * e^-inf is NaN, as with std::exp)
  return y < -745.2 ? 0.0 : y > 709.8 ? std::numeric_limits<double>::infinity() : p * pow2i(k);
}

[[gnu::always_inline]] inline double sigmoid_fast(double x) {
  const double e = exp_fast(-std::fabs(x));
  const double s = 1.0 / (1.0 + e);
  return x >= 0 ? s : e * s;
}

[[gnu::always_inline]] inline double tanh_fast(double x) {
  const double t = std::fabs(x), t2 = t * t;
  double p = -929569.0 / 638512875.0;  // the Taylor coefficients of x^15 .. x, highest first
  p = std::fma(p, t2, 21844.0 / 6081075.0);
  p = std::fma(p, t2, -1382.0 / 155925.0);
  p = std::fma(p, t2, 62.0 / 2835.0);
  p = std::fma(p, t2, -17.0 / 315.0);
  p = std::fma(p, t2, 2.0 / 15.0);
  p = std::fma(p, t2, -1.0 / 3.0);
  p = std::fma(p, t2, 1.0);
  const double small = t * p;
  const double e = exp_fast(-2.0 * t);
  const double large = (1.0 - e) / (1.0 + e);
  return std::copysign(t < 0.125 ? small : large, x);
}

/// gelu_tanh(x) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): ops/elementwise_formulas.h's formula.
[[gnu::always_inline]] inline double gelu_tanh_fast(double x) {
  const double k = 0.7978845608028654;  // sqrt(2 / pi), as the reference's std::sqrt gives it
  return x * sigmoid_fast(2.0 * (k * (x + 0.044715 * x * x * x)));
}

/// dy * d/dx gelu_tanh(x): ops/elementwise_formulas.h's gelu_tanh_derivative with sigmoid_fast.
[[gnu::always_inline]] inline double gelu_tanh_grad_fast(double dy, double x) {
  const double k = 0.7978845608028654, c = 0.044715;
  const double u = k * (x + c * x * x * x);
  const double s = sigmoid_fast(2.0 * u), sn = sigmoid_fast(-2.0 * u);
  return dy * (s + 2.0 * x * s * sn * k * (1.0 + 3.0 * c * x * x));
}

/// y[i] = e^x[i], rounded to f32 (fast_exp.cpp: vectorised clones).
void exp_f32(const float* x, float* y, int64_t n);
/// y[i] = tanh(x[i]).
void tanh_f32(const float* x, float* y, int64_t n);
/// y[i] = 1 / (1 + e^-x[i]).
void sigmoid_f32(const float* x, float* y, int64_t n);
/// y[i] = x[i] * sigmoid(x[i]) (SiLU / swish).
void silu_f32(const float* x, float* y, int64_t n);
/// y[i] = gelu_tanh(x[i]).
void gelu_tanh_f32(const float* x, float* y, int64_t n);
/// y[i] = dy[i] * gelu_tanh'(x[i]).
void gelu_tanh_grad_f32(const float* dy, const float* x, float* y, int64_t n);

}  // namespace tg::detail::fast
