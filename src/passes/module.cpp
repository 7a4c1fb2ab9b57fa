#include "passes/module.h"

#include "tgraph/error.h"

namespace tg::detail {
namespace {
void reinfer_block(GraphImpl& g, int32_t b) {
  for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
    Node& n = g.nodes[static_cast<size_t>(id)];
    for (int32_t r : n.regions) {
      // Loop regions take the loop-carried types as params: refresh them from the inputs.
      Block& rb = g.blocks[static_cast<size_t>(r)];
      if (n.kind == OpKind::ForLoop)
        for (size_t i = 1; i < rb.params.size(); ++i) g.values[static_cast<size_t>(rb.params[i])].type = g.type(n.inputs[i + 2]);
      if (n.kind == OpKind::WhileLoop && r == n.regions[0])
        for (size_t i = 0; i < rb.params.size(); ++i) g.values[static_cast<size_t>(rb.params[i])].type = g.type(n.inputs[i]);
      reinfer_block(g, r);
      if (n.kind == OpKind::WhileLoop && r == n.regions[0]) {
        Block& ab = g.blocks[static_cast<size_t>(n.regions[1])];
        for (size_t i = 0; i < ab.params.size(); ++i) g.values[static_cast<size_t>(ab.params[i])].type = g.type(rb.results[i + 1]);
      }
    }
    InferResult r = g.infer(n);
    if (!r.ok()) throw Error(r.error);
    for (size_t i = 0; i < n.outputs.size(); ++i) g.values[static_cast<size_t>(n.outputs[i])].type = r.types[i];
  }
}
}  // namespace

void reinfer(GraphImpl& g) { reinfer_block(g, 0); }

void replace_uses(Module& m, int32_t from, int32_t to) {
  for (Node& n : m.graph.nodes)
    for (int32_t& v : n.inputs)
      if (v == from) v = to;
  for (Block& b : m.graph.blocks)
    for (int32_t& v : b.results)
      if (v == from) v = to;
  for (int32_t& v : m.targets)
    if (v == from) v = to;
}

std::vector<int32_t> use_counts(const Module& m) {
  std::vector<int32_t> c(m.graph.values.size(), 0);
  for (const Block& b : m.graph.blocks) {
    for (int32_t id : b.nodes)
      for (int32_t v : m.graph.nodes[static_cast<size_t>(id)].inputs) ++c[static_cast<size_t>(v)];
    for (int32_t v : b.results) ++c[static_cast<size_t>(v)];
  }
  for (int32_t v : m.targets) ++c[static_cast<size_t>(v)];
  return c;
}

}  // namespace tg::detail
