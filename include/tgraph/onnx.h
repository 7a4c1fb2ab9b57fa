#pragma once
// The ONNX frontend: ModelProto -> Graph. Available when tgraph is built with ONNX
// (TGRAPH_HAVE_ONNX); see docs/onnx.md for the supported ops and opsets.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tgraph/graph.h"
#include "tgraph/tensor_data.h"

namespace tg {

/// What a graph input or output of sequence or optional type holds. Such a value crosses the
/// API as the tensors it holds, one feed (or output) each, in order: a sequence's elements are
/// named NAME[0], NAME[1]...; an optional's value is named NAME; an empty optional has none.
struct OnnxValueForm {
  enum class Kind { tensor, sequence, optional };
  Kind kind = Kind::tensor;
  /// A sequence's elements; an optional's value (none when the optional is empty).
  std::vector<OnnxValueForm> elements;
  /// How many tensors the value holds.
  size_t num_tensors() const;
  /// "tensor", "sequence of 3", "optional tensor", "empty optional"...
  std::string str() const;
  bool operator==(const OnnxValueForm&) const = default;
};

/// Options of import_onnx.
struct OnnxImportOptions {
  /// Replaces the declared shape of a graph input (e.g. to fix symbolic dims to known sizes).
  std::map<std::string, Shape> input_shapes;
  /// The same by position among the inputs that are not initializers (applied first).
  std::vector<Shape> input_shapes_in_order;
  /// Values of inputs (by position) known at import time: shape-like operands (Reshape's shape,
  /// Slice's starts, ...) are read from them; the inputs stay feeds of the graph.
  std::vector<TensorData> input_values_in_order;
  /// What each sequence or optional graph input holds (by name); required for those inputs.
  /// The positions of input_shapes_in_order and input_values_in_order count their tensors.
  std::map<std::string, OnnxValueForm> input_forms;
};

/// An imported ONNX model: the graph, its feeds and its outputs, in the model's order.
struct OnnxModel {
  Graph graph;
  /// Graph inputs that are not initializers, with their placeholders and declared types.
  std::vector<std::string> input_names;
  std::vector<Tensor> inputs;
  std::vector<TensorType> input_types;
  std::vector<std::string> output_names;
  std::vector<Tensor> outputs;
  /// The graph's declared inputs (not initializers) and outputs and what each holds; a
  /// sequence or optional is several (or no) entries of inputs / outputs (OnnxValueForm).
  std::vector<std::pair<std::string, OnnxValueForm>> input_forms, output_forms;
  /// Opset of the default (ai.onnx) domain.
  int64_t opset = 0;
  std::string producer;
  /// Number of nodes per op type (top-level graph).
  std::map<std::string, int64_t> op_histogram;

  /// Compiles the model for a device; dynamic input dims stay dynamic.
  Executable compile(const CompileOptions& options = {}) const;
};

/// What a model declares, read without converting it (works for models the importer rejects).
struct OnnxModelInfo {
  int64_t ir_version = 0;
  int64_t opset = 0;
  std::string producer;
  /// Opset per domain ("" is ai.onnx).
  std::map<std::string, int64_t> opsets;
  /// Graph inputs that are not initializers and outputs: names and type strings ("[N,3] f32").
  std::vector<std::pair<std::string, std::string>> inputs, outputs;
  /// The inputs' types (symbolic dims -1; f32 where the element type is not supported).
  std::vector<TensorType> input_types;
  int64_t num_initializers = 0;
  int64_t initializer_bytes = 0;
  /// Nodes per op type, subgraphs (If / Loop / Scan bodies) included.
  std::map<std::string, int64_t> op_histogram;
};

/// Reads a model's declaration; throws tg::Error when the file is not an ONNX model.
OnnxModelInfo inspect_onnx(const std::string& path);

/// Imports an ONNX model file; throws tg::Error naming the node, op type and opset of an op it
/// cannot import, or saying why the file cannot be read.
OnnxModel import_onnx(const std::string& path, const OnnxImportOptions& options = {});
/// Imports a serialized ModelProto; `base_dir` resolves external data files.
OnnxModel import_onnx_bytes(const std::string& bytes, const OnnxImportOptions& options = {},
                            const std::string& base_dir = ".");
/// Reads a serialized TensorProto file (the .pb files of ONNX's test data).
TensorData read_onnx_tensor(const std::string& path, std::string* name = nullptr);
/// Reads a serialized TensorProto, SequenceProto or OptionalProto file (`kind` says which),
/// appending the tensors it holds to `tensors`; returns its form.
OnnxValueForm read_onnx_value(const std::string& path, OnnxValueForm::Kind kind,
                              std::vector<TensorData>& tensors);
/// Highest opset of the default domain the importer knows.
int64_t onnx_max_opset();

}  // namespace tg
