#include "backends/cuda/kernels_layout.h"

namespace tg::detail {
namespace {

struct PermuteArgs {
  int rank;
  long long out_dims[kMaxPermuteRank];
  long long in_strides_for_out[kMaxPermuteRank];  // in stride of the dim that out dim i reads
};

template <class T>
__global__ void permute_kernel(const T* __restrict__ in, T* __restrict__ out, PermuteArgs a, long long n) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x) {
    long long rest = i, src = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      long long c = rest % a.out_dims[d];
      rest /= a.out_dims[d];
      src += c * a.in_strides_for_out[d];
    }
    out[i] = in[src];
  }
}

template <class T>
cudaError_t launch(const void* in, void* out, const PermuteArgs& a, long long n, cudaStream_t stream) {
  long long blocks = (n + 255) / 256;
  permute_kernel<T><<<static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, stream>>>(
      static_cast<const T*>(in), static_cast<T*>(out), a, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_permute(const void* in, void* out, int rank, const long long* in_dims, const int* perm,
                           int elem_size, cudaStream_t stream) {
  if (rank < 1 || rank > kMaxPermuteRank) return cudaErrorInvalidValue;
  PermuteArgs a{};
  a.rank = rank;
  long long in_strides[kMaxPermuteRank];
  long long n = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (in_dims[d] < 0) return cudaErrorInvalidValue;
    in_strides[d] = n;
    n *= in_dims[d];
  }
  bool used[kMaxPermuteRank] = {};
  for (int d = 0; d < rank; ++d) {
    int p = perm[d];
    if (p < 0 || p >= rank || used[p]) return cudaErrorInvalidValue;
    used[p] = true;
    a.out_dims[d] = in_dims[p];
    a.in_strides_for_out[d] = in_strides[p];
  }
  if (n == 0) return cudaSuccess;
  switch (elem_size) {
    case 1: return launch<unsigned char>(in, out, a, n, stream);
    case 2: return launch<unsigned short>(in, out, a, n, stream);
    case 4: return launch<unsigned int>(in, out, a, n, stream);
    case 8: return launch<unsigned long long>(in, out, a, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tg::detail
