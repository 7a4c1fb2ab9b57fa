#pragma once
// How much device memory tgraph holds: for benchmarks and for users sizing a batch.
#include <cstddef>

#include "tgraph/device.h"

namespace tg {

/// tgraph's memory on one device: its caching pool's allocations plus the memory its captured
/// CUDA graphs keep (activations of a captured training step live there). Not counted: the
/// CUDA context, library workspaces, memory other frameworks allocate. All zero for the CPU.
struct DeviceMemory {
  size_t in_use = 0;  ///< bytes allocated now
  size_t peak = 0;    ///< the most allocated at once since the process started or reset_peak_memory
};

DeviceMemory device_memory(Device device);
/// Starts a new peak at what is allocated now (as torch.cuda.reset_peak_memory_stats).
void reset_peak_memory(Device device);

}  // namespace tg
