// DeviceTensor on CUDA (the CUDA backend's allocate, from_host, to_host, before_export):
// pool allocations, pinned-staged copies on the device's stream.
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/device_tensor_cuda.h"
#include "backends/cuda/pinned_staging.h"

namespace tg::detail {

DeviceTensor cuda_allocate(TensorType type, int device) {
  DeviceContext& ctx = DeviceContext::get(device);
  TG_CUDA(cudaSetDevice(device));
  size_t n = static_cast<size_t>(type.shape.num_elements()) * dtype_size(type.dtype);
  DeviceBuffer buf = ctx.allocate(n, ctx.stream());
  auto s = std::make_shared<DeviceTensor::Storage>();
  s->type = std::move(type);
  s->device = Device::cuda(device);
  s->data = buf.get();
  s->owner = buf;
  return DeviceTensor(std::move(s));
}

void cuda_upload(const DeviceTensor& dst, const TensorData& src) {
  DeviceContext& ctx = DeviceContext::get(dst.device().index);
  TG_CUDA(cudaSetDevice(dst.device().index));
  copy_to_device(dst.data(), src.data(), src.nbytes(), ctx.stream());
  TG_CUDA(cudaStreamSynchronize(ctx.stream()));  // complete when the call returns
}

TensorData cuda_download(const DeviceTensor& src) {
  DeviceContext& ctx = DeviceContext::get(src.device().index);
  TG_CUDA(cudaSetDevice(src.device().index));
  TensorData h(src.shape(), src.dtype());
  copy_to_host(h.data(), src.data(), src.nbytes(), ctx.stream());
  return h;
}

void cuda_sync(int device) {
  DeviceContext& ctx = DeviceContext::get(device);
  TG_CUDA(cudaSetDevice(device));
  TG_CUDA(cudaStreamSynchronize(ctx.stream()));
}

void cuda_order_after(int device, void* stream) {
  DeviceContext& ctx = DeviceContext::get(device);
  TG_CUDA(cudaSetDevice(device));
  cudaEvent_t e;
  TG_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t rec = cudaEventRecord(e, ctx.stream());
  cudaError_t wait = rec == cudaSuccess ? cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), e, 0) : rec;
  cudaEventDestroy(e);
  TG_CUDA(wait);
}

}  // namespace tg::detail
