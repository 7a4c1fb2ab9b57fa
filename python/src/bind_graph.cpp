// tgraph.Graph: every builder method of tg::Graph, adapted by one template (method()) that
// turns Python tensor handles into C++ ones and back. The op methods are listed by signature
// family; their argument names and defaults follow include/tgraph/graph.h.
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_args.h"
#include "tgraph/distributed.h"
#include "py_tensor.h"
#include "ops/op_def.h"
#include "runtime/executable_impl.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/plan_traffic.h"
#endif

namespace tgpy {
using namespace nb::literals;
using tg::Graph;
using tg::Tensor;

std::vector<Graph*>& detail::region_stack() {
  static thread_local std::vector<Graph*> s;
  return s;
}

Graph& builder_graph(Graph& self) {
  auto& s = detail::region_stack();
  return !s.empty() && &s.back()->impl() == &self.impl() ? *s.back() : self;
}

Tensor unwrap(const Graph& g, const PyTensor& p) {
  if (p.t.graph_impl() != &g.impl())
    throw tg::Error("[python] tensor " + p.t.name() + " belongs to another graph");
  return p.t;
}

namespace {

// ---- the adaptor: C++ argument and result types <-> what Python passes and gets --------------
template <class T>
struct Py {  // passed through unchanged
  using type = T;
  static T in(const Graph&, const T& v) { return v; }
};
template <>
struct Py<Tensor> {
  using type = PyTensor;
  static Tensor in(const Graph& g, const PyTensor& p) { return unwrap(g, p); }
};
template <>
struct Py<tg::Operation> {
  using type = PyOperation;
  static tg::Operation in(const Graph& g, const PyOperation& p) { return unwrap(g, p); }
};
template <>
struct Py<tg::DType> {
  using type = DTypeArg;
  static tg::DType in(const Graph&, const DTypeArg& d) { return d.get(); }
};
template <class E>
  requires(std::is_enum_v<E> && !std::is_same_v<E, tg::DType>)
struct Py<E> {
  using type = EnumArg<E>;
  static E in(const Graph&, const EnumArg<E>& e) { return e.get(); }
};
template <class T>
struct Py<std::vector<T>> {
  using type = std::vector<typename Py<T>::type>;
  static std::vector<T> in(const Graph& g, const type& v) {
    std::vector<T> out;
    for (const auto& x : v) out.push_back(Py<T>::in(g, x));
    return out;
  }
};
template <class T>
struct Py<std::optional<T>> {
  using type = std::optional<typename Py<T>::type>;
  static std::optional<T> in(const Graph& g, const type& v) {
    return v ? std::optional<T>(Py<T>::in(g, *v)) : std::nullopt;
  }
};

template <class T>
T out(const Graph&, T v) {
  return v;
}
PyTensor out(const Graph& g, Tensor t) { return wrap(g, t); }
PyOperation out(const Graph& g, tg::Operation op) { return wrap(g, op); }
std::vector<PyTensor> out(const Graph& g, const std::vector<Tensor>& ts) {
  std::vector<PyTensor> r;
  for (const Tensor& t : ts) r.push_back(wrap(g, t));
  return r;
}
std::pair<PyTensor, PyTensor> out(const Graph& g, const std::pair<Tensor, Tensor>& p) {
  return {wrap(g, p.first), wrap(g, p.second)};
}

// A builder method of tg::Graph as a Python method: arguments unwrapped, the call made on the
// graph the call goes into (a body's block while one is being built), the result wrapped.
template <class R, class... A>
auto method(R (Graph::*f)(A...)) {
  return [f](Graph& self, typename Py<std::decay_t<A>>::type... a) {
    Graph& g = builder_graph(self);
    return out(g, (g.*f)(Py<std::decay_t<A>>::in(g, a)...));
  };
}

// ---- Python bodies of control flow ----------------------------------------------------------
std::vector<Tensor> tensors_of(const Graph& g, nb::handle r, const char* what) {
  std::vector<Tensor> out;
  if (r.is_none()) return out;
  if (nb::isinstance<PyTensor>(r)) return {unwrap(g, nb::cast<PyTensor>(r))};
  if (!PySequence_Check(r.ptr()))
    throw tg::Error(std::string("[python] ") + what + " must return a tensor or a sequence of tensors, got " +
                    nb::cast<std::string>(nb::repr(r)));
  for (nb::handle x : nb::cast<nb::sequence>(r)) {
    if (!nb::isinstance<PyTensor>(x))
      throw tg::Error(std::string("[python] ") + what + " returned a non-tensor: " +
                      nb::cast<std::string>(nb::repr(x)));
    out.push_back(unwrap(g, nb::cast<PyTensor>(x)));
  }
  return out;
}

nb::list py_list(const Graph& g, const std::vector<Tensor>& ts) {
  nb::list l;
  for (const Tensor& t : ts) l.append(nb::cast(wrap(g, t)));
  return l;
}

// Calls a Python body with the body's graph as the one builder calls go into.
template <class Fn>
nb::object call_body(Graph& region, Fn&& fn) {
  return with_region(region, std::forward<Fn>(fn));
}

std::vector<PyTensor> if_else(Graph& self, const PyTensor& pred, nb::callable then_fn,
                              std::optional<nb::callable> else_fn) {
  Graph& g = builder_graph(self);
  auto branch = [](nb::callable fn, const char* what) {
    return [fn, what](Graph& rg) { return tensors_of(rg, call_body(rg, [&] { return fn(); }), what); };
  };
  tg::RegionFn else_body;
  if (else_fn) else_body = branch(*else_fn, "else_fn");
  return out(g, g.if_else(unwrap(g, pred), branch(then_fn, "then_fn"), else_body));
}

Graph::ForBody for_body(nb::callable body) {
  return [body](Graph& rg, Tensor i, std::vector<Tensor> args) {
    return tensors_of(rg, call_body(rg, [&] {
                        nb::list call_args = py_list(rg, args);
                        call_args.insert(0, nb::cast(wrap(rg, i)));
                        return body(*nb::tuple(call_args));
                      }), "for_loop body");
  };
}

std::vector<PyTensor> for_range(Graph& self, const PyTensor& lower, const PyTensor& upper,
                                const PyTensor& step, const std::vector<PyTensor>& init, nb::callable body) {
  Graph& g = builder_graph(self);
  return out(g, g.for_loop(unwrap(g, lower), unwrap(g, upper), unwrap(g, step),
                           Py<std::vector<Tensor>>::in(g, init), for_body(body)));
}

std::vector<PyTensor> for_n(Graph& self, const PyTensor& n, const std::vector<PyTensor>& init,
                            nb::callable body) {
  Graph& g = builder_graph(self);
  return out(g, g.for_loop(unwrap(g, n), Py<std::vector<Tensor>>::in(g, init), for_body(body)));
}

std::vector<PyTensor> while_loop(Graph& self, const std::vector<PyTensor>& init, nb::callable before,
                                 nb::callable after) {
  Graph& g = builder_graph(self);
  Graph::WhileBefore b = [before](Graph& rg, std::vector<Tensor> args) {
    nb::object r = call_body(rg, [&] { return before(*nb::tuple(py_list(rg, args))); });
    if (!nb::isinstance<nb::tuple>(r) || nb::len(r) != 2 || !nb::isinstance<PyTensor>(r[0]))
      throw tg::Error("[python] while_loop's before must return (pred, [results]) with pred a bool tensor, got " +
                      nb::cast<std::string>(nb::repr(r)));
    Tensor pred = unwrap(rg, nb::cast<PyTensor>(r[0]));
    return std::pair<Tensor, std::vector<Tensor>>(pred, tensors_of(rg, r[1], "while_loop before"));
  };
  Graph::WhileAfter a = [after](Graph& rg, std::vector<Tensor> args) {
    return tensors_of(rg, call_body(rg, [&] { return after(*nb::tuple(py_list(rg, args))); }),
                      "while_loop after");
  };
  return out(g, g.while_loop(Py<std::vector<Tensor>>::in(g, init), b, a));
}

}  // namespace

void bind_graph(nb::module_& m) {
  m.def(
      "op_names",
      [] {
        std::vector<std::string> names;
        for (int i = 0; i < tg::detail::kNumOps; ++i) names.push_back(tg::detail::op_def(static_cast<tg::detail::OpKind>(i)).name);
        return names;
      },
      "The name of every op of the op list (src/ops/op_list.h), in its order: what `tgraph ops` prints.");
  nb::class_<PyTensor>(m, "Tensor", "A value of a graph (a symbolic handle; run the graph to get numbers).")
      .def_prop_ro("graph", [](const PyTensor& p) { return p.graph; })
      .def_prop_ro("shape", [](const PyTensor& p) { return p.t.shape(); })
      .def_prop_ro("dtype", [](const PyTensor& p) { return p.t.dtype(); })
      .def_prop_ro("type", [](const PyTensor& p) { return p.t.type(); })
      .def_prop_ro("rank", [](const PyTensor& p) { return p.t.rank(); })
      .def_prop_ro("name", [](const PyTensor& p) { return p.t.name(); })
      .def_prop_ro("op", [](const PyTensor& p) { return PyOperation{p.graph, p.t.op()}; })
      .def_prop_ro("id", [](const PyTensor& p) { return p.t.id(); })
      .def("__hash__", [](const PyTensor& p) { return std::hash<Tensor>()(p.t); })
      .def("same_as", [](const PyTensor& a, const PyTensor& b) { return a.t == b.t; },
           "True when both handles name the same value.")
      .def("__repr__", [](const PyTensor& p) { return "Tensor(" + p.t.name() + ": " + p.t.type().str() + ")"; });
  nb::class_<PyOperation>(m, "Operation", "An operation of a graph (targets with side effects, control dependencies).")
      .def_prop_ro("kind", [](const PyOperation& p) { return p.op.kind_name(); })
      .def_prop_ro("num_outputs", [](const PyOperation& p) { return p.op.num_outputs(); })
      .def("output", [](const PyOperation& p, int i) { return wrap(p.graph, p.op.output(i)); }, "i"_a = 0)
      .def("__repr__", [](const PyOperation& p) { return "Operation(" + p.op.kind_name() + ")"; });

  nb::class_<Graph> c(m, "Graph", "A graph of tensor operations: build it, compile it once, run it many times.");
  c.def(nb::init<>());

  // sources and state
  c.def("placeholder", method(&Graph::placeholder), "shape"_a, "dtype"_a = tg::f32, "name"_a = "");
  c.def("constant", method(&Graph::constant), "value"_a, "name"_a = "");
  c.def("scalar", method(&Graph::scalar), "value"_a, "dtype"_a = tg::f32);
  c.def("variable", method(&Graph::variable), "initial"_a, "name"_a);
  c.def("read_variable", method(&Graph::read_variable), "variable"_a);
  c.def("assign", method(&Graph::assign), "variable"_a, "value"_a);
  c.def("control_dependency",
        [](Graph& self, const std::vector<PyOperation>& ops, nb::callable fn) {
          Graph& g = builder_graph(self);
          return out(g, g.control_dependency(Py<std::vector<tg::Operation>>::in(g, ops),
                                             [&] { return tensors_of(g, fn(), "control_dependency's fn"); }));
        },
        "ops"_a, "fn"_a, "Runs fn(); every op it makes runs after `ops`. Returns fn's tensors.");

  // elementwise: one tensor in
  for (auto [name, f] : std::initializer_list<std::pair<const char*, Tensor (Graph::*)(Tensor)>>{
           {"identity", &Graph::identity}, {"stop_gradient", &Graph::stop_gradient}, {"neg", &Graph::neg},
           {"abs", &Graph::abs}, {"sign", &Graph::sign}, {"exp", &Graph::exp}, {"exp2", &Graph::exp2},
           {"log", &Graph::log}, {"log2", &Graph::log2}, {"log1p", &Graph::log1p}, {"expm1", &Graph::expm1},
           {"sqrt", &Graph::sqrt}, {"rsqrt", &Graph::rsqrt}, {"reciprocal", &Graph::reciprocal},
           {"square", &Graph::square}, {"sin", &Graph::sin}, {"cos", &Graph::cos}, {"tan", &Graph::tan},
           {"sinh", &Graph::sinh}, {"cosh", &Graph::cosh}, {"tanh", &Graph::tanh}, {"asin", &Graph::asin},
           {"acos", &Graph::acos}, {"atan", &Graph::atan}, {"asinh", &Graph::asinh}, {"acosh", &Graph::acosh},
           {"atanh", &Graph::atanh}, {"erf", &Graph::erf}, {"floor", &Graph::floor}, {"ceil", &Graph::ceil},
           {"round", &Graph::round}, {"rint", &Graph::rint}, {"trunc", &Graph::trunc},
           {"logical_not", &Graph::logical_not}, {"bitwise_not", &Graph::bitwise_not},
           {"is_nan", &Graph::is_nan}, {"is_inf", &Graph::is_inf}, {"is_finite", &Graph::is_finite},
           {"sigmoid", &Graph::sigmoid}, {"relu", &Graph::relu}, {"gelu", &Graph::gelu},
           {"gelu_tanh", &Graph::gelu_tanh}, {"silu", &Graph::silu}, {"softplus", &Graph::softplus},
           {"shape_of", &Graph::shape_of}, {"non_zero_indices", &Graph::non_zero_indices}})
    c.def(name, method(f), "x"_a);
  c.def("leaky_relu", method(&Graph::leaky_relu), "x"_a, "alpha"_a = 0.01);
  c.def("elu", method(&Graph::elu), "x"_a, "alpha"_a = 1.0);
  c.def("hard_sigmoid", method(&Graph::hard_sigmoid), "x"_a, "alpha"_a = 1.0 / 6.0, "beta"_a = 0.5);
  c.def("cast", method(&Graph::cast), "x"_a, "to"_a);
  c.def("bitcast", method(&Graph::bitcast), "x"_a, "to"_a);

  // elementwise: two tensors in (numpy broadcasting)
  for (auto [name, f] : std::initializer_list<std::pair<const char*, Tensor (Graph::*)(Tensor, Tensor)>>{
           {"add", &Graph::add}, {"sub", &Graph::sub}, {"mul", &Graph::mul}, {"div", &Graph::div},
           {"div_no_nan", &Graph::div_no_nan}, {"mod", &Graph::mod}, {"floor_mod", &Graph::floor_mod},
           {"pow", &Graph::pow}, {"minimum", &Graph::minimum}, {"maximum", &Graph::maximum},
           {"minimum_nan", &Graph::minimum_nan}, {"maximum_nan", &Graph::maximum_nan},
           {"equal", &Graph::equal}, {"not_equal", &Graph::not_equal}, {"less", &Graph::less},
           {"less_equal", &Graph::less_equal}, {"greater", &Graph::greater},
           {"greater_equal", &Graph::greater_equal}, {"logical_and", &Graph::logical_and},
           {"logical_or", &Graph::logical_or}, {"logical_xor", &Graph::logical_xor},
           {"bitwise_and", &Graph::bitwise_and}, {"bitwise_or", &Graph::bitwise_or},
           {"bitwise_xor", &Graph::bitwise_xor}, {"shift_left", &Graph::shift_left},
           {"shift_right", &Graph::shift_right}})
    c.def(name, method(f), "a"_a, "b"_a);
  c.def("atan2", method(&Graph::atan2), "y"_a, "x"_a);
  c.def("gelu_tanh_grad", method(&Graph::gelu_tanh_grad), "dy"_a, "x"_a);
  c.def("relu_grad", method(&Graph::relu_grad), "dy"_a, "y"_a);
  c.def("select", method(&Graph::select), "cond"_a, "a"_a, "b"_a);
  c.def("clamp", method(&Graph::clamp), "x"_a, "lo"_a, "hi"_a);

  // reductions and scans
  for (auto [name, f] : std::initializer_list<
           std::pair<const char*, Tensor (Graph::*)(Tensor, std::vector<int64_t>, bool)>>{
           {"reduce_sum", &Graph::reduce_sum}, {"reduce_prod", &Graph::reduce_prod},
           {"reduce_max", &Graph::reduce_max}, {"reduce_min", &Graph::reduce_min},
           {"reduce_mean", &Graph::reduce_mean}, {"reduce_variance", &Graph::reduce_variance},
           {"reduce_all", &Graph::reduce_all}, {"reduce_any", &Graph::reduce_any},
           {"reduce_logsumexp", &Graph::reduce_logsumexp}})
    c.def(name, method(f), "x"_a, "axes"_a = std::vector<int64_t>{}, "keep_dims"_a = false);
  c.def("argmax", method(&Graph::argmax), "x"_a, "axis"_a, "keep_dims"_a = false);
  c.def("argmin", method(&Graph::argmin), "x"_a, "axis"_a, "keep_dims"_a = false);
  for (auto [name, f] : std::initializer_list<
           std::pair<const char*, Tensor (Graph::*)(Tensor, int64_t, bool, bool)>>{
           {"cumsum", &Graph::cumsum}, {"cumprod", &Graph::cumprod}, {"cummax", &Graph::cummax},
           {"cummin", &Graph::cummin}})
    c.def(name, method(f), "x"_a, "axis"_a, "exclusive"_a = false, "reverse"_a = false);
  c.def("top_k", method(&Graph::top_k), "x"_a, "k"_a, "axis"_a = -1, "largest"_a = true);
  c.def("sort", method(&Graph::sort), "x"_a, "axis"_a = -1, "descending"_a = false);
  c.def("argsort", method(&Graph::argsort), "x"_a, "axis"_a = -1, "descending"_a = false);

  // linear algebra, convolution, pooling
  c.def("matmul", method(&Graph::matmul), "a"_a, "b"_a, "transpose_a"_a = false, "transpose_b"_a = false);
  c.def("scaled_matmul", method(&Graph::scaled_matmul), "a"_a, "b"_a, "scale_a"_a, "scale_b"_a, "out"_a = tg::f32,
        "transpose_a"_a = false, "transpose_b"_a = false);
  c.def("band_part", method(&Graph::band_part), "x"_a, "num_lower"_a, "num_upper"_a);
  c.def("conv2d", method(&Graph::conv2d), "x"_a, "w"_a, "desc"_a = tg::ConvDesc{});
  c.def("conv3d", method(&Graph::conv3d), "x"_a, "w"_a, "desc"_a = tg::ConvDesc{});
  c.def("conv_transpose2d", method(&Graph::conv_transpose2d), "x"_a, "w"_a, "desc"_a = tg::ConvDesc{});
  c.def("conv2d_data_grad", method(&Graph::conv2d_data_grad), "dy"_a, "w"_a, "input_shape"_a, "desc"_a = tg::ConvDesc{});
  c.def("conv2d_weight_grad", method(&Graph::conv2d_weight_grad), "dy"_a, "x"_a, "weights_shape"_a, "desc"_a = tg::ConvDesc{});
  c.def("conv3d_data_grad", method(&Graph::conv3d_data_grad), "dy"_a, "w"_a, "input_shape"_a, "desc"_a = tg::ConvDesc{});
  c.def("conv3d_weight_grad", method(&Graph::conv3d_weight_grad), "dy"_a, "x"_a, "weights_shape"_a, "desc"_a = tg::ConvDesc{});
  c.def("max_pool2d", method(&Graph::max_pool2d), "x"_a, "desc"_a = tg::PoolDesc{});
  c.def("avg_pool2d", method(&Graph::avg_pool2d), "x"_a, "desc"_a = tg::PoolDesc{});
  c.def("max_pool2d_with_indices", method(&Graph::max_pool2d_with_indices), "x"_a, "desc"_a = tg::PoolDesc{});
  c.def("max_pool2d_grad", method(&Graph::max_pool2d_grad), "dy"_a, "x"_a, "desc"_a = tg::PoolDesc{});
  c.def("avg_pool2d_grad", method(&Graph::avg_pool2d_grad), "dy"_a, "x"_a, "desc"_a = tg::PoolDesc{});
  c.def("global_avg_pool2d", method(&Graph::global_avg_pool2d), "x"_a, "layout"_a = tg::Layout::nhwc);
  c.def("global_max_pool2d", method(&Graph::global_max_pool2d), "x"_a, "layout"_a = tg::Layout::nhwc);

  // normalisation, losses, attention
  c.def("batch_norm", method(&Graph::batch_norm), "x"_a, "mean"_a, "var"_a, "gamma"_a, "beta"_a,
        "axis"_a = -1, "epsilon"_a = 1e-5);
  c.def("batch_norm_training", method(&Graph::batch_norm_training), "x"_a, "gamma"_a, "beta"_a,
        "axis"_a = -1, "epsilon"_a = 1e-5);
  c.def("layer_norm", method(&Graph::layer_norm), "x"_a, "gamma"_a, "beta"_a, "axis"_a = -1, "epsilon"_a = 1e-5);
  c.def("group_norm", method(&Graph::group_norm), "x"_a, "gamma"_a, "beta"_a, "groups"_a, "axis"_a = -1,
        "epsilon"_a = 1e-5);
  c.def("softmax", method(&Graph::softmax), "x"_a, "axis"_a = -1);
  c.def("log_softmax", method(&Graph::log_softmax), "x"_a, "axis"_a = -1);
  c.def("softmax_cross_entropy", method(&Graph::softmax_cross_entropy), "logits"_a, "labels"_a,
        "axis"_a = -1, "reduction"_a = tg::LossReduction::mean);
  c.def("mse", method(&Graph::mse), "a"_a, "b"_a, "reduction"_a = tg::LossReduction::mean);
  c.def("scaled_dot_product_attention", method(&Graph::scaled_dot_product_attention), "q"_a, "k"_a,
        "v"_a, "mask"_a = nb::none(), "desc"_a = tg::AttentionDesc{});

  // shape ops
  // sources: tensors whose dims the target takes (tg.dim_from_source(j)), for dynamic shapes
  using ShapeOp = Tensor (Graph::*)(Tensor, std::vector<int64_t>, const std::vector<Tensor>&);
  c.def("reshape", method(static_cast<ShapeOp>(&Graph::reshape)), "x"_a, "shape"_a,
        "sources"_a = std::vector<PyTensor>{});
  c.def("transpose", method(&Graph::transpose), "x"_a, "perm"_a);
  c.def("broadcast_to", method(static_cast<ShapeOp>(&Graph::broadcast_to)), "x"_a, "shape"_a,
        "sources"_a = std::vector<PyTensor>{});
  c.def("broadcast_like", method(&Graph::broadcast_like), "x"_a, "like"_a);
  c.def("sum_to_like", method(&Graph::sum_to_like), "x"_a, "like"_a);
  c.def("expand_dims", method(&Graph::expand_dims), "x"_a, "axes"_a);
  c.def("squeeze", method(&Graph::squeeze), "x"_a, "axes"_a = std::vector<int64_t>{});
  c.def("flatten", method(&Graph::flatten), "x"_a, "axis"_a = 1);
  c.def("concat", method(&Graph::concat), "xs"_a, "axis"_a);
  c.def("stack", method(&Graph::stack), "xs"_a, "axis"_a);
  c.def("split", method(&Graph::split), "x"_a, "sizes"_a, "axis"_a);
  c.def("strided_slice", method(&Graph::strided_slice), "x"_a, "desc"_a);
  c.def("slice", method(&Graph::slice), "x"_a, "begin"_a, "end"_a);
  c.def("slice_update", method(&Graph::slice_update), "x"_a, "update"_a, "desc"_a);
  c.def("pad", method(&Graph::pad), "x"_a, "before"_a, "after"_a, "mode"_a = tg::PadMode::constant,
        "constant"_a = 0.0);
  c.def("tile", method(&Graph::tile), "x"_a, "multiples"_a);
  c.def("reverse", method(&Graph::reverse), "x"_a, "axes"_a);
  c.def("arange", method(&Graph::arange), "start"_a, "limit"_a, "delta"_a = 1.0, "dtype"_a = tg::f32);
  c.def("one_hot", method(&Graph::one_hot), "indices"_a, "depth"_a, "axis"_a = -1, "dtype"_a = tg::f32,
        "on_value"_a = 1.0, "off_value"_a = 0.0);
  c.def("space_to_depth", method(&Graph::space_to_depth), "x"_a, "block"_a, "layout"_a = tg::Layout::nhwc);
  c.def("depth_to_space", method(&Graph::depth_to_space), "x"_a, "block"_a, "layout"_a = tg::Layout::nhwc);
  c.def("resize", method(&Graph::resize), "x"_a, "desc"_a);
  // Sizes as 1-D integer tensors computed in the graph from other tensors' sizes (shape_of and
  // arithmetic): the plain op where known when built, else a sized_op known per size.
  c.def("reshape_sized", method(&Graph::reshape_sized), "x"_a, "shape"_a, "copy_zeros"_a = false);
  c.def("broadcast_to_sized", method(&Graph::broadcast_to_sized), "x"_a, "shape"_a);
  c.def("pad_sized", method(&Graph::pad_sized), "x"_a, "pads"_a, "mode"_a = tg::PadMode::constant,
        "constant"_a = 0.0);
  c.def("slice_sized", method(&Graph::slice_sized), "x"_a, "begin"_a, "end"_a, "strides"_a, "axes"_a);
  c.def("tile_sized", method(&Graph::tile_sized), "x"_a, "multiples"_a);
  c.def("arange_sized", method(&Graph::arange_sized), "start"_a, "limit"_a, "delta"_a, "dtype"_a = tg::f32);
  c.def("resize_sized", method(&Graph::resize_sized), "x"_a, "size"_a, "desc"_a);

  // random
  c.def("random_state", method(&Graph::random_state), "seed"_a);
  c.def("random", method(&Graph::random), "state"_a, "desc"_a);
  c.def("dropout", method(&Graph::dropout), "x"_a, "state"_a, "rate"_a);

  // collectives across ranks (tgraph.distributed)
  c.def("all_reduce", method(&Graph::all_reduce), "x"_a, "reduce"_a = tg::CollectiveReduce::sum);
  c.def("all_gather", method(&Graph::all_gather), "x"_a);
  c.def("reduce_scatter", method(&Graph::reduce_scatter), "x"_a, "reduce"_a = tg::CollectiveReduce::sum);
  c.def("broadcast", method(&Graph::broadcast), "x"_a, "root"_a = 0);

  // gather, scatter, stencil
  c.def("gather", method(&Graph::gather), "x"_a, "indices"_a, "axis"_a = 0, "batch_dims"_a = 0);
  c.def("gather_nd", method(&Graph::gather_nd), "x"_a, "indices"_a, "batch_dims"_a = 0);
  c.def("gather_along_axis", method(&Graph::gather_along_axis), "x"_a, "indices"_a, "axis"_a);
  c.def("scatter", method(&Graph::scatter), "x"_a, "indices"_a, "updates"_a, "axis"_a = 0,
        "mode"_a = tg::ScatterMode::set, "batch_dims"_a = 0, "deterministic"_a = false);
  c.def("scatter_nd", method(&Graph::scatter_nd), "x"_a, "indices"_a, "updates"_a,
        "mode"_a = tg::ScatterMode::set, "batch_dims"_a = 0, "deterministic"_a = false);
  c.def("scatter_along_axis", method(&Graph::scatter_along_axis), "x"_a, "indices"_a, "updates"_a,
        "axis"_a, "mode"_a = tg::ScatterMode::set, "deterministic"_a = false);
  c.def("stencil", method(&Graph::stencil), "source"_a, "weights"_a, "desc"_a = tg::StencilDesc{});
  c.def("stencil_2d", method(&Graph::stencil_2d), "source"_a, "weights"_a, "desc"_a = tg::StencilDesc{});
  c.def("stencil_3d", method(&Graph::stencil_3d), "source"_a, "weights"_a, "desc"_a = tg::StencilDesc{});

  // control flow: the bodies are Python callables, built once into the graph
  c.def("if_else", &if_else, "pred"_a, "then_fn"_a, "else_fn"_a = nb::none(),
        "then_fn() or else_fn() on a scalar bool, on the device; both return tensors of the same types.");
  c.def("_for_n", &for_n, "n"_a, "init"_a, "body"_a);
  c.def("_for_range", &for_range, "lower"_a, "upper"_a, "step"_a, "init"_a, "body"_a);
  c.def("while_loop", &while_loop, "init"_a, "before"_a, "after"_a,
        "MPSGraph's while: before(*args) -> (pred, results); while pred: args = after(*results). "
        "Returns the results of the last before.");

  // differentiation
  c.def("gradients",
        [](Graph& self, const PyTensor& y, const std::vector<PyTensor>& xs) {
          Graph& g = builder_graph(self);
          std::vector<Tensor> cx = Py<std::vector<Tensor>>::in(g, xs);
          auto grads = g.gradients(unwrap(g, y), cx);
          std::vector<std::optional<PyTensor>> r;
          for (const Tensor& x : cx) {
            auto it = grads.find(x);
            r.push_back(it == grads.end() ? std::nullopt : std::optional<PyTensor>(wrap(g, it->second)));
          }
          return r;
        },
        "y"_a, "xs"_a, "d(sum of y)/dx for each x, in the order of xs (zeros where y does not depend on x).");

  // tgraph.distributed.average_gradients: the bucketed all_reduce of a data-parallel step
  c.def("_average_gradients",
        [](Graph& self, const std::vector<std::optional<PyTensor>>& grads, size_t bucket_bytes) {
          Graph& g = builder_graph(self);
          std::vector<Tensor> in;
          for (const auto& t : grads) in.push_back(t ? unwrap(g, *t) : Tensor());
          std::vector<std::optional<PyTensor>> r;
          for (const Tensor& t : tg::distributed::average_gradients(g, in, bucket_bytes))
            r.push_back(t.valid() ? std::optional<PyTensor>(wrap(g, t)) : std::nullopt);
          return r;
        },
        "grads"_a, "bucket_bytes"_a);

  // compiling and running (tgraph/__init__.py gives these their keyword forms)
  c.def("_compile",
        [](Graph& g, const std::vector<std::pair<PyTensor, tg::TensorType>>& feeds,
           const std::vector<PyTensor>& targets, const std::vector<PyOperation>& ops,
           const tg::CompileOptions& options) {
          std::vector<std::pair<Tensor, tg::TensorType>> f;
          for (const auto& [t, type] : feeds) f.emplace_back(unwrap(g, t), type);
          nb::gil_scoped_release release;
          return g.compile(f, Py<std::vector<Tensor>>::in(g, targets),
                           Py<std::vector<tg::Operation>>::in(g, ops), options);
        });
  c.def("_cuda_plan_traffic",
        [](Graph& g, const std::vector<std::pair<PyTensor, tg::TensorType>>& feeds,
           const std::vector<PyTensor>& targets, const std::vector<PyOperation>& ops, tg::CompileOptions options,
           int top) {
#ifdef TGRAPH_HAVE_CUDA
          std::vector<std::pair<Tensor, tg::TensorType>> f;
          for (const auto& [t, type] : feeds) f.emplace_back(unwrap(g, t), type);
          options.device = tg::Device::cuda(0);  // planned as for a GPU; none is needed
          tg::detail::Module m;
          tg::detail::prepare_module(m, g.impl(), f, Py<std::vector<Tensor>>::in(g, targets),
                                     Py<std::vector<tg::Operation>>::in(g, ops), options);
          return tg::detail::cuda_plan_traffic(m, top);
#else
          (void)g, (void)feeds, (void)targets, (void)ops, (void)options, (void)top;
          throw tg::Error("[plan] this build of tgraph has no CUDA backend");
#endif
        },
        "feeds"_a, "targets"_a, "ops"_a, "options"_a, "top"_a = 15,
        "The bytes the CUDA backend's generated kernels would move for this compile, planned without a "
        "GPU (bench/torch_plan_traffic.py).");
  c.def("_run", [](Graph& g, const std::vector<std::pair<PyTensor, tg::TensorData>>& feeds,
                   const std::vector<PyTensor>& targets, const std::vector<PyOperation>& ops) {
    std::vector<std::pair<Tensor, tg::TensorData>> f;
    for (const auto& [t, v] : feeds) f.emplace_back(unwrap(g, t), feed_value(v, t.t.dtype()));
    std::vector<Tensor> ts = Py<std::vector<Tensor>>::in(g, targets);
    std::vector<tg::Operation> os = Py<std::vector<tg::Operation>>::in(g, ops);
    std::vector<tg::TensorData> r;
    {
      nb::gil_scoped_release release;
      r = g.run(f, ts, os);
    }
    return r;
  });

  // inspection
  c.def("__str__", &Graph::str);
  c.def("dot", &Graph::dot);
  c.def_prop_ro("num_nodes", &Graph::num_nodes);
  c.def("__repr__", [](const Graph& g) { return "Graph(" + std::to_string(g.num_nodes()) + " nodes)"; });
}

}  // namespace tgpy
