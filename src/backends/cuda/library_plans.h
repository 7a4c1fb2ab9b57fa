#pragma once
// Library choices that travel with a saved executable (runtime/device_code.h's `plans`): each
// library records the algorithm it chose for a problem (cuDNN attention: the whole plan, as
// cuDNN serialises it, compiled kernel included) under
// "<library_signature>|<kind>|<problem>", and a load hands the entries whose signature is this
// process's back to the libraries' caches. The signature names cuDNN's and cuBLASLt's versions
// and the GPU's architecture: a choice made elsewhere is never trusted, only asked again.
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/library_warmup.h"

namespace tg::detail {

/// "cudnn<version>.cublasLt<version>.sm<major><minor>" for `device`.
std::string library_signature(int device);

/// A library's choice made by an earlier process on this machine, by its saved key (above),
/// from the disk cache (runtime/disk_cache.h): empty when there is none. Every path (C++, ONNX,
/// the CLI, Python) then skips the heuristics a process before it asked.
std::string library_choice_from_disk(const std::string& key);
/// Files a choice just made (best effort).
void library_choice_to_disk(const std::string& key, const std::string& value);

/// Hands the saved choices whose signature matches `device`'s to the libraries' caches.
void provide_library_plans(const std::map<std::string, std::string>& plans, int device);

// Each library's half (cudnn_conv.cpp, matmul_lt.cpp): `problem` is the key without the device.
void cudnn_conv_provide(const std::string& problem, const std::string& value, int device);
void matmul_lt_provide(const std::string& problem, const std::string& value, int device);
void cudnn_attention_provide(const std::string& problem, const std::string& value, int device);  // cudnn_attention.cpp

/// The matmuls whose saved algorithms a load handed over and no warm-up has run yet, as calls
/// for a LibraryWarmup (each once, on scratch memory of its sizes): taken by a load or the next
/// first run on `device`, so cuBLASLt's kernels load while the device starts or the run goes on
/// (its matmuls stand in meanwhile: matmul_stand_in_enabled).
std::vector<WarmCall> matmul_lt_saved_warm_calls(int device);

struct ExecutableImpl;
/// Starts `calls` on warm-up threads now (CudaState::loading), for `exe`'s second run to wait
/// for (its first too when its matmuls may not stand in): a load begins its saved matmuls'
/// first executions (their kernels' loading) while the device's other library handles are made.
void cuda_begin_library_calls(const ExecutableImpl& exe, std::vector<WarmCall> calls);

}  // namespace tg::detail
