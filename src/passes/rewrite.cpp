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
  // Uses of a rewritten node's outputs (and control dependencies on it) move to its
  // replacement lazily: each node's as it is visited, every node's at the end. Moving them
  // all at each rewrite cost O(nodes) a rewrite — the channels-last pass rewrites most of a
  // ResNet-50, 40% of a new size's copy compile (bench_specialize_passes). Visited nodes, and
  // so the producers a rewrite reads, are always up to date.
  std::vector<int32_t> value_to(G.values.size(), -1), node_to(G.nodes.size(), -1);
  auto value = [&](int32_t v) {
    while (v >= 0 && static_cast<size_t>(v) < value_to.size() && value_to[static_cast<size_t>(v)] >= 0)
      v = value_to[static_cast<size_t>(v)];
    return v;
  };
  auto node = [&](int32_t id) {
    while (id >= 0 && static_cast<size_t>(id) < node_to.size() && node_to[static_cast<size_t>(id)] >= 0)
      id = node_to[static_cast<size_t>(id)];
    return id;
  };
  auto update = [&](Node& n) {
    for (int32_t& v : n.inputs) v = value(v);
    for (int32_t& d : n.control_deps) d = node(d);
  };
  // Every node's uses moved, at the end or when a rewrite throws what is not a tg::Error (the
  // graph stays whole for whoever catches it).
  auto finish = [&] {
    if (!changed) return;
    for (Node& n : G.nodes) update(n);
    for (Block& blk : G.blocks)
      for (int32_t& v : blk.results) v = value(v);
    for (int32_t& v : m.targets) v = value(v);
  };
  try {
    for (int32_t b : blocks) {
      for (size_t pos = 0; pos < G.blocks[static_cast<size_t>(b)].nodes.size(); ++pos) {
        int32_t id = G.blocks[static_cast<size_t>(b)].nodes[pos];
        update(G.nodes[static_cast<size_t>(id)]);
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
        } catch (...) {
          G.blocks[static_cast<size_t>(b)].nodes.resize(first_new);  // (what it built goes)
          throw;
        }
        auto& nodes = G.blocks[static_cast<size_t>(b)].nodes;
        bool ok = !out.empty() && out.size() == n.outputs.size();
        for (size_t i = 0; ok && i < out.size(); ++i) ok = out[i].type() == G.type(n.outputs[i]);
        // A replacement that is (or already stands for) another of the node's own outputs would
        // make the lazy moves below chase each other for ever (outputs swapped): kept as it was.
        for (size_t i = 0; ok && i < out.size(); ++i) {
          const int32_t to = value(out[i].id());
          for (size_t j = 0; ok && j < n.outputs.size(); ++j)
            ok = to != n.outputs[j] || (i == j && to == out[i].id());
        }
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
        value_to.resize(G.values.size(), -1);
        node_to.resize(G.nodes.size(), -1);
        for (size_t i = 0; i < out.size(); ++i)
          if (out[i].id() != n.outputs[i]) value_to[static_cast<size_t>(n.outputs[i])] = out[i].id();
        const int32_t last = G.values[static_cast<size_t>(out[0].id())].node;
        if (last != id) node_to[static_cast<size_t>(id)] = last;
        pos += added - 1;
        changed = true;
      }
    }
  } catch (...) {
    finish();
    throw;
  }
  finish();
  return changed;
}

}  // namespace tg::detail
