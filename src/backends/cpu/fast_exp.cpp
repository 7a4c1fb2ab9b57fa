// The f32 e^x, tanh, sigmoid and SiLU loops over fast_exp.h: AVX-512, AVX2 + FMA (x86-64-v3)
// and baseline clones picked when the library loads, every clone giving the same bits (std::fma
// is exact; no other contraction). Built with -fno-trapping-math (src/CMakeLists.txt) so the
// selects between the pieces vectorise.
#include "backends/cpu/fast_exp.h"

namespace tg::detail::fast {

TG_EXACT_CLONES void exp_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(exp_fast(static_cast<double>(x[i])));
}

TG_EXACT_CLONES void tanh_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(tanh_fast(static_cast<double>(x[i])));
}

TG_EXACT_CLONES void sigmoid_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(sigmoid_fast(static_cast<double>(x[i])));
}

TG_EXACT_CLONES void silu_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = static_cast<float>(v * sigmoid_fast(v));
  }
}

TG_EXACT_CLONES void gelu_tanh_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(gelu_tanh_fast(static_cast<double>(x[i])));
}

TG_EXACT_CLONES void gelu_tanh_grad_f32(const float* __restrict dy, const float* __restrict x, float* __restrict y,
                                      int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(gelu_tanh_grad_fast(static_cast<double>(dy[i]), static_cast<double>(x[i])));
}

}  // namespace tg::detail::fast
