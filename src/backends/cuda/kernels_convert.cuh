#pragma once
// Device-side element access that matches the CPU reference bit for bit (src/core/element.h
// and src/core/half.h): float dtypes are read exactly as double and written back through
// float (f16 / bf16 round from the float, as the host does); float -> integer stores truncate
// and saturate (NaN -> 0); integer dtypes travel as exact int64 and are stored wrapped.
// Included by .cu files only (kernels; no host library headers).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "tgraph/dtype.h"

namespace tg::detail::dev {

// Storage tags for the dtypes whose C++ type is ambiguous or missing on the device.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};
struct Bool {
  uint8_t v;
};

__device__ __forceinline__ float half_to_float(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = static_cast<float>(m) / 16777216.0f;
    return sign ? -v : v;
  }
  if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ __forceinline__ uint16_t float_to_half(float f) {
  uint32_t x = __float_as_uint(f);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) {  // subnormal or zero in half: round v * 2^24 to nearest even
    float v = __fmul_rn(__uint_as_float(ax), 16777216.0f);
    uint32_t m = static_cast<uint32_t>(v);
    float rem = __fsub_rn(v, static_cast<float>(m));
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t h = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
  uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// ---- as double (load_element / store_element) ----
__device__ __forceinline__ double to_double(float v) { return v; }
__device__ __forceinline__ double to_double(double v) { return v; }
__device__ __forceinline__ double to_double(F16 v) { return half_to_float(v.bits); }
__device__ __forceinline__ double to_double(BF16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}
__device__ __forceinline__ double to_double(Bool v) { return v.v ? 1.0 : 0.0; }
template <class I>
__device__ __forceinline__ double to_double(I v) {
  return static_cast<double>(v);
}

template <class I>
__device__ __forceinline__ I saturate(double v, double lo, double hi, I min, I max) {
  if (v != v) return 0;
  if (v <= lo) return min;
  if (v >= hi) return max;
  return static_cast<I>(v);
}

template <class T>
__device__ __forceinline__ T from_double(double v) {
  if constexpr (std::is_same_v<T, float>)
    return static_cast<float>(v);
  else if constexpr (std::is_same_v<T, double>)
    return v;
  else if constexpr (std::is_same_v<T, F16>)
    return F16{float_to_half(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, BF16>)
    return BF16{float_to_bf16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<T, Bool>)
    return Bool{static_cast<uint8_t>(v != 0.0 ? 1 : 0)};
  else if constexpr (std::is_same_v<T, int8_t>)
    return saturate<int8_t>(v, -128.0, 127.0, INT8_MIN, INT8_MAX);
  else if constexpr (std::is_same_v<T, int16_t>)
    return saturate<int16_t>(v, -32768.0, 32767.0, INT16_MIN, INT16_MAX);
  else if constexpr (std::is_same_v<T, int32_t>)
    return saturate<int32_t>(v, -2147483648.0, 2147483647.0, INT32_MIN, INT32_MAX);
  else if constexpr (std::is_same_v<T, int64_t>)
    return saturate<int64_t>(v, -9223372036854775808.0, 9223372036854775807.0, INT64_MIN, INT64_MAX);
  else
    return saturate<uint8_t>(v, 0.0, 255.0, 0, UINT8_MAX);
}

// ---- exact integers (load_int / store_int) ----
template <class I>
__device__ __forceinline__ long long to_int(I v) {
  return static_cast<long long>(v);
}
__device__ __forceinline__ long long to_int(Bool v) { return v.v ? 1 : 0; }
// Two's complement wrap to the dtype's width.
template <class I>
__device__ __forceinline__ I from_int(long long v) {
  return static_cast<I>(v);
}

/// Calls f(T{}) with T the device storage type of t (F16 / BF16 / Bool for those dtypes).
template <class F>
__host__ bool with_storage(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return true;
    case DType::f64: f(double{}); return true;
    case DType::f16: f(F16{}); return true;
    case DType::bf16: f(BF16{}); return true;
    case DType::i8: f(int8_t{}); return true;
    case DType::i16: f(int16_t{}); return true;
    case DType::i32: f(int32_t{}); return true;
    case DType::i64: f(int64_t{}); return true;
    case DType::u8: f(uint8_t{}); return true;
    case DType::boolean: f(Bool{}); return true;
  }
  return false;
}

/// Grid size for a grid-stride loop over n items with 256-thread blocks.
__host__ inline unsigned grid_for(long long n, long long per_block = 256) {
  long long blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 8192 ? (blocks < 1 ? 1 : blocks) : 8192);
}

}  // namespace tg::detail::dev
