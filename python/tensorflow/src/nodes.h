// What the plugin's graph passes read of NodeDefs (graph.cpp, cluster.cpp, fold_updates.cpp):
// names of tensors and nodes, TensorFlow's op definitions and the dtypes they give a node's
// arguments, and which nodes tgraph takes.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op_def.pb.h"

namespace tgraph_tf {

/// "name:k" for an input reference "name" or "name:k" (a data edge; not "^name").
std::string tensor_name(const std::string& input);

/// The node an input reference names ("name", "name:k" or "^name").
std::string node_of(const std::string& input);

/// TensorFlow's definition of op `name`, or null when TensorFlow has none registered.
const tensorflow::OpDef* op_def(const std::string& name);

/// The dtypes of a node's data inputs (`inputs`) or outputs, flattened over list arguments;
/// empty when the op or an attribute it needs is unknown.
std::vector<tensorflow::DataType> arg_types(const tensorflow::NodeDef& n, bool inputs);

/// Placed on the TGRAPH device.
bool on_tgraph(const tensorflow::NodeDef& n);

/// A node the clusters take: on TGRAPH, an op with a converter, `T` a dtype the kernels are
/// registered for (f32, f64), and not among the nodes grappler says to preserve.
bool clusterable(const tensorflow::NodeDef& n, const std::set<std::string>& preserve = {});

}  // namespace tgraph_tf
