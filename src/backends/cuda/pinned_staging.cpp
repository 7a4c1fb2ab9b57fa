#include "backends/cuda/pinned_staging.h"

#include <cstring>

#include "backends/cuda/cuda_check.h"

namespace tg::detail {
namespace {

// Below this size the driver's own staging is as fast and needs no extra host copy.
constexpr size_t kDirect = 256u << 10;
// Two chunk buffers per thread: the host copy of chunk k overlaps the DMA of chunk k-1.
constexpr size_t kChunk = 8u << 20;

struct Staging {
  void* buf[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  bool used[2] = {false, false};
  Staging() {
    for (int i = 0; i < 2; ++i) {
      TG_CUDA(cudaMallocHost(&buf[i], kChunk));
      TG_CUDA(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }
  }
  ~Staging() {
    for (int i = 0; i < 2; ++i) {
      if (done[i]) {
        cudaEventSynchronize(done[i]);
        cudaEventDestroy(done[i]);
      }
      if (buf[i]) cudaFreeHost(buf[i]);
    }
  }
  void wait(int i) {
    if (used[i]) TG_CUDA(cudaEventSynchronize(done[i]));
    used[i] = false;
  }
};

// One per thread (and device-agnostic: pinned memory is visible to every device), so
// concurrent runs on different threads never share a buffer.
Staging& staging() {
  thread_local Staging s;
  return s;
}

}  // namespace

void copy_to_device(void* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n < kDirect) {
    TG_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
    return;
  }
  Staging& s = staging();
  int k = 0;
  for (size_t off = 0; off < n; off += kChunk, k ^= 1) {
    size_t len = n - off < kChunk ? n - off : kChunk;
    s.wait(k);  // the DMA that last read this buffer is done
    std::memcpy(s.buf[k], static_cast<const char*>(src) + off, len);
    TG_CUDA(cudaMemcpyAsync(static_cast<char*>(dst) + off, s.buf[k], len, cudaMemcpyHostToDevice, stream));
    TG_CUDA(cudaEventRecord(s.done[k], stream));
    s.used[k] = true;
  }
}

void copy_to_host(void* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n < kDirect) {
    TG_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
    TG_CUDA(cudaStreamSynchronize(stream));
    return;
  }
  Staging& s = staging();
  s.wait(0);
  s.wait(1);
  size_t chunks = (n + kChunk - 1) / kChunk;
  auto issue = [&](size_t c) {
    int k = static_cast<int>(c & 1);
    size_t off = c * kChunk, len = n - off < kChunk ? n - off : kChunk;
    TG_CUDA(cudaMemcpyAsync(s.buf[k], static_cast<const char*>(src) + off, len, cudaMemcpyDeviceToHost, stream));
    TG_CUDA(cudaEventRecord(s.done[k], stream));
    s.used[k] = true;
  };
  issue(0);
  for (size_t c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) issue(c + 1);  // the next chunk's DMA runs while this one is copied out
    int k = static_cast<int>(c & 1);
    s.wait(k);
    size_t off = c * kChunk, len = n - off < kChunk ? n - off : kChunk;
    std::memcpy(static_cast<char*>(dst) + off, s.buf[k], len);
  }
}

}  // namespace tg::detail
