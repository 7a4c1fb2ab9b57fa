// Temporary memory for device ops, from the allocator of the run that calls them (cuda_ops.h).
#include "backends/cuda/cuda_ops.h"

namespace tg::detail {
namespace {

thread_local const std::function<DeviceBuffer(size_t)>* current_alloc = nullptr;

}  // namespace

OpWorkspaceScope::OpWorkspaceScope(std::function<DeviceBuffer(size_t)> alloc)
    : alloc_(std::move(alloc)), saved_(current_alloc) {
  current_alloc = &alloc_;
}

OpWorkspaceScope::~OpWorkspaceScope() { current_alloc = saved_; }

DeviceBuffer op_workspace(size_t bytes, cudaStream_t stream, int device) {
  if (current_alloc) return (*current_alloc)(bytes);
  return DeviceContext::get(device).allocate(bytes, stream);
}

}  // namespace tg::detail
