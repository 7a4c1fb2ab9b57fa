#pragma once
// Library calls made once ahead of a first run, several at a time (issue 22). CUDA loads a
// library's kernels at their first launch and cuDNN builds its plans inside a call, one call
// after another in an op-by-op first run. In a fresh process on the H200 the first executions
// of ResNet-50's 69 distinct convolutions (three directions, algorithms known) took 306 ms on
// one thread and 116-117 ms on 4 or 8 threads with a cuDNN handle and a stream each
// (bench_library_plans --cold-threads); a small batch does not load the kernels a large one
// uses, so the calls run at their own shapes, on scratch memory whose values do not matter.
// The run that follows finds the kernels loaded, the algorithms chosen and the plans built.
#include <cuda_runtime_api.h>

#include <functional>
#include <thread>
#include <vector>

namespace tg::detail {

/// One library call on scratch memory, enqueued on the stream it is given.
using WarmCall = std::function<void(cudaStream_t)>;

/// Runs `calls` on up to four threads of their own (each with its own stream and cuDNN handle
/// for the legacy calls, cudnn_legacy_device) from construction; wait() (or the destructor)
/// returns when every call is done and its stream synchronised. A call that fails is dropped:
/// the run makes it itself, as without the warm-up.
class LibraryWarmup {
 public:
  LibraryWarmup(std::vector<WarmCall> calls, int device);
  ~LibraryWarmup();
  LibraryWarmup(const LibraryWarmup&) = delete;
  LibraryWarmup& operator=(const LibraryWarmup&) = delete;
  void wait();

 private:
  std::vector<WarmCall> calls_;
  std::vector<std::thread> threads_;
};

/// Warm-up calls made in this process that returned without an error (for tests).
long long library_warmup_calls_made();

/// False when TGRAPH_NO_LIBRARY_WARMUP=1 (first runs make their library calls one by one).
bool library_warmup_enabled();

}  // namespace tg::detail
