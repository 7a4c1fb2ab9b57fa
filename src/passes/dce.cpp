#include "passes/dce.h"

#include <algorithm>
#include <vector>

namespace tg::detail {
namespace {

// Liveness of loop-carried values. A loop's slots are live only on demand, so a carried
// value nothing needs (its output unused, its param feeding only its own next value, e.g. a
// gradient tape in a forward-only executable) is dropped with the ops that compute it.
//  - for_loop slot i: input 3+i, body param 1+i, body result i, output i;
//  - while_loop "out" slot j: before result 1+j, after param j, output j;
//  - while_loop "arg" slot i: input i, before param i, after result i.
// Marking is one backward walk to a fixed point: a slot becomes live when its output or any
// of its params is needed, and then needs its init and the result that feeds it.
struct Liveness {
  GraphImpl& g;
  const Module& m;
  std::vector<char> live;
  std::vector<char> effects;                // per node: has side effects, or contains such an op
  std::vector<std::vector<char>> out, arg;  // per loop node: live slots (arg: while_loop only)
  std::vector<int32_t> work;

  Liveness(GraphImpl& graph, const Module& mod)
      : g(graph), m(mod), live(g.nodes.size(), 0), effects(g.nodes.size(), 0), out(g.nodes.size()),
        arg(g.nodes.size()) {
    for (size_t id = 0; id < g.nodes.size(); ++id) {
      const Node& n = g.nodes[id];
      if (n.kind == OpKind::ForLoop) out[id].assign(n.outputs.size(), 0);
      if (n.kind == OpKind::WhileLoop) {
        out[id].assign(n.outputs.size(), 0);
        arg[id].assign(n.inputs.size(), 0);
      }
    }
    // Nodes are created after their regions' contents, so one pass in id order sees inner
    // nodes first; iterate anyway in case a pass appended nodes out of that order.
    for (bool again = true; again;) {
      again = false;
      for (size_t id = 0; id < g.nodes.size(); ++id) {
        if (effects[id]) continue;
        bool e = g.def(static_cast<int32_t>(id)).has(kSideEffects);
        for (int32_t r : g.nodes[id].regions)
          for (int32_t inner : g.blocks[static_cast<size_t>(r)].nodes) e = e || effects[static_cast<size_t>(inner)];
        if (e) effects[id] = again = 1;
      }
    }
  }

  static bool is_loop(OpKind k) { return k == OpKind::ForLoop || k == OpKind::WhileLoop; }

  void node(int32_t n) {
    if (!live[static_cast<size_t>(n)]) {
      live[static_cast<size_t>(n)] = 1;
      work.push_back(n);
    }
  }

  const Block& region(int32_t n, size_t r) const {
    return g.blocks[static_cast<size_t>(g.nodes[static_cast<size_t>(n)].regions[r])];
  }

  void out_slot(int32_t n, size_t j) {
    auto& s = out[static_cast<size_t>(n)];
    if (j >= s.size() || s[j]) return;
    s[j] = 1;
    node(n);
    const Node& nd = g.nodes[static_cast<size_t>(n)];
    if (nd.kind == OpKind::ForLoop) {
      value(nd.inputs[3 + j]);
      value(region(n, 0).results[j]);
    } else {
      value(region(n, 0).results[1 + j]);
    }
  }

  void arg_slot(int32_t n, size_t i) {
    auto& s = arg[static_cast<size_t>(n)];
    if (i >= s.size() || s[i]) return;
    s[i] = 1;
    node(n);
    value(g.nodes[static_cast<size_t>(n)].inputs[i]);
    value(region(n, 1).results[i]);
  }

  void value(int32_t v) {
    const Value& val = g.values[static_cast<size_t>(v)];
    if (val.node >= 0) {
      node(val.node);
      if (is_loop(g.nodes[static_cast<size_t>(val.node)].kind)) out_slot(val.node, static_cast<size_t>(val.index));
      return;
    }
    // A block param: a loop region's param makes its slot live.
    const Block& b = g.blocks[static_cast<size_t>(val.block)];
    if (b.parent_node < 0) return;
    const Node& p = g.nodes[static_cast<size_t>(b.parent_node)];
    if (!is_loop(p.kind)) return;
    auto it = std::find(b.params.begin(), b.params.end(), v);
    if (it == b.params.end()) return;
    size_t k = static_cast<size_t>(it - b.params.begin());
    if (p.kind == OpKind::ForLoop) {
      if (k > 0) out_slot(b.parent_node, k - 1);  // param 0 is the induction variable
    } else if (val.block == p.regions[0]) {
      arg_slot(b.parent_node, k);
    } else {
      out_slot(b.parent_node, k);
    }
  }

  void run() {
    for (int32_t v : m.targets) value(v);
    for (int32_t v : m.feeds) value(v);
    for (int32_t n : m.target_ops) node(n);
    while (!work.empty()) {
      int32_t id = work.back();
      work.pop_back();
      const Node& n = g.nodes[static_cast<size_t>(id)];
      for (int32_t d : n.control_deps) node(d);
      if (n.kind == OpKind::ForLoop) {
        for (size_t i = 0; i < 3; ++i) value(n.inputs[i]);  // lower, upper, step
      } else if (n.kind == OpKind::WhileLoop) {
        value(region(id, 0).results[0]);  // the predicate
      } else {
        for (int32_t v : n.inputs) value(v);
        for (int32_t r : n.regions)
          for (int32_t v : g.blocks[static_cast<size_t>(r)].results) value(v);
      }
      for (int32_t r : n.regions)
        for (int32_t inner : g.blocks[static_cast<size_t>(r)].nodes)
          if (effects[static_cast<size_t>(inner)]) node(inner);
    }
  }
};

template <class T>
std::vector<T> keep(const std::vector<T>& xs, const std::vector<char>& live, size_t first = 0) {
  std::vector<T> out(xs.begin(), xs.begin() + static_cast<long>(first));
  for (size_t i = first; i < xs.size(); ++i)
    if (live[i - first]) out.push_back(xs[i]);
  return out;
}

// Drops a live loop's dead slots; returns whether any went.
bool drop_dead_slots(GraphImpl& g, int32_t id, const Liveness& L) {
  Node& n = g.nodes[static_cast<size_t>(id)];
  const auto& out = L.out[static_cast<size_t>(id)];
  const auto& arg = L.arg[static_cast<size_t>(id)];
  bool all_out = std::all_of(out.begin(), out.end(), [](char c) { return c != 0; });
  bool all_arg = std::all_of(arg.begin(), arg.end(), [](char c) { return c != 0; });
  if (all_out && all_arg) return false;
  auto renumber = [&](const std::vector<int32_t>& vs) {
    for (size_t i = 0; i < vs.size(); ++i) g.values[static_cast<size_t>(vs[i])].index = static_cast<int32_t>(i);
  };
  if (n.kind == OpKind::ForLoop) {
    Block& body = g.blocks[static_cast<size_t>(n.regions[0])];
    n.inputs = keep(n.inputs, out, 3);
    body.params = keep(body.params, out, 1);
    body.results = keep(body.results, out);
    renumber(body.params);
  } else {
    Block& before = g.blocks[static_cast<size_t>(n.regions[0])];
    Block& after = g.blocks[static_cast<size_t>(n.regions[1])];
    n.inputs = keep(n.inputs, arg);
    before.params = keep(before.params, arg);
    after.results = keep(after.results, arg);
    before.results = keep(before.results, out, 1);
    after.params = keep(after.params, out);
    renumber(before.params);
    renumber(after.params);
  }
  n.outputs = keep(n.outputs, out);
  renumber(n.outputs);
  return true;
}

}  // namespace

bool DeadCodeElimination::run(Module& m) {
  GraphImpl& g = m.graph;
  Liveness L(g, m);
  L.run();
  const std::vector<char>& live = L.live;
  bool changed = false;
  for (size_t id = 0; id < g.nodes.size(); ++id)
    if (live[id] && Liveness::is_loop(g.nodes[id].kind)) changed |= drop_dead_slots(g, static_cast<int32_t>(id), L);
  for (Block& b : g.blocks) {
    std::vector<int32_t> kept;
    for (int32_t id : b.nodes)
      if (live[static_cast<size_t>(id)]) kept.push_back(id);
    changed |= kept.size() != b.nodes.size();
    b.nodes = std::move(kept);
  }
  // Regions of dead control-flow nodes no longer count as users of anything; dead constants
  // let go of their values (the nodes stay, as ids, but nothing reads them again: a weight
  // that constant folding transposed or cast would otherwise be held, and saved, twice).
  for (size_t id = 0; id < g.nodes.size(); ++id)
    if (!live[id]) {
      for (int32_t r : g.nodes[id].regions) g.blocks[static_cast<size_t>(r)].results.clear();
      if (g.nodes[id].kind == OpKind::Constant && g.nodes[id].data.nbytes() > 0) g.nodes[id].data = TensorData();
    }
  // Control deps on removed nodes are dropped (what they ordered against no longer runs).
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    if (!live[id]) continue;
    auto& deps = g.nodes[id].control_deps;
    std::erase_if(deps, [&](int32_t d) { return !live[static_cast<size_t>(d)]; });
  }
  return changed;
}

}  // namespace tg::detail
