#pragma once
// Runs of a CUDA executable on device-resident tensors (src/backends/cuda/cuda_executor.cpp).
#include <vector>

#include "runtime/executable_impl.h"
#include "tgraph/device_tensor.h"

namespace tg::detail {

/// Executable::run_device on CUDA: inputs read on the device, outputs
/// left there (fresh buffers, complete when it returns).
std::vector<DeviceTensor> run_cuda_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs);

}  // namespace tg::detail
