#pragma once
// Executable files (.tgx): a versioned, checksummed snapshot of a compiled executable — the
// optimized graph, feeds and targets, device and precision, and the variables' values.
// Loading re-plans buffers and re-verifies the graph. Since version 3 a CUDA executable's file
// also holds the generated kernels its runs used, as source and cubin (device_code.h), so a
// load in a fresh process runs without compiling them.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executable_impl.h"

namespace tg::detail {

class AtomicFile;

/// Serialises an executable (variables at their current values) into `f` as the bytes are
/// produced (no copy of the weights in memory).
void write_executable(const ExecutableImpl& exe, AtomicFile& f);
/// Rebuilds an executable; throws tg::Error("[load] ...") on a corrupt, truncated or
/// incompatible file, before anything is created.
std::shared_ptr<ExecutableImpl> deserialize_executable(const std::string& bytes);
/// The same on `n` bytes at `data`; with `owner` (holding them, 64-byte aligned) the tensors of
/// a version 3 file point into those bytes instead of being copied.
std::shared_ptr<ExecutableImpl> deserialize_executable(const char* data, size_t n, std::shared_ptr<std::byte> owner);
/// The part after the header checks (exposed for the fuzzer, which cannot forge checksums);
/// `version` says which sections and padding the payload has.
std::shared_ptr<ExecutableImpl> deserialize_payload(const char* data, size_t size, int64_t version = 3,
                                                    std::shared_ptr<std::byte> owner = nullptr);

}  // namespace tg::detail
