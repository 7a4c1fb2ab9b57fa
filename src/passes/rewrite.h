#pragma once
// Node-by-node rewriting, shared by the passes that replace an op with a small subgraph
// (decompose.cpp: composites into primitives; layout.cpp: nchw into nhwc), and the cast nodes
// that the precision passes insert by hand.
#include <functional>
#include <vector>

#include "passes/module.h"
#include "tgraph/graph.h"

namespace tg::detail {

/// The replacement values of node n's outputs, built with g at n's place; empty to keep n.
/// May throw tg::Error (n is then kept).
using NodeRewrite =
    std::function<std::vector<Tensor>(Graph& g, const Node& n, const std::vector<Tensor>& in)>;

/// Visits the nodes of `blocks` in order and replaces each that `f` rewrites: the new nodes
/// take its place in the block (and its control dependencies), its outputs' uses move to the
/// replacements (which must have the same types, or n is kept), and later nodes see the
/// rewritten graph. Returns whether anything changed.
bool rewrite_nodes(Module& m, const std::vector<int32_t>& blocks, const NodeRewrite& f);
/// The same over every block the graph has now (blocks the rewrites add are not visited).
bool rewrite_nodes(Module& m, const NodeRewrite& f);

/// Appends a cast of value `from` to `to`, in `block` but listed in no block's nodes yet (the
/// caller places it); its output is `out` when given (that value gets it as producer), else a
/// new value. Returns the node id (autocast.cpp, half_storage.cpp).
int32_t add_cast_node(GraphImpl& g, int32_t from, DType to, int32_t block, int32_t out = -1);

}  // namespace tg::detail
