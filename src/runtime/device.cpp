#include "tgraph/device.h"

#include "tgraph/memory.h"

#include <cstdlib>
#include <tuple>

#include "runtime/backend.h"

namespace tg {

int Device::cuda_device_count() {
  const detail::Backend* b = detail::find_backend(Kind::cuda);
  return b ? b->device_count() : 0;
}

// The first GPU when one is usable; TGRAPH_DEVICE=cpu forces the CPU.
Device Device::best() {
  const char* env = std::getenv("TGRAPH_DEVICE");
  if (env && std::string(env) == "cpu") return cpu();
  return cuda_device_count() > 0 ? cuda(0) : cpu();
}

std::string Device::describe() const {
  const detail::Backend* b = detail::find_backend(kind);
  const std::string d = b ? b->describe(index) : "";
  return str() + " (" + (d.empty() ? "unavailable" : d) + ")";
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
