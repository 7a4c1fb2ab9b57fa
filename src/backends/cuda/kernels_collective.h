#pragma once
// The one kernel the collectives need besides NCCL's (kernels_collective.cu): a mean's division.
#include <cuda_runtime_api.h>

#include "tgraph/dtype.h"

namespace tg::detail {

/// data[i] = data[i] / divisor for i < n, computed in double and rounded once to `t` (f32, f64,
/// f16, bf16; through float for the 16-bit types, as the host's mean): an all_reduce's mean
/// from its sum. cudaErrorInvalidValue (nothing launched) for another dtype.
cudaError_t launch_divide(void* data, long long n, DType t, double divisor, cudaStream_t stream);

}  // namespace tg::detail
