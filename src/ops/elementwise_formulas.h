#pragma once
// The definition of each float elementwise op, written once (issue 23) and generic in its
// compute type T. The reference interpreter computes every float op with these in double, the
// fused CPU loops that compute in double and round once call the same functions (the two agree
// bit for bit by construction), and CUDA's generated kernels compute the same text in their
// compute type: elementwise_codegen.cpp stringifies each X-macro expression (x, y the operands,
// a, b the op's ScalarDesc alpha and beta, T the compute type) and the helpers below into the
// NVRTC source. The fast f32 CPU kernels compute the ops exact in f32 with these in float
// (fast_elementwise.cpp); their transcendental ones (libm-free, vectorised) are held to them by
// tests (fast_cpu_test).
//
// One X-macro line per op: X(kind, expression). The expressions may call the tg_* helpers and
// the C math functions by their unqualified names (exp, log1p, fabs, ...: std:: overloads on the
// host, CUDA's on the device); constants are written T(c) so a float kernel stays in float. A
// new float elementwise op adds its line here.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/op_def.h"

// The helpers the expressions call, as one macro so the same text is compiled here (TG_FN =
// inline) and stringified into the NVRTC prelude (TG_FN = __device__ __forceinline__).
// clang-format off
#define TG_FORMULA_HELPERS                                                                      \
  /* 1 / (1 + e^-x), without overflow for large |x|. */                                        \
  template <class T> TG_FN T tg_sigmoid(T x) {                                                  \
    if (x >= T(0)) return T(1) / (T(1) + exp(-x));                                              \
    const T e = exp(x);                                                                         \
    return e / (T(1) + e);                                                                      \
  }                                                                                             \
  /* gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written x sigmoid(2u) \
     (the same function): 1 + tanh(u) cancels for negative x, sigmoid(2u) does not. */         \
  template <class T> TG_FN T tg_gelu_tanh(T x) {                                                \
    const T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);                      \
    return x * tg_sigmoid(T(2) * u);                                                            \
  }                                                                                             \
  /* d/dx gelu_tanh(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u), written with            \
     s = sigmoid(2u) and its mirror sigmoid(-2u) (0.5 (1 + t) = s, 1 - t^2 = 4 s sigmoid(-2u)):    \
     no cancellation, and no 0 * inf where tanh saturates. */                                  \
  template <class T> TG_FN T tg_gelu_tanh_derivative(T x) {                                     \
    const T k = T(0.79788456080286535588), c = T(0.044715);                                     \
    const T u = k * (x + c * x * x * x);                                                        \
    const T s = tg_sigmoid(T(2) * u), sn = tg_sigmoid(T(-2) * u);                               \
    return s + T(2) * x * s * sn * k * (T(1) + T(3) * c * x * x);                               \
  }                                                                                             \
  template <class T> TG_FN T tg_sign(T x) { return x != x ? x : T((x > T(0)) - (x < T(0))); }  \
  template <class T> TG_FN T tg_softplus(T x) {                                                 \
    return x != x ? x : (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));                           \
  }                                                                                             \
  template <class T> TG_FN T tg_hard_sigmoid(T x, T a, T b) {                                   \
    const T v = a * x + b;                                                                      \
    return v != v ? v : (v < T(0) ? T(0) : (v > T(1) ? T(1) : v));                              \
  }                                                                                             \
  template <class T> TG_FN T tg_floor_mod(T x, T y) {                                           \
    T r = fmod(x, y);                                                                           \
    if (r != T(0) && ((r < T(0)) != (y < T(0)))) r += y;                                        \
    return r == T(0) ? copysign(T(0), y) : r;                                                   \
  }                                                                                             \
  /* minimum / maximum that propagate NaN (fmin / fmax drop it). */                            \
  template <class T> TG_FN T tg_nan_min(T x, T y) { return (x != x || y != y) ? x + y : fmin(x, y); } \
  template <class T> TG_FN T tg_nan_max(T x, T y) { return (x != x || y != y) ? x + y : fmax(x, y); }

#define TG_UNARY_FLOAT_FORMULAS(X)                                                             \
  X(Identity, x) X(StopGradient, x) X(Neg, -x) X(Abs, fabs(x)) X(Sign, tg_sign(x))             \
  X(Square, x * x) X(Relu, x < T(0) ? T(0) : x) /* NaN stays NaN */                            \
  X(Exp, exp(x)) X(Exp2, exp2(x)) X(Log, log(x)) X(Log2, log2(x))                              \
  X(Log1p, log1p(x)) X(Expm1, expm1(x)) X(Sqrt, sqrt(x))                                       \
  X(Rsqrt, T(1) / sqrt(x)) X(Reciprocal, T(1) / x)                                             \
  X(Sin, sin(x)) X(Cos, cos(x)) X(Tan, tan(x)) X(Sinh, sinh(x))                                \
  X(Cosh, cosh(x)) X(Tanh, tanh(x)) X(Asin, asin(x)) X(Acos, acos(x))                          \
  X(Atan, atan(x)) X(Asinh, asinh(x)) X(Acosh, acosh(x)) X(Atanh, atanh(x))                    \
  X(Erf, erf(x)) X(Floor, floor(x)) X(Ceil, ceil(x))                                           \
  X(Round, round(x)) /* half away from zero */ X(Rint, rint(x)) /* half to even */             \
  X(Trunc, trunc(x)) X(Sigmoid, tg_sigmoid(x))                                                 \
  X(LeakyRelu, x < T(0) ? T(a) * x : x) X(Elu, x < T(0) ? T(a) * expm1(x) : x)                 \
  X(Gelu, T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)))) X(GeluTanh, tg_gelu_tanh(x)) \
  X(Silu, x * tg_sigmoid(x)) X(Softplus, tg_softplus(x))                                       \
  X(HardSigmoid, tg_hard_sigmoid(x, T(a), T(b)))

#define TG_BINARY_FLOAT_FORMULAS(X)                                                            \
  X(Add, x + y) X(Sub, x - y) X(Mul, x * y) X(Div, x / y) X(DivNoNan, y == T(0) ? T(0) : x / y) \
  X(Mod, fmod(x, y)) X(FloorMod, tg_floor_mod(x, y)) X(Pow, pow(x, y))                         \
  X(Minimum, fmin(x, y)) X(Maximum, fmax(x, y))                                                \
  X(MinimumNan, tg_nan_min(x, y)) X(MaximumNan, tg_nan_max(x, y))                              \
  X(Atan2, atan2(x, y)) X(GeluTanhGrad, x * tg_gelu_tanh_derivative(y))                        \
  X(ReluGrad, y > T(0) ? x : T(0))
// clang-format on

namespace tg::detail {

namespace formula {
using std::acos, std::acosh, std::asin, std::asinh, std::atan, std::atan2, std::atanh, std::ceil, std::copysign,
    std::cos, std::cosh, std::erf, std::exp, std::exp2, std::expm1, std::fabs, std::floor, std::fmax, std::fmin,
    std::fmod, std::log, std::log1p, std::log2, std::pow, std::rint, std::round, std::sin, std::sinh, std::sqrt,
    std::tan, std::tanh, std::trunc;
#define TG_FN inline
TG_FORMULA_HELPERS
#undef TG_FN

/// Op K of one float operand in compute type T (a, b: its ScalarDesc's alpha and beta, else
/// unused).
template <OpKind K, class T>
inline T unary(T x, [[maybe_unused]] double a, [[maybe_unused]] double b) {
#define TG_X(kind, expr) if constexpr (K == OpKind::kind) return (expr); else
  TG_UNARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
  static_assert(K != K, "not a unary float op");
}

/// Op K of two float operands in compute type T.
template <OpKind K, class T>
inline T binary(T x, T y) {
#define TG_X(kind, expr) if constexpr (K == OpKind::kind) return (expr); else
  TG_BINARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
  static_assert(K != K, "not a binary float op");
}
}  // namespace formula

/// The helpers in double, by their old names (the fast CPU kernels' tests).
inline double sigmoid(double x) { return formula::tg_sigmoid(x); }
inline double gelu_tanh(double x) { return formula::tg_gelu_tanh(x); }
inline double gelu_tanh_derivative(double x) { return formula::tg_gelu_tanh_derivative(x); }

/// Op K of one float operand (a, b: its ScalarDesc's alpha and beta, else unused).
template <OpKind K>
inline double unary_formula(double x, double a, double b) {
  return formula::unary<K, double>(x, a, b);
}

/// Op K of two float operands.
template <OpKind K>
inline double binary_formula(double x, double y) {
  return formula::binary<K, double>(x, y);
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

/// True when k is a unary (binary) float op with a formula here.
inline bool has_unary_formula(OpKind k) {
  double unused = 0;
  return unary_formula(k, 0.0, 0.0, 0.0, unused);
}
inline bool has_binary_formula(OpKind k) {
  double unused = 0;
  return binary_formula(k, 0.0, 1.0, unused);
}

}  // namespace tg::detail
