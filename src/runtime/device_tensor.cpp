// DeviceTensor: device-resident tensors and DLPack exchange.
#include "tgraph/device_tensor.h"

#include <dlpack/dlpack.h>

#include "runtime/device_tensor_backend.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace {

const DeviceTensor::Storage& checked(const std::shared_ptr<DeviceTensor::Storage>& s) {
  if (!s) throw Error("[device_tensor] empty DeviceTensor");
  return *s;
}

#ifndef TGRAPH_HAVE_CUDA
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("[device_tensor] ") + what + ": tgraph was built without the CUDA backend");
}
#endif

// DLPack's bool code (added to the spec after v0.6, which Debian ships).
constexpr uint8_t kDLBoolCode = 6;

DLDataType to_dl(DType t) {
  switch (t) {
    case DType::f32: return {kDLFloat, 32, 1};
    case DType::f16: return {kDLFloat, 16, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::f64: return {kDLFloat, 64, 1};
    case DType::i8: return {kDLInt, 8, 1};
    case DType::i16: return {kDLInt, 16, 1};
    case DType::i32: return {kDLInt, 32, 1};
    case DType::i64: return {kDLInt, 64, 1};
    case DType::u8: return {kDLUInt, 8, 1};
    case DType::boolean: return {kDLBoolCode, 8, 1};
  }
  throw Error("[to_dlpack] unknown dtype");
}

bool from_dl(DLDataType d, DType& out) {
  if (d.lanes != 1) return false;
  struct M { uint8_t code, bits; DType t; };
  static const M table[] = {{kDLFloat, 32, DType::f32}, {kDLFloat, 16, DType::f16}, {kDLBfloat, 16, DType::bf16},
                            {kDLFloat, 64, DType::f64}, {kDLInt, 8, DType::i8},     {kDLInt, 16, DType::i16},
                            {kDLInt, 32, DType::i32},   {kDLInt, 64, DType::i64},   {kDLUInt, 8, DType::u8},
                            {kDLBoolCode, 8, DType::boolean}};
  for (const M& m : table)
    if (m.code == d.code && m.bits == d.bits) {
      out = m.t;
      return true;
    }
  return false;
}

// What an exported DLManagedTensor owns: the shape array and a handle on the memory.
struct Export {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  std::shared_ptr<DeviceTensor::Storage> keep;
};

}  // namespace

DeviceTensor DeviceTensor::allocate(TensorType type, Device device) {
  if (!type.shape.is_static())
    throw Error("[device_tensor] allocate needs a static shape, got " + type.str());
  if (device.kind == Device::Kind::cpu) {
    TensorData h(type.shape, type.dtype);
    return from_host(h, device);
  }
#ifdef TGRAPH_HAVE_CUDA
  return cuda_allocate(std::move(type), device.index);
#else
  no_cuda("allocate");
#endif
}

DeviceTensor DeviceTensor::from_host(const TensorData& host, Device device) {
  if (host.empty() && host.num_elements() != 0) throw Error("[device_tensor] from_host of an empty TensorData");
  if (device.kind == Device::Kind::cpu) {
    auto s = std::make_shared<Storage>();
    s->type = host.type();
    s->device = device;
    s->data = const_cast<void*>(host.data());
    s->owner = std::make_shared<TensorData>(host);  // shares the host buffer
    return DeviceTensor(std::move(s));
  }
#ifdef TGRAPH_HAVE_CUDA
  DeviceTensor d = cuda_allocate(host.type(), device.index);
  cuda_upload(d, host);
  return d;
#else
  no_cuda("from_host");
#endif
}

TensorData DeviceTensor::to_host() const {
  const Storage& s = checked(s_);
  if (s.device.kind == Device::Kind::cpu) {
    // No elements: a producer may hand over a null pointer (torch's empty tensors do), which a
    // wrapped TensorData would take for no tensor at all.
    if (s.type.shape.num_elements() == 0) return TensorData(s.type.shape, s.type.dtype);
    auto keep = s_;
    return TensorData::wrap(s.type.shape, s.type.dtype,
                            std::shared_ptr<std::byte>(keep, static_cast<std::byte*>(s.data)));
  }
#ifdef TGRAPH_HAVE_CUDA
  return cuda_download(*this);
#else
  no_cuda("to_host");
#endif
}

const Shape& DeviceTensor::shape() const { return checked(s_).type.shape; }
DType DeviceTensor::dtype() const { return checked(s_).type.dtype; }
TensorType DeviceTensor::type() const { return checked(s_).type; }
Device DeviceTensor::device() const { return checked(s_).device; }
void* DeviceTensor::data() const { return checked(s_).data; }
size_t DeviceTensor::nbytes() const {
  const Storage& s = checked(s_);
  return static_cast<size_t>(s.type.shape.num_elements()) * dtype_size(s.type.dtype);
}

DLManagedTensor* DeviceTensor::to_dlpack() const {
#ifdef TGRAPH_HAVE_CUDA
  const Storage& s = checked(s_);
  if (s.device.kind == Device::Kind::cuda) cuda_sync(s.device.index);  // consumers see finished data
#endif
  return export_dlpack();
}

DLManagedTensor* DeviceTensor::to_dlpack(void* cuda_stream) const {
  const Storage& s = checked(s_);
#ifdef TGRAPH_HAVE_CUDA
  if (s.device.kind == Device::Kind::cuda && cuda_stream) cuda_order_after(s.device.index, cuda_stream);
#endif
  (void)cuda_stream;
  return export_dlpack();
}

DLManagedTensor* DeviceTensor::export_dlpack() const {
  const Storage& s = checked(s_);
  auto* e = new Export;
  e->keep = s_;
  e->shape.assign(s.type.shape.dims().begin(), s.type.shape.dims().end());
  DLTensor& t = e->managed.dl_tensor;
  t.data = s.data;
  t.device = {s.device.kind == Device::Kind::cuda ? kDLCUDA : kDLCPU, s.device.index};
  t.ndim = static_cast<int>(e->shape.size());
  t.dtype = to_dl(s.type.dtype);
  t.shape = e->shape.data();
  t.strides = nullptr;  // compact, row-major
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); };
  return &e->managed;
}

DeviceTensor DeviceTensor::from_dlpack(DLManagedTensor* managed) {
  if (!managed) throw Error("[from_dlpack] null DLManagedTensor");
  const DLTensor& t = managed->dl_tensor;
  DType dtype{};
  if (!from_dl(t.dtype, dtype))
    throw Error("[from_dlpack] unsupported DLPack dtype (code " + std::to_string(t.dtype.code) + ", " +
                std::to_string(t.dtype.bits) + " bits, " + std::to_string(t.dtype.lanes) + " lanes)");
  if (t.ndim < 0 || (t.ndim > 0 && !t.shape)) throw Error("[from_dlpack] malformed tensor (ndim/shape)");
  std::vector<int64_t> dims(t.shape, t.shape + t.ndim);
  for (int64_t d : dims)
    if (d < 0) throw Error("[from_dlpack] negative dimension in the DLPack shape");
  if (t.strides) {  // accept explicit row-major strides (size-1 dims may carry any stride)
    int64_t expect = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (dims[static_cast<size_t>(i)] != 1 && t.strides[i] != expect)
        throw Error("[from_dlpack] only compact row-major tensors are accepted; make it contiguous first");
      expect *= dims[static_cast<size_t>(i)];
    }
  }
  Device device;
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) {
    device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA) {
#ifndef TGRAPH_HAVE_CUDA
    no_cuda("from_dlpack of a CUDA tensor");
#endif
    device = Device::cuda(t.device.device_id);
  } else {
    throw Error("[from_dlpack] unsupported DLPack device type " + std::to_string(t.device.device_type));
  }
  auto s = std::make_shared<Storage>();
  s->type = TensorType(Shape(dims), dtype);
  s->device = device;
  s->data = static_cast<char*>(t.data) + t.byte_offset;
  s->owner = std::shared_ptr<void>(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  });
  return DeviceTensor(std::move(s));
}

}  // namespace tg
