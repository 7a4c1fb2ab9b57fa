#include "backends/cpu/buffer_plan.h"

#include <algorithm>
#include <map>

#include "runtime/arena_allocator.h"

namespace tg::detail {
namespace {

constexpr int64_t kAlign = 64;
int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Values that need arena space: outputs of top-level ops that compute (not constants,
// variables or placeholders, whose bytes live elsewhere) with a static size.
bool planned(const GraphImpl& g, const Node& n, int32_t v) {
  const OpDef& d = op_def(n.kind);
  return !d.has(kSource) && !d.has(kStateful) && !d.has(kHasRegions) && g.type(v).shape.is_static();
}

}  // namespace

std::vector<char> pinned_values(const Module& m) {
  const GraphImpl& g = m.graph;
  std::vector<char> pinned(g.values.size(), 0);
  for (int32_t v : m.targets) pinned[static_cast<size_t>(v)] = 1;
  for (const Block& blk : g.blocks)
    for (int32_t id : blk.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (n.kind == OpKind::Assign || op_def(n.kind).has(kHasRegions))
        for (int32_t v : n.inputs) pinned[static_cast<size_t>(v)] = 1;
    }
  return pinned;
}

BufferPlan plan_buffers(const Module& m) {
  const GraphImpl& g = m.graph;
  BufferPlan p;
  p.offset.assign(g.values.size(), -1);
  p.in_place.assign(g.values.size(), 0);
  const auto& order = g.blocks[0].nodes;
  const int32_t end = static_cast<int32_t>(order.size());
  // Last top-level step that reads each value (uses inside regions count at their parent).
  std::vector<int32_t> last_use(g.values.size(), -1);
  std::vector<int32_t> step_of(g.nodes.size(), -1);
  for (int32_t s = 0; s < end; ++s) step_of[static_cast<size_t>(order[static_cast<size_t>(s)])] = s;
  auto top_step = [&](int32_t node) {
    while (g.nodes[static_cast<size_t>(node)].block != 0)
      node = g.blocks[static_cast<size_t>(g.nodes[static_cast<size_t>(node)].block)].parent_node;
    return step_of[static_cast<size_t>(node)];
  };
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    for (int32_t id : g.blocks[b].nodes)
      for (int32_t v : g.nodes[static_cast<size_t>(id)].inputs)
        last_use[static_cast<size_t>(v)] = std::max(last_use[static_cast<size_t>(v)], top_step(id));
    if (b != 0 && g.blocks[b].parent_node >= 0)
      for (int32_t v : g.blocks[b].results)
        last_use[static_cast<size_t>(v)] = std::max(last_use[static_cast<size_t>(v)], top_step(g.blocks[b].parent_node));
  }
  const std::vector<char> pinned = pinned_values(m);

  ArenaAllocator arena;
  std::vector<std::pair<int32_t, int32_t>> live;  // (value, last step), for freeing
  auto size_of = [&](int32_t v) {
    const TensorType& t = g.type(v);
    return aligned(std::max<int64_t>(1, t.shape.num_elements()) * static_cast<int64_t>(dtype_size(t.dtype)));
  };
  for (int32_t s = 0; s < end; ++s) {
    const Node& n = g.nodes[static_cast<size_t>(order[static_cast<size_t>(s)])];
    for (int32_t v : n.outputs) {
      if (!planned(g, n, v) || pinned[static_cast<size_t>(v)]) continue;
      int64_t size = size_of(v);
      p.naive_bytes += size;
      // In place: an elementwise op over an input of the same byte size that dies here.
      if (op_def(n.kind).has(kElementwise) && n.outputs.size() == 1) {
        for (int32_t in : n.inputs) {
          auto it = std::find_if(live.begin(), live.end(), [&](auto& e) { return e.first == in; });
          // Element i of the output may overwrite element i of the input only when both have
          // the same element size and count (not just the same aligned byte size).
          const TensorType &ti = g.type(in), &to = g.type(v);
          bool aligned_elements = dtype_size(ti.dtype) == dtype_size(to.dtype) && ti.shape == to.shape;
          if (it != live.end() && it->second == s && aligned_elements) {
            p.offset[static_cast<size_t>(v)] = p.offset[static_cast<size_t>(in)];
            p.in_place[static_cast<size_t>(v)] = 1;
            it->first = v;
            it->second = std::max(last_use[static_cast<size_t>(v)], s);
            break;
          }
        }
        if (p.in_place[static_cast<size_t>(v)]) continue;
      }
      p.offset[static_cast<size_t>(v)] = arena.place(size);  // best fit, else the arena grows
      live.emplace_back(v, std::max(last_use[static_cast<size_t>(v)], s));
    }
    // Free what dies at this step (outputs never read die at once).
    arena.release_dead(live, s, p.offset, size_of);
  }
  p.arena_bytes = arena.bytes();
  return p;
}

}  // namespace tg::detail
