// tgraph's own matmul (kernels_matmul.h): what an op-by-op run computes a matmul with while its
// cuBLASLt kernel is not loaded yet (matmul_lt.cpp). Written to be right for every operand form
// matmul_lt takes, with nothing compiled at run time; not for cuBLASLt's speed (no tensor cores).
//
// A block computes a 64 x 64 tile of one batch's c with 256 threads, each 4 x 4 outputs (rows
// ty + 16 r, columns tx + 16 c: a warp's shared-memory reads are broadcasts or consecutive).
// a's and b's 16-deep slices go through shared memory widened to the accumulator's type, read
// along whichever dim each operand is contiguous in, so both transposes load coalesced.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/kernels_matmul.h"

namespace tg::detail {
namespace {

constexpr int kTile = 64;  // rows and columns of c per block
constexpr int kDepth = 16;  // k per shared-memory slice
constexpr int kSide = 16;  // threads per side (kSide * kSide per block)
constexpr int kPer = kTile / kSide;  // outputs per thread and side

__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ double widen(double x) { return x; }
__device__ __forceinline__ void store(__half& o, float x) { o = __float2half_rn(x); }
__device__ __forceinline__ void store(__nv_bfloat16& o, float x) { o = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store(float& o, float x) { o = x; }
__device__ __forceinline__ void store(double& o, double x) { o = x; }

template <class Acc>
__device__ __forceinline__ Acc activate(Acc v, MatmulKernelArgs::Epilogue epilogue) {
  if (epilogue == MatmulKernelArgs::Epilogue::relu_bias) return v > Acc(0) ? v : Acc(0);
  if (epilogue == MatmulKernelArgs::Epilogue::gelu_tanh_bias) {
    // The tanh form, as cuBLASLt's GELU epilogue: 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))).
    const Acc u = Acc(0.7978845608028654) * (v + Acc(0.044715) * v * v * v);
    return Acc(0.5) * v * (Acc(1) + tanh(u));
  }
  return v;
}

template <class T, class Acc>
__global__ void __launch_bounds__(kSide* kSide) matmul_kernel(MatmulKernelArgs p) {
  __shared__ Acc as[kDepth][kTile + 1];
  __shared__ Acc bs[kDepth][kTile + 1];  // (padded: a transposed b's stores go down columns)
  const int tid = static_cast<int>(threadIdx.x), tx = tid % kSide, ty = tid / kSide;
  const long long i0 = static_cast<long long>(blockIdx.y) * kTile, j0 = static_cast<long long>(blockIdx.x) * kTile;
  const long long batch = blockIdx.z;
  const T* a = static_cast<const T*>(p.a) + batch * p.stride_a;
  const T* b = static_cast<const T*>(p.b) + batch * p.stride_b;
  Acc acc[kPer][kPer];
#pragma unroll
  for (int r = 0; r < kPer; ++r)
#pragma unroll
    for (int c = 0; c < kPer; ++c) acc[r][c] = Acc(0);
  for (long long k0 = 0; k0 < p.k; k0 += kDepth) {
    for (int e = tid; e < kTile * kDepth; e += kSide * kSide) {
      // a [m, k]: consecutive threads along k; transposed ([k, m]): along m.
      const int r = p.ta ? e % kTile : e / kDepth, kk = p.ta ? e / kTile : e % kDepth;
      const long long gi = i0 + r, gk = k0 + kk;
      as[kk][r] = gi < p.m && gk < p.k ? Acc(widen(a[p.ta ? gk * p.m + gi : gi * p.k + gk])) : Acc(0);
      // b [k, n]: along n; transposed ([n, k]): along k.
      const int c = p.tb ? e / kDepth : e % kTile, kb = p.tb ? e % kDepth : e / kTile;
      const long long gj = j0 + c, gkb = k0 + kb;
      bs[kb][c] = gj < p.n && gkb < p.k ? Acc(widen(b[p.tb ? gj * p.k + gkb : gkb * p.n + gj])) : Acc(0);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kDepth; ++kk) {
      Acc x[kPer], y[kPer];
#pragma unroll
      for (int r = 0; r < kPer; ++r) x[r] = as[kk][ty + kSide * r];
#pragma unroll
      for (int c = 0; c < kPer; ++c) y[c] = bs[kk][tx + kSide * c];
#pragma unroll
      for (int r = 0; r < kPer; ++r)
#pragma unroll
        for (int c = 0; c < kPer; ++c) acc[r][c] += x[r] * y[c];
    }
    __syncthreads();
  }
  T* out = static_cast<T*>(p.c) + batch * p.m * p.n;
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const long long i = i0 + ty + kSide * r;
    if (i >= p.m) continue;
#pragma unroll
    for (int c = 0; c < kPer; ++c) {
      const long long j = j0 + tx + kSide * c;
      if (j >= p.n) continue;
      Acc v = acc[r][c];
      if (p.epilogue != MatmulKernelArgs::Epilogue::none) v = activate(v + Acc(widen(bias[j])), p.epilogue);
      store(out[i * p.n + j], v);
    }
  }
}

}  // namespace

cudaError_t launch_matmul(const MatmulKernelArgs& p, cudaStream_t stream) {
  const long long rows = (p.m + kTile - 1) / kTile, cols = (p.n + kTile - 1) / kTile;
  if (p.m <= 0 || p.n <= 0 || p.k < 0 || p.batch < 1 || rows > 65535 || cols > 2147483647LL || p.batch > 65535 ||
      (p.epilogue != MatmulKernelArgs::Epilogue::none && !p.bias))
    return cudaErrorInvalidValue;
  MatmulKernelArgs q = p;
  if (q.batch == 1) q.stride_a = q.stride_b = 0;
  const dim3 grid(static_cast<unsigned>(cols), static_cast<unsigned>(rows), static_cast<unsigned>(q.batch));
  const dim3 block(kSide * kSide);
  switch (q.type) {
    case MatmulKernelArgs::Type::f16: matmul_kernel<__half, float><<<grid, block, 0, stream>>>(q); break;
    case MatmulKernelArgs::Type::bf16: matmul_kernel<__nv_bfloat16, float><<<grid, block, 0, stream>>>(q); break;
    case MatmulKernelArgs::Type::f32: matmul_kernel<float, float><<<grid, block, 0, stream>>>(q); break;
    case MatmulKernelArgs::Type::f64: matmul_kernel<double, double><<<grid, block, 0, stream>>>(q); break;
  }
  return cudaGetLastError();
}

}  // namespace tg::detail
