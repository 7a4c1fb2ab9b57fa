// Cumulative scans (see kernels_scan.h). The accumulator is double for float dtypes and int64
// for integers, as in the CPU reference; a warp scans 32 elements at a time with shuffles and
// carries the running prefix, so only float sums / products differ from the reference's
// left-to-right order (by rounding: the association changes); max / min and integer scans are
// exact.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels_convert.cuh"
#include "backends/cuda/kernels_scan.h"

namespace tg::detail {
namespace {

template <class V>
struct ScanArgs {
  long long outer, len, inner;
  int op;
  bool exclusive, reverse;
  V identity;
};

__device__ __forceinline__ double combine(int op, double a, double b) {
  switch (op) {
    case 0: return __dadd_rn(a, b);
    case 1: return __dmul_rn(a, b);
    case 2:
      if (a != a || b != b) return __longlong_as_double(0x7ff8000000000000LL);
      return a < b ? b : a;  // std::max: the earlier of equals
    default:
      if (a != a || b != b) return __longlong_as_double(0x7ff8000000000000LL);
      return b < a ? b : a;  // std::min
  }
}

__device__ __forceinline__ long long combine(int op, long long a, long long b) {
  switch (op) {
    case 0:
      return static_cast<long long>(static_cast<unsigned long long>(a) + static_cast<unsigned long long>(b));
    case 1:
      return static_cast<long long>(static_cast<unsigned long long>(a) * static_cast<unsigned long long>(b));
    case 2: return a < b ? b : a;
    default: return b < a ? b : a;
  }
}

template <class T, class V>
__device__ __forceinline__ V ld(const T* p, long long i) {
  if constexpr (std::is_same_v<V, double>)
    return dev::to_double(p[i]);
  else
    return dev::to_int(p[i]);
}
template <class T, class V>
__device__ __forceinline__ void st(T* p, long long i, V v) {
  if constexpr (std::is_same_v<V, double>)
    p[i] = dev::from_double<T>(v);
  else
    p[i] = dev::from_int<T>(v);
}

// One thread walks one line; neighbouring threads take neighbouring inner positions.
template <class T, class V>
__global__ void __launch_bounds__(256)
    scan_thread_kernel(const T* __restrict__ in, T* __restrict__ out, const ScanArgs<V> a) {
  const long long lines = a.outer * a.inner;
  for (long long l = blockIdx.x * 256LL + threadIdx.x; l < lines; l += 256LL * gridDim.x) {
    const long long base = (l / a.inner) * a.len * a.inner + l % a.inner;
    V acc = a.identity;
    for (long long j = 0; j < a.len; ++j) {
      const long long i = base + (a.reverse ? a.len - 1 - j : j) * a.inner;
      const V v = ld<T, V>(in, i);
      if (a.exclusive) st<T, V>(out, i, acc);
      acc = j == 0 ? v : combine(a.op, acc, v);
      if (!a.exclusive) st<T, V>(out, i, acc);
    }
  }
}

// One warp scans one contiguous line (inner == 1), 32 elements per step.
template <class T, class V>
__global__ void __launch_bounds__(256)
    scan_warp_kernel(const T* __restrict__ in, T* __restrict__ out, const ScanArgs<V> a) {
  const int lane = threadIdx.x & 31;
  const long long warps = 8LL * gridDim.x;
  for (long long l = blockIdx.x * 8LL + threadIdx.x / 32; l < a.outer; l += warps) {
    const long long base = l * a.len;
    V carry = a.identity;
    bool has_carry = false;
    for (long long t0 = 0; t0 < a.len; t0 += 32) {
      const long long j = t0 + lane;
      const bool valid = j < a.len;
      const long long i = base + (a.reverse ? a.len - 1 - j : j);
      V x = valid ? ld<T, V>(in, i) : a.identity;
      // Inclusive scan across the warp; the earlier prefix is always the left operand. Lanes
      // past the end hold the identity and only follow the valid ones.
      for (int off = 1; off < 32; off *= 2) {
        V y = __shfl_up_sync(0xffffffffu, x, off);
        if (lane >= off) x = combine(a.op, y, x);
      }
      if (has_carry) x = combine(a.op, carry, x);
      if (a.exclusive) {
        V e = __shfl_up_sync(0xffffffffu, x, 1);
        if (lane == 0) e = has_carry ? carry : a.identity;
        if (valid) st<T, V>(out, i, e);
      } else if (valid) {
        st<T, V>(out, i, x);
      }
      carry = __shfl_sync(0xffffffffu, x, 31);
      has_carry = true;
    }
  }
}

template <class T, class V>
cudaError_t launch_t(const void* in, void* out, const ScanArgs<V>& a, cudaStream_t stream) {
  auto* s = static_cast<const T*>(in);
  auto* d = static_cast<T*>(out);
  if (a.inner == 1 && a.len >= 16)
    scan_warp_kernel<T, V><<<dev::grid_for(a.outer, 8), 256, 0, stream>>>(s, d, a);
  else
    scan_thread_kernel<T, V><<<dev::grid_for(a.outer * a.inner), 256, 0, stream>>>(s, d, a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_scan(const void* in, void* out, DType t, ScanOp op, long long outer, long long len,
                        long long inner, bool exclusive, bool reverse, double identity_f,
                        long long identity_i, cudaStream_t stream) {
  if (outer < 0 || len < 0 || inner < 0) return cudaErrorInvalidValue;
  if (outer * len * inner == 0) return cudaSuccess;
  if (!in || !out || t == DType::boolean) return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, dev::Bool>) {
      constexpr bool fl = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                          std::is_same_v<T, dev::F16> || std::is_same_v<T, dev::BF16>;
      if constexpr (fl) {
        ScanArgs<double> a{outer, len, inner, static_cast<int>(op), exclusive, reverse, identity_f};
        e = launch_t<T, double>(in, out, a, stream);
      } else {
        ScanArgs<long long> a{outer, len, inner, static_cast<int>(op), exclusive, reverse, identity_i};
        e = launch_t<T, long long>(in, out, a, stream);
      }
    }
  });
  return e;
}

}  // namespace tg::detail
