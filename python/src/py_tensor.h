#pragma once
// What the Python module shares between its files: the Python-side tensor handle, the graph
// a builder call goes into, and the casters for Shape and TensorData.
//
// A C++ tg::Tensor is a raw (graph, id) pair: the graph must outlive it. In Python a tensor
// can outlive every name of its graph, so the handle Python sees (PyTensor) holds a Graph,
// which shares the graph's storage.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tgraph/tgraph.h"

namespace tgpy {
namespace nb = nanobind;

/// A tensor of a graph as Python holds it: the handle and the graph (block) that made it.
struct PyTensor {
  tg::Graph graph;
  tg::Tensor t;
};
/// An operation (assign, an optimizer step) as Python holds it.
struct PyOperation {
  tg::Graph graph;
  tg::Operation op;
};

/// The graph a builder call on `self` goes into. While a Python body of if_else / for_loop /
/// while_loop runs, calls on any handle of that graph go into the body's block (as MPSGraph's
/// blocks and JAX's traced functions behave), so a body may use the outer graph object.
tg::Graph& builder_graph(tg::Graph& self);
/// Runs fn with `region` as the graph that builder calls of its graph go into.
template <class Fn>
auto with_region(tg::Graph& region, Fn&& fn);

namespace detail {
std::vector<tg::Graph*>& region_stack();
}

template <class Fn>
auto with_region(tg::Graph& region, Fn&& fn) {
  auto& stack = detail::region_stack();
  stack.push_back(&region);
  struct Pop {
    std::vector<tg::Graph*>& s;
    ~Pop() { s.pop_back(); }
  } pop{stack};
  return fn();
}

/// The C++ handle of a Python tensor, checked to belong to graph g.
tg::Tensor unwrap(const tg::Graph& g, const PyTensor& p);
inline tg::Operation unwrap(const tg::Graph&, const PyOperation& p) { return p.op; }
inline PyTensor wrap(const tg::Graph& g, tg::Tensor t) { return {g, t}; }
inline PyOperation wrap(const tg::Graph& g, tg::Operation op) { return {g, op}; }

/// Host tensor <-> numpy array. bf16 has no numpy type: it comes back as float32.
nb::object to_numpy(const tg::TensorData& t);
tg::TensorData from_array(nb::handle obj, std::optional<tg::DType> dtype = std::nullopt);
/// A host array for a feed of type `feed`: numpy has no bfloat16 or 8-bit floats, so such
/// feeds take float32 arrays, narrowed here.
inline tg::TensorData feed_value(const tg::TensorData& v, tg::DType feed) {
  return (feed == tg::DType::bf16 || tg::is_float8(feed)) && v.dtype() == tg::DType::f32 ? v.cast(feed) : v;
}

void bind_types(nb::module_& m);
void bind_data(nb::module_& m);
void bind_graph(nb::module_& m);
void bind_executable(nb::module_& m);
void bind_training(nb::module_& m);
void bind_distributed(nb::module_& m);

}  // namespace tgpy

namespace nanobind::detail {

/// Shapes are Python tuples of ints (-1 for a dynamic dim); None is an unranked shape.
template <>
struct type_caster<tg::Shape> {
  NB_TYPE_CASTER(tg::Shape, const_name("Sequence[int]"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    if (src.is_none()) {
      value = tg::Shape::unranked();
      return true;
    }
    if (!PySequence_Check(src.ptr()) || PyUnicode_Check(src.ptr())) return false;
    Py_ssize_t n = PySequence_Size(src.ptr());
    if (n < 0) {
      PyErr_Clear();
      return false;
    }
    std::vector<int64_t> dims;
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_GetItem(src.ptr(), i);
      if (!item) {
        PyErr_Clear();
        return false;
      }
      long long v = PyLong_AsLongLong(item);
      Py_DECREF(item);
      if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      dims.push_back(v);
    }
    value = tg::Shape(std::move(dims));
    return true;
  }
  static handle from_cpp(const tg::Shape& s, rv_policy, cleanup_list*) noexcept {
    if (!s.ranked()) return none().release();
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(s.dims().size()));
    for (size_t i = 0; i < s.dims().size(); ++i)
      PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(s.dims()[i]));
    return t;
  }
};

/// Host tensors are numpy arrays (anything numpy.asarray takes goes in).
template <>
struct type_caster<tg::TensorData> {
  NB_TYPE_CASTER(tg::TensorData, const_name("numpy.typing.ArrayLike"))
  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    try {
      value = tgpy::from_array(src);
      return true;
    } catch (...) {
      PyErr_Clear();
      return false;
    }
  }
  static handle from_cpp(const tg::TensorData& t, rv_policy, cleanup_list*) noexcept {
    try {
      return tgpy::to_numpy(t).release();
    } catch (python_error& e) {
      e.restore();
      return handle();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      return handle();
    }
  }
};

}  // namespace nanobind::detail
