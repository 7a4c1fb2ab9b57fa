#pragma once
// Compiles generated CUDA C++ with NVRTC to a cubin for the device's architecture, caches the
// result in memory and on disk (keyed by a hash of source and options), and loads it with
// the runtime API (cudaLibraryLoadData), so no binary links libcuda.
#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

namespace tg::detail {

/// A kernel ready to launch with cudaLaunchKernel.
struct CompiledKernel {
  cudaKernel_t kernel = nullptr;
  int blocks_per_sm = 0;  // resident 256-thread blocks per SM, once a launcher has asked
  const void* fn() const { return reinterpret_cast<const void*>(kernel); }
};

/// Returns kernel `name` from `source`, compiling only on the first request for this source
/// (per process) and only when no cubin is cached on disk ($TGRAPH_CACHE_DIR, default
/// ~/.cache/tgraph/kernels). Throws tg::Error with NVRTC's log on a compile error.
CompiledKernel nvrtc_kernel(const std::string& source, const std::string& name, int device);

/// Starts compiling `source` for `device` on a pool of worker threads (one per core) unless it
/// is loaded or cached on disk already, so a later nvrtc_kernel for it only waits for the
/// result. An executable's first run announces the kernels it is about to need this way: NVRTC
/// takes ~50-100 ms a kernel, and a training step has hundreds. A failed compile is reported by
/// nvrtc_kernel, not here.
void nvrtc_prefetch(const std::string& source, int device);

/// Compiles source to a cubin for sm_<major><minor> (no device needed); throws tg::Error
/// with NVRTC's log on failure.
std::vector<char> nvrtc_compile(const std::string& source, int major, int minor);

/// The cubin of `source` for sm_<major><minor> (no device needed): one an executable's file
/// provided, the disk cache's, or compiled now (and cached on disk).
std::vector<char> nvrtc_cubin(const std::string& source, int major, int minor);

/// Makes `cubin` the compiled form of `source` for sm_<major><minor> in this process (device
/// code read from an executable's file): nvrtc_kernel and nvrtc_prefetch then compile nothing
/// for it. The first file's cubin for a source stays.
void nvrtc_provide(int major, int minor, const std::string& source, std::vector<char> cubin);

/// The device's architecture (major, minor).
std::pair<int, int> nvrtc_arch(int device);

/// Records in the run's DeviceCode (runtime/device_code.h) that it uses `source`, for callers
/// that keep compiled kernels in caches of their own and so skip nvrtc_kernel on a hit.
void nvrtc_note_use(const std::string& source, int device);

/// Statistics for tests: compiles done, disk hits, memory hits, kernels from files.
struct NvrtcStats {
  int compiled = 0, disk_hits = 0, memory_hits = 0;
  int prefetched = 0;  // compiles started by nvrtc_prefetch (counted in `compiled` too)
  int provided = 0;    // kernels loaded from cubins an executable's file provided
};
NvrtcStats nvrtc_stats();

}  // namespace tg::detail
