#pragma once
// Graph storage: nodes, values and blocks in flat arrays indexed by id. Block 0 is the top
// level; every region of a control-flow node is a block whose params are the region's
// arguments and whose results are what it returns. A node may read values of enclosing blocks.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/attr.h"
#include "ops/op_def.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

struct VariableStore;

struct Node {
  OpKind kind;
  int32_t block = 0;
  std::vector<int32_t> inputs;        // value ids
  std::vector<int32_t> outputs;       // value ids
  std::vector<int32_t> control_deps;  // node ids that must run before this one
  std::vector<int32_t> regions;       // block ids (control flow)
  Attr attr;
  TensorData data;  // constant value, or a variable's initial value
  std::string name;
};

struct Value {
  TensorType type;
  int32_t node = -1;  // producer; -1 for a block parameter
  int32_t index = 0;  // output index, or parameter index
  int32_t block = 0;  // block the value is defined in
  std::string name;
};

struct Block {
  std::vector<int32_t> nodes;  // in creation (topological) order
  std::vector<int32_t> params;
  std::vector<int32_t> results;
  int32_t parent_node = -1;  // the control-flow node owning this region
  int32_t parent_block = -1;
};

struct GraphImpl {
  std::vector<Node> nodes;
  std::vector<Value> values;
  std::vector<Block> blocks{Block{}};
  std::unordered_map<std::string, int32_t> variables;  // variable name -> node id
  /// Current variable values, shared by every executable compiled from this graph.
  std::shared_ptr<VariableStore> variable_store;
  /// Nodes made inside an open control_dependency scope get these extra deps.
  std::vector<std::vector<int32_t>> control_scopes;
  /// Compiled with Precision::tf32: f32 matmul and convolution may use TF32 tensor cores.
  bool allow_tf32 = false;

  const OpDef& def(int32_t node) const { return op_def(nodes[node].kind); }
  const TensorType& type(int32_t value) const { return values[value].type; }
  /// The node that produces `value`, or null for a block parameter. The pointer is into
  /// `nodes`: adding a node may invalidate it.
  const Node* producer(int32_t value) const {
    const int32_t id = values[static_cast<size_t>(value)].node;
    return id < 0 ? nullptr : &nodes[static_cast<size_t>(id)];
  }
  /// True when block `inner` is `outer` or nested inside it.
  bool block_within(int32_t inner, int32_t outer) const;
  /// Runs inference and appends a node to `block`; throws tg::Error on a type error.
  int32_t add_node(int32_t block, OpKind kind, std::vector<int32_t> inputs, Attr attr,
                   std::vector<TensorType> declared = {}, std::vector<int32_t> regions = {});
  /// Adds a parameter to a block.
  int32_t add_param(int32_t block, TensorType type);
  /// Creates an empty block nested in `parent_block`.
  int32_t add_block(int32_t parent_block);
  /// The name used in printed output: the value's name or "%<id>".
  std::string value_name(int32_t v) const;
  /// Runs the op's inference rule on the node as it stands.
  InferResult infer(const Node& n) const;
  /// Runs the node's inference rule on other (e.g. concrete run-time) input types.
  InferResult infer_with(const Node& n, const std::vector<TensorType>& inputs) const;
  /// infer_with's types, or tg::Error naming the op: the output types of a node at run time.
  std::vector<TensorType> output_types_for(const Node& n, const std::vector<TensorType>& inputs) const;
};

/// The result types of each region of a node.
std::vector<std::vector<TensorType>> region_result_types(const GraphImpl& g, const Node& n);

}  // namespace tg::detail
