#include "tgraph/device.h"

#include "tgraph/memory.h"

#include <omp.h>

#include <cstdlib>
#include <tuple>

#include "runtime/backend.h"

#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/cuda_info.h"
#endif

namespace tg {

int Device::cuda_device_count() {
#ifdef TGRAPH_HAVE_CUDA
  return detail::cuda_usable_devices();
#else
  return 0;
#endif
}

// The first GPU when one is usable; TGRAPH_DEVICE=cpu forces the CPU.
Device Device::best() {
  const char* env = std::getenv("TGRAPH_DEVICE");
  if (env && std::string(env) == "cpu") return cpu();
  return cuda_device_count() > 0 ? cuda(0) : cpu();
}

std::string Device::describe() const {
  if (kind == Kind::cpu) return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
#ifdef TGRAPH_HAVE_CUDA
  std::string d = detail::cuda_device_description(index);
  if (!d.empty()) return str() + " (" + d + ")";
#endif
  return str() + " (unavailable)";
}

DeviceMemory device_memory(Device device) {
  DeviceMemory m;
  if (const detail::Backend* b = detail::find_backend(device.kind)) std::tie(m.in_use, m.peak) = b->memory(device.index);
  return m;
}

void reset_peak_memory(Device device) {
  if (const detail::Backend* b = detail::find_backend(device.kind)) b->reset_peak_memory(device.index);
}

std::string Device::str() const {
  return kind == Kind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace tg
