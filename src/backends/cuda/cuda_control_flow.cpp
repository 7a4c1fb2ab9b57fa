#include "backends/cuda/cuda_control_flow.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"

namespace tg::detail {
namespace {

// Streams live as long as the process (like the device context's): buffers freed later may
// still name them. Index 0 is the allocation side stream, k >= 1 captures depth-k bodies.
cudaStream_t stream_at(int device, int k) {
  static std::mutex mu;
  static std::map<int, std::vector<cudaStream_t>> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto& v = streams[device];
  while (static_cast<int>(v.size()) <= k) {
    cudaStream_t s = nullptr;
    TG_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    v.push_back(s);
  }
  return v[static_cast<size_t>(k)];
}

cudaGraph_t capturing_graph(cudaStream_t s, const cudaGraphNode_t** deps, size_t* num_deps) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  // Edge data is asked for so that programmatic edges (cuBLASLt may add them) do not make the
  // query fail as lossy; the new node takes plain edges.
  const cudaGraphEdgeData* edges = nullptr;
  TG_CUDA(cudaStreamGetCaptureInfo(s, &status, nullptr, &graph, deps, &edges, num_deps));
  if (status != cudaStreamCaptureStatusActive)
    throw Error("[cuda] graph capture: the stream is not capturing (status " +
                std::to_string(static_cast<int>(status)) + ")");
  return graph;
}

}  // namespace

DeviceBuffer graph_buffer(DeviceContext& ctx, size_t bytes) {
  cudaMemPool_t pool = nullptr;
  TG_CUDA(cudaDeviceGetDefaultMemPool(&pool, ctx.index()));  // the pool DeviceContext allocates from
  void* p = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&p, bytes == 0 ? 1 : bytes, pool, stream_at(ctx.index(), 0));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw Error("[cuda] out of memory on cuda:" + std::to_string(ctx.index()) +
                " capturing a CUDA graph: requested " + std::to_string(bytes) + " bytes; tgraph holds " +
                std::to_string(ctx.bytes_in_use()) + " bytes in use");
  }
  cuda_check(e, "cudaMallocFromPoolAsync");
  cudaStream_t main = ctx.stream();
  return DeviceBuffer(static_cast<std::byte*>(p), [main](std::byte* q) { cudaFreeAsync(q, main); });
}

void graph_upload(DeviceContext& ctx, void* dst, const void* src, size_t bytes) {
  cudaStream_t side = stream_at(ctx.index(), 0);
  if (bytes) TG_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, side));
  TG_CUDA(cudaStreamSynchronize(side));
}

void graph_buffers_ready(DeviceContext& ctx) { TG_CUDA(cudaStreamSynchronize(stream_at(ctx.index(), 0))); }

cudaStream_t body_stream(int device, int depth) { return stream_at(device, depth); }

cudaGraphConditionalHandle new_cond_handle(cudaStream_t capturing) {
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cudaGraph_t graph = capturing_graph(capturing, &deps, &n);
  cudaGraphConditionalHandle h = 0;
  TG_CUDA(cudaGraphConditionalHandleCreate(&h, graph, 0, 0));
  return h;
}

std::array<cudaGraph_t, 2> add_cond_node(cudaStream_t capturing, cudaGraphConditionalHandle handle,
                                         cudaGraphConditionalNodeType type, unsigned size) {
  const cudaGraphNode_t* deps = nullptr;
  size_t n = 0;
  cudaGraph_t graph = capturing_graph(capturing, &deps, &n);
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = handle;
  p.conditional.type = type;
  p.conditional.size = size;
  cudaGraphNode_t node = nullptr;
  TG_CUDA(cudaGraphAddNode(&node, graph, deps, nullptr, n, &p));
  TG_CUDA(
      cudaStreamUpdateCaptureDependencies(capturing, &node, nullptr, 1, cudaStreamSetCaptureDependencies));
  return {p.conditional.phGraph_out[0], size > 1 ? p.conditional.phGraph_out[1] : nullptr};
}

BodyCapture::BodyCapture(cudaStream_t stream, cudaGraph_t body) : stream_(stream), body_(body) {
  // Relaxed: a kernel first met inside a body may still be loaded (cudaLibraryLoadData).
  TG_CUDA(cudaStreamBeginCaptureToGraph(stream, body, nullptr, nullptr, 0, cudaStreamCaptureModeRelaxed));
  active_ = true;
}

void BodyCapture::end() {
  active_ = false;
  cudaGraph_t g = nullptr;
  TG_CUDA(cudaStreamEndCapture(stream_, &g));
  size_t nodes = 0;
  TG_CUDA(cudaGraphGetNodes(body_, nullptr, &nodes));
  cudaGraphNode_t empty = nullptr;
  if (nodes == 0) TG_CUDA(cudaGraphAddEmptyNode(&empty, body_, nullptr, 0));  // a body with no work
}

BodyCapture::~BodyCapture() {
  if (!active_) return;
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream_, &g);
  cudaGetLastError();
}

}  // namespace tg::detail
