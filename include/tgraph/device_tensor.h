#pragma once
// Tensors that live in a device's memory, and zero-copy exchange with other frameworks
// through DLPack (PyTorch's torch.utils.dlpack, JAX, CuPy, NumPy >= 1.22 ...).
#include <memory>

#include "tgraph/device.h"
#include "tgraph/tensor_data.h"

struct DLManagedTensor;  // <dlpack/dlpack.h>; only callers that exchange tensors include it

namespace tg {

/// A dense, row-major tensor on a device: GPU memory for Device::cuda(i), host memory for
/// Device::cpu(). Copies share the memory (like TensorData). GPU memory comes from tgraph's
/// stream-ordered caching pool and goes back to it when the last handle is dropped.
///
/// Host <-> device copies go through pinned staging buffers and are complete when the call
/// returns. Executable::run_device takes and returns device tensors, so a
/// pipeline of executables (or a training loop) never round-trips through the host.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  /// Uninitialised storage of a static type on `device`.
  static DeviceTensor allocate(TensorType type, Device device);
  /// A copy of `host` on `device` (for Device::cpu(), the same memory, no copy).
  static DeviceTensor from_host(const TensorData& host, Device device);
  /// A host copy (for a CPU tensor, the same memory, no copy).
  TensorData to_host() const;

  const Shape& shape() const;
  DType dtype() const;
  TensorType type() const;
  Device device() const;
  size_t nbytes() const;
  bool empty() const { return !s_; }
  /// The first element's address in the device's memory.
  void* data() const;

  /// Exports the tensor as a DLPack managed tensor that keeps this memory alive until the
  /// consumer calls its deleter. GPU work on the tensor is complete when this returns.
  DLManagedTensor* to_dlpack() const;
  /// The same for a consumer that reads the tensor on `cuda_stream` (a cudaStream_t; the
  /// DLPack protocol's stream argument): that stream's later work waits for tgraph's writes,
  /// and the host does not. nullptr: no ordering at all (the consumer has ordered its stream
  /// already, as after Executable::run_device(inputs, stream)); the legacy default stream is
  /// cudaStreamLegacy.
  DLManagedTensor* to_dlpack(void* cuda_stream) const;
  /// Takes ownership of a DLPack tensor (calls its deleter when the last handle goes). The
  /// tensor must be compact and row-major (strides null or row-major), of a dtype tgraph
  /// knows, on the CPU or a CUDA device; the producer must have finished writing it.
  /// Otherwise throws tg::Error and leaves `managed` untouched (still owned by the caller).
  static DeviceTensor from_dlpack(DLManagedTensor* managed);

  struct Storage;
  explicit DeviceTensor(std::shared_ptr<Storage> s) : s_(std::move(s)) {}
  const std::shared_ptr<Storage>& storage() const { return s_; }

 private:
  DLManagedTensor* export_dlpack() const;
  std::shared_ptr<Storage> s_;
};

/// Where a DeviceTensor's bytes are and who keeps them alive.
struct DeviceTensor::Storage {
  TensorType type;
  Device device;
  void* data = nullptr;
  std::shared_ptr<void> owner;  // frees the memory (pool block, TensorData buffer, DLPack deleter)
};

}  // namespace tg
