#pragma once
// Lent outputs. A stream-ordered run_device (the PyTorch frontend's) hands large outputs of a
// replay to the caller as they are, in the captured graph's memory, instead of copying each
// into fresh memory: a training forward's saved activations are most of its bytes, and a copy
// of them per step costs as much bandwidth as a tenth of the step and as much memory again.
// One lease is held by every output of a replay lent this way; while it lives the instance
// does not replay (cuda_executor.cpp, run_common). A later run given a lent output (the
// backward reading the forward's saved activations) finds it here by address and reads it in
// place, with no copy either.
#include <memory>
#include <vector>

#include "backends/cuda/cuda_run.h"

namespace tg::detail::cuda_run {

/// Outputs smaller than this are copied: cheap, and a held loss value does not pin the instance.
constexpr size_t kLendMinBytes = size_t{1} << 20;

/// Lends the buffers at `addresses` of `instance`: returns the lease (the outputs' owners share
/// it), which marks the instance busy and registers the addresses until it is released.
std::shared_ptr<void> lend(const std::shared_ptr<Captured>& instance, const std::vector<const void*>& addresses);

/// The memory of a lent output at `data` with `type`, kept alive by its instance (not by the
/// lease, so reading it in place does not keep the instance busy); empty when `data` is none.
DevTensor find_lent(const void* data, const TensorType& type);

}  // namespace tg::detail::cuda_run
