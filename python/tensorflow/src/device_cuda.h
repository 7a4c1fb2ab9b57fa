// The CUDA half of the TGRAPH device (device_cuda.cpp): used where the plugin is built with the
// CUDA toolkit (TGRAPH_TF_CUDA) and a GPU is present; elsewhere these say "no GPU".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tensorflow/c/experimental/stream_executor/stream_executor.h"

namespace tgraph_tf {

#ifdef TGRAPH_TF_CUDA
/// Number of CUDA devices tgraph can use (one TGRAPH device each).
int cuda_devices();
/// Sets the StreamExecutor's functions to the CUDA ones (device memory, CUDA streams, events).
void fill_cuda_executor(SP_StreamExecutor* se);
/// The timer's elapsed nanoseconds (SP_TimerFns::nanoseconds) for CUDA timers.
uint64_t (*cuda_timer_ns())(SP_Timer);
/// The cudaStream_t behind one of the device's streams (TF_GetStream in a kernel).
void* cuda_stream(SP_Stream s);
/// Whether `p` is in device memory (TensorFlow keeps int32 tensors of a GPU-like device in host
/// memory; the kernels ask rather than assume).
bool device_memory(const void* p);
/// Copies n bytes between any two of host and device memory, queued on `stream`.
bool copy_on_stream(void* dst, const void* src, size_t n, void* stream, std::string& error);
/// Waits for the work queued on `stream`.
bool sync_stream(void* stream, std::string& error);
#else
inline int cuda_devices() { return 0; }
inline void fill_cuda_executor(SP_StreamExecutor*) {}
inline uint64_t (*cuda_timer_ns())(SP_Timer) { return nullptr; }
inline void* cuda_stream(SP_Stream) { return nullptr; }
inline bool device_memory(const void*) { return false; }
inline bool copy_on_stream(void*, const void*, size_t, void*, std::string& e) { return e = "no CUDA", false; }
inline bool sync_stream(void*, std::string& e) { return e = "no CUDA", false; }
#endif

/// Whether the TGRAPH devices are CUDA devices: built with CUDA, a GPU present, and not
/// TGRAPH_TF_DEVICE=cpu. Decided once per process (TensorFlow fixes its device list at start).
inline bool on_cuda() {
  static const bool cuda = [] {
    const char* v = std::getenv("TGRAPH_TF_DEVICE");
    if (v && std::string(v) == "cpu") return false;
    return cuda_devices() > 0;
  }();
  return cuda;
}

}  // namespace tgraph_tf
