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

// What a branch may hold: nodes the clusters take, constants, identities (the pivots), and
// conditionals rebuilt already (nested ones, innermost first).
bool branch_node(const NodeDef& n, const std::set<std::string>& preserve) {
  if (!on_tgraph(n) || preserve.count(n.name()) || frame_op(n.op())) return false;
  if (n.op() == "Const" || n.op() == "Identity" || n.op() == kIfOp || n.op() == kWhileOp) return true;
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

  explicit View(const tensorflow::GraphDef& graph) : g(graph), readers(static_cast<size_t>(graph.node_size())) {
    for (int i = 0; i < g.node_size(); ++i) index[g.node(i).name()] = i;
    for (int i = 0; i < g.node_size(); ++i)
      for (const std::string& in : g.node(i).input()) {
        auto it = index.find(node_of(in));
        if (it != index.end()) readers[static_cast<size_t>(it->second)].push_back(i);
      }
  }
  int of(const std::string& input) const {
    auto it = index.find(node_of(input));
    return it == index.end() ? -1 : it->second;
  }
};

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

// One conditional: its Merges and the branch nodes they read back to the Switches on `pred`.
struct Cond {
  std::string pred;
  std::vector<int> merges;
  std::set<int> nodes;     // both branches
  std::set<int> switches;  // the Switches on pred they read
};

// Replaces `c` by one TgraphIf node; false (g unchanged) where something does not fit.
bool rebuild(tensorflow::GraphDef& g, const View& v, const Cond& c, const std::map<int, int>& side) {
  const std::set<int> merges(c.merges.begin(), c.merges.end());
  // Nothing outside the conditional reads a branch node, or a Merge's value_index.
  for (int u : c.nodes)
    for (int r : v.readers[static_cast<size_t>(u)])
      if (!c.nodes.count(r) && !merges.count(r)) return false;
  for (int m : c.merges)
    for (int r : v.readers[static_cast<size_t>(m)])
      for (const std::string& in : g.node(r).input())
        if (in[0] != '^' && v.of(in) == m && output_index(tensor_name(in)) != 0) return false;

  std::vector<std::string> captured;
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
      auto a = s.attr().find("T");
      if (a != s.attr().end()) dt = a->second.type();
    } else if (src >= 0) {
      const std::vector<DataType> outs = arg_types(g.node(src), false);
      const int k = output_index(t);
      if (k < static_cast<int>(outs.size())) dt = outs[static_cast<size_t>(k)];
    }
    auto at = std::find(captured.begin(), captured.end(), t);
    if (at == captured.end()) {
      if (dt == tensorflow::DT_INVALID) ok = false;
      captured.push_back(t);
      tin.push_back(dt);
      at = captured.end() - 1;
    }
    return if_arg(static_cast<size_t>(at - captured.begin()));
  };

  // Each branch's nodes in an order where inputs come first.
  std::vector<int> order;
  std::set<int> placed;
  std::function<void(int)> visit = [&](int u) {
    if (!placed.insert(u).second) return;
    for (const std::string& in : g.node(u).input()) {
      const int src = v.of(in);
      if (src >= 0 && c.nodes.count(src)) visit(src);
    }
    order.push_back(u);
  };
  for (int u : c.nodes) visit(u);
  tensorflow::GraphDef bodies[2];
  for (int u : order) {
    NodeDef n = g.node(u);
    n.clear_input();
    for (const std::string& in : g.node(u).input()) {
      if (in[0] != '^') {
        n.add_input(body_name(in));
        continue;
      }
      const int src = v.of(in);
      if (src < 0 || (!c.nodes.count(src) && !c.switches.count(src))) controls.insert(in);
    }
    *bodies[side.at(u)].add_node() = std::move(n);
  }
  NodeDef node;
  const NodeDef& first = g.node(c.merges[0]);
  std::string name = first.name() + "/tgraph_if";
  while (v.index.count(name)) name += "_";
  node.set_name(name);
  node.set_op(kIfOp);
  node.set_device(first.device());
  node.add_input(c.pred);
  auto& attrs = *node.mutable_attr();
  for (int m : c.merges) {
    const NodeDef& mn = g.node(m);
    std::string outs[2];
    for (int k = 0; k < 2; ++k) {
      const std::string& in = mn.input(k);
      const int src = v.of(in);
      const int s = src >= 0 && c.switches.count(src) ? output_index(tensor_name(in)) : side.at(src);
      outs[s] = body_name(in);
    }
    if (outs[0].empty() || outs[1].empty()) return false;  // both inputs from one branch
    attrs["then_outs"].mutable_list()->add_s(outs[1]);
    attrs["else_outs"].mutable_list()->add_s(outs[0]);
    auto t = mn.attr().find("T");
    if (t == mn.attr().end()) return false;
    attrs["Tout"].mutable_list()->add_type(t->second.type());
  }
  if (!ok) return false;
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
    bool read = false;
    for (int r : v.readers[static_cast<size_t>(s)]) read = read || !gone.count(r);
    if (!read) gone.insert(s);
  }
  std::map<std::string, std::string> renamed;
  for (size_t j = 0; j < c.merges.size(); ++j) {
    const std::string& m = g.node(c.merges[j]).name();
    renamed[m + ":0"] = name + ":" + std::to_string(j);
    renamed["^" + m] = "^" + name;
  }
  replace_nodes(g, gone, renamed, std::move(node));
  return true;
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
    // Each node's branch (1: then, 0: else; -1 both or a frame), from the Switch outputs it
    // descends from, data or control; nodes below no Switch are outside.
    std::map<int, int> side;
    std::function<int(int)> side_of = [&](int u) -> int {
      auto it = side.find(u);
      if (it != side.end()) return it->second;
      side[u] = -2;  // visiting: outside until shown otherwise
      int s = -2;
      for (const std::string& in : g.node(u).input()) {
        const int src = v.of(in);
        if (src < 0) continue;
        int t = -2;
        if (switches.count(src)) t = in[0] == '^' ? -2 : output_index(tensor_name(in));
        else if (g.node(src).op() != "Merge") t = side_of(src);
        if (t == -2) continue;
        s = s == -2 ? t : (s == t ? s : -1);
      }
      return side[u] = s;
    };
    // The Merges whose two inputs come from the two branches, and what they read back to
    // the Switches; Merges sharing a Switch belong to one conditional.
    std::vector<Cond> conds;
    for (int m = 0; m < g.node_size(); ++m) {
      const NodeDef& mn = g.node(m);
      if (mn.op() != "Merge" || mn.input_size() < 2 || !on_tgraph(mn)) continue;
      if (mn.input_size() > 2 && mn.input(2)[0] != '^') continue;
      Cond c;
      c.pred = pred;
      c.merges = {m};
      bool fits = true;
      std::function<void(int)> collect = [&](int u) {
        if (switches.count(u)) {
          c.switches.insert(u);
          return;
        }
        if (!c.nodes.insert(u).second) return;
        if (side_of(u) < 0 || !branch_node(g.node(u), preserve)) fits = false;
        for (const std::string& in : g.node(u).input()) {
          const int src = v.of(in);
          if (src >= 0 && (switches.count(src) || (g.node(src).op() != "Merge" && side_of(src) >= 0))) collect(src);
        }
      };
      int sides = 0;
      for (int k = 0; k < 2 && fits; ++k) {
        const int src = v.of(mn.input(k));
        if (src < 0) { fits = false; break; }
        const int s = switches.count(src) ? output_index(tensor_name(mn.input(k))) : side_of(src);
        if (s < 0) { fits = false; break; }
        sides |= 1 << s;
        collect(src);
      }
      if (!fits || sides != 3) continue;
      bool joined = false;
      for (Cond& other : conds) {
        bool shares = false;
        for (int s : c.switches) shares = shares || other.switches.count(s);
        if (!shares) continue;
        other.merges.push_back(m);
        other.nodes.insert(c.nodes.begin(), c.nodes.end());
        other.switches.insert(c.switches.begin(), c.switches.end());
        joined = true;
        break;
      }
      if (!joined) conds.push_back(std::move(c));
    }
    for (const Cond& c : conds)
      if (rebuild(g, v, c, side)) return true;
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
  // Switch's taken output in the body), a captured invariant, or a node of the region.
  bool ok = true;
  auto region = [&](const std::vector<std::string>& roots, bool body, std::vector<std::string>& names) {
    std::set<int> nodes;
    std::vector<int> order;
    auto rename = [&](const std::string& in) -> std::string {
      const int src = v.of(in);
      if (src < 0) return ok = false, "";
      if (!body && var_of_merge.count(src) && output_index(tensor_name(in)) == 0) return loop_var(var_of_merge[src]);
      if (body && var_of_switch.count(src) && output_index(tensor_name(in)) == 1) return loop_var(var_of_switch[src]);
      if (capture_of.count(src)) return if_arg(capture_of[src]);
      if (structure.count(src) || !frame.count(src) || !branch_node(g.node(src), preserve)) return ok = false, "";
      return tensor_name(in);
    };
    std::function<void(int)> visit = [&](int u) {
      if (!nodes.insert(u).second) return;
      for (const std::string& in : g.node(u).input())
        if (in[0] != '^' && !rename(in).empty() && rename(in)[0] != '_') visit(v.of(in));
      order.push_back(u);
    };
    for (const std::string& r : roots) {
      const std::string n = rename(r);
      if (!n.empty() && n[0] != '_') visit(v.of(r));
      names.push_back(n);
    }
    tensorflow::GraphDef out;
    for (int u : order) {
      NodeDef n = g.node(u);
      n.clear_input();
      for (const std::string& in : g.node(u).input())
        if (in[0] != '^') n.add_input(rename(in));
      *out.add_node() = std::move(n);
    }
    return std::make_pair(out, nodes);
  };
  std::vector<std::string> cond_out, body_outs, next_in;
  auto [cond_body, cond_nodes] = region({g.node(f.loop_cond).input(0)}, false, cond_out);
  for (int n : f.next) next_in.push_back(g.node(n).input(0));
  auto [body_body, body_nodes] = region(next_in, true, body_outs);
  if (!ok) return false;
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
  for (const std::string& c : controls) node.add_input(c);
  for (int e : f.enter) {
    auto t = g.node(e).attr().find("T");
    if (t == g.node(e).attr().end()) return false;
    attrs["Tout"].mutable_list()->add_type(t->second.type());
    attrs["Tin"].mutable_list()->add_type(t->second.type());
  }
  for (int e : f.invariant) {
    auto t = g.node(e).attr().find("T");
    if (t == g.node(e).attr().end()) return false;
    attrs["Tin"].mutable_list()->add_type(t->second.type());
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
int branch_of(const tensorflow::GraphDef& g, const View& v, const std::string& in, const std::string& pred,
              int depth = 0) {
  const int src = v.of(in);
  if (src < 0 || depth > 64) return -1;
  const NodeDef& n = g.node(src);
  if (n.op() == "Switch" && n.input_size() >= 2 && tensor_name(n.input(1)) == pred)
    return in[0] == '^' ? -1 : output_index(tensor_name(in));
  for (const std::string& i : n.input()) {
    const int b = branch_of(g, v, i, pred, depth + 1);
    if (b >= 0) return b;
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
