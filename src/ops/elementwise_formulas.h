#pragma once
// The definition of each float elementwise op, in double (issue 23: each formula once). The
// reference interpreter computes every float op with these, and the fused CPU loops that compute
// in double and round once call the same functions, so the two agree bit for bit by
// construction. The fast f32 kernels and CUDA's generated code are held to them by tests
// (fast_cpu_test, op sweeps on the GPU).
//
// One X-macro line per op: X(kind, expression in x [and y], with a = alpha, b = beta of the op's
// ScalarDesc where it has one). A new float elementwise op adds its line here.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/op_def.h"

namespace tg::detail {

/// 1 / (1 + e^-x), without overflow for large |x|.
inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

/// gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written x sigmoid(2u)
/// (the same function): 1 + tanh(u) cancels for negative x, sigmoid(2u) does not.
inline double gelu_tanh(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x * sigmoid(2.0 * u);
}

/// d/dx gelu_tanh(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u), written with s = sigmoid(2u)
/// and its mirror sigmoid(-2u) (0.5 (1 + t) = s, 1 - t^2 = 4 s sigmoid(-2u)): no cancellation.
inline double gelu_tanh_derivative(double x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const double u = k * (x + c * x * x * x);
  const double s = sigmoid(2.0 * u), sn = sigmoid(-2.0 * u);
  return s + 2.0 * x * s * sn * k * (1.0 + 3.0 * c * x * x);
}

namespace formula {

inline double sign(double x) { return std::isnan(x) ? x : (x > 0) - (x < 0); }
inline double softplus(double x) { return std::isnan(x) ? x : std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
inline double hard_sigmoid(double x, double a, double b) {
  const double v = a * x + b;
  return std::isnan(v) ? v : std::max(0.0, std::min(1.0, v));
}
inline double floor_mod(double x, double y) {
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return r == 0 ? std::copysign(0.0, y) : r;
}
inline double nan_min(double x, double y) {
  return std::isnan(x) || std::isnan(y) ? std::numeric_limits<double>::quiet_NaN() : std::min(x, y);
}
inline double nan_max(double x, double y) {
  return std::isnan(x) || std::isnan(y) ? std::numeric_limits<double>::quiet_NaN() : std::max(x, y);
}

}  // namespace formula

// clang-format off
#define TG_UNARY_FLOAT_FORMULAS(X)                                                             \
  X(Identity, x) X(StopGradient, x) X(Neg, -x) X(Abs, std::fabs(x)) X(Sign, formula::sign(x))  \
  X(Square, x * x) X(Relu, x < 0 ? 0.0 : x) /* NaN stays NaN */                                \
  X(Exp, std::exp(x)) X(Exp2, std::exp2(x)) X(Log, std::log(x)) X(Log2, std::log2(x))          \
  X(Log1p, std::log1p(x)) X(Expm1, std::expm1(x)) X(Sqrt, std::sqrt(x))                        \
  X(Rsqrt, 1.0 / std::sqrt(x)) X(Reciprocal, 1.0 / x)                                          \
  X(Sin, std::sin(x)) X(Cos, std::cos(x)) X(Tan, std::tan(x)) X(Sinh, std::sinh(x))            \
  X(Cosh, std::cosh(x)) X(Tanh, std::tanh(x)) X(Asin, std::asin(x)) X(Acos, std::acos(x))      \
  X(Atan, std::atan(x)) X(Asinh, std::asinh(x)) X(Acosh, std::acosh(x)) X(Atanh, std::atanh(x)) \
  X(Erf, std::erf(x)) X(Floor, std::floor(x)) X(Ceil, std::ceil(x))                            \
  X(Round, std::round(x)) /* half away from zero */ X(Rint, std::nearbyint(x)) /* half to even */ \
  X(Trunc, std::trunc(x)) X(Sigmoid, sigmoid(x))                                               \
  X(LeakyRelu, x < 0 ? a * x : x) X(Elu, x < 0 ? a * std::expm1(x) : x)                        \
  X(Gelu, 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)))) X(GeluTanh, gelu_tanh(x))           \
  X(Silu, x * sigmoid(x)) X(Softplus, formula::softplus(x))                                    \
  X(HardSigmoid, formula::hard_sigmoid(x, a, b))

#define TG_BINARY_FLOAT_FORMULAS(X)                                                            \
  X(Add, x + y) X(Sub, x - y) X(Mul, x * y) X(Div, x / y) X(DivNoNan, y == 0 ? 0.0 : x / y)     \
  X(Mod, std::fmod(x, y)) X(FloorMod, formula::floor_mod(x, y)) X(Pow, std::pow(x, y))        \
  X(Minimum, std::fmin(x, y)) X(Maximum, std::fmax(x, y))                                      \
  X(MinimumNan, formula::nan_min(x, y)) X(MaximumNan, formula::nan_max(x, y))                  \
  X(Atan2, std::atan2(x, y)) X(GeluTanhGrad, x * gelu_tanh_derivative(y))                      \
  X(ReluGrad, y > 0 ? x : 0.0)
// clang-format on

/// Op K of one float operand (a, b: its ScalarDesc's alpha and beta, else unused).
template <OpKind K>
inline double unary_formula(double x, [[maybe_unused]] double a, [[maybe_unused]] double b) {
#define TG_X(kind, expr) if constexpr (K == OpKind::kind) return (expr); else
  TG_UNARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
  static_assert(K != K, "not a unary float op");
}

/// Op K of two float operands.
template <OpKind K>
inline double binary_formula(double x, double y) {
#define TG_X(kind, expr) if constexpr (K == OpKind::kind) return (expr); else
  TG_BINARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
  static_assert(K != K, "not a binary float op");
}

/// Sets `out` to op k of x; false when k is not a unary float op.
inline bool unary_formula(OpKind k, double x, double a, double b, double& out) {
  switch (k) {
#define TG_X(kind, expr) case OpKind::kind: out = unary_formula<OpKind::kind>(x, a, b); return true;
    TG_UNARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
    default: return false;
  }
}

/// Sets `out` to op k of x and y; false when k is not a binary float op.
inline bool binary_formula(OpKind k, double x, double y, double& out) {
  switch (k) {
#define TG_X(kind, expr) case OpKind::kind: out = binary_formula<OpKind::kind>(x, y); return true;
    TG_BINARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
    default: return false;
  }
}

}  // namespace tg::detail
