#pragma once
// Device helpers shared by the hand-written kernels (.cu files only): grid sizing for
// grid-stride loops, 64/32-bit counters, and f16 / bf16 rounding identical to the host's
// (src/core/half.h), NaN bits included.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels_indexing.h"

namespace tg::detail {

constexpr int kThreads = 256;

/// Blocks for a grid-stride kernel: enough to fill every SM at the kernel's occupancy, never
/// more than the work needs. The occupancy is queried once per kernel.
template <auto Kernel>
unsigned grid_for(long long work_blocks, int sm_count) {
  static const int per_sm = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, kThreads, 0) != cudaSuccess || b < 1) {
      cudaGetLastError();
      b = 4;
    }
    return b;
  }();
  long long cap = static_cast<long long>(sm_count > 0 ? sm_count : 1) * per_sm;
  long long g = work_blocks < cap ? work_blocks : cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

/// Division of loop counters: a multiply-shift for 32-bit counters, plain for 64-bit ones.
template <class I>
struct Div;
template <>
struct Div<uint32_t> {
  FastDiv32 f;
  explicit Div(long long d) : f(static_cast<uint32_t>(d < 1 ? 1 : d)) {}
  __device__ __forceinline__ uint32_t div(uint32_t n) const { return f.div(n); }
};
template <>
struct Div<uint64_t> {
  uint64_t d;
  explicit Div(long long v) : d(static_cast<uint64_t>(v < 1 ? 1 : v)) {}
  __device__ __forceinline__ uint64_t div(uint64_t n) const { return n / d; }
};

/// True when a grid-stride loop over `total` items (with `step` per pass) can count in 32 bits.
inline bool fits_u32(long long total, long long step) { return total + step < (1LL << 32); }

/// float -> f16 / bf16 as the host rounds them (round to nearest even; a NaN keeps its sign
/// as 0x7e00 in f16 and its payload, quieted, in bf16).
__device__ __forceinline__ __half to_half(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return __ushort_as_half(static_cast<unsigned short>(((b >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(f);
}
__device__ __forceinline__ __nv_bfloat16 to_bf16(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16(static_cast<unsigned short>((b >> 16) | 0x40u));
  return __float2bfloat16_rn(f);
}

}  // namespace tg::detail
