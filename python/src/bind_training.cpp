// tgraph.optim: the optimizers of include/tgraph/optim.h. Gradients come as Graph.gradients
// returns them: a list in the order of the variables (or a dict keyed by variable).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_tensor.h"
#include "tgraph/optim.h"

namespace tgpy {
using namespace nb::literals;
using tg::Graph;
using tg::Tensor;

namespace {

tg::optim::GradMap grad_map_of(const Graph& g, const std::vector<PyTensor>& vars, nb::handle grads) {
  tg::optim::GradMap m;
  if (nb::isinstance<nb::dict>(grads)) {
    for (auto [k, v] : nb::cast<nb::dict>(grads))
      if (!v.is_none()) m.emplace(unwrap(g, nb::cast<PyTensor>(k)), unwrap(g, nb::cast<PyTensor>(v)));
    return m;
  }
  auto list = nb::cast<std::vector<std::optional<PyTensor>>>(grads);
  if (list.size() != vars.size())
    throw tg::Error("[optim] " + std::to_string(list.size()) + " gradients for " +
                    std::to_string(vars.size()) + " variables");
  for (size_t i = 0; i < vars.size(); ++i)
    if (list[i]) m.emplace(unwrap(g, vars[i]), unwrap(g, *list[i]));
  return m;
}

std::vector<Tensor> tensors(const Graph& g, const std::vector<PyTensor>& v) {
  std::vector<Tensor> r;
  for (const PyTensor& p : v) r.push_back(unwrap(g, p));
  return r;
}

tg::optim::GradMap grad_map(const Graph& g, const std::vector<PyTensor>& vars, nb::handle grads) {
  try {
    return grad_map_of(g, vars, grads);
  } catch (const nb::cast_error&) {
    throw tg::Error("[optim] grads must be a list of tensors (in the order of vars) or a dict variable -> "
                    "tensor, got " + nb::cast<std::string>(nb::repr(grads)));
  }
}

Tensor lr_tensor(Graph& g, nb::handle lr) {
  if (nb::isinstance<PyTensor>(lr)) return unwrap(g, nb::cast<PyTensor>(lr));
  return g.scalar(nb::cast<double>(lr), tg::DType::f32);
}

std::optional<Tensor> opt(const Graph& g, const std::optional<PyTensor>& p) {
  return p ? std::optional<Tensor>(unwrap(g, *p)) : std::nullopt;
}

}  // namespace

void bind_training(nb::module_& m) {
  nb::module_ o = m.def_submodule("optim", "Optimizers as graph ops: each returns one Operation to "
                                           "pass as a target op of compile.");
  o.def("sgd",
        [](Graph& self, const std::vector<PyTensor>& vars, nb::handle grads, nb::handle lr,
           double momentum, bool nesterov, double weight_decay, std::optional<PyTensor> apply_if) {
          Graph& g = builder_graph(self);
          tg::optim::SgdOptions so{momentum, nesterov, weight_decay, opt(g, apply_if)};
          return wrap(g, tg::optim::sgd(g, tensors(g, vars), grad_map(g, vars, grads), lr_tensor(g, lr), so));
        },
        "graph"_a, "vars"_a, "grads"_a, "lr"_a, "momentum"_a = 0.0, "nesterov"_a = false,
        "weight_decay"_a = 0.0, "apply_if"_a = nb::none());
  auto adam = [](bool decoupled) {
    return [decoupled](Graph& self, const std::vector<PyTensor>& vars, nb::handle grads, nb::handle lr,
                       double beta1, double beta2, double epsilon, std::optional<double> weight_decay,
                       std::optional<std::string> name, std::optional<PyTensor> apply_if) {
      Graph& g = builder_graph(self);
      tg::optim::AdamOptions ao;
      ao.beta1 = beta1;
      ao.beta2 = beta2;
      ao.epsilon = epsilon;
      ao.weight_decay = weight_decay.value_or(decoupled ? 0.01 : 0.0);
      ao.name = name.value_or(decoupled ? "adamw" : "adam");
      ao.apply_if = opt(g, apply_if);
      std::vector<Tensor> vs = tensors(g, vars);
      tg::optim::GradMap gm = grad_map(g, vars, grads);
      Tensor rate = lr_tensor(g, lr);
      return wrap(g, decoupled ? tg::optim::adamw(g, vs, gm, rate, ao) : tg::optim::adam(g, vs, gm, rate, ao));
    };
  };
  for (auto [name, decoupled] : {std::pair{"adam", false}, std::pair{"adamw", true}})
    o.def(name, adam(decoupled), "graph"_a, "vars"_a, "grads"_a, "lr"_a, "beta1"_a = 0.9,
          "beta2"_a = 0.999, "epsilon"_a = 1e-8, "weight_decay"_a = nb::none(), "name"_a = nb::none(),
          "apply_if"_a = nb::none());
  o.def("group",
        [](Graph& self, const std::vector<PyOperation>& ops) {
          Graph& g = builder_graph(self);
          std::vector<tg::Operation> v;
          for (const PyOperation& p : ops) v.push_back(p.op);
          return wrap(g, tg::optim::group(g, v));
        },
        "graph"_a, "ops"_a, "One operation that runs every op of ops.");
  o.def("global_norm",
        [](Graph& self, const std::vector<PyTensor>& vars, nb::handle grads) {
          Graph& g = builder_graph(self);
          return wrap(g, tg::optim::global_norm(g, grad_map(g, vars, grads)));
        },
        "graph"_a, "vars"_a, "grads"_a);
  o.def("clip_by_global_norm",
        [](Graph& self, const std::vector<PyTensor>& vars, nb::handle grads, double max_norm) {
          Graph& g = builder_graph(self);
          Tensor norm;
          tg::optim::GradMap clipped = tg::optim::clip_by_global_norm(g, grad_map(g, vars, grads), max_norm, &norm);
          std::vector<std::optional<PyTensor>> r;
          for (const PyTensor& v : vars) {
            auto it = clipped.find(unwrap(g, v));
            r.push_back(it == clipped.end() ? std::nullopt : std::optional<PyTensor>(wrap(g, it->second)));
          }
          return std::make_pair(r, wrap(g, norm));
        },
        "graph"_a, "vars"_a, "grads"_a, "max_norm"_a, "(clipped gradients in the order of vars, the norm)");
  o.def("cosine_lr", &tg::optim::cosine_lr, "step"_a, "total"_a, "base"_a, "warmup"_a = 0, "final_lr"_a = 0.0);
  o.def("step_lr", &tg::optim::step_lr, "step"_a, "step_size"_a, "base"_a, "gamma"_a = 0.1);
}

}  // namespace tgpy
