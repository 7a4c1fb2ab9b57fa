#pragma once
// Reading and writing one element of any dtype as a double (host side, reference paths).
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/float8.h"
#include "core/half.h"
#include "tgraph/dtype.h"

namespace tg::detail {

inline double load_element(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::i8: return static_cast<const int8_t*>(p)[i];
    case DType::i16: return static_cast<const int16_t*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
    case DType::boolean: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
    case DType::f8e4m3: case DType::f8e5m2: return float8_to_float(static_cast<const uint8_t*>(p)[i], float8_format(t));
  }
  return 0;
}

// Float-to-int conversion truncates toward zero and saturates (NaN becomes 0), so no
// conversion is undefined behaviour.
template <class I>
I saturate(double v) {
  if (std::isnan(v)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

inline void store_element(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DType::i8: static_cast<int8_t*>(p)[i] = saturate<int8_t>(v); break;
    case DType::i16: static_cast<int16_t*>(p)[i] = saturate<int16_t>(v); break;
    case DType::i32: static_cast<int32_t*>(p)[i] = saturate<int32_t>(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = saturate<int64_t>(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = saturate<uint8_t>(v); break;
    case DType::boolean: static_cast<uint8_t*>(p)[i] = v != 0.0 ? 1 : 0; break;
    case DType::f8e4m3: case DType::f8e5m2:
      // Through f32 first, as every other path (and the GPU) rounds: one rounding would differ
      // from two only for f64 values within half an f32 ulp of a tie.
      static_cast<uint8_t*>(p)[i] = float_to_float8(static_cast<float>(v), float8_format(t));
      break;
  }
}

}  // namespace tg::detail
