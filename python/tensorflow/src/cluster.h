// Clusters: the graph optimizer's one pass (graph.cpp calls it). Each connected group of
// TGRAPH nodes whose ops tgraph converts becomes one TgraphCluster node, which the plugin's
// kernel compiles into one tgraph executable (kernels.cpp): one compile and one run per step
// for the group, fused by tgraph, instead of one executable per op with a copy between each.
#pragma once

#include <set>
#include <string>

#include "tensorflow/core/framework/graph.pb.h"

namespace tgraph_tf {

/// The op a cluster becomes, and its attributes (registered in kernels.cpp).
inline constexpr const char* kClusterOp = "TgraphCluster";

/// Replaces every group of two or more clusterable nodes (on TGRAPH, an op with a converter, a
/// dtype the kernels take, not in `preserve`) connected by data edges by one TgraphCluster
/// node, never making a cycle: two nodes join only if no path between them leaves the group.
/// Small integer and float constants the group reads are copied into its body. Values the
/// group reads become its inputs (in attribute `inputs`, with `value_args` naming those read
/// as shapes or axes), values read outside it its outputs; control edges into and out of any
/// member go to the cluster. Returns the number of clusters made (0: `g` unchanged).
int form_clusters(tensorflow::GraphDef& g, const std::set<std::string>& preserve);

}  // namespace tgraph_tf
