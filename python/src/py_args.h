#pragma once
// Arguments that Python may spell several ways: element types ("f32", numpy.float32,
// torch.float32, tgraph.f32) and the descriptor enums ("same", tgraph.PaddingStyle.same).
#include <nanobind/nanobind.h>

#include <string>
#include <type_traits>

#include "ir/attr.h"
#include "tgraph/dtype.h"
#include "tgraph/error.h"

namespace tgpy {
namespace nb = nanobind;

/// An element type given from Python. A string that names no type is taken and reported by
/// get() as a tg::Error (a caster that refused it would give only nanobind's generic message).
struct DTypeArg {
  tg::DType v = tg::DType::f32;
  std::string error;
  tg::DType get() const {
    if (!error.empty()) throw tg::Error(error);
    return v;
  }
};
/// A descriptor enum given from Python (the enum or its name), reported the same way.
template <class E>
struct EnumArg {
  E v{};
  std::string error;
  E get() const {
    if (!error.empty()) throw tg::Error(error);
    return v;
  }
};

/// The element type named by a Python object; throws tg::Error naming what it got.
tg::DType dtype_from_py(nb::handle h);

/// Values of E in order, as tgraph's printer names them.
template <class E>
std::vector<std::pair<std::string, E>> enum_values() {
  std::vector<std::pair<std::string, E>> out;
  for (int i = 0; i < 64; ++i) {
    std::string n = tg::detail::enum_name(static_cast<E>(i));
    if (n == "?") break;
    out.emplace_back(n, static_cast<E>(i));
  }
  return out;
}

template <class E>
E enum_from_py(nb::handle h) {
  if (PyUnicode_Check(h.ptr())) {
    std::string s = nb::cast<std::string>(h);
    std::string known;
    for (const auto& [name, v] : enum_values<E>()) {
      if (name == s) return v;
      known += (known.empty() ? "" : ", ") + name;
    }
    throw tg::Error("[python] unknown value '" + s + "'; expected one of: " + known);
  }
  return nb::cast<E>(h);
}

/// A value of type T from Python, with the spellings above for element types and enums.
template <class T>
T from_py(nb::handle h, const std::string& what = "a value") {
  if constexpr (std::is_same_v<T, tg::DType>) {
    return dtype_from_py(h);
  } else if constexpr (std::is_enum_v<T>) {
    return enum_from_py<T>(h);
  } else {
    try {
      return nb::cast<T>(h);
    } catch (const nb::cast_error&) {
      throw tg::Error("[python] " + what + " cannot be " + nb::cast<std::string>(nb::repr(h)));
    }
  }
}

}  // namespace tgpy

namespace nanobind::detail {

template <>
struct type_caster<tgpy::DTypeArg> {
  NB_TYPE_CASTER(tgpy::DTypeArg, const_name("DTypeLike"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    try {
      value.v = tgpy::dtype_from_py(src);
      return true;
    } catch (const tg::Error& e) {
      value.error = e.what();
      return PyUnicode_Check(src.ptr());  // a string: reported when used, with tgraph's message
    } catch (...) {
      PyErr_Clear();
      return false;
    }
  }
  static handle from_cpp(const tgpy::DTypeArg& d, rv_policy p, cleanup_list* c) noexcept {
    return make_caster<tg::DType>::from_cpp(d.v, p, c);
  }
};

template <class E>
struct type_caster<tgpy::EnumArg<E>> {
  NB_TYPE_CASTER(tgpy::EnumArg<E>, const_name("str | Enum"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    try {
      value.v = tgpy::enum_from_py<E>(src);
      return true;
    } catch (const tg::Error& e) {
      value.error = e.what();
      return PyUnicode_Check(src.ptr());
    } catch (...) {
      PyErr_Clear();
      return false;
    }
  }
  static handle from_cpp(const tgpy::EnumArg<E>& d, rv_policy p, cleanup_list* c) noexcept {
    return make_caster<E>::from_cpp(d.v, p, c);
  }
};

}  // namespace nanobind::detail
