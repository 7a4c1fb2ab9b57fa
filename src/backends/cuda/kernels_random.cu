// Philox4x32-10 random numbers, one counter block per thread, in the reference's mapping of
// words to elements (docs/ops-semantics.md). Arithmetic is double with explicitly rounded
// operations (__dmul_rn / __dadd_rn): no FMA contraction, so uniforms and dropout masks are
// bitwise the reference's; normals differ only by the device's log / sin / cos (a few ulp of
// double before rounding to the dtype).
#include <cstdint>

#include "backends/cuda/kernels_random.h"
#include "backends/cuda/kernels_util.cuh"

namespace tg::detail {
namespace {

constexpr int kTruncatedAttempts = 16;
constexpr double kTwoPi = 2.0 * 3.14159265358979323846;  // 2 * M_PI, exactly as the reference's

// Stores v into element i of y as the host's store_element does (floats round, integers
// truncate and saturate, NaN -> 0).
__device__ __forceinline__ void store(void* y, DType t, uint64_t i, double v) {
  auto sat = [v](double lo, double hi) -> long long {
    if (isnan(v)) return 0;
    if (v <= lo) return static_cast<long long>(lo);
    if (v >= hi) return hi >= 9.2e18 ? 0x7fffffffffffffffLL : static_cast<long long>(hi);
    return static_cast<long long>(v);
  };
  switch (t) {
    case DType::f32: static_cast<float*>(y)[i] = __double2float_rn(v); break;
    case DType::f64: static_cast<double*>(y)[i] = v; break;
    case DType::f16: static_cast<__half*>(y)[i] = to_half(__double2float_rn(v)); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(y)[i] = to_bf16(__double2float_rn(v)); break;
    case DType::i8: static_cast<int8_t*>(y)[i] = static_cast<int8_t>(sat(-128.0, 127.0)); break;
    case DType::i16: static_cast<int16_t*>(y)[i] = static_cast<int16_t>(sat(-32768.0, 32767.0)); break;
    case DType::i32: static_cast<int32_t*>(y)[i] = static_cast<int32_t>(sat(-2147483648.0, 2147483647.0)); break;
    case DType::i64: static_cast<int64_t*>(y)[i] = sat(-9223372036854775808.0, 9223372036854775807.0); break;
    case DType::u8: static_cast<uint8_t*>(y)[i] = static_cast<uint8_t>(sat(0.0, 255.0)); break;
    case DType::boolean: static_cast<uint8_t*>(y)[i] = v != 0.0 ? 1 : 0; break;
  }
}

__device__ __forceinline__ double load(const void* x, DType t, uint64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(x)[i];
    case DType::f64: return static_cast<const double*>(x)[i];
    case DType::f16: return __half2float(static_cast<const __half*>(x)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]);
  }
}

// Box-Muller: radius from 1 - u1 (in (0, 1]), angle 2 pi u2; the cos or the sin branch.
__device__ __forceinline__ double box_muller(double u1, double u2, bool sine) {
  double r = sqrt(__dmul_rn(-2.0, log(__dsub_rn(1.0, u1)))), th = __dmul_rn(kTwoPi, u2);
  return __dmul_rn(r, sine ? sin(th) : cos(th));
}

__device__ __forceinline__ bool is_wide(DType t) { return t != DType::f32 && t != DType::f16 && t != DType::bf16; }

struct Stream {
  uint64_t seed, counter;
};
__device__ __forceinline__ Stream read_state(const int64_t* state) {
  return {static_cast<uint64_t>(state[0]), static_cast<uint64_t>(state[1])};
}

// One thread per counter block (truncated normal: per element).
__global__ void __launch_bounds__(kThreads) random_kernel(const int64_t* __restrict__ state, RandomDist dist, DType t,
                                                          double a, double b, void* y, uint64_t n, uint64_t work,
                                                          int64_t* next_state, uint64_t blocks) {
  const Stream s = read_state(state);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (first == 0) {
    next_state[0] = static_cast<int64_t>(s.seed);
    next_state[1] = static_cast<int64_t>(s.counter + blocks);
  }
  const bool wide = is_wide(t), integer = wide && t != DType::f64;
  const double span = __dsub_rn(b, a);
  for (uint64_t q = first; q < work; q += stride) {
    if (dist == RandomDist::truncated_normal) {  // q is the element; attempt k reads block k * n + q
      double z = 0;
      for (int k = 0; k < kTruncatedAttempts; ++k) {
        PhiloxWords w = philox_block(s.seed, s.counter, static_cast<uint64_t>(k) * n + q);
        z = wide ? box_muller(philox_u53(w.w[0], w.w[1]), philox_u53(w.w[2], w.w[3]), false)
                 : box_muller(philox_u24(w.w[0]), philox_u24(w.w[1]), false);
        if (fabs(z) <= 2.0) break;
      }
      store(y, t, q, __dadd_rn(a, __dmul_rn(b, fmin(fmax(z, -2.0), 2.0))));
      continue;
    }
    PhiloxWords w = philox_block(s.seed, s.counter, q);
    if (dist == RandomDist::uniform) {
      if (wide) {
        for (int h = 0; h < 2; ++h) {
          uint64_t i = 2 * q + h;
          if (i >= n) break;
          double u = philox_u53(w.w[2 * h], w.w[2 * h + 1]);
          store(y, t, i, integer ? __dadd_rn(a, floor(__dmul_rn(u, span))) : __dadd_rn(a, __dmul_rn(span, u)));
        }
      } else {
        for (int h = 0; h < 4; ++h) {
          uint64_t i = 4 * q + h;
          if (i >= n) break;
          store(y, t, i, __dadd_rn(a, __dmul_rn(span, philox_u24(w.w[h]))));
        }
      }
    } else if (wide) {  // normal, f64: block q is pair q
      double u1 = philox_u53(w.w[0], w.w[1]), u2 = philox_u53(w.w[2], w.w[3]);
      for (int h = 0; h < 2; ++h)
        if (2 * q + h < n) store(y, t, 2 * q + h, __dadd_rn(a, __dmul_rn(b, box_muller(u1, u2, h == 1))));
    } else {  // normal, f32-like: block q holds pairs 2q and 2q + 1
      for (int h = 0; h < 4; ++h) {
        uint64_t i = 4 * q + h;
        if (i >= n) break;
        double z = box_muller(philox_u24(w.w[h & 2]), philox_u24(w.w[(h & 2) + 1]), h & 1);
        store(y, t, i, __dadd_rn(a, __dmul_rn(b, z)));
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) dropout_kernel(const int64_t* __restrict__ state, double rate, double keep,
                                                           DType t, const void* __restrict__ x, void* y, uint64_t n,
                                                           int64_t* next_state, uint64_t blocks) {
  const Stream s = read_state(state);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (first == 0) {
    next_state[0] = static_cast<int64_t>(s.seed);
    next_state[1] = static_cast<int64_t>(s.counter + blocks);
  }
  for (uint64_t q = first; q < blocks; q += stride) {
    PhiloxWords w = philox_block(s.seed, s.counter, q);
    for (int h = 0; h < 4; ++h) {
      uint64_t i = 4 * q + h;
      if (i >= n) break;
      store(y, t, i, philox_u24(w.w[h]) >= rate ? __ddiv_rn(load(x, t, i), keep) : 0.0);
    }
  }
}

__global__ void random_state_kernel(int64_t seed, int64_t* state) {
  state[0] = seed;
  state[1] = 0;
}

unsigned grid_of(uint64_t work, int sm_count) {
  uint64_t blocks = (work + kThreads - 1) / kThreads, cap = static_cast<uint64_t>(sm_count > 0 ? sm_count : 1) * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks < cap ? blocks : cap);
}

}  // namespace

uint64_t random_blocks(RandomDist d, DType t, uint64_t n) {
  const bool wide = t != DType::f32 && t != DType::f16 && t != DType::bf16;
  switch (d) {
    case RandomDist::uniform: return ((wide ? 2 : 1) * n + 3) / 4;
    case RandomDist::normal: return wide ? (n + 1) / 2 : ((n + 1) / 2 + 1) / 2;
    default: return kTruncatedAttempts * n;
  }
}

cudaError_t launch_random(const int64_t* state, RandomDist d, DType t, double a, double b, void* y, uint64_t n,
                          int64_t* next_state, int sm_count, cudaStream_t s) {
  const uint64_t blocks = random_blocks(d, t, n);
  const uint64_t work = d == RandomDist::truncated_normal ? n : blocks;
  random_kernel<<<grid_of(work, sm_count), kThreads, 0, s>>>(state, d, t, a, b, y, n, work, next_state, blocks);
  return cudaGetLastError();
}

cudaError_t launch_dropout(const int64_t* state, double rate, DType t, const void* x, void* y, uint64_t n,
                           int64_t* next_state, int sm_count, cudaStream_t s) {
  const uint64_t blocks = (n + 3) / 4;
  dropout_kernel<<<grid_of(blocks, sm_count), kThreads, 0, s>>>(state, rate, 1.0 - rate, t, x, y, n, next_state,
                                                                 blocks);
  return cudaGetLastError();
}

cudaError_t launch_random_state(int64_t seed, int64_t* state, cudaStream_t s) {
  random_state_kernel<<<1, 1, 0, s>>>(seed, state);
  return cudaGetLastError();
}

}  // namespace tg::detail
