#include "functionalize.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "convert.h"
#include "nodes.h"

namespace tgraph_tf {

using tensorflow::DataType;
using tensorflow::NodeDef;

std::string if_arg(size_t k) { return "_if_arg:" + std::to_string(k); }
std::string loop_var(size_t k) { return "_loop_var:" + std::to_string(k); }

namespace {

int output_index(const std::string& tensor) {  // "name:k" -> k
  const size_t c = tensor.rfind(':');
  return c == std::string::npos ? 0 : std::stoi(tensor.substr(c + 1));
}

bool frame_op(const std::string& op) {
  return op == "Switch" || op == "Merge" || op == "Enter" || op == "Exit" || op == "NextIteration" || op == "LoopCond";
}

// The dtypes a rebuilt region may pass in or out: those tgraph's kernels take.
bool region_type(DataType t) {
  return t == tensorflow::DT_FLOAT || t == tensorflow::DT_DOUBLE || t == tensorflow::DT_INT32 ||
         t == tensorflow::DT_INT64 || t == tensorflow::DT_BOOL;
}

DataType type_attr(const NodeDef& n, const char* name) {
  auto a = n.attr().find(name);
  return a == n.attr().end() ? tensorflow::DT_INVALID : a->second.type();
}

// What a branch may hold: nodes the clusters take, constants, identities (the pivots), and
// conditionals rebuilt already (nested ones, innermost first).
bool branch_node(const NodeDef& n, const std::set<std::string>& preserve) {
  if (!on_tgraph(n) || preserve.count(n.name()) || frame_op(n.op())) return false;
  if (n.op() == "Const") return region_type(type_attr(n, "dtype"));
  if (n.op() == "Identity") return region_type(type_attr(n, "T"));
  if (n.op() == kIfOp || n.op() == kWhileOp) return true;
  if (clusterable(n, preserve)) return true;
  // Integer arithmetic on TGRAPH (a loop's counter and its bound) converts too, inside control
  // flow; the clusters leave it to TensorFlow's host kernels elsewhere.
  auto t = n.attr().find("T");
  if (t == n.attr().end()) return has_converter(n.op());  // bool logic (LogicalAnd ...)
  return has_converter(n.op()) && (t->second.type() == tensorflow::DT_INT32 || t->second.type() == tensorflow::DT_INT64);
}

struct View {
  const tensorflow::GraphDef& g;
  std::unordered_map<std::string, int> index;
  std::vector<std::vector<int>> readers;  // data and control
  std::vector<int> order;                 // inputs first (a loop's NextIteration edges left out)
  std::vector<int> position;              // in `order`; nodes on a cycle come last, in any order

  explicit View(const tensorflow::GraphDef& graph)
      : g(graph), readers(static_cast<size_t>(graph.node_size())), position(static_cast<size_t>(graph.node_size())) {
    const size_t n = static_cast<size_t>(g.node_size());
    for (int i = 0; i < g.node_size(); ++i) index[g.node(i).name()] = i;
    std::vector<int> pending(n, 0);
    for (int i = 0; i < g.node_size(); ++i)
      for (const std::string& in : g.node(i).input()) {
        const int src = of(in);
        if (src < 0) continue;
        readers[static_cast<size_t>(src)].push_back(i);
        if (g.node(src).op() != "NextIteration") ++pending[static_cast<size_t>(i)];
      }
    std::vector<int> ready;
    for (size_t i = 0; i < n; ++i)
      if (!pending[i]) ready.push_back(static_cast<int>(i));
    std::vector<bool> placed(n, false);
    while (!ready.empty()) {  // Kahn's order, without recursion (graphs of any depth)
      const int u = ready.back();
      ready.pop_back();
      placed[static_cast<size_t>(u)] = true;
      order.push_back(u);
      if (g.node(u).op() == "NextIteration") continue;
      for (int r : readers[static_cast<size_t>(u)])
        if (--pending[static_cast<size_t>(r)] == 0) ready.push_back(r);
    }
    for (size_t i = 0; i < n; ++i)
      if (!placed[i]) order.push_back(static_cast<int>(i));
    for (size_t k = 0; k < order.size(); ++k) position[static_cast<size_t>(order[k])] = static_cast<int>(k);
  }
  int of(const std::string& input) const {
    auto it = index.find(node_of(input));
    return it == index.end() ? -1 : it->second;
  }
  // `nodes` in an order where inputs come first.
  std::vector<int> sorted(const std::set<int>& nodes) const {
    std::vector<int> out(nodes.begin(), nodes.end());
    std::sort(out.begin(), out.end(), [&](int a, int b) { return position[static_cast<size_t>(a)] < position[static_cast<size_t>(b)]; });
    return out;
  }
  // Whether a node of `targets` is reached from `from` along data or control edges.
  bool reaches(const std::set<int>& from, const std::set<int>& targets) const {
    std::vector<bool> seen(readers.size(), false);
    std::vector<int> todo(from.begin(), from.end());
    while (!todo.empty()) {
      const int u = todo.back();
      todo.pop_back();
      if (g.node(u).op() == "NextIteration") continue;  // a loop's next trip, not a cycle
      for (int r : readers[static_cast<size_t>(u)]) {
        if (seen[static_cast<size_t>(r)]) continue;
        if (targets.count(r)) return true;
        seen[static_cast<size_t>(r)] = true;
        todo.push_back(r);
      }
    }
    return false;
  }
};

// Whether a node of the region `nodes` reads a shape or axes (a value input, convert.h) other
// than from a constant of the region: the region's converters read those as values when the
// graph is built, which a tensor passed in does not carry.
bool values_inside(const tensorflow::GraphDef& g, const View& v, const std::set<int>& nodes) {
  for (int u : nodes) {
    const NodeDef& n = g.node(u);
    if (n.op() == kIfOp || n.op() == kWhileOp) continue;  // checked when it was rebuilt
    for (int k : value_inputs(n.op())) {
      if (k >= n.input_size()) return false;
      const int src = v.of(n.input(k));
      if (src < 0 || !nodes.count(src) || g.node(src).op() != "Const") return false;
    }
  }
  return true;
}

// Whether a node the rebuilding removes is one grappler says to keep (a fetch, a feed).
bool keeps_any(const tensorflow::GraphDef& g, const std::set<int>& gone, const std::set<std::string>& preserve) {
  for (int u : gone)
    if (preserve.count(g.node(u).name())) return true;
  return false;
}

// g without the nodes in `gone`, its other nodes' inputs renamed ("name:k" or "^name"), and
// `added` appended.
void replace_nodes(tensorflow::GraphDef& g, const std::set<int>& gone, const std::map<std::string, std::string>& renamed,
                   NodeDef added) {
  tensorflow::GraphDef out = g;  // library, versions and the rest as they were
  out.clear_node();
  for (int i = 0; i < g.node_size(); ++i) {
    if (gone.count(i)) continue;
    NodeDef n = g.node(i);
    for (std::string& in : *n.mutable_input()) {
      auto r = renamed.find(in[0] == '^' ? in : tensor_name(in));
      if (r != renamed.end()) in = r->second;
    }
    *out.add_node() = std::move(n);
  }
  *out.add_node() = std::move(added);
  g = std::move(out);
}

// Where a node stands with respect to one predicate's Switches: computed on their side only
// (0: else, 1: then), on no side (live whatever the predicate), or on both (never live at
// once: not a branch).
constexpr int kLive = -2, kMixed = -1;

int combine(int s, int t) { return t == kLive ? s : s == kLive ? t : s == t ? s : kMixed; }

// Each node's side for the Switches `switches` on one predicate, inputs first. A Merge whose
// inputs come from both sides (or one live) is live: that is a conditional's join. A Merge of a
// conditional nested in a branch has both inputs on that branch's side, and so does what reads
// it: the nested conditional's nodes belong to the outer branch (and keep it from being
// rebuilt until the nested one is).
std::vector<int> sides(const tensorflow::GraphDef& g, const View& v, const std::set<int>& switches) {
  std::vector<int> side(static_cast<size_t>(g.node_size()), kLive);
  for (int u : v.order) {
    const NodeDef& n = g.node(u);
    const bool merge = n.op() == "Merge";
    int s = kLive, data = kLive;
    bool any_data = false, live_data = false;
    for (const std::string& in : n.input()) {
      const int src = v.of(in);
      if (src < 0 || g.node(src).op() == "NextIteration") continue;
      int t = side[static_cast<size_t>(src)];
      if (switches.count(src)) t = in[0] == '^' ? kLive : output_index(tensor_name(in));
      if (merge && in[0] != '^') {
        if (t == kLive) live_data = true;
        else data = any_data ? (data == t ? data : (data == kMixed || t == kMixed ? kMixed : kLive)) : t;
        any_data = true;
        continue;
      }
      s = combine(s, t);
    }
    if (merge) s = combine(s, live_data ? kLive : data);
    side[static_cast<size_t>(u)] = s;
  }
  return side;
}

// One conditional: its Merges and the branch nodes they read back to the Switches on `pred`.
struct Cond {
  std::string pred;
  std::vector<int> merges;
  std::set<int> nodes;     // both branches
  std::set<int> switches;  // the Switches on pred they read
};

// Replaces `c` by one TgraphIf node; false (g unchanged) where something does not fit.
bool rebuild(tensorflow::GraphDef& g, const View& v, const Cond& c, const std::vector<int>& side,
             const std::set<std::string>& preserve) {
  const std::set<int> merges(c.merges.begin(), c.merges.end());
  // Nothing outside the conditional reads a branch node, or a Merge's value_index.
  for (int u : c.nodes)
    for (int r : v.readers[static_cast<size_t>(u)])
      if (!c.nodes.count(r) && !merges.count(r)) return false;
  for (int m : c.merges)
    for (int r : v.readers[static_cast<size_t>(m)])
      for (const std::string& in : g.node(r).input())
        if (in[0] != '^' && v.of(in) == m && output_index(tensor_name(in)) != 0) return false;
  if (!values_inside(g, v, c.nodes)) return false;

  std::vector<std::string> captured;
  std::set<int> sources;  // the nodes of captured tensors and control inputs
  std::vector<DataType> tin{tensorflow::DT_BOOL};
  std::set<std::string> controls;
  bool ok = true;
  // A tensor read in a branch, as the body names it: a branch node's own, or a captured input.
  auto body_name = [&](const std::string& in) -> std::string {
    const int src = v.of(in);
    std::string t = tensor_name(in);
    if (src >= 0 && c.nodes.count(src)) return t;
    DataType dt = tensorflow::DT_INVALID;
    if (src >= 0 && c.switches.count(src)) {  // a Switch's output in the branch: its data input
      const NodeDef& s = g.node(src);
      t = tensor_name(s.input(0));
      dt = type_attr(s, "T");
      sources.insert(v.of(s.input(0)));
    } else if (src >= 0) {
      const std::vector<DataType> outs = arg_types(g.node(src), false);
      const int k = output_index(t);
      if (k < static_cast<int>(outs.size())) dt = outs[static_cast<size_t>(k)];
      sources.insert(src);
    }
    auto at = std::find(captured.begin(), captured.end(), t);
    if (at == captured.end()) {
      if (!region_type(dt)) ok = false;
      captured.push_back(t);
      tin.push_back(dt);
      at = captured.end() - 1;
    }
    return if_arg(static_cast<size_t>(at - captured.begin()));
  };
  auto control = [&](const std::string& in, const std::set<int>& inside) {
    const int src = v.of(in);
    if (src >= 0 && inside.count(src)) return;
    controls.insert(in);
    if (src >= 0) sources.insert(src);
  };

  tensorflow::GraphDef bodies[2];
  std::set<int> inside(c.nodes);
  inside.insert(c.switches.begin(), c.switches.end());
  for (int u : v.sorted(c.nodes)) {
    NodeDef n = g.node(u);
    n.clear_input();
    for (const std::string& in : g.node(u).input()) {
      if (in[0] != '^') n.add_input(body_name(in));
      else control(in, inside);
    }
    *bodies[side[static_cast<size_t>(u)]].add_node() = std::move(n);
  }
  NodeDef node;
  const NodeDef& first = g.node(c.merges[0]);
  std::string name = first.name() + "/tgraph_if";
  while (v.index.count(name)) name += "_";
  node.set_name(name);
  node.set_op(kIfOp);
  node.set_device(first.device());
  node.add_input(c.pred);
  sources.insert(v.of(c.pred));
  auto& attrs = *node.mutable_attr();
  for (int m : c.merges) {
    const NodeDef& mn = g.node(m);
    std::string outs[2];
    for (int k = 0; k < 2; ++k) {
      const std::string& in = mn.input(k);
      const int src = v.of(in);
      const int s = src >= 0 && c.switches.count(src) ? output_index(tensor_name(in)) : side[static_cast<size_t>(src)];
      outs[s] = body_name(in);
    }
    for (int k = 2; k < mn.input_size(); ++k)
      if (mn.input(k)[0] == '^') control(mn.input(k), inside);
    if (outs[0].empty() || outs[1].empty()) return false;  // both inputs from one branch
    attrs["then_outs"].mutable_list()->add_s(outs[1]);
    attrs["else_outs"].mutable_list()->add_s(outs[0]);
    const DataType t = type_attr(mn, "T");
    if (!region_type(t)) return false;
    attrs["Tout"].mutable_list()->add_type(t);
  }
  if (!ok) return false;
  // What the node reads must not depend on what it computes: the backward conditional of a
  // differentiated one shares the forward's Switches (and, short-circuited, reads its branch
  // values) but takes the gradient of the forward's result.
  sources.erase(-1);
  if (v.reaches(merges, sources)) return false;
  for (const std::string& t : captured) node.add_input(t);
  for (const std::string& ctl : controls) node.add_input(ctl);
  for (DataType t : tin) attrs["Tin"].mutable_list()->add_type(t);
  std::string bytes;
  bodies[1].SerializeToString(&bytes);
  attrs["then_body"].set_s(bytes);
  bodies[0].SerializeToString(&bytes);
  attrs["else_body"].set_s(bytes);

  // The graph without the conditional's nodes (and Switches nobody else reads), its readers
  // reading the TgraphIf instead of the Merges.
  std::set<int> gone(c.nodes.begin(), c.nodes.end());
  gone.insert(c.merges.begin(), c.merges.end());
  for (int s : c.switches) {
    bool read = preserve.count(g.node(s).name()) > 0;
    for (int r : v.readers[static_cast<size_t>(s)]) read = read || !gone.count(r);
    if (!read) gone.insert(s);
  }
  if (keeps_any(g, gone, preserve)) return false;
  std::map<std::string, std::string> renamed;
  for (size_t j = 0; j < c.merges.size(); ++j) {
    const std::string& m = g.node(c.merges[j]).name();
    renamed[m + ":0"] = name + ":" + std::to_string(j);
    renamed["^" + m] = "^" + name;
  }
  replace_nodes(g, gone, renamed, std::move(node));
  return true;
}

// The conditionals on predicate `pred`: each Merge joining the two sides, with what it reads back
// to the Switches; Merges sharing a Switch belong to one conditional.
std::vector<Cond> conds_on(const tensorflow::GraphDef& g, const View& v, const std::string& pred,
                           const std::set<int>& switches, const std::vector<int>& side,
                           const std::set<std::string>& preserve) {
  std::vector<Cond> conds;
  std::map<int, size_t> cond_of_switch;
  for (int m = 0; m < g.node_size(); ++m) {
    const NodeDef& mn = g.node(m);
    if (mn.op() != "Merge" || mn.input_size() < 2 || !on_tgraph(mn)) continue;
    if (mn.input_size() > 2 && mn.input(2)[0] != '^') continue;
    Cond c;
    c.pred = pred;
    c.merges = {m};
    bool fits = true;
    int sides_seen = 0;
    std::vector<int> todo;
    for (int k = 0; k < 2; ++k) {
      const int src = v.of(mn.input(k));
      if (src < 0) { fits = false; break; }
      const int s = switches.count(src) ? output_index(tensor_name(mn.input(k))) : side[static_cast<size_t>(src)];
      if (s < 0) { fits = false; break; }
      sides_seen |= 1 << s;
      todo.push_back(src);
    }
    if (!fits || sides_seen != 3) continue;
    while (!todo.empty() && fits) {  // back from the Merge to the Switches
      const int u = todo.back();
      todo.pop_back();
      if (switches.count(u)) {
        c.switches.insert(u);
        continue;
      }
      if (!c.nodes.insert(u).second) continue;
      if (side[static_cast<size_t>(u)] < 0 || !branch_node(g.node(u), preserve)) fits = false;
      for (const std::string& in : g.node(u).input()) {
        const int src = v.of(in);
        if (src >= 0 && (switches.count(src) || side[static_cast<size_t>(src)] != kLive)) todo.push_back(src);
      }
    }
    if (!fits) continue;
    // Joined with every conditional it shares a Switch with.
    size_t into = conds.size();
    for (int s : c.switches) {
      auto it = cond_of_switch.find(s);
      if (it == cond_of_switch.end() || it->second == into) continue;
      if (into == conds.size()) {
        into = it->second;
        continue;
      }
      Cond& other = conds[it->second];  // a second one: folded into the first
      Cond& keep = conds[into];
      keep.merges.insert(keep.merges.end(), other.merges.begin(), other.merges.end());
      keep.nodes.insert(other.nodes.begin(), other.nodes.end());
      keep.switches.insert(other.switches.begin(), other.switches.end());
      for (auto& [sw, k] : cond_of_switch)
        if (k == it->second) k = into;
      other = Cond{};
    }
    if (into == conds.size()) conds.push_back(Cond{pred, {}, {}, {}});
    Cond& keep = conds[into];
    keep.merges.push_back(m);
    keep.nodes.insert(c.nodes.begin(), c.nodes.end());
    keep.switches.insert(c.switches.begin(), c.switches.end());
    for (int s : c.switches) cond_of_switch[s] = into;
  }
  conds.erase(std::remove_if(conds.begin(), conds.end(), [](const Cond& c) { return c.merges.empty(); }), conds.end());
  for (Cond& c : conds) std::sort(c.merges.begin(), c.merges.end());
  return conds;
}

// Finds one conditional that can be rebuilt and rebuilds it.
bool rebuild_one(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  const View v(g);
  std::set<std::string> preds;
  for (const NodeDef& n : g.node())
    if (n.op() == "Switch" && n.input_size() >= 2 && on_tgraph(n)) preds.insert(tensor_name(n.input(1)));
  for (const std::string& pred : preds) {
    std::set<int> switches;
    for (int i = 0; i < g.node_size(); ++i)
      if (g.node(i).op() == "Switch" && g.node(i).input_size() >= 2 && tensor_name(g.node(i).input(1)) == pred)
        switches.insert(i);
    const std::vector<int> side = sides(g, v, switches);
    for (const Cond& c : conds_on(g, v, pred, switches, side, preserve))
      if (rebuild(g, v, c, side, preserve)) return true;
  }
  return false;
}

// ---- while loops ----

// One lowered loop frame: per loop variable its Enter, Merge, NextIteration, Switch and Exit
// (-1: none), the invariant Enters, the LoopCond.
struct Frame {
  std::vector<int> enter, merge, next, sw, exit, invariant;
  int loop_cond = -1;
};

bool attr_bool(const NodeDef& n, const char* name) {
  auto a = n.attr().find(name);
  return a != n.attr().end() && a->second.b();
}

// The frame whose Enters are `enters`; false where its shape is not the lowering's.
bool read_frame(const tensorflow::GraphDef& g, const View& v, const std::vector<int>& enters, Frame& f) {
  for (int e : enters) {
    if (!on_tgraph(g.node(e))) return false;
    if (attr_bool(g.node(e), "is_constant")) {
      f.invariant.push_back(e);
      continue;
    }
    int merge = -1;
    for (int r : v.readers[static_cast<size_t>(e)])
      if (g.node(r).op() == "Merge") merge = r;
    if (merge < 0 || g.node(merge).input_size() < 2) return false;
    int next = -1;
    for (const std::string& in : g.node(merge).input())
      if (in[0] != '^' && v.of(in) >= 0 && g.node(v.of(in)).op() == "NextIteration") next = v.of(in);
    int sw = -1;
    for (int r : v.readers[static_cast<size_t>(merge)])
      if (g.node(r).op() == "Switch" && v.of(g.node(r).input(0)) == merge) sw = r;
    if (next < 0 || sw < 0 || g.node(sw).input_size() < 2) return false;
    const int lc = v.of(g.node(sw).input(1));
    if (lc < 0 || g.node(lc).op() != "LoopCond" || (f.loop_cond >= 0 && f.loop_cond != lc)) return false;
    f.loop_cond = lc;
    int exit = -1;
    for (int r : v.readers[static_cast<size_t>(sw)])
      if (g.node(r).op() == "Exit") exit = r;
    f.enter.push_back(e), f.merge.push_back(merge), f.next.push_back(next), f.sw.push_back(sw), f.exit.push_back(exit);
  }
  return f.loop_cond >= 0 && !f.enter.empty();
}

// Replaces one frame by a TgraphWhile; false (g unchanged) where something does not fit.
bool rebuild_loop(tensorflow::GraphDef& g, const View& v, const Frame& f, const std::set<std::string>& preserve) {
  std::map<int, size_t> var_of_merge, var_of_switch;
  for (size_t i = 0; i < f.merge.size(); ++i) var_of_merge[f.merge[i]] = i, var_of_switch[f.sw[i]] = i;
  std::map<int, size_t> capture_of;  // invariant Enter -> capture index
  for (size_t k = 0; k < f.invariant.size(); ++k) capture_of[f.invariant[k]] = k;
  std::set<int> structure(f.enter.begin(), f.enter.end());
  structure.insert(f.invariant.begin(), f.invariant.end());
  structure.insert(f.merge.begin(), f.merge.end());
  structure.insert(f.next.begin(), f.next.end());
  structure.insert(f.sw.begin(), f.sw.end());
  structure.insert(f.loop_cond);
  // The frame's nodes: what its Enters reach (data or control), up to its Exits.
  std::set<int> frame;
  std::vector<int> todo(f.enter.begin(), f.enter.end());
  todo.insert(todo.end(), f.invariant.begin(), f.invariant.end());
  while (!todo.empty()) {
    const int u = todo.back();
    todo.pop_back();
    if (!frame.insert(u).second || g.node(u).op() == "Exit") continue;
    for (int r : v.readers[static_cast<size_t>(u)]) todo.push_back(r);
  }
  for (int x : f.exit)
    if (x >= 0) frame.erase(x);
  // Inside a region, the tensor a node reads: a loop variable (a Merge in the condition, a
  // Switch's taken output in the body), a captured invariant, or a node of the region (then
  // `src` is that node).
  bool ok = true;
  auto name_in = [&](const std::string& in, bool body, int& src) -> std::string {
    src = v.of(in);
    if (src < 0) return ok = false, "";
    const size_t k = static_cast<size_t>(output_index(tensor_name(in)));
    std::string name;
    if (!body && var_of_merge.count(src) && k == 0) name = loop_var(var_of_merge[src]);
    else if (body && var_of_switch.count(src) && k == 1) name = loop_var(var_of_switch[src]);
    else if (capture_of.count(src)) name = if_arg(capture_of[src]);
    else if (structure.count(src) || !frame.count(src) || !branch_node(g.node(src), preserve)) ok = false;
    else return tensor_name(in);  // a node of the region
    src = -1;
    return name;
  };
  auto region = [&](const std::vector<std::string>& roots, bool body, std::vector<std::string>& names) {
    std::set<int> nodes;
    std::vector<int> todo;
    for (const std::string& r : roots) {
      int src;
      names.push_back(name_in(r, body, src));
      if (src >= 0) todo.push_back(src);
    }
    while (!todo.empty()) {
      const int u = todo.back();
      todo.pop_back();
      if (!nodes.insert(u).second) continue;
      for (const std::string& in : g.node(u).input()) {
        int src;
        if (in[0] != '^') name_in(in, body, src);
        else src = -1;
        if (src >= 0) todo.push_back(src);
      }
    }
    tensorflow::GraphDef out;
    for (int u : v.sorted(nodes)) {
      NodeDef n = g.node(u);
      n.clear_input();
      for (const std::string& in : g.node(u).input()) {
        int src;
        if (in[0] != '^') n.add_input(name_in(in, body, src));
      }
      *out.add_node() = std::move(n);
    }
    return std::make_pair(out, nodes);
  };
  std::vector<std::string> cond_out, body_outs, next_in;
  auto [cond_body, cond_nodes] = region({g.node(f.loop_cond).input(0)}, false, cond_out);
  for (int n : f.next) next_in.push_back(g.node(n).input(0));
  auto [body_body, body_nodes] = region(next_in, true, body_outs);
  if (!ok || !values_inside(g, v, cond_nodes) || !values_inside(g, v, body_nodes)) return false;
  // Every other node of the frame is a pure leftover (a pivot, a constant nobody reads) that
  // only the frame reads; nothing escapes but through the Exits; no Merge's value_index read.
  for (int u : frame) {
    if (!structure.count(u) && !cond_nodes.count(u) && !body_nodes.count(u) && !branch_node(g.node(u), preserve))
      return false;
    for (int r : v.readers[static_cast<size_t>(u)])
      if (!frame.count(r) && std::find(f.exit.begin(), f.exit.end(), r) == f.exit.end()) return false;
  }
  for (int m : f.merge)
    for (int r : v.readers[static_cast<size_t>(m)])
      for (const std::string& in : g.node(r).input())
        if (in[0] != '^' && v.of(in) == m && output_index(tensor_name(in)) != 0) return false;

  NodeDef node;
  std::string name = g.node(f.loop_cond).name() + "/tgraph_while";
  while (v.index.count(name)) name += "_";
  node.set_name(name);
  node.set_op(kWhileOp);
  node.set_device(g.node(f.loop_cond).device());
  auto& attrs = *node.mutable_attr();
  std::set<std::string> controls;
  for (int e : f.enter) node.add_input(g.node(e).input(0));
  for (int e : f.invariant) node.add_input(g.node(e).input(0));
  for (int u : frame)
    for (const std::string& in : g.node(u).input())
      if (in[0] == '^' && !frame.count(v.of(in))) controls.insert(in);
  for (int x : f.exit)  // an Exit's control inputs (beyond the Switch it reads) move too
    if (x >= 0)
      for (const std::string& in : g.node(x).input())
        if (in[0] == '^' && !frame.count(v.of(in))) controls.insert(in);
  for (const std::string& c : controls) node.add_input(c);
  for (int e : f.enter) {
    const DataType t = type_attr(g.node(e), "T");
    if (!region_type(t)) return false;
    attrs["Tout"].mutable_list()->add_type(t);
    attrs["Tin"].mutable_list()->add_type(t);
  }
  for (int e : f.invariant) {
    const DataType t = type_attr(g.node(e), "T");
    if (!region_type(t)) return false;
    attrs["Tin"].mutable_list()->add_type(t);
  }
  std::string bytes;
  cond_body.SerializeToString(&bytes);
  attrs["cond_body"].set_s(bytes);
  body_body.SerializeToString(&bytes);
  attrs["body_body"].set_s(bytes);
  attrs["cond_out"].set_s(cond_out[0]);
  for (const std::string& o : body_outs) attrs["body_outs"].mutable_list()->add_s(o);

  std::map<std::string, std::string> renamed;
  for (size_t i = 0; i < f.exit.size(); ++i) {
    if (f.exit[i] < 0) continue;
    const std::string& x = g.node(f.exit[i]).name();
    renamed[x + ":0"] = name + ":" + std::to_string(i);
    renamed["^" + x] = "^" + name;
  }
  std::set<int> gone = frame;
  for (int x : f.exit)
    if (x >= 0) gone.insert(x);
  if (keeps_any(g, gone, preserve)) return false;
  replace_nodes(g, gone, renamed, std::move(node));
  return true;
}

// Finds one loop frame that can be rebuilt (its regions free of other frames) and rebuilds it.
bool rebuild_one_loop(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  const View v(g);
  std::map<std::string, std::vector<int>> frames;
  for (int i = 0; i < g.node_size(); ++i)
    if (g.node(i).op() == "Enter") {
      auto a = g.node(i).attr().find("frame_name");
      frames[a == g.node(i).attr().end() ? "" : a->second.s()].push_back(i);
    }
  for (const auto& [name, enters] : frames) {
    Frame f;
    if (read_frame(g, v, enters, f) && rebuild_loop(g, v, f, preserve)) return true;
  }
  return false;
}

// ---- a differentiated conditional's intermediates ----

// The Switch output (node, k) an optional read reaches through Identities, or (-1, 0).
std::pair<int, int> switch_of(const tensorflow::GraphDef& g, const View& v, std::string in) {
  for (int hops = 0; hops < 8; ++hops) {
    const int src = v.of(in);
    if (src < 0) break;
    const NodeDef& n = g.node(src);
    if (n.op() == "Switch") return {src, output_index(tensor_name(in))};
    if (n.op() != "Identity" || n.input_size() < 1) break;
    in = n.input(0);
  }
  return {-1, 0};
}

// The branch (0: else, 1: then) of the conditional on `pred` that computes input `in`, found
// through its Switches and pivots (the branch's constants are ordered after a pivot); -1 if none.
int branch_of(const tensorflow::GraphDef& g, const View& v, const std::string& in, const std::string& pred) {
  std::vector<bool> seen(static_cast<size_t>(g.node_size()), false);
  std::vector<std::string> todo{in};
  while (!todo.empty()) {  // depth first, each node once
    const std::string t = todo.back();
    todo.pop_back();
    const int src = v.of(t);
    if (src < 0) continue;
    const NodeDef& n = g.node(src);
    if (n.op() == "Switch" && n.input_size() >= 2 && tensor_name(n.input(1)) == pred) {
      if (t[0] != '^') return output_index(tensor_name(t));
      continue;
    }
    if (seen[static_cast<size_t>(src)]) continue;
    seen[static_cast<size_t>(src)] = true;
    for (int k = n.input_size() - 1; k >= 0; --k) todo.push_back(n.input(k));
  }
  return -1;
}

// TensorFlow's gradient of a conditional hands each intermediate the backward needs from the
// forward conditional's branch to the backward's as an optional (OptionalFromValue in the
// branch that computed it, OptionalNone in the other, a variant Merge, a Switch on the same
// predicate, OptionalGetValue in the backward's branch on the same side). Variants stay on
// TensorFlow, so such conditionals could not be rebuilt. Where the read is on the side that
// wrote the value, the read takes the value itself (live exactly when the read's branch is),
// and the optionals, left unread, go. Returns how many reads were short-circuited.
int short_circuit_optionals(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  int made = 0;
  std::map<std::string, std::string> renamed;  // "OptionalGetValue:0" -> the value
  {
    const View v(g);
    for (int i = 0; i < g.node_size(); ++i) {
      const NodeDef& get = g.node(i);
      if (get.op() != "OptionalGetValue" || get.input_size() < 1 || preserve.count(get.name())) continue;
      const auto [sw, side] = switch_of(g, v, get.input(0));
      if (sw < 0 || g.node(sw).input_size() < 2) continue;
      const std::string pred = tensor_name(g.node(sw).input(1));
      const int merge = v.of(g.node(sw).input(0));
      if (merge < 0 || g.node(merge).op() != "Merge") continue;
      std::string value;
      for (const std::string& in : g.node(merge).input()) {
        const int src = in[0] == '^' ? -1 : v.of(in);
        if (src >= 0 && g.node(src).op() == "OptionalFromValue" && g.node(src).input_size() == 1 &&
            v.of(g.node(src).input(0)) >= 0 && on_tgraph(g.node(v.of(g.node(src).input(0)))) &&
            branch_of(g, v, tensor_name(in), pred) == side)
          value = tensor_name(g.node(src).input(0));
      }
      if (value.empty()) continue;
      renamed[get.name() + ":0"] = value;
      ++made;
    }
  }
  if (!made) return 0;
  for (NodeDef& n : *g.mutable_node())
    for (std::string& in : *n.mutable_input())
      if (in[0] != '^') {
        auto r = renamed.find(tensor_name(in));
        if (r != renamed.end()) in = r->second;
      }
  // The optionals' nodes nobody reads any more go (repeatedly: each takes the next).
  for (bool removed = true; removed;) {
    removed = false;
    const View v(g);
    std::set<int> gone;
    for (int i = 0; i < g.node_size(); ++i) {
      const std::string& op = g.node(i).op();
      const bool optional = op == "OptionalGetValue" || op == "OptionalFromValue" || op == "OptionalNone" ||
                            ((op == "Merge" || op == "Switch" || op == "Identity") && [&] {
                              auto t = g.node(i).attr().find("T");
                              return t != g.node(i).attr().end() && t->second.type() == tensorflow::DT_VARIANT;
                            }());
      if (optional && v.readers[static_cast<size_t>(i)].empty() && !preserve.count(g.node(i).name())) gone.insert(i);
    }
    if (gone.empty()) break;
    tensorflow::GraphDef out = g;
    out.clear_node();
    for (int i = 0; i < g.node_size(); ++i)
      if (!gone.count(i)) *out.add_node() = g.node(i);
    g = std::move(out);
    removed = true;
  }
  return made;
}

}  // namespace

int functionalize_conds(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  // Nested conditionals pass optionals of optionals (and the inner predicate as one): each
  // round takes one level off.
  for (int round = 0; round < 64 && short_circuit_optionals(g, preserve) > 0; ++round) {
  }
  int made = 0;
  while (made < 10000 && rebuild_one(g, preserve)) ++made;
  return made;
}

int functionalize_loops(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  int made = 0;
  while (made < 10000 && rebuild_one_loop(g, preserve)) ++made;
  return made;
}

}  // namespace tgraph_tf
