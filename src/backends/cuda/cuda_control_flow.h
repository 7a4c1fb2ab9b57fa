#pragma once
// CUDA graph plumbing for control flow captured on the device: memory that captured graphs
// own, the streams that capture conditional bodies, and conditional IF / WHILE nodes added to
// a graph under capture. The executor (cuda_executor.cpp) decides what goes in each body.
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>

#include "backends/cuda/device_context.h"

namespace tg::detail {

/// Device memory a captured graph reads and writes at a fixed address. It is taken from the
/// device's pool on a side stream that is never captured (so no allocation node lands in a
/// graph, which conditional bodies forbid) and freed on the device's stream, after the work
/// already queued there. Call graph_buffers_ready() before the graph first runs.
DeviceBuffer graph_buffer(DeviceContext& ctx, size_t bytes);
/// Copies host bytes into a graph_buffer outside any capture and waits for the copy.
void graph_upload(DeviceContext& ctx, void* dst, const void* src, size_t bytes);
/// Waits until every graph_buffer allocation made so far can be used on any stream.
void graph_buffers_ready(DeviceContext& ctx);

/// The stream that captures bodies nested `depth` (>= 1) conditional nodes deep.
cudaStream_t body_stream(int device, int depth);

/// A conditional handle owned by the graph `capturing` is recording into.
cudaGraphConditionalHandle new_cond_handle(cudaStream_t capturing);
/// Adds a conditional node after the work `capturing` has recorded so far (later work on the
/// stream follows the node) and returns its body graphs (IF with size 2: then, else).
std::array<cudaGraph_t, 2> add_cond_node(cudaStream_t capturing, cudaGraphConditionalHandle handle,
                                         cudaGraphConditionalNodeType type, unsigned size);

/// Records work into a conditional node's body on `stream` from construction until end();
/// ends the capture (discarding it) if the scope is left by an exception.
class BodyCapture {
 public:
  BodyCapture(cudaStream_t stream, cudaGraph_t body);
  BodyCapture(const BodyCapture&) = delete;
  BodyCapture& operator=(const BodyCapture&) = delete;
  ~BodyCapture();
  void end();

 private:
  cudaStream_t stream_;
  cudaGraph_t body_;
  bool active_ = false;
};

}  // namespace tg::detail
