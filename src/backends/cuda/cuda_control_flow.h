#pragma once
// CUDA graph plumbing for control flow captured on the device: memory that captured graphs
// own, the streams that capture conditional bodies, and conditional IF / WHILE nodes added to
// a graph under capture. The executor (cuda_executor.cpp) decides what goes in each body.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "backends/cuda/device_context.h"

namespace tg::detail {

/// Device memory a captured graph reads and writes at fixed addresses, for as long as any of its
/// buffers lives: plain cudaMalloc chunks carved into 256-byte-aligned pieces. Not the pool's
/// stream-ordered memory: a pool block's validity is tied to a stream's order, which conditional
/// bodies (run by the device on streams of its own) and the runs that follow do not share, and
/// compute-sanitizer faulted on exactly those reads when the device was busy
/// (docs/decisions.md). No allocation ever lands in a graph as a node (bodies forbid them).
/// A buffer released during the capture returns its bytes for later takes of the same capture:
/// the captured work runs in the order it was recorded, so a later kernel writing them runs
/// after every earlier reader (what the stream-ordered pool does for uncaptured runs).
class GraphMemory {
 public:
  /// Every piece is a multiple of it, and aligned to it.
  static constexpr size_t kAlign = 256;
  /// n bytes (at least one) rounded up to kAlign: what a piece of n bytes takes.
  static constexpr size_t rounded(size_t n) { return (std::max<size_t>(n, 1) + kAlign - 1) / kAlign * kAlign; }
  explicit GraphMemory(DeviceContext& ctx);
  GraphMemory(const GraphMemory&) = delete;
  GraphMemory& operator=(const GraphMemory&) = delete;
  /// A buffer of `bytes`; it keeps its chunk alive. Throws tg::Error naming the request size
  /// and what is in use when the device is out of memory.
  DeviceBuffer take(size_t bytes);
  /// Bytes of device memory this graph's chunks hold.
  size_t bytes() const { return reserved_; }
  /// The most bytes its buffers held at once (the rest of bytes() is what taking them one at a
  /// time in chunks left unused).
  size_t live_peak() const;
  /// Lays the next takes out in one chunk of `total` bytes (allocated now) by a plan made from
  /// a recorded run's allocations (runtime/lifetime_plan.h): take k gets offsets[k] when it asks
  /// for sizes[k] bytes (rounded up to kAlign) or fewer and no planned buffer still alive
  /// overlaps it there, else a
  /// chunk as before (and take k + 1 goes on with the plan). So a capture that allocates as the
  /// recorded run did holds its live peak, not what online best fit leaves.
  void plan(std::vector<size_t> sizes, std::vector<size_t> offsets, size_t total);
  /// The same where some takes land in bytes the graph does not own: inputs the caller donated
  /// (runtime/lifetime_plan.h, place_in_donated). Take k goes to at[k] when that is set (else
  /// to offsets[k] in the chunk), and only once every donated input under it was let go
  /// (donated_release); a take there holds no chunk.
  struct Donated {
    std::byte* lo = nullptr;
    size_t bytes = 0;
  };
  void plan(std::vector<size_t> sizes, std::vector<size_t> offsets, size_t total, std::vector<std::byte*> at,
            std::vector<Donated> donated);
  /// What to call when the run lets go of donated input k (the last reference to its value).
  std::function<void()> donated_release(size_t k) const;
  /// Whether [p, p + n) shares a byte with a donated input of the plan.
  bool in_donated(const void* p, size_t n) const;
  /// Takes the plan served, and of them those in donated bytes.
  size_t planned_takes() const;
  size_t donated_takes() const;

 private:
  struct FreeList;  // released pieces by address, with their chunk (cuda_control_flow.cpp)
  struct Plan;      // the planned chunk's offsets and its buffers alive (cuda_control_flow.cpp)
  size_t new_chunk(size_t chunk, size_t request);  // cudaMalloc'ed, counted; its index
  DeviceContext& ctx_;
  std::shared_ptr<Plan> plan_;
  std::vector<std::shared_ptr<std::byte>> chunks_;
  std::shared_ptr<FreeList> free_;
  // The chunk new pieces are cut from (the planned chunk never is), how much of it is cut and
  // its size (0: none yet); all chunks' bytes.
  size_t bump_ = 0, used_ = 0, size_ = 0, reserved_ = 0;
};
/// Whether [a, a + n) and [b, b + m) share a byte.
inline bool shares_bytes(const void* a, size_t n, const void* b, size_t m) {
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  return x < y + m && y < x + n;
}

/// Bytes all captured graphs on `device` hold now.
size_t graph_memory_bytes(int device);
/// Records that tgraph's pool on `device` has `pool_in_use` bytes allocated (after an
/// allocation), for the peak below.
void note_device_usage(int device, size_t pool_in_use);
/// The most bytes tgraph held on `device` at once (pool allocations + graph memory) since the
/// process started or reset_device_peak.
size_t device_peak_bytes(int device);
void reset_device_peak(int device, size_t pool_in_use);
/// Copies host bytes into graph memory outside any capture and waits for the copy.
void graph_upload(DeviceContext& ctx, void* dst, const void* src, size_t bytes);

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
