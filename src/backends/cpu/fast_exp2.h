#pragma once
// The two pieces of a vectorisable e^x (fast_erf.h's e^(-a^2), fast_norm.cpp's softmax exp),
// written without a libm call or a double -> integer conversion, either of which keeps GCC from
// vectorising the loop (and AVX-512F has no 64-bit conversion at all).
#include <bit>
#include <cstdint>

// The function clones of the loops over these formulas (fast_erf.cpp, fast_exp.cpp): AVX-512,
// AVX2 + FMA (x86-64-v3) and baseline, picked when the library loads. Only std::fma contracts
// (exact), so every clone gives the same bits.
#if defined(__clang__)
#define TG_EXACT_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define TG_EXACT_CLONES \
  __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default"), optimize("fp-contract=off")))
#endif

namespace tg::detail::fast {

/// y rounded to the nearest integer, ties to even (|y| < 2^51): adding and taking away
/// 1.5 * 2^52 leaves no fraction bits.
[[gnu::always_inline]] inline double round_nearest(double y) {
  return (y + 6755399441055744.0) - 6755399441055744.0;
}

/// 2^k for an integer-valued k in [-1022, 1023]: k + 1023 sits in the low mantissa bits of
/// k + 1.5 * 2^52 + 1023 (exact), shifted into the exponent field.
[[gnu::always_inline]] inline double pow2i(double k) {
  return std::bit_cast<double>(std::bit_cast<int64_t>(k + (6755399441055744.0 + 1023.0)) << 52);
}

}  // namespace tg::detail::fast
