#pragma once
// Launchers of avg_pool2d and avg_pool2d_grad in kernels_avg_pool.cu: the cases cuDNN's
// pooling declines (ceil_mode, asymmetric padding, dilation, count_include_pad with windows
// past the padding after).
#include <cuda_runtime_api.h>

#include "backends/cuda/kernels_max_pool.h"
#include "tgraph/dtype.h"

namespace tg::detail {

/// A 2-D average pooling: the window geometry, the padding after (which bounds the padded
/// extent [-before, in + after) that count_include_pad counts), and the divisor rule.
struct AvgPoolGeometry {
  PoolGeometry win;
  long long pah, paw;  // padding after, along H and W
  bool count_include_pad;
};

/// y = the sum of each window's taps inside x over its divisor (the taps inside x, or inside
/// the padded extent with count_include_pad; 0 for a zero divisor), as the CPU reference:
/// sums in row-major window order in double for f32 / f64, in float for f16 / bf16. Float
/// dtypes only (cudaErrorInvalidValue otherwise).
cudaError_t launch_avg_pool(const void* x, void* y, DType t, const AvgPoolGeometry& g, cudaStream_t stream);

/// dx (x's shape) = the adjoint of launch_avg_pool applied to dy (y's shape): each element of
/// x gathers dy / divisor of the windows holding it, in row-major window order.
cudaError_t launch_avg_pool_grad(const void* dy, void* dx, DType t, const AvgPoolGeometry& g,
                                 cudaStream_t stream);

}  // namespace tg::detail
