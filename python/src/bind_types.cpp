// Element types, enums, devices, tensor types, compile options and the op descriptors.
// Descriptors are bound from their TG_FIELDS reflection: every field is a keyword of the
// constructor and a property, so a field added in C++ appears in Python with no edit here.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <deque>
#include <sstream>
#include <string_view>

#include "backends/cpu/profile.h"
#include "py_args.h"
#include "py_tensor.h"

namespace tgpy {
using namespace nb::literals;

tg::DType dtype_from_py(nb::handle h) {
  if (nb::isinstance<tg::DType>(h)) return nb::cast<tg::DType>(h);
  std::string s;
  if (PyUnicode_Check(h.ptr())) {
    s = nb::cast<std::string>(h);
  } else if (nb::hasattr(h, "__module__") && nb::str(h.attr("__module__")).c_str() == std::string("torch")) {
    s = nb::cast<std::string>(nb::str(h));  // "torch.float32"
  } else {
    // numpy dtypes, numpy scalar types and Python's float/int/bool go through numpy.dtype
    try {
      s = nb::cast<std::string>(nb::module_::import_("numpy").attr("dtype")(h).attr("name"));
    } catch (nb::python_error&) {
      throw tg::Error("[python] not an element type: " + nb::cast<std::string>(nb::repr(h)));
    }
  }
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  static const std::pair<const char*, tg::DType> long_names[] = {
      {"float32", tg::f32}, {"float", tg::f32},    {"float16", tg::f16}, {"half", tg::f16},
      {"bfloat16", tg::bf16}, {"float64", tg::f64}, {"double", tg::f64}, {"int8", tg::i8},
      {"int16", tg::i16},   {"int32", tg::i32},    {"int", tg::i32},     {"int64", tg::i64},
      {"long", tg::i64},    {"uint8", tg::u8},     {"bool", tg::boolean},
      {"float8_e4m3fn", tg::f8e4m3}, {"float8_e5m2", tg::f8e5m2}};
  for (const auto& [n, t] : long_names)
    if (s == n) return t;
  return tg::dtype_from_name(s);  // "f32", "bf16"...; throws naming the unknown name
}

namespace {

template <class E>
void bind_enum(nb::module_& m, const char* name) {
  static std::deque<std::string> names;  // nanobind keeps the pointers
  nb::enum_<E> e(m, name);
  for (const auto& [n, v] : enum_values<E>()) e.value(names.emplace_back(n).c_str(), v);
}

std::vector<std::string> split_names(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    size_t comma = s.find(',');
    std::string_view n = s.substr(0, comma);
    while (!n.empty() && n.front() == ' ') n.remove_prefix(1);
    out.emplace_back(n);
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
  }
  return out;
}

template <class D>
using FieldsOf = decltype(std::declval<D&>().fields());

template <class D, size_t... I>
bool set_field(D& d, const std::vector<std::string>& names, const std::string& key, nb::handle v,
               std::index_sequence<I...>) {
  bool found = false;
  ((names[I] == key
        ? (std::get<I>(d.fields()) = from_py<std::decay_t<std::tuple_element_t<I, FieldsOf<D>>>>(v, "field " + key),
           found = true)
        : false),
   ...);
  return found;
}

// A descriptor: D(field=value, ...), a property per field, == and repr in tgraph's printer form.
template <class D>
void bind_desc(nb::module_& m, const char* name) {
  static const std::vector<std::string> names = split_names(D::field_names());
  using Seq = std::make_index_sequence<std::tuple_size_v<FieldsOf<D>>>;
  nb::class_<D> c(m, name);
  c.def("__init__", [name](D* d, nb::kwargs kw) {
    new (d) D();
    for (auto [k, v] : kw) {
      std::string key = nb::cast<std::string>(k);
      if (!set_field(*d, names, key, v, Seq{})) {
        std::string all;
        for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
        throw tg::Error(std::string("[python] ") + name + " has no field '" + key + "' (fields: " + all + ")");
      }
    }
  });
  [&]<size_t... I>(std::index_sequence<I...>) {
    (c.def_prop_rw(
         names[I].c_str(), [](const D& d) { return std::get<I>(d.fields()); },
         [](D& d, nb::handle v) {
           std::get<I>(d.fields()) =
               from_py<std::decay_t<std::tuple_element_t<I, FieldsOf<D>>>>(v, "field " + names[I]);
         }),
     ...);
  }(Seq{});
  c.def("__eq__", [](const D& a, const D& b) { return a == b; });
  c.def("__repr__", [name](const D& d) {
    std::ostringstream os;
    os << name;
    tg::detail::print_value(os, d);
    return os.str();
  });
}

}  // namespace

void bind_types(nb::module_& m) {
  nb::exception<tg::Error>(m, "Error", PyExc_RuntimeError);

  nb::enum_<tg::DType> dt(m, "DType");
  for (int i = 0; i < tg::kNumDTypes; ++i) {
    const auto t = static_cast<tg::DType>(i);
    dt.value(tg::dtype_name(t), t);
  }
  m.def("dtype", [](DTypeArg d) { return d.get(); }, "like"_a,
        "The element type named by a string, a numpy or torch dtype, or a DType.");
  m.def("dtype_size", &tg::dtype_size);
  m.def("_profile_flush", &tg::detail::cpu_profile_flush, "title"_a,
        "Under TGRAPH_PROFILE: prints the profile so far under `title` and starts a new one.");
  m.def("dim_from_source", &tg::dim_from_source, "j"_a,
        "The target dim code of reshape / broadcast_to that takes dim j of their shape sources.");
  m.def("promote_types", [](DTypeArg a, DTypeArg b) { return tg::promote_types(a.get(), b.get()); });

  bind_enum<tg::PaddingStyle>(m, "PaddingStyle");
  bind_enum<tg::Layout>(m, "Layout");
  bind_enum<tg::LossReduction>(m, "LossReduction");
  bind_enum<tg::PadMode>(m, "PadMode");
  bind_enum<tg::ResizeMode>(m, "ResizeMode");
  bind_enum<tg::CoordinateMode>(m, "CoordinateMode");
  bind_enum<tg::NearestRounding>(m, "NearestRounding");
  bind_enum<tg::Distribution>(m, "Distribution");
  bind_enum<tg::ScatterMode>(m, "ScatterMode");
  bind_enum<tg::Reduction>(m, "Reduction");
  bind_enum<tg::Boundary>(m, "Boundary");
  bind_enum<tg::CollectiveReduce>(m, "CollectiveReduce");

  nb::class_<tg::Device>(m, "Device")
      .def_static("cpu", &tg::Device::cpu)
      .def_static("cuda", &tg::Device::cuda, "index"_a = 0)
      .def_static("best", &tg::Device::best)
      .def_static("cuda_device_count", &tg::Device::cuda_device_count)
      .def_prop_ro("kind", [](const tg::Device& d) { return d.kind == tg::Device::Kind::cpu ? "cpu" : "cuda"; })
      .def_ro("index", &tg::Device::index)
      .def("describe", &tg::Device::describe)
      .def("__str__", &tg::Device::str)
      .def("__repr__", [](const tg::Device& d) { return "Device('" + d.str() + "')"; })
      .def("__eq__", [](const tg::Device& a, const tg::Device& b) { return a == b; })
      .def("__hash__", [](const tg::Device& d) { return static_cast<int>(d.kind) * 1000 + d.index; })
      .def(
          "memory",
          [](const tg::Device& d) {
            tg::DeviceMemory m = tg::device_memory(d);
            return nb::make_tuple(m.in_use, m.peak);
          },
          "(bytes in use, peak bytes) of tgraph's memory on this device: its pool's allocations "
          "and its captured graphs' memory (zeros for the CPU).")
      .def("reset_peak_memory", [](const tg::Device& d) { tg::reset_peak_memory(d); },
           "Starts a new peak at what is in use now.");

  nb::class_<tg::TensorType>(m, "TensorType")
      .def("__init__", [](tg::TensorType* t, tg::Shape s, DTypeArg d) { new (t) tg::TensorType(s, d.get()); },
           "shape"_a, "dtype"_a)
      .def_rw("shape", &tg::TensorType::shape)
      .def_rw("dtype", &tg::TensorType::dtype)
      .def("__eq__", [](const tg::TensorType& a, const tg::TensorType& b) { return a == b; })
      .def("__repr__", [](const tg::TensorType& t) { return "TensorType(" + t.str() + ")"; });

  nb::enum_<tg::Precision>(m, "Precision")
      .value("f32", tg::Precision::f32)
      .value("tf32", tg::Precision::tf32)
      .value("bf16", tg::Precision::bf16)
      .value("f16", tg::Precision::f16);
  nb::class_<tg::CompileOptions>(m, "CompileOptions")
      .def(nb::init<>())
      .def_rw("device", &tg::CompileOptions::device)
      .def_rw("disable_type_inference", &tg::CompileOptions::disable_type_inference)
      .def_rw("precision", &tg::CompileOptions::precision)
      .def_rw("optimize", &tg::CompileOptions::optimize)
      .def_rw("free_output_layouts", &tg::CompileOptions::free_output_layouts)
      .def_rw("switches", &tg::CompileOptions::switches,
              "Debugging switches for this executable only, by environment name (docs/switches.md).");

  bind_desc<tg::ConvDesc>(m, "ConvDesc");
  bind_desc<tg::PoolDesc>(m, "PoolDesc");
  bind_desc<tg::SliceDesc>(m, "SliceDesc");
  bind_desc<tg::AttentionDesc>(m, "AttentionDesc");
  bind_desc<tg::ResizeDesc>(m, "ResizeDesc");
  bind_desc<tg::RandomDesc>(m, "RandomDesc");
  bind_desc<tg::StencilDesc>(m, "StencilDesc");
}

}  // namespace tgpy
