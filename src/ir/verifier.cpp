#include "ir/verifier.h"

#include <vector>

#include "tgraph/error.h"

namespace tg::detail {
namespace {

struct Checker {
  const GraphImpl& g;
  std::vector<char> defined;  // per value: defined so far in program order
  std::vector<char> seen_node;
  std::string err;

  bool fail(int32_t node, const std::string& msg) {
    if (err.empty())
      err = "node ^" + std::to_string(node) + " (" + op_name(g.nodes[static_cast<size_t>(node)].kind) +
            "): " + msg;
    return false;
  }

  bool block(int32_t b) {
    const Block& blk = g.blocks[static_cast<size_t>(b)];
    for (int32_t p : blk.params) defined[static_cast<size_t>(p)] = 1;
    for (int32_t id : blk.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (n.block != b) return fail(id, "listed in block " + std::to_string(b) + " but belongs to " + std::to_string(n.block));
      for (int32_t v : n.inputs) {
        if (v < 0 || static_cast<size_t>(v) >= g.values.size()) return fail(id, "input refers to no value");
        if (!defined[static_cast<size_t>(v)]) return fail(id, "uses " + g.value_name(v) + " before it is defined");
        if (!g.block_within(b, g.values[static_cast<size_t>(v)].block))
          return fail(id, "uses " + g.value_name(v) + " from a region that is not visible");
      }
      for (int32_t d : n.control_deps)
        if (d < 0 || static_cast<size_t>(d) >= g.nodes.size() || !seen_node[static_cast<size_t>(d)])
          return fail(id, "control dependency ^" + std::to_string(d) + " does not precede it");
      for (int32_t r : n.regions) {
        if (g.blocks[static_cast<size_t>(r)].parent_node != id) return fail(id, "region's owner is wrong");
        if (!block(r)) return false;
        for (int32_t v : g.blocks[static_cast<size_t>(r)].results)
          if (!defined[static_cast<size_t>(v)]) return fail(id, "region returns an undefined value");
      }
      InferResult ir = g.infer(n);
      if (!ir.ok()) return fail(id, ir.error);
      if (ir.types.size() != n.outputs.size()) return fail(id, "output count differs from inference");
      for (size_t i = 0; i < n.outputs.size(); ++i)
        if (!(ir.types[i] == g.type(n.outputs[i])))
          return fail(id, "output " + std::to_string(i) + " is stored as " + g.type(n.outputs[i]).str() +
                              " but infers as " + ir.types[i].str());
      for (int32_t v : n.outputs) defined[static_cast<size_t>(v)] = 1;
      seen_node[static_cast<size_t>(id)] = 1;
    }
    return true;
  }
};

}  // namespace

std::string verify(const GraphImpl& g) {
  Checker c{g, std::vector<char>(g.values.size(), 0), std::vector<char>(g.nodes.size(), 0), {}};
  c.block(0);
  return c.err;
}

void verify_or_throw(const GraphImpl& g, const std::string& after_pass) {
  std::string e = verify(g);
  if (!e.empty())
    throw Error("[verify] " + (after_pass.empty() ? std::string() : "after pass " + after_pass + ": ") + e);
}

}  // namespace tg::detail
