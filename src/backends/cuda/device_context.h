#pragma once
// Per-device CUDA state shared by every executable on that device: the stream-ordered
// caching allocator (a CUDA memory pool that keeps freed blocks), library handles and their
// workspaces, and pinned staging for host transfers.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>

namespace tg::detail {

/// Device memory that returns to the pool (stream-ordered) when the last owner lets go.
using DeviceBuffer = std::shared_ptr<std::byte>;

class DeviceContext {
 public:
  /// The context of device `index`, made on first use.
  static DeviceContext& get(int index);

  int index() const { return index_; }
  /// The stream runs use (non-blocking; lives as long as the process).
  cudaStream_t stream() const { return stream_; }
  /// Allocates on `stream` from the pool; throws tg::Error naming the request size and what is
  /// in use when the device is out of memory.
  DeviceBuffer allocate(size_t bytes, cudaStream_t stream);
  /// Gives the pool's unused memory back to the driver (before an allocation outside the pool
  /// is retried: cudaMalloc cannot use what the pool keeps).
  void release_cached();
  /// Bytes held by tgraph's pool: in use now, and reserved from the driver.
  size_t bytes_in_use() const;
  size_t bytes_reserved() const;
  /// The most bytes the pool had in use at once since the process started.
  size_t bytes_peak() const;
  /// cuBLASLt handle and a workspace for it (explicit, so calls can be graph-captured).
  void* cublaslt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return kWorkspace; }
  /// Serialises use of the shared workspace between concurrent runs.
  std::mutex& library_mutex() { return lib_mu_; }

  static constexpr size_t kWorkspace = 64u << 20;

 private:
  explicit DeviceContext(int index);
  int index_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  void* lt_ = nullptr;
  void* workspace_ = nullptr;
  std::mutex lib_mu_;
};

}  // namespace tg::detail
