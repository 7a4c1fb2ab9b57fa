// DeviceTensor: device-resident tensors and DLPack exchange.
#include "tgraph/device_tensor.h"

#include <dlpack/dlpack.h>

#include "runtime/backend.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace {

const DeviceTensor::Storage& checked(const std::shared_ptr<DeviceTensor::Storage>& s) {
  if (!s) throw Error("[device_tensor] empty DeviceTensor");
  return *s;
}

// DLPack's bool code (added to the spec after v0.6, which Debian ships).
constexpr uint8_t kDLBoolCode = 6;
// DLPack 1.1's OCP 8-bit float codes (kDLFloat8_e4m3fn, kDLFloat8_e5m2).
constexpr uint8_t kDLF8E4M3FnCode = 10, kDLF8E5M2Code = 12;

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
    case DType::f8e4m3: return {kDLF8E4M3FnCode, 8, 1};
    case DType::f8e5m2: return {kDLF8E5M2Code, 8, 1};
  }
  throw Error("[to_dlpack] unknown dtype");
}

bool from_dl(DLDataType d, DType& out) {
  if (d.lanes != 1) return false;
  struct M { uint8_t code, bits; DType t; };
  static const M table[] = {{kDLFloat, 32, DType::f32}, {kDLFloat, 16, DType::f16}, {kDLBfloat, 16, DType::bf16},
                            {kDLFloat, 64, DType::f64}, {kDLInt, 8, DType::i8},     {kDLInt, 16, DType::i16},
                            {kDLInt, 32, DType::i32},   {kDLInt, 64, DType::i64},   {kDLUInt, 8, DType::u8},
                            {kDLBoolCode, 8, DType::boolean}, {kDLF8E4M3FnCode, 8, DType::f8e4m3},
                            {kDLF8E5M2Code, 8, DType::f8e5m2}};
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
  return backend_for(device.kind, "[device_tensor] allocate:").allocate(std::move(type), device);
}

DeviceTensor DeviceTensor::from_host(const TensorData& host, Device device) {
  if (host.empty() && host.num_elements() != 0) throw Error("[device_tensor] from_host of an empty TensorData");
  return backend_for(device.kind, "[device_tensor] from_host:").from_host(host, device);
}

TensorData DeviceTensor::to_host() const {
  const Storage& s = checked(s_);
  return backend_for(s.device.kind, "[device_tensor] to_host:").to_host(*this);
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
  const Storage& s = checked(s_);
  backend_for(s.device.kind, "[to_dlpack]").before_export(*this, std::nullopt);
  return export_dlpack();
}

DLManagedTensor* DeviceTensor::to_dlpack(void* cuda_stream) const {
  const Storage& s = checked(s_);
  backend_for(s.device.kind, "[to_dlpack]").before_export(*this, cuda_stream);
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
    device = Device::cuda(t.device.device_id);
    backend_for(device.kind, "[from_dlpack] a CUDA tensor:");
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
