// Fast f32 elementwise ops on operands of equal shape (the dispatcher is fast_kernels.cpp).
//
// Rounding follows docs/ops-semantics.md: add, sub, mul, div, sqrt, square, neg, abs, relu,
// minimum and maximum are computed in f32, which gives exactly the reference's result (the
// double result of one IEEE operation on two floats, rounded once, is the f32 result).
// Transcendental ops (exp, tanh, sigmoid, gelu, silu, erf) are computed in double without libm
// (fast_exp.h, fast_erf.h: vectorised) and rounded once: the reference's results but for one ulp
// in about 10^7 values. minimum / maximum are IEEE minNum / maxNum (a NaN operand is
// ignored); relu keeps NaN. Large tensors are split over OpenMP threads; small ones run inline.
#include <cmath>
#include <cstdint>

#include <omp.h>

#include "backends/cpu/fast_erf.h"
#include "backends/cpu/fast_exp.h"
#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "ops/elementwise_formulas.h"

namespace tg::detail {
namespace fast {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more than they save

// A vectorised f32 loop (fast_exp.h, fast_erf.h) over contiguous slices, one per thread.
void parallel_f32(void (*f)(const float*, float*, int64_t), const float* x, float* y, int64_t n) {
  if (n < kParallelMin) {
    f(x, y, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b = n * t / nt, e = n * (t + 1) / nt;
    f(x + b, y + b, e - b);
  }
}

template <class F>
void unary_loop(const float* __restrict x, float* __restrict y, int64_t n, F f) {
  if (n >= kParallelMin) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
  }
}

template <class F>
void binary_loop(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t n, F f) {
  if (n >= kParallelMin) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
  }
}

}  // namespace

bool elementwise(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  const bool binary = in.size() == 2;
  if (in.empty() || in.size() > 2) return false;
  for (const TensorData& t : in)
    if (t.dtype() != DType::f32 || t.empty()) return false;
  if (binary && in[0].shape().dims() != in[1].shape().dims()) return false;
  const int64_t count = in[0].num_elements();
  TensorData y = cpu_output(0, in[0].shape(), DType::f32);
  const float* a = in[0].ptr<float>();
  const float* b = binary ? in[1].ptr<float>() : nullptr;
  float* o = y.ptr<float>();
  switch (n.kind) {
    // binary
    // binary, exact in f32: the formula of ops/elementwise_formulas.h computed in float
#define TG_EXACT_BINARY(kind)                                                                             \
  case OpKind::kind:                                                                                     \
    if (!binary) return false;                                                                           \
    binary_loop(a, b, o, count, [](float p, float q) { return formula::binary<OpKind::kind, float>(p, q); }); \
    break;
    TG_EXACT_BINARY(Add) TG_EXACT_BINARY(Sub) TG_EXACT_BINARY(Mul) TG_EXACT_BINARY(Div)
#undef TG_EXACT_BINARY
    // IEEE maxNum / minNum as comparisons (they vectorise; fmaxf / fminf need not): the formula's
    // fmax / fmin but for which zero of -0 and +0 is returned
    case OpKind::Maximum:
      if (!binary) return false;
      binary_loop(a, b, o, count, [](float p, float q) { return (p >= q || q != q) ? p : q; });
      break;
    case OpKind::Minimum:
      if (!binary) return false;
      binary_loop(a, b, o, count, [](float p, float q) { return (p <= q || q != q) ? p : q; });
      break;
    // unary, exact in f32: the formula computed in float
#define TG_EXACT_UNARY(kind)                                                                             \
  case OpKind::kind:                                                                                    \
    if (binary) return false;                                                                           \
    unary_loop(a, o, count, [](float v) { return formula::unary<OpKind::kind, float>(v, 0, 0); });      \
    break;
    TG_EXACT_UNARY(Relu) TG_EXACT_UNARY(Neg) TG_EXACT_UNARY(Abs) TG_EXACT_UNARY(Square) TG_EXACT_UNARY(Sqrt)
#undef TG_EXACT_UNARY
    // unary, transcendental: double, rounded once
    // e^x, tanh, sigmoid, SiLU, erf, GELU without libm: vectorised, the reference's f32 results
    // but for 1 ulp in ~10^7 (fast_exp.h, fast_erf.h)
    case OpKind::Exp:
      if (binary) return false;
      parallel_f32(exp_f32, a, o, count);
      break;
    case OpKind::Tanh:
      if (binary) return false;
      parallel_f32(tanh_f32, a, o, count);
      break;
    case OpKind::Sigmoid:
      if (binary) return false;
      parallel_f32(sigmoid_f32, a, o, count);
      break;
    case OpKind::Silu:
      if (binary) return false;
      parallel_f32(silu_f32, a, o, count);
      break;
    case OpKind::Gelu:  // erf without libm: vectorised, the same f32 results but for 1 ulp in ~10^7 (fast_erf.h)
      if (binary) return false;
      parallel_f32(gelu_f32, a, o, count);
      break;
    case OpKind::Erf:
      if (binary) return false;
      parallel_f32(erf_f32, a, o, count);
      break;
    default:
      return false;
  }
  out.clear();
  out.push_back(std::move(y));
  return true;
}

}  // namespace fast

}  // namespace tg::detail
