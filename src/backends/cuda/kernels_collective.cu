// The mean of a collective: its sum divided by the world size on the device (kernels_collective.h).
#include "backends/cuda/kernels_collective.h"
#include "backends/cuda/kernels_convert.cuh"

namespace tg::detail {
namespace {

template <class T>
__global__ void __launch_bounds__(256) divide_kernel(T* __restrict__ data, long long n, double divisor) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x)
    data[i] = dev::from_double<T>(dev::to_double(data[i]) / divisor);
}

}  // namespace

cudaError_t launch_divide(void* data, long long n, DType t, double divisor, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (!data || (t != DType::f32 && t != DType::f64 && t != DType::f16 && t != DType::bf16)) return cudaErrorInvalidValue;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, dev::F16> ||
                  std::is_same_v<T, dev::BF16>)
      divide_kernel<T><<<dev::grid_for(n), 256, 0, stream>>>(static_cast<T*>(data), n, divisor);
  });
  return cudaGetLastError();
}

}  // namespace tg::detail
