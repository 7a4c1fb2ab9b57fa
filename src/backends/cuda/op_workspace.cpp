// Temporary memory for device ops, from the allocator of the run that calls them, and scratch
// operands for calls made ahead of a run (cuda_ops.h).
#include "backends/cuda/cuda_ops.h"

#include <algorithm>

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

void call_on_scratch(DeviceOp op, const GraphImpl& g, const Node& n, const std::vector<TensorType>& in,
                     const std::vector<TensorType>& out, cudaStream_t stream, int device) {
  DeviceContext& ctx = DeviceContext::get(device);
  std::vector<DeviceBuffer> keep;
  auto scratch = [&](const TensorType& t) {
    keep.push_back(ctx.allocate(std::max<size_t>(1, static_cast<size_t>(t.shape.num_elements()) * dtype_size(t.dtype)),
                                stream));
    return keep.back().get();
  };
  std::vector<DevArg> a;
  std::vector<DevOut> o;
  for (const TensorType& t : in) a.push_back(DevArg{scratch(t), t});
  for (const TensorType& t : out) o.push_back(DevOut{scratch(t), t});
  op(g, n, a, o, stream, device);
}

}  // namespace tg::detail
