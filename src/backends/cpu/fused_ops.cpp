// One instruction of a fused CPU loop over a tile. The f32 ops are plain loops the compiler
// vectorises; exec is built for AVX-512, AVX2 and the baseline, picked at load time
// (target_clones), since the library itself is compiled for the baseline ISA. The results
// match the unfused kernels bit for bit: fast_elementwise.cpp's formulas for the ops it has,
// the reference's double-then-round for the rest.
#include "backends/cpu/fused_ops.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/fast_erf.h"
#include "backends/cpu/fast_exp.h"
#include "backends/cpu/fast_kernels.h"
#include "ops/elementwise_formulas.h"
#include "core/half.h"

namespace tg::detail::fused {
namespace {

template <class F>
void dloop1(float* __restrict d, const float* __restrict a, int n, F f) {
  for (int j = 0; j < n; ++j) d[j] = static_cast<float>(f(static_cast<double>(a[j])));
}

template <class F>
void dloop2(float* __restrict d, const float* __restrict a, const float* __restrict b, int n, F f) {
  for (int j = 0; j < n; ++j)
    d[j] = static_cast<float>(f(static_cast<double>(a[j]), static_cast<double>(b[j])));
}

void unary_formula_loop(OpKind k, float* d, const float* a, int n, double al, double be);

// The reference's double formulas (ops/elementwise_formulas.h), rounded once to f32; a few
// through the fast f32 kernels the unfused path uses for them.
void unary_double(const Instr& in, float* d, const float* a, int n) {
  const double al = in.alpha, be = in.beta;
  switch (in.kind) {
    case OpKind::Exp: fast::exp_f32(a, d, n); break;  // fast_exp.h: the reference's bits but for rare 1-ulp
    case OpKind::Tanh: fast::tanh_f32(a, d, n); break;
    case OpKind::Erf: fast::erf_f32(a, d, n); break;  // as the unfused kernel (fast_erf.h)
    case OpKind::Sigmoid: fast::sigmoid_f32(a, d, n); break;
    case OpKind::Gelu: fast::gelu_f32(a, d, n); break;
    case OpKind::GeluTanh: fast::gelu_tanh_f32(a, d, n); break;
    case OpKind::Silu: fast::silu_f32(a, d, n); break;
    default: unary_formula_loop(in.kind, d, a, n, al, be);
  }
}

void unary_formula_loop(OpKind k, float* d, const float* a, int n, double al, double be) {
  switch (k) {
#define TG_X(kind, expr)                                                                     \
  case OpKind::kind:                                                                         \
    dloop1(d, a, n, [al, be](double x) { return unary_formula<OpKind::kind>(x, al, be); }); \
    break;
    TG_UNARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
    default: break;  // compile_fused only emits float ops
  }
}

void binary_double(const Instr& in, float* d, const float* a, const float* b, int n) {
  if (in.kind == OpKind::GeluTanhGrad) return fast::gelu_tanh_grad_f32(a, b, d, n);
  switch (in.kind) {
#define TG_X(kind, expr)                                                                         \
  case OpKind::kind:                                                                             \
    dloop2(d, a, b, n, [](double x, double y) { return binary_formula<OpKind::kind>(x, y); }); \
    break;
    TG_BINARY_FLOAT_FORMULAS(TG_X)
#undef TG_X
    default: break;
  }
}

void round_to(Round r, float* d, int n) {
  if (r == Round::f16)
    for (int j = 0; j < n; ++j) d[j] = half_to_float(float_to_half(d[j]));
  else if (r == Round::bf16)
    for (int j = 0; j < n; ++j) d[j] = bf16_to_float(float_to_bf16(d[j]));
}

}  // namespace

TG_CPU_CLONES void accumulate(double* __restrict acc, const float* __restrict x, int n) {
  for (int j = 0; j < n; ++j) acc[j] += x[j];
}

TG_CPU_CLONES void exec(const Instr* code, size_t count, float* const* regs, const double* const* aux,
                        int n) {
  for (size_t i = 0; i < count; ++i) {
    const Instr& in = code[i];
    float* __restrict d = regs[in.d];
    const float* __restrict a = regs[in.a];
    const float* __restrict b = regs[in.b];
    const float* __restrict c = regs[in.c];
#define TG_L1(expr)             \
  for (int j = 0; j < n; ++j) { \
    const float x = a[j];       \
    d[j] = (expr);              \
  }                             \
  break
#define TG_L2(expr)                 \
  for (int j = 0; j < n; ++j) {     \
    const float x = a[j], y = b[j]; \
    d[j] = (expr);                  \
  }                                 \
  break
    switch (in.code) {
      case Code::copy: TG_L1(x);
      case Code::neg: TG_L1(-x);
      case Code::abs: TG_L1(std::fabs(x));
      case Code::sign: TG_L1(x != x ? x : static_cast<float>((x > 0) - (x < 0)));
      case Code::square: TG_L1(x * x);
      case Code::relu: TG_L1(x < 0.0f ? 0.0f : x);
      case Code::sqrt: TG_L1(std::sqrt(x));
      case Code::add: TG_L2(x + y);
      case Code::sub: TG_L2(x - y);
      case Code::mul: TG_L2(x * y);
      case Code::div: TG_L2(x / y);
      case Code::div_no_nan: TG_L2(y == 0.0f ? 0.0f : x / y);
      case Code::minimum: TG_L2((x <= y || y != y) ? x : y);
      case Code::maximum: TG_L2((x >= y || y != y) ? x : y);
      case Code::relu_grad: TG_L2(y > 0.0f ? x : 0.0f);
      case Code::minimum_nan: TG_L2((x != x || y != y) ? x + y : (y < x ? y : x));
      case Code::maximum_nan: TG_L2((x != x || y != y) ? x + y : (x < y ? y : x));
      case Code::eq: TG_L2(x == y ? 1.0f : 0.0f);
      case Code::ne: TG_L2(x != y ? 1.0f : 0.0f);
      case Code::lt: TG_L2(x < y ? 1.0f : 0.0f);
      case Code::le: TG_L2(x <= y ? 1.0f : 0.0f);
      case Code::gt: TG_L2(x > y ? 1.0f : 0.0f);
      case Code::ge: TG_L2(x >= y ? 1.0f : 0.0f);
      case Code::logical_not: TG_L1(x == 0.0f ? 1.0f : 0.0f);
      case Code::logical_and: TG_L2((x != 0.0f && y != 0.0f) ? 1.0f : 0.0f);
      case Code::logical_or: TG_L2((x != 0.0f || y != 0.0f) ? 1.0f : 0.0f);
      case Code::logical_xor: TG_L2(((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f);
      case Code::is_nan: TG_L1(x != x ? 1.0f : 0.0f);
      case Code::is_inf: TG_L1(std::isinf(x) ? 1.0f : 0.0f);
      case Code::is_finite: TG_L1(std::isfinite(x) ? 1.0f : 0.0f);
      case Code::to_bool: TG_L1(x != 0.0f ? 1.0f : 0.0f);
      case Code::select:
        for (int j = 0; j < n; ++j) d[j] = a[j] != 0.0f ? b[j] : c[j];
        break;
      case Code::clamp:
        // std::max / std::min as the reference: a NaN x propagates, NaN bounds are ignored.
        for (int j = 0; j < n; ++j) {
          const float v = a[j] < b[j] ? b[j] : a[j];
          d[j] = c[j] < v ? c[j] : v;
        }
        break;
      case Code::unary_double: unary_double(in, d, a, n); break;
      case Code::binary_double: binary_double(in, d, a, b, n); break;
      case Code::batch_norm:
        fast::batch_norm_apply(a, d, n, aux[3 * in.aux], aux[3 * in.aux + 1], aux[3 * in.aux + 2]);
        break;
    }
    if (in.round != Round::none) round_to(in.round, d, n);
  }
#undef TG_L1
#undef TG_L2
}

}  // namespace tg::detail::fused
