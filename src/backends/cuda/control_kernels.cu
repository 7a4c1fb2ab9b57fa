#include <cstdint>

#include "backends/cuda/control_kernels.h"

namespace tg::detail {
namespace {

__device__ unsigned long long raw_bits(const DeviceScalar& s) {
  switch (s.bytes) {
    case 1: return *static_cast<const unsigned char*>(s.ptr);
    case 2: return *static_cast<const unsigned short*>(s.ptr);
    case 4: return *static_cast<const unsigned int*>(s.ptr);
    default: return *static_cast<const unsigned long long*>(s.ptr);
  }
}

// Non-zero test that treats -0.0 as zero and NaN as true, like `value != 0` on the host.
__device__ bool truth(const DeviceScalar& s) {
  unsigned long long b = raw_bits(s);
  if (s.is_float) b &= ~(1ull << (8 * s.bytes - 1));
  return b != 0;
}

__device__ long long load_int(const DeviceScalar& s) {
  unsigned long long b = raw_bits(s);
  if (s.is_signed && s.bytes < 8) {
    int shift = 64 - 8 * s.bytes;
    return static_cast<long long>(b << shift) >> shift;
  }
  return static_cast<long long>(b);
}

__device__ void copy_bytes(void* dst, const void* src, unsigned long long n, unsigned long long tid,
                           unsigned long long threads) {
  bool aligned = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
  unsigned long long vec = aligned ? n / 16 : 0;
  for (unsigned long long i = tid; i < vec; i += threads)
    static_cast<uint4*>(dst)[i] = static_cast<const uint4*>(src)[i];
  for (unsigned long long i = vec * 16 + tid; i < n; i += threads)
    static_cast<unsigned char*>(dst)[i] = static_cast<const unsigned char*>(src)[i];
}

__global__ void control_kernel(ControlCopies c, ControlCond a) {
  unsigned long long tid = blockIdx.x * 256ull + threadIdx.x, threads = 256ull * gridDim.x;
  for (int k = 0; k < c.n; ++k) copy_bytes(c.dst[k], c.src[k], c.bytes[k], tid, threads);
  if (a.op == CondOp::none || tid != 0) return;
  // One thread sets the handle: concurrent cudaGraphSetConditional calls are undefined.
  unsigned int go = 0;
  if (a.op == CondOp::truth) {
    go = truth(a.pred);
  } else if (a.op == CondOp::for_start) {
    long long lo = load_int(a.lower), hi = load_int(a.upper), step = load_int(a.step);
    *a.index = static_cast<int>(lo);
    a.ctl[0] = hi;
    a.ctl[1] = step;
    if (step <= 0 && a.error) *a.error = 1;
    go = step > 0 && lo < hi;
  } else {
    long long i = static_cast<long long>(*a.index) + a.ctl[1];
    *a.index = static_cast<int>(i);
    go = i < a.ctl[0];
  }
  cudaGraphSetConditional(a.handle, go);
}

}  // namespace

cudaError_t launch_control(const ControlCopies& copies, const ControlCond& cond, int sm_count,
                           cudaStream_t stream) {
  if (copies.n < 0 || copies.n > kMaxControlCopies) return cudaErrorInvalidValue;
  unsigned long long total = 0;
  for (int k = 0; k < copies.n; ++k) total += copies.bytes[k];
  // One 16-byte chunk per thread up to a few waves; a lone handle update runs as one block.
  unsigned long long blocks = (total / 16 + 255) / 256;
  unsigned long long cap = static_cast<unsigned long long>(sm_count > 0 ? sm_count : 1) * 4;
  blocks = blocks < 1 ? 1 : blocks > cap ? cap : blocks;
  control_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(copies, cond);
  return cudaGetLastError();
}

}  // namespace tg::detail
