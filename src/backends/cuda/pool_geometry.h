#pragma once
// The window geometry of a 2-D pooling for the device's pooling kernels, as the CPU
// reference's make_pool (src/backends/cpu/ref_conv.cpp) has it: padding before from the
// padding style and the output size, padding after bounding the extent count_include_pad
// counts. Shared by max pooling (cuda_max_pool.cpp) and average pooling (cuda_avg_pool.cpp).
#include <cstdint>
#include <vector>

#include "backends/cuda/kernels_max_pool.h"
#include "tgraph/descriptors.h"

namespace tg::detail {

/// Fills g (and after[2], the padding after along H and W, when given) for pooling x of dims xd
/// into y of dims yd under d; false when d or the dims are not a 2-D pooling the kernels take
/// (rank other than 4, a layout other than NHWC / NCHW, windows, strides or dilations below 1).
bool pool_geometry(const PoolDesc& d, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd,
                   PoolGeometry& g, int64_t* after = nullptr);

}  // namespace tg::detail
