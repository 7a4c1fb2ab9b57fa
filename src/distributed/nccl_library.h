#pragma once
// NCCL's C API as tgraph calls it, loaded at run time (dlopen "libnccl.so.2"): libtgraph builds
// and runs where NCCL is absent, and a process that already loaded NCCL (PyTorch's) shares it.
// The types are declared here, not taken from nccl.h (which may be missing at build time);
// nccl_library.cpp checks them against nccl.h where it is present.
#include <cstddef>
#include <string>

namespace tg::detail::nccl {

enum Result : int { success = 0, in_progress = 7 };
enum DataType : int { int8 = 0, uint8 = 1, int32 = 2, uint32 = 3, int64 = 4, uint64 = 5, float16 = 6, float32 = 7,
                      float64 = 8, bfloat16 = 9 };
enum RedOp : int { sum = 0, prod = 1, max = 2, min = 3 };
struct UniqueId {
  char internal[128];
};
using Comm = struct ncclComm*;
using Stream = void*;  // cudaStream_t

/// The entry points tgraph uses (NCCL >= 2.10: stream capture, bf16).
struct Api {
  int version = 0;  // NCCL_VERSION_CODE of the loaded library, e.g. 22809 for 2.28.9
  std::string path;  // what was loaded
  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  Result (*comm_destroy)(Comm) = nullptr;
  Result (*comm_abort)(Comm) = nullptr;
  Result (*comm_get_async_error)(Comm, Result*) = nullptr;
  const char* (*get_error_string)(Result) = nullptr;
  const char* (*get_last_error)(Comm) = nullptr;  // NCCL >= 2.13; null before
  Result (*all_reduce)(const void*, void*, size_t, DataType, RedOp, Comm, Stream) = nullptr;
  Result (*all_gather)(const void*, void*, size_t, DataType, Comm, Stream) = nullptr;
  Result (*reduce_scatter)(const void*, void*, size_t, DataType, RedOp, Comm, Stream) = nullptr;
  Result (*broadcast)(const void*, void*, size_t, DataType, int, Comm, Stream) = nullptr;
};

/// The library, loaded once per process: TGRAPH_NCCL_LIBRARY when set (only that file), else
/// libnccl.so.2 as the loader finds it, else the CUDA toolkit's lib folders. Throws tg::Error
/// starting with `[what]` saying what was tried when it is missing or older than 2.10.
const Api& api(const std::string& what);
/// True when api() would succeed (never throws).
bool available();
/// "what failed: NCCL's words (its last error, if any)" for a failed call.
std::string describe(const Api& a, Result r, Comm comm);

}  // namespace tg::detail::nccl
