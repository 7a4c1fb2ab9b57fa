#include "passes/cse.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "ops/op_def.h"

namespace tg::detail {
namespace {

bool pure(const GraphImpl& g, const Node& n) {
  const OpDef& d = op_def(n.kind);
  if (d.has(kStateful) || d.has(kSideEffects) || d.has(kHasRegions)) return false;
  return !d.has(kSource) || n.kind == OpKind::Constant || n.kind == OpKind::Arange;
}

// A constant's bytes, 8 at a time; past 8 KB only 512-1,023 words spread over the tensor. Equal
// hashes are confirmed by `same`, so the samples only need to tell a model's weights apart —
// and every compile of a new size runs this pass twice over all of them: with 8,192 words per
// tensor (each a cache miss) BERT-base's 200 weights took 10-13 ms a run, most of the pass.
uint64_t bytes_hash(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  const size_t words = n / 8, step = words > 512 ? words / 512 : 1;
  uint64_t h = n;
  for (size_t w = 0; w < words; w += step) {
    uint64_t v;
    std::memcpy(&v, p + w * 8, 8);
    hash_mix(h, v);
  }
  for (size_t i = words * 8; i < n; ++i) hash_mix(h, p[i]);
  return h;
}

// Operand i of n, a commutative op's two in a canonical order, so add(a, b) and add(b, a) merge.
int32_t operand(const Node& n, size_t i) {
  const bool swap = n.inputs.size() == 2 && n.inputs[1] < n.inputs[0] && op_def(n.kind).has(kCommutative);
  return n.inputs[swap ? 1 - i : i];
}

bool same_operands(const Node& a, const Node& b) {
  if (a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (operand(a, i) != operand(b, i)) return false;
  return true;
}

uint64_t key_of(const GraphImpl& g, const Node& n) {
  uint64_t h = static_cast<uint64_t>(n.kind) * 1000003u;
  for (size_t i = 0; i < n.inputs.size(); ++i) hash_mix(h, static_cast<uint64_t>(operand(n, i)));
  for (int32_t d : n.control_deps) hash_mix(h, static_cast<uint64_t>(d) + 77);
  hash_mix(h, attr_hash(n.attr));
  if (n.kind == OpKind::Constant) {
    hash_mix(h, static_cast<uint64_t>(n.data.dtype()));
    hash_value(h, n.data.shape().dims());
    hash_mix(h, bytes_hash(n.data.data(), n.data.nbytes()));
  }
  return h;
}

bool same(const Node& a, const Node& b) {
  if (a.kind != b.kind || !same_operands(a, b) || a.control_deps != b.control_deps || !(a.attr == b.attr))
    return false;
  if (a.kind == OpKind::Constant)
    return a.data.type() == b.data.type() && std::memcmp(a.data.data(), b.data.data(), a.data.nbytes()) == 0;
  return true;
}

}  // namespace

bool CommonSubexpressionElimination::run(Module& m) {
  GraphImpl& g = m.graph;
  bool changed = false;
  // Merges are recorded in maps and applied as later nodes are visited (blocks are in
  // definition order), so the pass is linear rather than rewriting the graph per merge.
  std::vector<int32_t> value_map(g.values.size()), node_map(g.nodes.size());
  for (size_t i = 0; i < value_map.size(); ++i) value_map[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < node_map.size(); ++i) node_map[i] = static_cast<int32_t>(i);
  // Values are only merged within one block, so a region never reaches into a sibling.
  std::vector<int32_t> order{0};
  for (size_t k = 0; k < order.size(); ++k)
    for (int32_t id : g.blocks[static_cast<size_t>(order[k])].nodes)
      for (int32_t r : g.nodes[static_cast<size_t>(id)].regions) order.push_back(r);
  for (int32_t b : order) {
    std::unordered_multimap<uint64_t, int32_t> seen;
    std::vector<int32_t> kept;
    for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
      Node& n = g.nodes[static_cast<size_t>(id)];
      for (int32_t& v : n.inputs) v = value_map[static_cast<size_t>(v)];
      for (int32_t& d : n.control_deps) d = node_map[static_cast<size_t>(d)];
      if (!pure(g, n)) {
        kept.push_back(id);
        continue;
      }
      uint64_t k = key_of(g, n);
      int32_t match = -1;
      auto [lo, hi] = seen.equal_range(k);
      for (auto it = lo; it != hi; ++it)
        if (same(g.nodes[static_cast<size_t>(it->second)], n)) match = it->second;
      bool is_target_op = std::find(m.target_ops.begin(), m.target_ops.end(), id) != m.target_ops.end();
      if (match < 0 || is_target_op) {
        seen.emplace(k, id);
        kept.push_back(id);
        continue;
      }
      const Node& first = g.nodes[static_cast<size_t>(match)];
      for (size_t i = 0; i < n.outputs.size(); ++i)
        value_map[static_cast<size_t>(n.outputs[i])] = first.outputs[i];
      node_map[static_cast<size_t>(id)] = match;
      changed = true;
    }
    g.blocks[static_cast<size_t>(b)].nodes = std::move(kept);
  }
  // Regions are visited after their parent node, so their results are remapped here.
  for (Block& blk : g.blocks)
    for (int32_t& v : blk.results) v = value_map[static_cast<size_t>(v)];
  for (int32_t& v : m.targets) v = value_map[static_cast<size_t>(v)];
  return changed;
}

}  // namespace tg::detail
