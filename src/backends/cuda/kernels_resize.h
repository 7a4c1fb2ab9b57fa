#pragma once
// Launcher of the resize kernel in kernels_resize.cu.
#include <cuda_runtime_api.h>

#include "tgraph/dtype.h"

namespace tg::detail {

/// A rank-4 activation resized from [ih, iw] to [oh, ow] (NHWC when channels_last, else NCHW).
struct ResizeGeometry {
  long long n, c, ih, iw, oh, ow;
  bool channels_last;
};

/// resize as the CPU reference does it. `coordinates` and `rounding` are tg::CoordinateMode and
/// tg::NearestRounding as ints. Nearest copies elements by size (any dtype); bilinear reads
/// floats as double, blends with the reference's operation order (no FMA contraction) and
/// stores through the dtype's store rule, so results match the reference exactly.
cudaError_t launch_resize(const void* in, void* out, DType t, const ResizeGeometry& g, bool bilinear,
                          int coordinates, int rounding, cudaStream_t stream);

}  // namespace tg::detail
