// Host tensors as numpy arrays, and device tensors with the DLPack protocol (zero-copy with
// PyTorch, JAX, CuPy and numpy).
#include <dlpack/dlpack.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "py_args.h"
#include "py_tensor.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/device_context.h"
#endif

namespace tgpy {
using namespace nb::literals;

namespace {

nb::dlpack::dtype dl_dtype(tg::DType t) {
  switch (t) {
    case tg::DType::f32: return nb::dtype<float>();
    case tg::DType::f64: return nb::dtype<double>();
    case tg::DType::f16: return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case tg::DType::i8: return nb::dtype<int8_t>();
    case tg::DType::i16: return nb::dtype<int16_t>();
    case tg::DType::i32: return nb::dtype<int32_t>();
    case tg::DType::i64: return nb::dtype<int64_t>();
    case tg::DType::u8: return nb::dtype<uint8_t>();
    case tg::DType::boolean: return nb::dtype<bool>();
    case tg::DType::bf16: case tg::DType::f8e4m3: case tg::DType::f8e5m2: break;
  }
  throw tg::Error(std::string("[python] ") + tg::dtype_name(t) + " has no numpy type");
}

}  // namespace

nb::object to_numpy(const tg::TensorData& t0) {
  if (t0.empty() && t0.num_elements() != 0) throw tg::Error("[python] empty tensor");
  // numpy has no bfloat16 or 8-bit floats: widen (exactly) to float32
  tg::TensorData t = t0.dtype() == tg::DType::bf16 || tg::is_float8(t0.dtype()) ? t0.cast(tg::DType::f32) : t0;
  auto* keep = new tg::TensorData(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<tg::TensorData*>(p); });
  std::vector<size_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  nb::ndarray<nb::numpy> a(keep->data(), shape.size(), shape.data(), owner, nullptr,
                           dl_dtype(t.dtype()));
  return a.cast();
}

tg::TensorData from_array(nb::handle obj, std::optional<tg::DType> dtype) {
  nb::module_ np = nb::module_::import_("numpy");
  nb::object arr = np.attr("asarray")(obj, "order"_a = "C");
  std::string kind = nb::cast<std::string>(arr.attr("dtype").attr("name"));
  tg::DType t;
  try {
    t = dtype_from_py(arr.attr("dtype"));
  } catch (const tg::Error&) {
    throw tg::Error("[python] numpy dtype " + kind + " has no tgraph element type");
  }
  auto a = nb::cast<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>(arr);
  std::vector<int64_t> dims;
  for (size_t i = 0; i < a.ndim(); ++i) dims.push_back(static_cast<int64_t>(a.shape(i)));
  tg::TensorData out(tg::Shape(std::move(dims)), t);
  if (out.nbytes() > 0) std::memcpy(out.data(), a.data(), out.nbytes());
  if (dtype && *dtype != t) out = out.cast(*dtype);
  return out;
}

namespace {

// DLPack capsules: "dltensor" until a consumer takes the tensor and renames it "used_dltensor".
void capsule_destructor(PyObject* cap) {
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

// ordered: the caller orders the producer's writes itself (a stream-ordered run_device), so the
// producer is asked for no synchronisation (the protocol's stream -1).
tg::DeviceTensor from_dlpack_object(nb::handle obj, bool ordered = false) {
  if (nb::isinstance<tg::DeviceTensor>(obj)) return nb::cast<tg::DeviceTensor>(obj);
  if (PyCapsule_CheckExact(obj.ptr())) {
    // A DLPack capsule itself (torch.utils.dlpack.to_dlpack(t)): the producer did not order
    // anything, so the caller orders the run (run_device(..., stream=)). The cheapest way in
    // for the PyTorch frontend, which hands hundreds of tensors to each call.
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), "dltensor"));
    if (!m) throw nb::python_error();  // a used or foreign capsule
    tg::DeviceTensor t = tg::DeviceTensor::from_dlpack(m);
    PyCapsule_SetName(obj.ptr(), "used_dltensor");
    return t;
  }
  if (!nb::hasattr(obj, "__dlpack__")) return tg::DeviceTensor::from_host(from_array(obj), tg::Device::cpu());
  nb::object cap;
  nb::object dev = nb::hasattr(obj, "__dlpack_device__") ? obj.attr("__dlpack_device__")() : nb::none();
#ifdef TGRAPH_HAVE_CUDA
  if (!dev.is_none() && nb::cast<int>(dev[0]) == kDLCUDA) {
    // The DLPack protocol's stream argument: the producer orders its pending writes before
    // tgraph's stream (the one runs on this device use), so nothing reads the tensor early.
    if (ordered) {
      cap = obj.attr("__dlpack__")("stream"_a = -1);
    } else {
      auto stream = tg::detail::DeviceContext::get(nb::cast<int>(dev[1])).stream();
      cap = obj.attr("__dlpack__")("stream"_a = reinterpret_cast<uintptr_t>(stream));
    }
  }
#endif
  if (!cap.is_valid()) cap = obj.attr("__dlpack__")();
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (!m) throw nb::python_error();
  tg::DeviceTensor t = tg::DeviceTensor::from_dlpack(m);  // throws and leaves m owned by cap
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  return t;
}

}  // namespace

void bind_data(nb::module_& m) {
  nb::class_<tg::DeviceTensor>(m, "DeviceTensor",
                               "A tensor in a device's memory (GPU for cuda devices). Exchanges "
                               "memory with other frameworks through DLPack without copying.")
      .def("__init__",
           [](tg::DeviceTensor* t, nb::handle array, const tg::Device& device) {
             new (t) tg::DeviceTensor(tg::DeviceTensor::from_host(from_array(array), device));
           },
           "array"_a, "device"_a)
      .def_prop_ro("shape", &tg::DeviceTensor::shape)
      .def_prop_ro("dtype", &tg::DeviceTensor::dtype)
      .def_prop_ro("device", &tg::DeviceTensor::device)
      .def_prop_ro("nbytes", &tg::DeviceTensor::nbytes)
      .def("numpy", [](const tg::DeviceTensor& t) { return to_numpy(t.to_host()); },
           "A host copy as a numpy array (bf16 widened to float32).")
      .def("__dlpack__",
           [](const tg::DeviceTensor& t, nb::kwargs kw) {
             // The protocol's stream: the consumer's CUDA stream (1: the legacy default
             // stream, 2: the per-thread one), which then waits for tgraph's writes without
             // blocking the host; -1: none (the consumer has ordered its stream itself); no
             // stream: the writes are finished on return.
             nb::object stream = kw.contains("stream") ? nb::object(kw["stream"]) : nb::none();
             DLManagedTensor* managed = nullptr;
             if (stream.is_none() || t.device().kind != tg::Device::Kind::cuda) {
               managed = t.to_dlpack();
             } else {
               const intptr_t s = nb::cast<intptr_t>(stream);
               // 1 and 2 are also the runtime's cudaStreamLegacy / cudaStreamPerThread handles;
               // 0 is not a valid argument: taken as the legacy stream
               managed = t.to_dlpack(s == -1 ? nullptr : reinterpret_cast<void*>(s == 0 ? intptr_t{1} : s));
             }
             PyObject* cap = PyCapsule_New(managed, "dltensor", capsule_destructor);
             if (!cap) {
               managed->deleter(managed);
               throw nb::python_error();
             }
             return nb::steal(cap);
           })
      .def("__dlpack_device__",
           [](const tg::DeviceTensor& t) {
             bool cuda = t.device().kind == tg::Device::Kind::cuda;
             return nb::make_tuple(static_cast<int>(cuda ? kDLCUDA : kDLCPU), t.device().index);
           })
      .def("__repr__", [](const tg::DeviceTensor& t) {
        return "DeviceTensor(" + t.type().str() + ", " + t.device().str() + ")";
      });
  m.def("from_dlpack", &from_dlpack_object, "x"_a, "ordered"_a = false,
        "A DeviceTensor sharing the memory of any object with __dlpack__ (a torch tensor, a "
        "numpy array, ...) or of a DLPack capsule, without a copy. ordered=True: the producer "
        "is not asked to synchronise (for inputs of run_device(..., stream=) on the stream that "
        "wrote them); a capsule is always taken so.");
  m.def("to_device", [](nb::handle x, const tg::Device& d) {
    tg::DeviceTensor t = from_dlpack_object(x);
    if (t.device() == d) return t;
    return tg::DeviceTensor::from_host(t.to_host(), d);
  }, "x"_a, "device"_a, "x (an array or a DeviceTensor) on device d.");
}

}  // namespace tgpy
