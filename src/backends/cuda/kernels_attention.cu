// tgraph's own fused attention (kernels_attention.h): what runs a shape's first calls while
// cuDNN's plan for it is built (cudnn_attention.cpp's tiered path). Written for being right at
// any size with no compile at run time, not for cuDNN's speed: no tensor cores.
//
// A block takes 32 queries of one (batch, head); four threads share a query, each holding 8 of
// every 32 head dims (dims c*32 + part*8 .. +7 of chunk c), so a score is four partial dot
// products summed by two shuffles and a thread's loads from shared memory are 16 bytes. Keys
// and values go through shared memory 32 keys at a time; the softmax is online (a running
// maximum m and sum l, the accumulated output rescaled when m grows), in base 2: q is scaled
// by scale * log2(e) once and exp2 takes the scores. Everything accumulates in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/kernels_attention.h"

namespace tg::detail {
namespace {

constexpr int kRows = 32;   // queries per block
constexpr int kParts = 4;   // threads per query
constexpr int kKeys = 32;   // keys per shared-memory tile
constexpr int kThreads = kRows * kParts;
constexpr float kLog2e = 1.4426950408889634f;

// Pairs and single elements of the io dtype (H2: __half2 or __nv_bfloat162) to float and back.
__device__ __forceinline__ float2 widen2(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 widen2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
__device__ __forceinline__ void narrow2(float a, float b, __half2& h) { h = __floats2half2_rn(a, b); }
__device__ __forceinline__ void narrow2(float a, float b, __nv_bfloat162& h) { h = __floats2bfloat162_rn(a, b); }
__device__ __forceinline__ float widen1(const uint16_t* p, __half2) { return __half2float(*reinterpret_cast<const __half*>(p)); }
__device__ __forceinline__ float widen1(const uint16_t* p, __nv_bfloat162) {
  return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p));
}

// Eight elements of the io dtype in 16 bytes, widened to float and back.
template <class H2>
struct Io {
  static __device__ __forceinline__ void widen(const uint4& u, float* f) {
    const H2* h = reinterpret_cast<const H2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = widen2(h[i]);
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
  static __device__ __forceinline__ uint4 narrow(const float* f) {
    uint4 u;
    H2* h = reinterpret_cast<H2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) narrow2(f[2 * i], f[2 * i + 1], h[i]);
    return u;
  }
  static __device__ __forceinline__ float one(const uint16_t* p) { return widen1(p, H2{}); }
};

// Copies keys [k0, k0 + kKeys) of a [lk, d] matrix into tile (zeros past lk), 16 bytes a thread.
__device__ __forceinline__ void stage(const uint16_t* src, uint16_t* tile, long long k0, long long lk, int d) {
  const int vecs = d / 8;
  for (int e = threadIdx.x; e < kKeys * vecs; e += kThreads) {
    const int r = e / vecs, col = (e % vecs) * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (k0 + r < lk) x = *reinterpret_cast<const uint4*>(src + (k0 + r) * d + col);
    *reinterpret_cast<uint4*>(tile + r * d + col) = x;
  }
}

// NCH: chunks of 32 head dims a query holds (max(dqk, dv) <= 32 * NCH).
template <class H2, int NCH>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs a) {
  using io = Io<H2>;
  extern __shared__ uint4 tiles[];  // keys then values, kKeys rows each
  const int dqk = static_cast<int>(a.dqk), dv = static_cast<int>(a.dv);
  uint16_t* ks = reinterpret_cast<uint16_t*>(tiles);
  uint16_t* vs = ks + kKeys * dqk;
  const int row = static_cast<int>(threadIdx.x) / kParts, part = static_cast<int>(threadIdx.x) % kParts;
  const long long bh = blockIdx.x;  // batch * heads + head
  const long long i = static_cast<long long>(blockIdx.y) * kRows + row;
  const bool live = i < a.lq;  // the last block's extra rows compute, never store
  const long long qi = live ? i : 0;
  const uint16_t* q = static_cast<const uint16_t*>(a.q) + (bh * a.lq + qi) * dqk;
  const uint16_t* k = static_cast<const uint16_t*>(a.k) + bh * a.lk * dqk;
  const uint16_t* v = static_cast<const uint16_t*>(a.v) + bh * a.lk * dv;
  const uint16_t* bias = nullptr;
  if (a.bias)
    bias = static_cast<const uint16_t*>(a.bias) + (bh / a.heads) * a.bias_strides[0] +
           (bh % a.heads) * a.bias_strides[1] + qi * a.bias_strides[2];

  float qf[NCH * 8], acc[NCH * 8];
  const float qscale = a.scale * kLog2e;
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d = c * 32 + part * 8;
    if (live && d < dqk) {
      io::widen(*reinterpret_cast<const uint4*>(q + d), qf + c * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[c * 8 + e] *= qscale;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) qf[c * 8 + e] = 0.f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[c * 8 + e] = 0.f;
  }

  float m = -INFINITY, l = 0.f;  // running maximum (base-2 scores) and sum of exp2(score - m)
  long long kend = a.lk;         // causal: no query of this block sees a key past its last query
  if (a.causal) kend = min(a.lk, static_cast<long long>(blockIdx.y + 1) * kRows);
  for (long long k0 = 0; k0 < kend; k0 += kKeys) {
    __syncthreads();  // the previous tile is read
    stage(k, ks, k0, a.lk, dqk);
    stage(v, vs, k0, a.lk, dv);
    __syncthreads();
    float s[kKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      float dot = 0.f;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d = c * 32 + part * 8;
        if (d < dqk) {
          float kf[8];
          io::widen(*reinterpret_cast<const uint4*>(ks + j * dqk + d), kf);
#pragma unroll
          for (int e = 0; e < 8; ++e) dot = fmaf(qf[c * 8 + e], kf[e], dot);
        }
      }
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // the query's four threads are adjacent lanes
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      const long long key = k0 + j;
      if (key >= a.lk || (a.causal && key > i))
        dot = -INFINITY;
      else if (bias)
        dot = fmaf(io::one(bias + key), kLog2e, dot);
      s[j] = dot;
      tile_max = fmaxf(tile_max, dot);
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) continue;  // every key so far hidden from this query
    const float keep = exp2f(m - m_new);  // 0 while m is -inf
    l *= keep;
#pragma unroll
    for (int x = 0; x < NCH * 8; ++x) acc[x] *= keep;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) {
      const float p = exp2f(s[j] - m_new);
      l += p;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d = c * 32 + part * 8;
        if (d < dv) {
          float vf[8];
          io::widen(*reinterpret_cast<const uint4*>(vs + j * dv + d), vf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[c * 8 + e] = fmaf(p, vf[e], acc[c * 8 + e]);
        }
      }
    }
    m = m_new;
  }
  if (!live) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // a query that saw no key gives 0
  uint16_t* o = static_cast<uint16_t*>(a.o) + (bh * a.lq + i) * dv;
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d = c * 32 + part * 8;
    if (d < dv) {
      float f[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) f[e] = acc[c * 8 + e] * inv;
      *reinterpret_cast<uint4*>(o + d) = io::narrow(f);
    }
  }
}

template <class H2, int NCH>
cudaError_t launch(const AttentionArgs& a, dim3 grid, size_t shared, cudaStream_t stream) {
  attention_kernel<H2, NCH><<<grid, kThreads, shared, stream>>>(a);
  return cudaGetLastError();
}

template <class H2>
cudaError_t launch_for(const AttentionArgs& a, dim3 grid, size_t shared, cudaStream_t stream) {
  const long long d = a.dqk > a.dv ? a.dqk : a.dv;
  if (d <= 32) return launch<H2, 1>(a, grid, shared, stream);
  if (d <= 64) return launch<H2, 2>(a, grid, shared, stream);
  if (d <= 128) return launch<H2, 4>(a, grid, shared, stream);
  return launch<H2, 8>(a, grid, shared, stream);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool attention_kernel_takes(long long dqk, long long dv) {
  return dqk >= 8 && dv >= 8 && dqk <= 256 && dv <= 256 && dqk % 8 == 0 && dv % 8 == 0;
}

cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (!attention_kernel_takes(a.dqk, a.dv) || a.batch < 1 || a.heads < 1 || a.lk < 0 || a.lq < 0)
    return cudaErrorInvalidValue;
  // 16-byte loads and stores (dense operands of head dims multiple of 8 keep every row aligned).
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.o))
    return cudaErrorMisalignedAddress;
  if (a.lq == 0) return cudaSuccess;
  const long long bh = a.batch * a.heads, tiles = (a.lq + kRows - 1) / kRows;
  if (bh > 0x7fffffffLL || tiles > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(bh), static_cast<unsigned>(tiles));
  const size_t shared = static_cast<size_t>(kKeys * (a.dqk + a.dv)) * 2;  // at most 32 KiB
  return a.bf16 ? launch_for<__nv_bfloat162>(a, grid, shared, stream) : launch_for<__half2>(a, grid, shared, stream);
}

}  // namespace tg::detail
