// Graph::gradients: reverse-mode differentiation over the top-level block. Gradients of values
// used several times are summed; ops off the path from xs to y are skipped. The walk itself
// (backprop) also differentiates region bodies for the control-flow rules (vjp_control.cpp).
#include <unordered_map>

#include "ops/builder.h"
#include "ops/infer.h"
#include "ops/vjp.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace detail {

VjpFn vjp_rule(OpKind k) {
  static const auto table = [] {
    auto* t = new VjpTable{};  // lives for the program: rules are looked up from any thread
    register_elementwise_vjps(*t);
    register_reduce_vjps(*t);
    register_shape_vjps(*t);
    register_nn_vjps(*t);
    register_conv_vjps(*t);
    register_indexing_vjps(*t);
    register_collective_vjps(*t);
    return t;
  }();
  return (*table)[static_cast<size_t>(k)];
}

const char* no_gradient_reason(OpKind k) {
  switch (k) {
    case OpKind::Placeholder: case OpKind::Constant: case OpKind::Variable: case OpKind::ReadVariable:
    case OpKind::Assign: case OpKind::RandomState:
      return "a source or state: autodiff treats it as a leaf";
    case OpKind::IfElse: case OpKind::ForLoop: case OpKind::WhileLoop:
      return "control flow: differentiated through its regions (vjp_control.cpp; while_loop not at all)";
    case OpKind::LogicalNot: case OpKind::BitwiseNot: case OpKind::IsNan: case OpKind::IsInf: case OpKind::IsFinite:
    case OpKind::Equal: case OpKind::NotEqual: case OpKind::Less: case OpKind::LessEqual: case OpKind::Greater:
    case OpKind::GreaterEqual: case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::LogicalXor:
    case OpKind::BitwiseAnd: case OpKind::BitwiseOr: case OpKind::BitwiseXor: case OpKind::ShiftLeft:
    case OpKind::ShiftRight: case OpKind::ReduceAll: case OpKind::ReduceAny:
      return "a boolean or integer result: nothing to differentiate";
    case OpKind::Bitcast: return "a reinterpretation of bits, not a function of the value";
    case OpKind::ArgMax: case OpKind::ArgMin: case OpKind::ArgSort: case OpKind::NonZeroIndices:
    case OpKind::ShapeOf: case OpKind::Arange:
      return "an index or shape result: piecewise constant";
    case OpKind::Random: return "random numbers: no dependence on a differentiable input";
    case OpKind::ScaledMatMul:
      return "an FP8 product of quantized operands (as torch._scaled_mm): differentiate the wider values "
             "before their cast to 8 bits";
    case OpKind::Conv2dDataGrad: case OpKind::Conv2dWeightGrad: case OpKind::Conv3dDataGrad:
    case OpKind::Conv3dWeightGrad: case OpKind::MaxPool2dGrad: case OpKind::AvgPool2dGrad:
      return "a gradient op: second-order rules for convolution and pooling are not written";
    default: return nullptr;
  }
}

std::vector<int64_t> normalized_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
  for (int64_t a : axes) out.push_back(a < 0 ? a + rank : a);
  std::sort(out.begin(), out.end());
  return out;
}

Tensor filled_like(Graph& g, Tensor x, double v) {
  Tensor s = g.scalar(v, x.dtype());
  return x.shape().is_static() ? g.broadcast_to(s, x.shape().dims()) : g.broadcast_like(s, x);
}

Tensor unbroadcast(Graph& g, Tensor grad, Tensor x) {
  if (grad.shape() == x.shape() && x.shape().is_static()) return grad;
  if (!x.shape().is_static() || !grad.shape().is_static()) {
    if (grad.shape() == x.shape()) return grad;  // same dynamic pattern: no broadcast happened
    return g.sum_to_like(grad, x);
  }
  int64_t lead = grad.rank() - x.rank();
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < grad.rank(); ++i)
    if (i < lead || (x.shape()[i - lead] == 1 && grad.shape()[i] != 1)) axes.push_back(i);
  Tensor r = axes.empty() ? grad : g.reduce_sum(grad, axes, true);
  return r.shape() == x.shape() ? r : g.reshape(r, x.shape().dims());
}

Tensor broadcast_back(Graph& g, Tensor grad, Tensor x, const std::vector<int64_t>& axes, bool keep_dims) {
  if (!keep_dims) {
    std::vector<int64_t> ax = normalized_axes(axes, x.rank());
    if (!ax.empty()) grad = g.expand_dims(grad, ax);
  }
  if (x.shape().is_static()) return grad.shape() == x.shape() ? grad : g.broadcast_to(grad, x.shape().dims());
  return g.broadcast_like(grad, x);
}

}  // namespace detail

namespace detail {

void propagate_reach(const GraphImpl& G, const std::vector<int32_t>& nodes, std::vector<char>& reach) {
  reach.resize(G.values.size(), 0);
  for (int32_t id : nodes) {
    const Node& n = G.nodes[static_cast<size_t>(id)];
    bool any = false;
    for (int32_t v : n.inputs) any |= reach[static_cast<size_t>(v)] != 0;
    if (!any && !n.regions.empty())
      for (int32_t v : region_captures(G, n)) any |= reach[static_cast<size_t>(v)] != 0;
    if (any)
      for (int32_t v : n.outputs) reach[static_cast<size_t>(v)] = 1;
  }
}

void backprop(Graph& g, const std::vector<int32_t>& nodes, const std::vector<char>& reach, GradMap& grad,
              const std::string& target) {
  GraphImpl& G = g.impl();
  // Values made while walking (gradient ops, loop tapes) lie past the end of `reach`.
  auto reaches = [&](int32_t v) {
    return static_cast<size_t>(v) < reach.size() && reach[static_cast<size_t>(v)] &&
           is_float(G.type(v).dtype);
  };
  auto accumulate = [&](int32_t v, Tensor gv) {
    auto it = grad.find(v);
    if (it == grad.end()) grad.emplace(v, gv);
    else it->second = g.add(it->second, gv);
  };
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node node = G.nodes[static_cast<size_t>(*it)];  // copy: G.nodes grows below
    bool has_grad = false;
    for (int32_t v : node.outputs) has_grad |= grad.count(v) != 0;
    if (!has_grad) continue;
    bool on_path = false;
    for (int32_t v : node.inputs) on_path |= reaches(v);
    if (!on_path && !node.regions.empty())
      for (int32_t v : region_captures(G, node)) on_path |= reaches(v);
    if (!on_path) continue;
    VjpFn rule = node.regions.empty() ? vjp_rule(node.kind) : nullptr;
    if (!rule && node.regions.empty()) {
      const char* why = no_gradient_reason(node.kind);
      throw Error("[gradients] no gradient rule for op '" + std::string(op_name(node.kind)) + "' (node ^" +
                  std::to_string(*it) + ") on the path from the inputs to " + target + (why ? std::string(": ") + why : ""));
    }
    VjpContext c{g, node, {}, {}, {}};
    for (int32_t v : node.inputs) c.in.emplace_back(&G, v);
    for (int32_t v : node.outputs) {
      c.out.emplace_back(&G, v);
      auto gi = grad.find(v);
      c.dout.push_back(gi != grad.end() ? gi->second : filled_like(g, Tensor(&G, v), 0.0));
    }
    if (!rule) {  // control flow: gradients of inputs and of captured outer values
      for (const auto& [v, gv] : control_vjp(c, reach))
        if (gv.valid() && reaches(v)) accumulate(v, gv);
      continue;
    }
    std::vector<Tensor> din = rule(c);
    for (size_t i = 0; i < din.size() && i < node.inputs.size(); ++i)
      if (din[i].valid() && reaches(node.inputs[i])) accumulate(node.inputs[i], din[i]);
  }
}

}  // namespace detail

std::unordered_map<Tensor, Tensor> Graph::gradients(Tensor y, const std::vector<Tensor>& xs) {
  use(*this, y, OpKind::Identity, "y");
  GraphImpl& G = *impl_;
  if (!is_float(y.dtype())) throw Error("[gradients] y must be floating point, got " + y.type().str());
  if (block_ != 0 || G.values[static_cast<size_t>(y.id())].block != 0)
    throw Error("[gradients] y must be a top-level tensor");
  for (const Tensor& x : xs) use(*this, x, OpKind::Identity, "x");

  // Values that depend on some x (forward reach through data edges and region captures).
  std::vector<char> reach(G.values.size(), 0);
  for (const Tensor& x : xs) reach[static_cast<size_t>(x.id())] = 1;
  const std::vector<int32_t> order = G.blocks[0].nodes;  // copy: we append while walking
  propagate_reach(G, order, reach);

  GradMap grad;
  grad[y.id()] = filled_like(*this, y, 1.0);
  backprop(*this, order, reach, grad, y.name());
  std::unordered_map<Tensor, Tensor> out;
  for (const Tensor& x : xs) {
    auto g = grad.find(x.id());
    out[x] = g != grad.end() ? g->second : filled_like(*this, x, 0.0);
  }
  return out;
}

}  // namespace tg
