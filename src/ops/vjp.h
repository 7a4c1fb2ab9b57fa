#pragma once
// Gradient rules (vector-Jacobian products): graph-to-graph, built from other ops. Each family
// file registers its rules in a table indexed by OpKind; Graph::gradients walks the graph
// backwards and calls them.
#include <array>
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

// Registration, one function per family file.
using VjpTable = std::array<VjpFn, kNumOps>;
void register_elementwise_vjps(VjpTable& t);
void register_reduce_vjps(VjpTable& t);
void register_shape_vjps(VjpTable& t);
void register_nn_vjps(VjpTable& t);
void register_conv_vjps(VjpTable& t);
void register_indexing_vjps(VjpTable& t);

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
