#include "passes/rewrite.h"

#include <algorithm>

#include "ops/builder.h"
#include "tgraph/error.h"

namespace tg::detail {

int32_t add_cast_node(GraphImpl& g, int32_t from, DType to, int32_t block, int32_t out) {
  const int32_t id = static_cast<int32_t>(g.nodes.size());
  if (out < 0) {
    out = static_cast<int32_t>(g.values.size());
    g.values.push_back(Value{TensorType(g.type(from).shape, to), id, 0, block, {}});
  } else {
    g.values[static_cast<size_t>(out)].node = id;
    g.values[static_cast<size_t>(out)].index = 0;
  }
  Node n;
  n.kind = OpKind::Cast;
  n.block = block;
  n.inputs = {from};
  n.outputs = {out};
  n.attr = CastDesc{to};
  g.nodes.push_back(std::move(n));
  return id;
}

bool rewrite_nodes(Module& m, const NodeRewrite& f) {
  std::vector<int32_t> blocks(m.graph.blocks.size());
  for (size_t b = 0; b < blocks.size(); ++b) blocks[b] = static_cast<int32_t>(b);
  return rewrite_nodes(m, blocks, f);
}

bool rewrite_nodes(Module& m, const std::vector<int32_t>& blocks, const NodeRewrite& f) {
  GraphImpl& G = m.graph;
  bool changed = false;
  for (int32_t b : blocks) {
    for (size_t pos = 0; pos < G.blocks[static_cast<size_t>(b)].nodes.size(); ++pos) {
      int32_t id = G.blocks[static_cast<size_t>(b)].nodes[pos];
      Node n = G.nodes[static_cast<size_t>(id)];  // copy: building appends to G.nodes
      std::vector<Tensor> in;
      for (int32_t v : n.inputs) in.emplace_back(&G, v);
      Graph g = GraphAccess::wrap(G, b);
      const size_t first_new = G.blocks[static_cast<size_t>(b)].nodes.size();
      std::vector<Tensor> out;
      try {
        out = f(g, n, in);
      } catch (const Error&) {
        out.clear();  // a shape the rewrite does not handle: keep the node
      }
      auto& nodes = G.blocks[static_cast<size_t>(b)].nodes;
      bool ok = !out.empty() && out.size() == n.outputs.size();
      for (size_t i = 0; ok && i < out.size(); ++i) ok = out[i].type() == G.type(n.outputs[i]);
      if (!ok) {
        nodes.resize(first_new);  // drop anything built (unused nodes stay unreachable)
        continue;
      }
      // The new nodes take the old one's place (and its control dependencies).
      for (size_t k = first_new; k < nodes.size(); ++k) {
        auto& deps = G.nodes[static_cast<size_t>(nodes[k])].control_deps;
        deps.insert(deps.end(), n.control_deps.begin(), n.control_deps.end());
      }
      std::rotate(nodes.begin() + static_cast<long>(pos), nodes.begin() + static_cast<long>(first_new),
                  nodes.end());
      size_t added = nodes.size() - first_new;
      nodes.erase(nodes.begin() + static_cast<long>(pos + added));  // the old node itself
      for (size_t i = 0; i < out.size(); ++i) replace_uses(m, n.outputs[i], out[i].id());
      int32_t last = G.values[static_cast<size_t>(out[0].id())].node;
      for (Node& other : G.nodes)
        for (int32_t& d : other.control_deps)
          if (d == id) d = last;
      pos += added - 1;
      changed = true;
    }
  }
  return changed;
}

}  // namespace tg::detail
