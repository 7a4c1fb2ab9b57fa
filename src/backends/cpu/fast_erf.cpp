// The f32 erf and GELU loops over fast_erf.h: AVX-512, AVX2 + FMA (x86-64-v3) and baseline
// clones picked when the library loads. Every clone gives the same bits (std::fma is exact; no
// other contraction). The file is built with -fno-trapping-math (src/CMakeLists.txt) so the
// selects between the pieces vectorise.
#include "backends/cpu/fast_erf.h"

namespace tg::detail::fast {

TG_EXACT_CLONES void erf_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(erf_fast(static_cast<double>(x[i])));
}

TG_EXACT_CLONES void gelu_f32(const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(gelu_fast(static_cast<double>(x[i])));
}

}  // namespace tg::detail::fast
