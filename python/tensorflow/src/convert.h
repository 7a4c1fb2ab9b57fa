// TensorFlow NodeDef -> tgraph ops: one converter per TensorFlow op, keyed by the op's name (the
// counterpart of src/frontends/onnx/ for GraphDefs). Used by the per-op kernels now, and by the
// cluster kernel once the graph optimizer forms clusters (docs/tensorflow-plugin.md).
#pragma once

#include <string>
#include <vector>

#include "tensorflow/core/framework/node_def.pb.h"
#include "tgraph/graph.h"

namespace tgraph_tf {

/// The ops with a converter; their kernels are registered on the dtype attribute "T".
const std::vector<std::string>& converted_ops();

/// Whether op `op` has a converter.
bool has_converter(const std::string& op);

/// The inputs of `op` read as values when the graph is built (shapes, axes: int32 / int64
/// tensors TensorFlow keeps in host memory), by input index; the others are tensors.
const std::vector<int>& value_inputs(const std::string& op);

/// One input of a node: a tensor of the graph, or (a value input) its integer values.
struct Input {
  tg::Tensor t;
  std::vector<int64_t> values;
  bool known = false;  // `values` hold the input's integers (a constant's, or a value argument's)
};

/// The values node `n` computes from `in` (its inputs, in order), built on `g`. Throws
/// tg::Error naming the node and its op where the converter refuses its attributes.
std::vector<tg::Tensor> convert_node(tg::Graph& g, const tensorflow::NodeDef& n, const std::vector<Input>& in);

}  // namespace tgraph_tf
