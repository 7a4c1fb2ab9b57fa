#pragma once
// What the CUDA runtime reports, callable whether or not a driver is present.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace tg::detail {

/// Number of CUDA devices usable through the runtime API (0 without driver or device).
int cuda_usable_devices();
/// "NVIDIA H200, sm_90, 139 GiB" for device i, or "" when unusable.
std::string cuda_device_description(int i);
/// tgraph's bytes on device i: in use now and the peak (pool allocations + graph memory).
std::pair<size_t, size_t> cuda_memory_usage(int i);
void cuda_reset_peak_memory(int i);
/// y = a*x + y on device 0 through a kernel, for the smoke test and the demo; returns the
/// host result. Throws tg::Error on any CUDA error.
std::vector<float> cuda_axpy(float a, const std::vector<float>& x, const std::vector<float>& y);

}  // namespace tg::detail
