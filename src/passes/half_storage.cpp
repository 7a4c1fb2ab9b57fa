#include "passes/half_storage.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "passes/fusion.h"
#include "passes/rewrite.h"

namespace tg::detail {
namespace {

bool weight_gradient(OpKind k) { return k == OpKind::Conv2dWeightGrad || k == OpKind::Conv3dWeightGrad; }

}  // namespace

bool HalfStorage::run(Module& m) {
  GraphImpl& g = m.graph;
  const size_t nv = g.values.size();
  // Readers of each value (each node once) among the nodes the blocks run.
  std::vector<std::vector<int32_t>> readers(nv);
  for (const Block& b : g.blocks)
    for (int32_t id : b.nodes)
      for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs) {
        auto& r = readers[static_cast<size_t>(v)];
        if (r.empty() || r.back() != id) r.push_back(id);
      }
  std::vector<char> kept(nv, 0);  // returned or handed out of a region
  for (int32_t t : m.targets) kept[static_cast<size_t>(t)] = 1;
  for (const Block& b : g.blocks)
    for (int32_t r : b.results) kept[static_cast<size_t>(r)] = 1;
  std::set<std::vector<int64_t>> variable_shapes;
  for (const Node& n : g.nodes)
    if (n.kind == OpKind::Variable || n.kind == OpKind::ReadVariable)
      for (int32_t v : n.outputs) variable_shapes.insert(g.type(v).shape.dims());

  // Which f32 values carry half data: in block order, so operands are classified first.
  std::vector<char> in_half(nv, 0);
  auto producer = [&](int32_t v) -> const Node* {
    const int32_t p = g.values[static_cast<size_t>(v)].node;
    return p >= 0 ? &g.nodes[static_cast<size_t>(p)] : nullptr;
  };
  for (const Block& b : g.blocks)
    for (int32_t id : b.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (n.outputs.size() != 1 || g.type(n.outputs[0]).dtype != DType::f32) continue;
      const TensorType& t = g.type(n.outputs[0]);
      if (n.kind == OpKind::Cast) {
        const Node* p = producer(n.inputs[0]);
        if (g.type(n.inputs[0]).dtype == half && !(p && weight_gradient(p->kind)) &&
            !variable_shapes.count(t.shape.dims()))
          in_half[static_cast<size_t>(n.outputs[0])] = 1;
        continue;
      }
      if (!fusible_elementwise(g, n)) continue;
      bool any = false, all = true;
      for (int32_t v : n.inputs) {
        if (in_half[static_cast<size_t>(v)]) {
          any = true;
          continue;
        }
        const TensorType& u = g.type(v);
        const Node* p = producer(v);
        const bool narrow = u.dtype != DType::f32 || !(u.shape == t.shape) ||
                            (p && (p->kind == OpKind::BroadcastTo || p->kind == OpKind::BroadcastLike) &&
                             !(g.type(p->inputs[0]).shape == t.shape)) ||
                            (p && p->kind == OpKind::Constant);
        all &= narrow;
      }
      if (any && all) in_half[static_cast<size_t>(n.outputs[0])] = 1;
    }

  // Rewrites: casts placed right after a producer / right before a reader.
  std::unordered_map<int32_t, std::vector<int32_t>> after, before;
  std::unordered_set<int32_t> dead;  // source casts every reader of which got its own
  bool changed = false;
  for (size_t vi = 0; vi < nv; ++vi) {
    if (!in_half[vi] || kept[vi]) continue;
    const int32_t v = static_cast<int32_t>(vi), block = g.values[vi].block, pid = g.values[vi].node;
    const std::vector<int32_t>& rs = readers[vi];
    if (rs.empty() || pid < 0) continue;
    bool same_block = true;
    for (int32_t r : rs) same_block &= g.nodes[static_cast<size_t>(r)].block == block;
    if (!same_block) continue;
    const bool source = g.nodes[static_cast<size_t>(pid)].kind == OpKind::Cast;
    int32_t copy = -1;  // a reader that is v's half copy (made by Autocast for a convolution)
    std::vector<int32_t> others;
    for (int32_t r : rs) {
      const Node& rn = g.nodes[static_cast<size_t>(r)];
      if (!source && copy < 0 && rn.kind == OpKind::Cast && g.type(rn.outputs[0]).dtype == half) copy = r;
      else others.push_back(r);
    }
    bool leaves_chain = others.size() >= 2 || (copy >= 0 && !others.empty());
    for (int32_t r : others) {
      const Node& rn = g.nodes[static_cast<size_t>(r)];
      leaves_chain |= !fusible_elementwise(g, rn) || rn.outputs.size() != 1 || !(g.type(rn.outputs[0]).shape == g.type(v).shape);
    }
    if (!leaves_chain || others.empty()) continue;
    int32_t h;
    if (source) {
      h = g.nodes[static_cast<size_t>(pid)].inputs[0];
      dead.insert(pid);
    } else if (copy >= 0) {
      h = g.nodes[static_cast<size_t>(copy)].outputs[0];
    } else {
      const int32_t c = add_cast_node(g, v, half, block);
      after[pid].push_back(c);
      h = g.nodes[static_cast<size_t>(c)].outputs[0];
    }
    for (int32_t r : others) {
      const int32_t c = add_cast_node(g, h, DType::f32, block);
      before[r].push_back(c);
      for (int32_t& in : g.nodes[static_cast<size_t>(r)].inputs)
        if (in == v) in = g.nodes[static_cast<size_t>(c)].outputs[0];
    }
    changed = true;
  }
  if (!changed) return false;
  for (Block& b : g.blocks) {
    std::vector<int32_t> order;
    for (int32_t id : b.nodes) {
      if (auto it = before.find(id); it != before.end()) order.insert(order.end(), it->second.begin(), it->second.end());
      if (!dead.count(id)) order.push_back(id);
      if (auto it = after.find(id); it != after.end()) order.insert(order.end(), it->second.begin(), it->second.end());
    }
    b.nodes = std::move(order);
  }
  return true;
}

}  // namespace tg::detail
