// Graph construction, sources, variables, assign and control dependencies.
#include "ir/printer.h"
#include "ops/builder.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

Graph::Graph() : impl_(std::make_shared<GraphImpl>()) {}
Graph::~Graph() = default;
Graph::Graph(const Graph&) = default;
Graph& Graph::operator=(const Graph&) = default;

TensorType Tensor::type() const {
  if (!g_) throw Error("[tensor] empty tensor handle");
  return g_->values[static_cast<size_t>(id_)].type;
}
Operation Tensor::op() const {
  int32_t n = g_->values[static_cast<size_t>(id_)].node;
  if (n < 0) throw Error("[tensor] " + name() + " is a region argument, made by no operation");
  return Operation(g_, n);
}
std::string Tensor::name() const { return g_ ? g_->value_name(id_) : "<empty>"; }
std::string Operation::kind_name() const { return op_name(g_->nodes[static_cast<size_t>(id_)].kind); }
int Operation::num_outputs() const {
  return static_cast<int>(g_->nodes[static_cast<size_t>(id_)].outputs.size());
}
Tensor Operation::output(int i) const {
  const auto& outs = g_->nodes[static_cast<size_t>(id_)].outputs;
  if (i < 0 || i >= static_cast<int>(outs.size()))
    throw Error("[" + kind_name() + "] has no output " + std::to_string(i));
  return Tensor(g_, outs[static_cast<size_t>(i)]);
}

namespace {
Tensor source(Graph& g, OpKind k, TensorType t, Attr attr, TensorData data, const std::string& name) {
  GraphImpl& impl = g.impl();
  int32_t n = impl.add_node(g.current_block(), k, {}, std::move(attr), {std::move(t)});
  Node& node = impl.nodes[static_cast<size_t>(n)];
  node.data = std::move(data);
  node.name = name;
  impl.values[static_cast<size_t>(node.outputs[0])].name = name;
  return Tensor(&impl, node.outputs[0]);
}
}  // namespace

Tensor Graph::placeholder(Shape shape, DType dtype, const std::string& name) {
  return source(*this, OpKind::Placeholder, TensorType(std::move(shape), dtype), NameDesc{name}, {}, name);
}

Tensor Graph::constant(const TensorData& value, const std::string& name) {
  if (value.empty()) throw Error("[constant] empty TensorData");
  return source(*this, OpKind::Constant, value.type(), NoDesc{}, value, name);
}

Tensor Graph::scalar(double value, DType dtype) { return constant(TensorData::scalar(value, dtype)); }

Tensor Graph::variable(const TensorData& initial, const std::string& name) {
  if (name.empty()) throw Error("[variable] a variable needs a name");
  if (initial.empty()) throw Error("[variable] '" + name + "' has no initial value");
  if (impl_->variables.count(name))
    throw Error("[variable] a variable named '" + name + "' already exists in this graph");
  if (block_ != 0) throw Error("[variable] '" + name + "' must be made at the top level, not in a region");
  Tensor t = source(*this, OpKind::Variable, initial.type(), NameDesc{name}, initial.clone(), name);
  impl_->variables[name] = t.op().id();
  return t;
}

namespace {
int32_t variable_node(const Graph& g, Tensor v, OpKind k) {
  use(g, v, k, "variable");
  int32_t n = g.impl().values[static_cast<size_t>(v.id())].node;
  if (n < 0 || g.impl().nodes[static_cast<size_t>(n)].kind != OpKind::Variable)
    throw Error(op_tag(k) + "operand 'variable' (" + v.name() + ") is not a variable");
  return n;
}
}  // namespace

Tensor Graph::read_variable(Tensor v) {
  variable_node(*this, v, OpKind::ReadVariable);
  return make(*this, OpKind::ReadVariable, {v});
}

Operation Graph::assign(Tensor v, Tensor value) {
  variable_node(*this, v, OpKind::Assign);
  use(*this, value, OpKind::Assign, "value");
  // assign(w, 0.5) works as users expect: the value is cast and broadcast to the variable.
  value = broadcast_if(*this, OpKind::Assign, cast_if(*this, value, v.dtype()), v.shape());
  make_multi(*this, OpKind::Assign, {v, value});
  return Operation(impl_.get(), static_cast<int32_t>(impl_->nodes.size() - 1));
}

std::vector<Tensor> Graph::control_dependency(const std::vector<Operation>& ops,
                                              const std::function<std::vector<Tensor>()>& fn) {
  std::vector<int32_t> ids;
  for (const Operation& op : ops) {
    if (op.graph_impl() != impl_.get())
      throw Error("[control_dependency] an operation belongs to another graph");
    ids.push_back(op.id());
  }
  impl_->control_scopes.push_back(ids);
  struct Pop {
    GraphImpl* g;
    ~Pop() { g->control_scopes.pop_back(); }
  } pop{impl_.get()};
  std::vector<Tensor> out = fn();
  // A returned tensor made before the scope gets an identity that carries the dependency, so
  // "the result of fn runs after ops" holds for every tensor returned.
  for (Tensor& t : out) {
    int32_t n = impl_->values[static_cast<size_t>(t.id())].node;
    bool made_inside = n >= 0 && impl_->nodes[static_cast<size_t>(n)].control_deps.size() >= ids.size() &&
                       std::equal(ids.begin(), ids.end(),
                                  impl_->nodes[static_cast<size_t>(n)].control_deps.end() - static_cast<long>(ids.size()));
    if (!made_inside) t = make(*this, OpKind::Identity, {t});
  }
  return out;
}

Tensor Graph::stop_gradient(Tensor x) { return make(*this, OpKind::StopGradient, {x}); }

std::string Graph::str() const { return print_text(*impl_); }
std::string Graph::dot() const { return print_dot(*impl_); }
int64_t Graph::num_nodes() const { return static_cast<int64_t>(impl_->nodes.size()); }

}  // namespace tg
