#pragma once
// The CUDA side of DeviceTensor (device_tensor_cuda.cpp), which the CUDA backend offers through
// runtime/backend.h; a build without it has no CUDA backend, and DeviceTensor says so.
#include "tgraph/device_tensor.h"

namespace tg::detail {

DeviceTensor cuda_allocate(TensorType type, int device);
void cuda_upload(const DeviceTensor& dst, const TensorData& src);
TensorData cuda_download(const DeviceTensor& src);
/// Waits for the work tgraph queued on the device's stream (before handing memory out).
void cuda_sync(int device);
/// Orders `stream`'s later work after the work queued on the device's stream (no host wait).
void cuda_order_after(int device, void* stream);

}  // namespace tg::detail
