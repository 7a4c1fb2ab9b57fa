#pragma once
// Turning CUDA, cuBLAS and NVRTC status codes into tg::Error.
#include <cuda_runtime_api.h>

#include <string>

#include "tgraph/error.h"

namespace tg::detail {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear non-sticky errors so later calls start clean
    throw Error(std::string("[cuda] ") + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

/// A launcher's status: false when it refused its arguments (cudaErrorInvalidValue: nothing
/// ran, the op is declined and falls back), true when it launched; any other failure throws.
inline bool launched(cudaError_t e, const char* what) {
  if (e == cudaErrorInvalidValue) {
    cudaGetLastError();
    return false;
  }
  cuda_check(e, what);
  return true;
}

}  // namespace tg::detail

#define TG_CUDA(call) ::tg::detail::cuda_check((call), #call)
