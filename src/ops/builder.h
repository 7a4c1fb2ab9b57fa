#pragma once
// Shared helpers of the Graph builder methods (src/ops/build_*.cpp).
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/graph.h"

namespace tg::detail {

/// Private access to Graph for the builders.
struct GraphAccess {
  static Graph region_graph(const Graph& g, int32_t block) {
    Graph r = g;
    r.block_ = block;
    return r;
  }
  /// A Graph that builds into `impl` (owned elsewhere, e.g. a compile Module) at `block`.
  static Graph wrap(GraphImpl& impl, int32_t block) {
    Graph r;
    r.impl_ = std::shared_ptr<GraphImpl>(&impl, [](GraphImpl*) {});
    r.block_ = block;
    return r;
  }
};

/// Checks that t is a tensor of g visible from the current block; returns its value id.
int32_t use(const Graph& g, Tensor t, OpKind k, const char* operand);
/// Adds a node and returns its outputs as tensors.
std::vector<Tensor> make_multi(Graph& g, OpKind k, const std::vector<Tensor>& inputs,
                               Attr attr = NoDesc{});
/// Adds a single-output node.
Tensor make(Graph& g, OpKind k, const std::vector<Tensor>& inputs, Attr attr = NoDesc{});
/// Converts both operands to their promoted dtype and broadcasts them to a common shape,
/// inserting cast / broadcast_to nodes only where needed.
std::pair<Tensor, Tensor> promote_broadcast(Graph& g, OpKind k, Tensor a, Tensor b);
/// Casts to dtype if it differs.
Tensor cast_if(Graph& g, Tensor x, DType to);
/// Broadcasts x to shape if it differs.
Tensor broadcast_if(Graph& g, OpKind k, Tensor x, const Shape& shape);

}  // namespace tg::detail
