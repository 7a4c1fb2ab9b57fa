#pragma once
// erf and erfc in double that loops vectorise (no libm call, no branch: the pieces are all
// computed and one is selected), for the f32 kernels. Errors stay far under half a float ulp:
// below 1e-13 absolute for erf, 3e-13 relative for erfc, so rounded results are std::erf's but
// for values within that of a rounding boundary (4 floats in 10^8: tests/cpp/fast_erf_test.cpp).
// Coefficients are least-squares fits on Chebyshev nodes, made for this file:
//   a = |x| < 1.25:    erf(a) = a * A(a^2), A of degree 10 with A(0) = 2 / sqrt(pi) (relative
//                      error below 1e-13 down to the smallest floats); erfc = 1 - erf;
//   1.25 <= a < 9.5:   erfc(a) = e^(-a^2) * B(u), u = 1/a mapped onto [-1, 1], B of degree 17
//                      fitting erfc(a) e^(a^2), which is smooth in 1/a; erf = 1 - erfc;
//   a >= 9.5:          erfc = 0 (below 1e-40), erf = 1.
// erfc keeps its relative accuracy in the tail, which GELU needs for negative inputs
// (0.5 x erfc(-x / sqrt 2): 1 + erf there would cancel). e^(-a^2) is 2^k e^r, |r| <= ln2 / 2:
// e^r by its Taylor series to r^11, 2^k from exponent bits (fast_exp2.h). Polynomials are evaluated
// with std::fma (exactly rounded: every vector clone and the scalar path agree bit for bit).
// Loops over these vectorise only without trapping math (GCC will not evaluate every piece
// otherwise) and with FMA instructions; erf_f32 / gelu_f32 (fast_erf.cpp) are such loops.
#include <cmath>
#include <cstdint>

#include "backends/cpu/fast_exp2.h"

namespace tg::detail::fast {

[[gnu::always_inline]] inline double exp_neg_square(double a) {  // e^(-a^2) for 0 <= a <= 9.5
  const double y = -a * a;
  const double k = round_nearest(y * 1.4426950408889634);
  const double r = (y - k * 0.6931471803691238) - k * 1.9082149292705877e-10;  // ln2 in two parts
  double p = 1.0 / 39916800;
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
  return p * pow2i(k);
}

// erf(a) and erfc(a) for a >= 0 (or NaN).
struct ErfPair {
  double erf, erfc;
};
[[gnu::always_inline]] inline ErfPair erf_pair(double a) {
  const double t = a * a;
  double pa = 7.364545195898131e-09;
  pa = std::fma(pa, t, -1.3947125800800597e-07);
  pa = std::fma(pa, t, 1.5989335278368544e-06);
  pa = std::fma(pa, t, -1.4866852540661862e-05);
  pa = std::fma(pa, t, 0.00012050588130651033);
  pa = std::fma(pa, t, -0.0008548080570356768);
  pa = std::fma(pa, t, 0.005223969681579979);
  pa = std::fma(pa, t, -0.026866169173282363);
  pa = std::fma(pa, t, 0.11283791657498513);
  pa = std::fma(pa, t, -0.37612638902762463);
  pa = std::fma(pa, t, 1.1283791670955126);  // 2 / sqrt(pi): the exact slope at 0
  const double small = a * pa;
  const double ac = a < 1.25 ? 1.25 : a < 9.5 ? a : 9.5;  // keeps u in [-1, 1]
  const double u = (2.0 / ac - 0.9052631578947369) * 1.4393939393939392;
  double pb = 1.869944423263381e-08;
  pb = std::fma(pb, u, -2.575033129491699e-08);
  pb = std::fma(pb, u, -6.177367764465673e-08);
  pb = std::fma(pb, u, 1.6757930328090086e-07);
  pb = std::fma(pb, u, -2.279764188496097e-07);
  pb = std::fma(pb, u, 2.955368011135105e-07);
  pb = std::fma(pb, u, 1.7727319914050478e-07);
  pb = std::fma(pb, u, -2.757200492367163e-06);
  pb = std::fma(pb, u, 9.41708328515206e-06);
  pb = std::fma(pb, u, -1.8505474294053552e-05);
  pb = std::fma(pb, u, 7.589955421040496e-06);
  pb = std::fma(pb, u, 0.00011088815051532457);
  pb = std::fma(pb, u, -0.0005340110800502523);
  pb = std::fma(pb, u, 0.0012732615997512972);
  pb = std::fma(pb, u, 0.00035680089994728764);
  pb = std::fma(pb, u, -0.022661721741896755);
  pb = std::fma(pb, u, 0.15453941596880275);
  pb = std::fma(pb, u, 0.2347421947031631);
  const double tail = exp_neg_square(ac) * pb;  // erfc where 1.25 <= a < 9.5
  const bool lo = a < 1.25, hi = a >= 9.5;
  return {lo ? small : hi ? 1.0 : 1.0 - tail, lo ? 1.0 - small : hi ? 0.0 : tail};
}

[[gnu::always_inline]] inline double erf_fast(double x) {
  const double m = erf_pair(x < 0 ? -x : x).erf;
  const double r = x < 0 ? -m : m;
  return x != x ? x : r;
}

// 0.5 x (1 + erf(x / sqrt 2)), through erfc where x < 0.
[[gnu::always_inline]] inline double gelu_fast(double x) {
  const double a = (x < 0 ? -x : x) / 1.4142135623730951;
  const ErfPair p = erf_pair(a);
  return 0.5 * x * (x < 0 ? p.erfc : 1.0 + p.erf);
}

/// y[i] = erf(x[i]), rounded to f32 (fast_erf.cpp: vectorised clones).
void erf_f32(const float* x, float* y, int64_t n);
/// y[i] = 0.5 x (1 + erf(x / sqrt 2)), the exact GELU, rounded to f32.
void gelu_f32(const float* x, float* y, int64_t n);

}  // namespace tg::detail::fast
