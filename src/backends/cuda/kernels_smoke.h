#pragma once
// Launchers of the kernels in kernels_smoke.cu (kernels only there; host logic in .cpp).
#include <cuda_runtime_api.h>

namespace tg::detail {

/// y = a*x + y, grid-stride.
cudaError_t launch_axpy(float a, const float* x, float* y, long long n, cudaStream_t stream);

}  // namespace tg::detail
