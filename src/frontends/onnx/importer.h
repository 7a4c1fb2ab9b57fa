#pragma once
// Internals of the ONNX importer: the per-node conversion context and the converter table.
#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tgraph/error.h"
#include "tgraph/graph.h"
#include "tgraph/onnx.h"
#include "tgraph/tensor_data.h"

namespace tg::onnx_import {

/// One element of a shape-like integer vector that depends on dynamic input dims (what Shape
/// of a tensor with symbolic dims gives, and what Gather / Concat / Unsqueeze / arithmetic make
/// of it): a number, dim `dim` of tensor `source` (known at run time), or unknown (a product of
/// dims, say). Reshape, Expand, ConstantOfShape, Range and Slice take such vectors as their
/// shape operands (sym_shape.cpp): how a model exported with dynamic axes imports once.
struct SymDim {
  enum class Kind { known, dim, unknown };
  Kind kind = Kind::unknown;
  int64_t value = 0;
  Tensor source;
  int64_t dim = 0;
  static SymDim number(int64_t v) { return {Kind::known, v, Tensor(), 0}; }
  bool same(const SymDim& o) const;  // provably equal (the same number, or the same dim)
};

/// A value that is DequantizeLinear of an FP8 (E4M3FN / E5M2) tensor by one scale, zero point
/// zero: its 8-bit operand (held widened, exact) and f32 scale, so MatMul can run as tgraph's
/// scaled_matmul (FP8 tensor cores on CUDA) instead of on the dequantized values.
struct Fp8Dequantized {
  Tensor q;       // the FP8 values, held widened
  DType format;   // f8e4m3 or f8e5m2
  Tensor scale;   // f32, one element
};

/// An ONNX value: its tensor, and its value when known at import time. Sequences and optionals
/// have no tensor of their own: the importer holds their elements, which it knows while importing
/// (sequences of a static length, optionals known to be empty or not).
struct Value {
  enum class Kind { tensor, sequence, optional };
  Tensor t;
  std::optional<TensorData> constant;  // known value (initializer, Constant, folded)
  bool const_derived = false;          // computed from constants only: foldable on demand
  int32_t onnx_type = 0;               // a narrow format t holds widened (kFloat8E4M3FN...), else 0
  int32_t unsigned_type = 0;           // kUint16 / kUint32 / kUint64 when t holds one widened, else 0
  Kind kind = Kind::tensor;
  std::vector<Value> elems = {};  // a sequence's elements; an optional's value (none when empty)
  std::optional<std::vector<SymDim>> sym = {};  // its elements, followed symbolically (SymDim)
  std::optional<Fp8Dequantized> fp8 = {};       // DequantizeLinear of FP8 by one scale
};

/// "tensor", "sequence" or "optional".
const char* kind_name(Value::Kind k);

/// The unsigned ONNX types tgraph holds in a wider signed dtype (u16 in i32, u32 and u64 in i64).
constexpr int32_t kUint16 = 4, kUint32 = 12, kUint64 = 13;
/// onnx_type when it is one of the widened unsigned types, else 0.
inline int32_t unsigned_type(int32_t onnx_type) {
  return onnx_type == kUint16 || onnx_type == kUint32 || onnx_type == kUint64 ? onnx_type : 0;
}

/// The ONNX element types of the narrow formats (TensorProto::DataType, opsets 19-25).
constexpr int32_t kFloat8E4M3FN = 17, kFloat8E4M3FNUZ = 18, kFloat8E5M2 = 19, kFloat8E5M2FNUZ = 20, kUint4 = 21,
                  kInt4 = 22, kFloat4E2M1 = 23, kFloat8E8M0 = 24, kUint2 = 25, kInt2 = 26;
/// ONNX element type -> tgraph dtype; throws for types tgraph lacks. The narrow formats map to
/// the dtype that holds their values exactly (f32, i8, u8).
DType dtype_from_onnx(int32_t onnx_type);
/// The value of the narrow-format code `bits` (one element's bits, low-aligned).
double decode_narrow(int32_t onnx_type, uint32_t bits);
/// onnx_type when it is one of the narrow formats, else 0.
int32_t narrow_type(int32_t onnx_type);
/// TensorProto -> TensorData; `base_dir` resolves external data.
TensorData tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir);

/// What the whole import shares: opsets per domain, where external data lives, the inputs
/// whose values are known at import time.
struct Env {
  std::map<std::string, int64_t> opsets;
  std::string base_dir;
  std::vector<std::pair<Tensor, TensorData>> known_feeds;
};

/// Converts the nodes of a graph (or a subgraph) into g, reading and writing `values`.
void convert_nodes(Graph& g, const onnx::GraphProto& gp, std::map<std::string, Value>& values, const Env& env,
                   std::map<std::string, int64_t>* histogram);

/// What a converter sees: one node, its inputs and attributes, and where its outputs go.
class Ctx {
 public:
  Ctx(Graph& g, const onnx::NodeProto& node, int64_t opset, std::map<std::string, Value>& values, const Env& env)
      : g(g), node(node), opset(opset), values_(values), env_(env) {}

  Graph& g;
  const onnx::NodeProto& node;
  int64_t opset;

  /// Throws "[onnx] node 'name' (Op, opset N): msg".
  [[noreturn]] void fail(const std::string& msg) const;
  std::string where() const;

  int num_inputs() const { return node.input_size(); }
  bool has_input(int i) const { return i >= 0 && i < node.input_size() && !node.input(i).empty(); }
  Tensor in(int i) const;
  /// The input's value, which must be known at import time.
  TensorData const_in(int i) const;
  std::vector<int64_t> ints_in(int i) const;
  bool is_const(int i) const;
  /// Input i is not known at import time but is computed from tensors' sizes alone (Shape,
  /// constants and arithmetic): a size a sized_op takes (Graph::*_sized), known per size.
  bool sized_in(int i) const;
  /// Input i's elements as SymDims: followed symbolically, or a small known integer input's
  /// numbers; nullopt when neither (sym_shape.cpp).
  std::optional<std::vector<SymDim>> sym_in(int i) const;
  /// Output i's elements, followed symbolically.
  void set_sym(int i, std::vector<SymDim> s);
  /// The value record output i has been given.
  Value value_out(int i) const { return values_.at(node.output(i)); }

  bool has_attr(const std::string& name) const { return find(name) != nullptr; }
  int64_t attr_i(const std::string& name, int64_t def) const;
  float attr_f(const std::string& name, float def) const;
  std::string attr_s(const std::string& name, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> def = {}) const;
  std::vector<float> attr_floats(const std::string& name) const;
  std::optional<TensorData> attr_t(const std::string& name) const;
  /// A graph attribute (If / Loop / Scan bodies); fails when missing.
  const onnx::GraphProto& attr_g(const std::string& name) const;
  /// Converts a subgraph inline: binds its inputs to `inputs` (outer values stay visible) and
  /// returns its outputs.
  std::vector<Value> inline_subgraph(const onnx::GraphProto& body, const std::vector<Value>& inputs) const;
  /// The value record of input i (for passing to subgraphs); any kind.
  Value value_in(int i) const;
  /// Input i, which must be a sequence (its elements).
  std::vector<Value> seq_in(int i) const;

  int num_outputs() const { return node.output_size(); }
  bool wants_output(int i) const { return i >= 0 && i < node.output_size() && !node.output(i).empty(); }
  void out(int i, Tensor t);
  /// Output i holds a narrow format (kFloat8E4M3FN...) widened, 0 for none.
  void set_onnx_type(int i, int32_t narrow);
  /// The narrow format input i holds widened, 0 for none.
  int32_t onnx_type_in(int i) const { return has_input(i) ? value_in(i).onnx_type : 0; }
  /// Input i's widened unsigned ONNX type (kUint16...), 0 for none.
  int32_t unsigned_in(int i) const { return has_input(i) ? value_in(i).unsigned_type : 0; }
  /// Output i is the FP8 dequantization d (MatMul reads it).
  void set_fp8_dequantized(int i, const Fp8Dequantized& d);
  /// Output i holds the unsigned ONNX type u (kUint16...) widened, 0 for none.
  void set_unsigned(int i, int32_t u);
  /// Output i is input k (same value record, constness included).
  void alias(int i, int k);
  /// Output i is the value record v (a subgraph's output, constness included).
  void out_value(int i, const Value& v);
  /// An output whose value is known now.
  void out_const(int i, const TensorData& v);

 private:
  const onnx::AttributeProto* find(const std::string& name) const;
  std::map<std::string, Value>& values_;
  const Env& env_;
};

/// After a node converted: follows its integer outputs symbolically where its inputs are
/// (Shape of dynamic dims, Gather, Concat, Unsqueeze, arithmetic ...; sym_shape.cpp).
void follow_sym(Ctx& c);
/// A shape operand as a reshape / broadcast_to target: numbers, dim_from_source codes into
/// `sources`, -1 for unknown elements; nullopt when input i cannot be followed.
struct SymTarget {
  std::vector<int64_t> codes;
  std::vector<Tensor> sources;
  int unknown = 0;  // elements given -1
};
std::optional<SymTarget> sym_target(const Ctx& c, int i);

/// The newest opset of the ai.onnx.ml domain the converters know (ONNX 1.22).
constexpr int kNewestMlOpset = 5;

/// The newest opset of the default domain the converters know (ONNX 1.22). Opsets 22 to 27
/// changed the ops tgraph converts only in their type constraints, but for the attributes the
/// converters read: DequantizeLinear's output_dtype and QuantizeLinear's precision (23),
/// Cast's round_mode (24, for FLOAT8E8M0 only), Range's stash_type (27); pooling's ceil_mode
/// windows that start in the padding after are dropped (22), as the converters already did.
/// Checked against the schemas' history in the onnx package (docs/onnx.md).
constexpr int kNewestOpset = 27;

using ConvertFn = void (*)(Ctx&);
/// One row of the converter table: op type, opset range [since, until], the function.
struct Converter {
  const char* op;
  int since;
  int until;
  ConvertFn fn;
  const char* domain = "";  // "" for ai.onnx (and the training preview); "ai.onnx.ml"
};

/// Converts a parsed model.
OnnxModel import_model(const onnx::ModelProto& m, const OnnxImportOptions& opt,
                       const std::string& base_dir);

/// The converter tables of each family (converters_*.cpp).
const std::vector<Converter>& elementwise_converters();
const std::vector<Converter>& nn_converters();
const std::vector<Converter>& shape_converters();
const std::vector<Converter>& reduce_converters();
const std::vector<Converter>& misc_converters();
const std::vector<Converter>& control_converters();
const std::vector<Converter>& signal_converters();
const std::vector<Converter>& sampling_converters();
const std::vector<Converter>& rnn_converters();
const std::vector<Converter>& quant_converters();
const std::vector<Converter>& llm_converters();
const std::vector<Converter>& state_converters();
const std::vector<Converter>& image_converters();
const std::vector<Converter>& dynamic_converters();
const std::vector<Converter>& sequence_converters();
const std::vector<Converter>& ml_converters();
/// The converter for op of domain ("" or "ai.onnx.ml") at opset, or nullptr.
const Converter* find_converter(const std::string& op, int64_t opset, const std::string& domain = "");
/// True when op has a converter for some opset.
bool knows_op(const std::string& op);

// Helpers shared by converters.
/// Normalises a possibly negative axis against rank.
int64_t norm_axis(const Ctx& c, int64_t axis, int64_t rank);
/// Fails unless lo <= rank(x) <= hi.
void require_rank(const Ctx& c, Tensor x, int64_t lo, int64_t hi, const char* what);
/// Fails when a tensor the importer would build holds more than 2^28 elements.
void require_size(const Ctx& c, double elements, const char* what);
/// x's dims, which must be static.
std::vector<int64_t> static_dims(const Ctx& c, Tensor x, const char* what);
/// The convolution of x and w with the node's Conv attributes (no bias), NCHW / OIHW.
Tensor conv_core(Ctx& c, Tensor x, Tensor w);
/// y + b with b along dim 1 (NCHW bias).
Tensor bias_nchw(Graph& g, Tensor y, Tensor b);
/// A constant of x's dtype.
Tensor scalar_like(Graph& g, double v, Tensor x);
/// x rounded to the narrow float format n (kFloat8E4M3FN...), as f32 (converters_elementwise.cpp).
Tensor round_to_float_format(Ctx& c, Tensor x, int32_t n, bool saturate);

}  // namespace tg::onnx_import
