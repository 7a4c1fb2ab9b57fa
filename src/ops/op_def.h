#pragma once
// OpKind (from op_list.h), op families, traits, and the registry of OpDefs.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/attr.h"
#include "tgraph/shape.h"

namespace tg::detail {

enum class OpKind : uint16_t {
#define X(e, name, family, desc) e,
#include "ops/op_list.h"
#undef X
  kCount
};
inline constexpr int kNumOps = static_cast<int>(OpKind::kCount);

/// Groups of ops that share an inference rule and traits.
enum class Family : uint8_t {
  source, variable, read_variable, assign, unary, unary_float, unary_logical, unary_bitwise,
  unary_predicate, cast, bitcast, binary, binary_float, compare, binary_logical, binary_bitwise,
  select, clamp, reduce, reduce_float, reduce_logical, arg_reduce, cumulative, top_k, sort,
  matmul, scaled_matmul, band_part, conv, conv_grad, pool, pool_grad, norm, softmax, loss, attention, reshape,
  transpose, broadcast_to, broadcast_like, sum_to_like, expand_dims, squeeze, concat, split, strided_slice, slice_update, pad,
  tile, reverse, shape_of, arange, one_hot, space_depth, resize, sized, random_state, random, dropout,
  gather, scatter, non_zero, stencil, if_else, for_loop, while_loop, collective
};

/// Properties passes ask for instead of keeping lists of ops.
enum Trait : uint32_t {
  kElementwise = 1u << 0,    // out[i] depends on in[i] only (after explicit broadcasting)
  kReduction = 1u << 1,      // reduces axes
  kShapeOnly = 1u << 2,      // moves data without arithmetic
  kStateful = 1u << 3,       // reads or writes state (variables, random state counters)
  kSideEffects = 1u << 4,    // must run even if no tensor output is used
  kHasRegions = 1u << 7,     // control flow
  kSource = 1u << 8,         // no inputs: placeholder, constant, variable
  kCommutative = 1u << 9,    // f(a, b) == f(b, a) bit for bit (CSE merges either order)
  kView = 1u << 10,          // the operand's bytes under a new shape or dtype (backends alias them)
};

/// What an inference rule sees.
struct InferContext {
  OpKind kind;
  const std::vector<TensorType>& inputs;
  const Attr& attr;
  /// Result types of each region (control flow only).
  const std::vector<std::vector<TensorType>>* region_results = nullptr;
  /// The type stored on the node for sources (placeholder, constant, variable).
  const std::vector<TensorType>* declared = nullptr;
};

/// Inferred output types or an error message ("[op] ...").
struct InferResult {
  std::vector<TensorType> types;
  std::string error;
  bool ok() const { return error.empty(); }
  static InferResult fail(std::string msg) { return {{}, std::move(msg)}; }
};
using InferFn = InferResult (*)(const InferContext&);

/// Static description of one op.
struct OpDef {
  OpKind kind;
  const char* name;
  Family family;
  uint32_t traits;
  InferFn family_infer;  // the family's rule
  bool has(Trait t) const { return (traits & t) != 0; }
  /// The output types: the family's rule, after refusing 8-bit float operands where the op
  /// does arithmetic on them (they are storage types: cast, data movement, scaled_matmul).
  InferResult infer(const InferContext& c) const;
};

/// The definition of an op.
const OpDef& op_def(OpKind k);
/// The op named `name`; throws tg::Error if none.
OpKind op_kind_from_name(const std::string& name);
inline const char* op_name(OpKind k) { return op_def(k).name; }

}  // namespace tg::detail
