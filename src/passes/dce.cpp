#include "passes/dce.h"

#include <vector>

namespace tg::detail {

bool DeadCodeElimination::run(Module& m) {
  GraphImpl& g = m.graph;
  std::vector<char> live(g.nodes.size(), 0);
  std::vector<int32_t> work;
  auto mark_value = [&](int32_t v) {
    int32_t n = g.values[static_cast<size_t>(v)].node;
    if (n >= 0 && !live[static_cast<size_t>(n)]) {
      live[static_cast<size_t>(n)] = 1;
      work.push_back(n);
    }
  };
  auto mark_node = [&](int32_t n) {
    if (!live[static_cast<size_t>(n)]) {
      live[static_cast<size_t>(n)] = 1;
      work.push_back(n);
    }
  };
  for (int32_t v : m.targets) mark_value(v);
  for (int32_t v : m.feeds) mark_value(v);
  for (int32_t n : m.target_ops) mark_node(n);
  while (!work.empty()) {
    int32_t id = work.back();
    work.pop_back();
    const Node& n = g.nodes[static_cast<size_t>(id)];
    for (int32_t v : n.inputs) mark_value(v);
    for (int32_t d : n.control_deps) mark_node(d);
    for (int32_t r : n.regions) {
      const Block& b = g.blocks[static_cast<size_t>(r)];
      for (int32_t v : b.results) mark_value(v);
      for (int32_t inner : b.nodes)
        if (g.def(inner).has(kSideEffects)) mark_node(inner);
    }
  }
  bool changed = false;
  for (Block& b : g.blocks) {
    std::vector<int32_t> kept;
    for (int32_t id : b.nodes)
      if (live[static_cast<size_t>(id)]) kept.push_back(id);
    changed |= kept.size() != b.nodes.size();
    b.nodes = std::move(kept);
  }
  // Regions of dead control-flow nodes no longer count as users of anything.
  for (size_t id = 0; id < g.nodes.size(); ++id)
    if (!live[id])
      for (int32_t r : g.nodes[id].regions) g.blocks[static_cast<size_t>(r)].results.clear();
  // Control deps on removed nodes are dropped (what they ordered against no longer runs).
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    if (!live[id]) continue;
    auto& deps = g.nodes[id].control_deps;
    std::erase_if(deps, [&](int32_t d) { return !live[static_cast<size_t>(d)]; });
  }
  return changed;
}

}  // namespace tg::detail
