// TensorFlow NodeDef -> tgraph ops: one converter per TensorFlow op, keyed by the op's name (the
// counterpart of src/frontends/onnx/ for GraphDefs). Used by the per-op kernels now, and by the
// cluster kernel once the graph optimizer forms clusters (docs/tensorflow-plugin.md).
#pragma once

#include <string>
#include <vector>

#include "tensorflow/core/framework/node_def.pb.h"
#include "tgraph/graph.h"

namespace tgraph_tf {

/// The ops with a converter, and the dtype attribute their kernel is registered on ("T").
const std::vector<std::string>& converted_ops();

/// The values node `n` computes from `in` (its data inputs, in order), built on `g`. Throws
/// tg::Error naming the node and its op where the converter refuses its attributes.
std::vector<tg::Tensor> convert_node(tg::Graph& g, const tensorflow::NodeDef& n, const std::vector<tg::Tensor>& in);

}  // namespace tgraph_tf
