#include "functionalize.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "nodes.h"

namespace tgraph_tf {

using tensorflow::DataType;
using tensorflow::NodeDef;

std::string if_arg(size_t k) { return "_if_arg:" + std::to_string(k); }

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
  return n.op() == "Const" || n.op() == "Identity" || n.op() == kIfOp || clusterable(n, preserve);
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
  tensorflow::GraphDef out = g;
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
  *out.add_node() = std::move(node);
  g = std::move(out);
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

}  // namespace

int functionalize_conds(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  int made = 0;
  while (made < 10000 && rebuild_one(g, preserve)) ++made;
  return made;
}

}  // namespace tgraph_tf
