#pragma once
// Launcher of the kernel in control_kernels.cu that control flow captured into CUDA graph
// conditional nodes runs at region boundaries: it moves region results into the loop's fixed
// state buffers and sets the conditional node's handle on the device (no host round trip).
#include <cuda_runtime_api.h>

namespace tg::detail {

/// Most copies one control kernel makes (the caller splits longer lists).
constexpr int kMaxControlCopies = 16;

/// A device scalar the kernel reads: `bytes` wide, a float (the sign bit does not count as
/// non-zero) or an integer (loaded sign-extended when `is_signed`).
struct DeviceScalar {
  const void* ptr = nullptr;
  int bytes = 0;
  bool is_float = false;
  bool is_signed = false;
};

/// Byte copies made by one kernel; no source may be another copy's destination.
struct ControlCopies {
  int n = 0;
  void* dst[kMaxControlCopies] = {};
  const void* src[kMaxControlCopies] = {};
  unsigned long long bytes[kMaxControlCopies] = {};
};

/// What the kernel does with the conditional handle once the copies are made.
enum class CondOp : int {
  none,       // nothing (the kernel may then run outside a graph)
  truth,      // handle = (pred != 0)
  for_start,  // *index = lower; ctl = {upper, step}; handle = (lower < upper); step <= 0: *error = 1, no trip
  for_next,   // *index += ctl[1]; handle = (*index < ctl[0])
};

struct ControlCond {
  CondOp op = CondOp::none;
  cudaGraphConditionalHandle handle = 0;
  DeviceScalar pred;                // truth
  DeviceScalar lower, upper, step;  // for_start
  int* index = nullptr;             // for_start, for_next: the loop's i32 index
  long long* ctl = nullptr;         // for_start, for_next: {upper, step}
  int* error = nullptr;             // for_start: set to 1 when step <= 0 (may be null)
};

/// Enqueues the copies, then the handle update (a kernel that sets a handle must only run
/// inside a CUDA graph). Returns the launch status.
cudaError_t launch_control(const ControlCopies& copies, const ControlCond& cond, int sm_count,
                           cudaStream_t stream);

}  // namespace tg::detail
