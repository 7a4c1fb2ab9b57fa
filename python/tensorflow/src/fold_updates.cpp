#include "fold_updates.h"

#include <set>
#include <string>
#include <unordered_map>

#include "nodes.h"

namespace tgraph_tf {

int fold_variable_updates(tensorflow::GraphDef& g) {
  std::unordered_map<std::string, int> index;
  std::set<std::string> names;
  for (int i = 0; i < g.node_size(); ++i) {
    index[g.node(i).name()] = i;
    names.insert(g.node(i).name());
  }
  auto unique = [&](const std::string& base) {
    std::string n = base;
    for (int k = 1; names.count(n); ++k) n = base + "_" + std::to_string(k);
    names.insert(n);
    return n;
  };
  int folded = 0;
  const int n = g.node_size();
  for (int i = 0; i < n; ++i) {
    tensorflow::NodeDef* u = g.mutable_node(i);
    const bool add = u->op() == "AssignAddVariableOp", sub = u->op() == "AssignSubVariableOp";
    if ((!add && !sub) || !on_tgraph(*u) || u->input_size() < 2) continue;
    auto dt = u->attr().find("dtype");
    if (dt == u->attr().end() ||
        (dt->second.type() != tensorflow::DT_FLOAT && dt->second.type() != tensorflow::DT_DOUBLE))
      continue;
    // The delta must come from a node the clusters take (same rule as cluster.cpp's).
    const std::string& delta = u->input(1);
    if (delta.empty() || delta[0] == '^') continue;
    auto p = index.find(node_of(delta));
    if (p == index.end()) continue;
    const tensorflow::NodeDef& d = g.node(p->second);
    if (!clusterable(d) || d.device() != u->device() || d.attr().at("T").type() != dt->second.type()) continue;
    const std::string resource = u->input(0);
    std::vector<std::string> controls;
    for (int k = 2; k < u->input_size(); ++k) controls.push_back(u->input(k));
    tensorflow::NodeDef read;
    read.set_name(unique(u->name() + "/tgraph_read"));
    read.set_op("ReadVariableOp");
    read.set_device(u->device());
    read.add_input(resource);
    for (const std::string& c : controls) read.add_input(c);
    (*read.mutable_attr())["dtype"] = dt->second;
    tensorflow::NodeDef math;
    math.set_name(unique(u->name() + "/tgraph_update"));
    math.set_op(add ? "AddV2" : "Sub");
    math.set_device(u->device());
    math.add_input(read.name());
    math.add_input(delta);
    (*math.mutable_attr())["T"] = dt->second;
    const tensorflow::AttrValue dtype = dt->second;
    u->set_op("AssignVariableOp");
    u->clear_input();
    u->add_input(resource);
    u->add_input(math.name());
    for (const std::string& c : controls) u->add_input(c);
    u->clear_attr();
    (*u->mutable_attr())["dtype"] = dtype;
    *g.add_node() = std::move(read);
    *g.add_node() = std::move(math);
    ++folded;
  }
  return folded;
}

}  // namespace tgraph_tf
