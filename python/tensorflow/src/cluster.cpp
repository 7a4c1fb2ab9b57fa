#include "cluster.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "convert.h"
#include "nodes.h"

namespace tgraph_tf {

namespace {

using tensorflow::DataType;
using tensorflow::NodeDef;

// A constant small enough to copy into a cluster's body (shapes, axes, scalars).
bool inlinable_const(const NodeDef& n) {
  if (n.op() != "Const") return false;
  for (const std::string& in : n.input())
    if (!in.empty() && in[0] == '^') return false;  // ordered after something (a branch's pivot)
  auto v = n.attr().find("value");
  auto t = n.attr().find("dtype");
  if (v == n.attr().end() || t == n.attr().end()) return false;
  const DataType dt = t->second.type();
  if (dt != tensorflow::DT_FLOAT && dt != tensorflow::DT_DOUBLE && dt != tensorflow::DT_INT32 &&
      dt != tensorflow::DT_INT64)
    return false;
  int64_t elems = 1;
  for (const auto& d : v->second.tensor().tensor_shape().dim()) elems *= d.size();
  return elems >= 0 && elems <= 4096;
}

// Groups of nodes merged along data edges, kept acyclic: the graph of groups (data and control
// edges; NextIteration's back edges left out, as a loop's frame is its own) is a DAG, and two
// groups join only when the edge between them is the only path from one to the other.
struct Groups {
  std::vector<int> parent;
  std::vector<std::set<int>> succ, pred;  // by group root

  explicit Groups(size_t n) : parent(n), succ(n), pred(n) {
    for (size_t i = 0; i < n; ++i) parent[i] = static_cast<int>(i);
  }
  int find(int x) {
    while (parent[static_cast<size_t>(x)] != x) x = parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  }
  void edge(int a, int b) {
    a = find(a), b = find(b);
    if (a == b) return;
    succ[static_cast<size_t>(a)].insert(b);
    pred[static_cast<size_t>(b)].insert(a);
  }
  // Whether b is reachable from a other than by the edge a -> b.
  bool other_path(int a, int b) {
    std::vector<int> stack;
    std::set<int> seen;
    for (int s : succ[static_cast<size_t>(a)])
      if (s != b) stack.push_back(s);
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      if (x == b) return true;
      if (!seen.insert(x).second) continue;
      for (int s : succ[static_cast<size_t>(x)]) stack.push_back(s);
    }
    return false;
  }
  void merge(int a, int b) {  // b into a
    a = find(a), b = find(b);
    if (a == b) return;
    parent[static_cast<size_t>(b)] = a;
    for (int s : succ[static_cast<size_t>(b)]) {
      pred[static_cast<size_t>(s)].erase(b);
      if (s != a) pred[static_cast<size_t>(s)].insert(a), succ[static_cast<size_t>(a)].insert(s);
    }
    for (int p : pred[static_cast<size_t>(b)]) {
      succ[static_cast<size_t>(p)].erase(b);
      if (p != a) succ[static_cast<size_t>(p)].insert(a), pred[static_cast<size_t>(a)].insert(p);
    }
    succ[static_cast<size_t>(a)].erase(b);
    pred[static_cast<size_t>(a)].erase(b);
    succ[static_cast<size_t>(b)].clear();
    pred[static_cast<size_t>(b)].clear();
  }
};

// Nodes in an order where each comes after its inputs (back edges of loops left out); empty
// when the graph has a cycle otherwise.
std::vector<int> topological(const tensorflow::GraphDef& g, const std::unordered_map<std::string, int>& index) {
  const int n = g.node_size();
  std::vector<int> indegree(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    for (const std::string& in : g.node(i).input()) {
      auto it = index.find(node_of(in));
      if (it == index.end() || g.node(it->second).op() == "NextIteration") continue;
      out[static_cast<size_t>(it->second)].push_back(i);
      ++indegree[static_cast<size_t>(i)];
    }
  std::vector<int> order;
  for (int i = 0; i < n; ++i)
    if (indegree[static_cast<size_t>(i)] == 0) order.push_back(i);
  for (size_t k = 0; k < order.size(); ++k)
    for (int j : out[static_cast<size_t>(order[k])])
      if (--indegree[static_cast<size_t>(j)] == 0) order.push_back(j);
  if (static_cast<int>(order.size()) != n) order.clear();
  return order;
}

}  // namespace

int form_clusters(tensorflow::GraphDef& g, const std::set<std::string>& preserve) {
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < g.node_size(); ++i) index[g.node(i).name()] = i;
  const std::vector<int> order = topological(g, index);
  if (order.empty()) return 0;
  const int n = g.node_size();
  std::vector<char> take(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) take[static_cast<size_t>(i)] = clusterable(g.node(i), preserve);

  Groups groups(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    for (const std::string& in : g.node(i).input()) {
      auto it = index.find(node_of(in));
      if (it != index.end() && g.node(it->second).op() != "NextIteration") groups.edge(it->second, i);
    }
  for (int v : order) {
    if (!take[static_cast<size_t>(v)]) continue;
    const NodeDef& nv = g.node(v);
    const std::vector<int>& values = value_inputs(nv.op());
    for (int k = 0; k < nv.input_size(); ++k) {
      const std::string& in = nv.input(k);
      if (in[0] == '^' || std::find(values.begin(), values.end(), k) != values.end()) continue;
      auto it = index.find(node_of(in));
      if (it == index.end() || !take[static_cast<size_t>(it->second)]) continue;
      const int u = it->second;
      if (g.node(u).device() != nv.device()) continue;
      const int a = groups.find(u), b = groups.find(v);
      if (a != b && !groups.other_path(a, b)) groups.merge(a, b);
    }
  }

  // Members of each group of two or more, in topological order.
  std::map<int, std::vector<int>> members;
  for (int v : order)
    if (take[static_cast<size_t>(v)]) members[groups.find(v)].push_back(v);
  std::vector<int> group_of(static_cast<size_t>(n), -1);
  int made = 0;
  std::vector<std::vector<int>> clusters;
  for (auto& [root, m] : members) {
    if (m.size() < 2) continue;
    for (int v : m) group_of[static_cast<size_t>(v)] = static_cast<int>(clusters.size());
    clusters.push_back(m);
  }
  if (clusters.empty()) return 0;

  // Who reads each tensor and node (data and control), to find a group's outputs.
  std::vector<NodeDef> added;
  std::map<std::string, std::string> renamed;  // "member:k" -> "cluster:j"
  std::map<std::string, std::string> control_renamed;  // member -> cluster
  std::set<std::string> used_names;
  for (int i = 0; i < n; ++i) used_names.insert(g.node(i).name());
  std::vector<std::set<std::string>> tensor_readers_outside(static_cast<size_t>(clusters.size()));
  for (int i = 0; i < n; ++i) {
    for (const std::string& in : g.node(i).input()) {
      if (in[0] == '^') continue;
      auto it = index.find(node_of(in));
      if (it == index.end()) continue;
      const int c = group_of[static_cast<size_t>(it->second)];
      if (c >= 0 && group_of[static_cast<size_t>(i)] != c) tensor_readers_outside[static_cast<size_t>(c)].insert(tensor_name(in));
    }
  }
  for (size_t c = 0; c < clusters.size(); ++c) {
    const std::vector<int>& m = clusters[c];
    std::set<int> in_group(m.begin(), m.end());
    std::string name;
    for (int k = made;; ++k)
      if (!used_names.count(name = "tgraph_cluster_" + std::to_string(k))) break;
    used_names.insert(name);
    NodeDef cl;
    cl.set_name(name);
    cl.set_op(kClusterOp);
    cl.set_device(g.node(m[0]).device());
    tensorflow::GraphDef body;
    std::vector<std::string> args;
    std::vector<int> value_args;
    std::vector<DataType> tin, tout;
    std::set<std::string> inlined, controls;
    auto arg_of = [&](const std::string& t, DataType dt, bool value) {
      auto at = std::find(args.begin(), args.end(), t);
      if (at == args.end()) {
        args.push_back(t);
        tin.push_back(dt);
        at = args.end() - 1;
      }
      const int a = static_cast<int>(at - args.begin());
      if (value && std::find(value_args.begin(), value_args.end(), a) == value_args.end()) value_args.push_back(a);
    };
    for (int v : m) {
      const NodeDef& nv = g.node(v);
      const std::vector<DataType> types = arg_types(nv, true);
      const std::vector<int>& values = value_inputs(nv.op());
      int data = 0;
      for (int k = 0; k < nv.input_size(); ++k) {
        const std::string& in = nv.input(k);
        auto it = index.find(node_of(in));
        if (in[0] == '^') {
          if (it == index.end() || !in_group.count(it->second)) controls.insert(in);
          continue;
        }
        const int slot = data++;
        if (it != index.end() && in_group.count(it->second)) continue;
        if (it != index.end() && inlinable_const(g.node(it->second))) {
          if (inlined.insert(g.node(it->second).name()).second) *body.add_node() = g.node(it->second);
          continue;
        }
        if (static_cast<size_t>(slot) >= types.size()) return 0;  // an op whose types cannot be read: no clusters
        arg_of(tensor_name(in), types[static_cast<size_t>(slot)],
               std::find(values.begin(), values.end(), slot) != values.end());
      }
    }
    for (int v : m) {
      NodeDef member = g.node(v);
      // Control inputs stay on the cluster node; the body orders by data alone.
      auto* ins = member.mutable_input();
      ins->erase(std::remove_if(ins->begin(), ins->end(), [](const std::string& s) { return s[0] == '^'; }), ins->end());
      *body.add_node() = member;
    }
    std::vector<std::string> outs;
    for (int v : m) {
      const NodeDef& nv = g.node(v);
      const std::vector<DataType> types = arg_types(nv, false);
      for (size_t k = 0; k < types.size(); ++k) {
        const std::string t = nv.name() + ":" + std::to_string(k);
        if (!tensor_readers_outside[c].count(t)) continue;
        renamed[t] = name + ":" + std::to_string(outs.size());
        outs.push_back(t);
        tout.push_back(types[k]);
      }
      control_renamed[nv.name()] = name;
    }
    for (const std::string& a : args) cl.add_input(a);
    for (const std::string& ctl : controls) cl.add_input(ctl);
    auto& attrs = *cl.mutable_attr();
    for (DataType t : tin) attrs["Tin"].mutable_list()->add_type(t);
    for (DataType t : tout) attrs["Tout"].mutable_list()->add_type(t);
    attrs["Tin"].mutable_list();
    attrs["Tout"].mutable_list();
    std::string bytes;
    body.SerializeToString(&bytes);
    attrs["body"].set_s(bytes);
    for (const std::string& a : args) attrs["inputs"].mutable_list()->add_s(a);
    for (const std::string& o : outs) attrs["outputs"].mutable_list()->add_s(o);
    for (int a : value_args) attrs["value_args"].mutable_list()->add_i(a);
    attrs["inputs"].mutable_list();
    attrs["outputs"].mutable_list();
    attrs["value_args"].mutable_list();
    added.push_back(std::move(cl));
    ++made;
  }

  // The rest of the graph, and the clusters themselves, read the clusters instead of their
  // members.
  auto rename = [&](NodeDef& node) {
    std::set<std::string> seen_controls;
    auto* ins = node.mutable_input();
    for (std::string& in : *ins) {
      if (in[0] == '^') {
        auto r = control_renamed.find(in.substr(1));
        if (r != control_renamed.end()) in = "^" + r->second;
      } else {
        auto r = renamed.find(tensor_name(in));
        if (r != renamed.end()) in = r->second;
      }
    }
    // A control edge named twice (two members of one cluster) once.
    ins->erase(std::remove_if(ins->begin(), ins->end(),
                              [&](const std::string& s) {
                                return s[0] == '^' && (s.substr(1) == node.name() || !seen_controls.insert(s).second);
                              }),
               ins->end());
  };
  tensorflow::GraphDef out = g;  // library, versions and the rest as they were
  out.clear_node();
  for (int i = 0; i < n; ++i) {
    if (group_of[static_cast<size_t>(i)] >= 0) continue;
    NodeDef node = g.node(i);
    rename(node);
    *out.add_node() = std::move(node);
  }
  for (NodeDef& cl : added) {
    rename(cl);
    *out.add_node() = std::move(cl);
  }
  g = std::move(out);
  return made;
}

}  // namespace tgraph_tf
