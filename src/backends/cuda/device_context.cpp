#include "backends/cuda/device_context.h"

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <string>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_control_flow.h"

namespace tg::detail {

DeviceContext& DeviceContext::get(int index) {
  // Never destroyed: warm-up threads may still use a context while the program exits
  // (library_warmup.h), and the driver frees what a context holds at exit anyway.
  static auto* mu = new std::mutex;
  static auto* contexts = new std::map<int, std::unique_ptr<DeviceContext>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto& c = (*contexts)[index];
  if (!c) c.reset(new DeviceContext(index));
  return *c;
}

DeviceContext::DeviceContext(int index) : index_(index) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || index >= n) {
    cudaGetLastError();
    throw Error("[cuda] device " + std::to_string(index) + " is not available (" + std::to_string(n) +
                " CUDA devices found)");
  }
  TG_CUDA(cudaSetDevice(index));
  TG_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TG_CUDA(cudaDeviceGetDefaultMemPool(&pool_, index));
  // Keep freed memory in the pool instead of returning it to the driver at each sync: this is
  // what makes the pool a caching allocator.
  uint64_t threshold = UINT64_MAX;
  TG_CUDA(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  cublasLtHandle_t h;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) throw Error("[cuda] cublasLtCreate failed");
  lt_ = h;
  TG_CUDA(cudaMalloc(&workspace_, kWorkspace));
}

DeviceBuffer DeviceContext::allocate(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&p, bytes == 0 ? 1 : bytes, pool_, stream);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    throw Error("[cuda] out of memory on cuda:" + std::to_string(index_) + ": requested " +
                std::to_string(bytes) + " bytes; tgraph holds " + std::to_string(bytes_in_use()) +
                " bytes in use (" + std::to_string(bytes_reserved()) + " reserved) and " +
                std::to_string(graph_memory_bytes(index_)) + " in captured graphs; the device has " +
                std::to_string(free_b) + " of " + std::to_string(total) + " bytes free");
  }
  cuda_check(e, "cudaMallocAsync");
  note_device_usage(index_, bytes_in_use());
  return DeviceBuffer(static_cast<std::byte*>(p), [stream](std::byte* q) { cudaFreeAsync(q, stream); });
}

void DeviceContext::release_cached() { cudaMemPoolTrimTo(pool_, 0); }

size_t DeviceContext::bytes_in_use() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &v);
  return v;
}

size_t DeviceContext::bytes_reserved() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v);
  return v;
}

size_t DeviceContext::bytes_peak() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &v);
  return v;
}

}  // namespace tg::detail
