#pragma once
// Gradient rules (vector-Jacobian products): graph-to-graph, built from other ops. Each family
// file registers its rules in a table indexed by OpKind; Graph::gradients walks the graph
// backwards and calls them.
#include <array>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/graph.h"

namespace tg::detail {

/// What a rule sees. `node` is a copy (building gradient ops may move the graph's storage).
struct VjpContext {
  Graph& g;
  Node node;
  std::vector<Tensor> in;    // forward inputs
  std::vector<Tensor> out;   // forward outputs
  std::vector<Tensor> dout;  // gradient of each output (zeros where none flows)
  template <class D>
  const D& attr() const { return std::get<D>(node.attr); }
};

/// Returns one gradient per forward input; an empty Tensor means "no gradient" (integer
/// inputs, indices, predicates).
using VjpFn = std::vector<Tensor> (*)(VjpContext&);

/// The rule of an op, or nullptr.
VjpFn vjp_rule(OpKind k);

/// Why op k has no gradient rule, for the ops that stand on the explicit no-gradient list
/// (integer, boolean or index outputs; sources and state, which autodiff treats as leaves;
/// control flow, differentiated through its regions; second-order rules not written); nullptr
/// for every other op. tests/cpp/op_contract_test.cpp checks that each op has a rule or a reason.
const char* no_gradient_reason(OpKind k);

// Control flow (vjp_control.cpp). Its gradients also flow to values the regions read from
// outside (captures), so the rule returns (value id, gradient) pairs rather than one per input.
using GradMap = std::unordered_map<int32_t, Tensor>;
/// Values that the node's regions (nested ones included) read from outside them, by id.
std::vector<int32_t> region_captures(const GraphImpl& g, const Node& n);
/// Gradients of an if_else / for_loop node's inputs and captures; `reach` marks the values
/// that depend on the differentiated inputs. Throws for while_loop.
std::vector<std::pair<int32_t, Tensor>> control_vjp(VjpContext& c, const std::vector<char>& reach);
/// Marks (in `reach`, grown to the graph's size) the outputs of `nodes` that depend on a
/// marked value, through inputs and region captures.
void propagate_reach(const GraphImpl& g, const std::vector<int32_t>& nodes, std::vector<char>& reach);
/// Reverse walk over `nodes` (forward order, built into g's current block or enclosing ones):
/// turns the cotangents seeded in `grad` into cotangents of every reached value, added up in
/// `grad`. `target` names the differentiated value in errors.
void backprop(Graph& g, const std::vector<int32_t>& nodes, const std::vector<char>& reach, GradMap& grad,
              const std::string& target);

// Registration, one function per family file.
using VjpTable = std::array<VjpFn, kNumOps>;
void register_elementwise_vjps(VjpTable& t);
void register_reduce_vjps(VjpTable& t);
void register_shape_vjps(VjpTable& t);
void register_nn_vjps(VjpTable& t);
void register_conv_vjps(VjpTable& t);
void register_indexing_vjps(VjpTable& t);
void register_collective_vjps(VjpTable& t);

// Helpers shared by rules.
/// A tensor of x's type filled with v (static shapes: a broadcast constant).
Tensor filled_like(Graph& g, Tensor x, double v);
/// Reduces a gradient to the shape of x (undoes numpy broadcasting).
Tensor unbroadcast(Graph& g, Tensor grad, Tensor x);
/// Broadcasts a gradient of a reduction back to x's shape: re-inserts the reduced axes
/// (when keep_dims was false) and broadcasts.
Tensor broadcast_back(Graph& g, Tensor grad, Tensor x, const std::vector<int64_t>& axes, bool keep_dims);
/// x with the given axes (normalised) made size 1: the keep_dims shape of a reduction.
std::vector<int64_t> normalized_axes(const std::vector<int64_t>& axes, int64_t rank);

}  // namespace tg::detail
