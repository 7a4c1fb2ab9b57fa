#pragma once
// Runs of a CUDA executable on device-resident tensors (src/backends/cuda/cuda_executor.cpp).
#include <optional>
#include <vector>

#include "runtime/executable_impl.h"
#include "tgraph/device_tensor.h"

namespace tg::detail {

/// Executable::run_device on CUDA: inputs read on the device, outputs left there (fresh
/// buffers). `caller`: none for a run complete when it returns; else a cudaStream_t (nullptr:
/// the legacy default stream) the run is ordered after and that waits for it, without blocking.
/// `donated`: positions of inputs the caller gives up (Executable::run_device).
std::vector<DeviceTensor> run_cuda_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs,
                                          std::optional<void*> caller = std::nullopt,
                                          const std::vector<size_t>& donated = {});

}  // namespace tg::detail
