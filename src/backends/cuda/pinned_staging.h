#pragma once
// Host <-> device copies through pinned (page-locked) staging buffers: the DMA engine reads
// and writes pinned memory directly, so large transfers run at the link's speed and a
// host-to-device copy does not wait for the source buffer to be staged by the driver.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace tg::detail {

/// Copies `n` bytes from host memory `src` to device memory `dst` on `stream`. Returns once
/// `src` may be reused (the device copy may still be in flight, ordered on `stream`).
void copy_to_device(void* dst, const void* src, size_t n, cudaStream_t stream);
/// Copies `n` bytes from device memory `src` (after the work queued on `stream`) into host
/// memory `dst`; returns when `dst` holds the bytes.
void copy_to_host(void* dst, const void* src, size_t n, cudaStream_t stream);

}  // namespace tg::detail
