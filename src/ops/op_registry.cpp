// The OpDef table: name and family from op_list.h, traits and inference rule per family.
#include <array>
#include <unordered_map>

#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

constexpr uint32_t kEw = kElementwise;

struct FamilyInfo {
  uint32_t traits;
  InferFn infer;
};

FamilyInfo family_info(Family f) {
  switch (f) {
#define F(name, traits) \
  case Family::name: return {traits, &infer_##name};
    F(source, kSource)
    F(variable, kSource | kStateful)
    F(read_variable, kStateful)
    F(assign, kStateful | kSideEffects)
    F(unary, kEw) F(unary_float, kEw) F(unary_logical, kEw) F(unary_bitwise, kEw)
    F(unary_predicate, kEw) F(cast, kEw) F(bitcast, kShapeOnly | kView)
    F(binary, kEw) F(binary_float, kEw) F(compare, kEw) F(binary_logical, kEw | kCommutative)
    F(binary_bitwise, kEw) F(select, kEw) F(clamp, kEw)
    F(reduce, kReduction) F(reduce_float, kReduction)
    F(reduce_logical, kReduction) F(arg_reduce, kReduction)
    F(cumulative, 0) F(top_k, 0) F(sort, 0) F(matmul, 0) F(scaled_matmul, 0) F(band_part, 0)
    F(conv, 0) F(conv_grad, 0) F(pool, 0) F(pool_grad, 0) F(norm, 0) F(softmax, 0)
    F(loss, 0) F(attention, 0)
    F(reshape, kShapeOnly | kView) F(transpose, kShapeOnly) F(broadcast_to, kShapeOnly)
    F(broadcast_like, kShapeOnly) F(sum_to_like, kReduction)
    F(expand_dims, kShapeOnly | kView) F(squeeze, kShapeOnly | kView) F(concat, kShapeOnly) F(split, kShapeOnly)
    F(strided_slice, kShapeOnly) F(slice_update, kShapeOnly) F(pad, kShapeOnly)
    F(tile, kShapeOnly) F(reverse, kShapeOnly) F(shape_of, kShapeOnly) F(arange, kSource)
    F(one_hot, 0) F(space_depth, kShapeOnly) F(resize, 0)
    // Opaque to the passes: it becomes its op when its sizes are known (sized_op.cpp).
    F(sized, 0)
    F(random_state, kSource) F(random, 0) F(dropout, 0)
    F(gather, 0) F(scatter, 0) F(non_zero, 0) F(stencil, 0)
    F(if_else, kHasRegions) F(for_loop, kHasRegions) F(while_loop, kHasRegions)
    // Stateful: never folded at compile time nor merged, since each one is a meeting of the ranks.
    F(collective, kStateful)
#undef F
  }
  return {0, nullptr};
}

constexpr uint32_t extra_traits(OpKind k) {
  switch (k) {
    // Not minimum / maximum: of +0 and -0 they return the first (or the second) operand.
    case OpKind::Add: case OpKind::Mul: case OpKind::Equal: case OpKind::NotEqual:
    case OpKind::BitwiseAnd: case OpKind::BitwiseOr: case OpKind::BitwiseXor:
      return kCommutative;
    case OpKind::Random: case OpKind::Dropout: return kStateful;
    default: return 0;
  }
}

std::array<OpDef, kNumOps> build_table() {
  std::array<OpDef, kNumOps> t{};
  int i = 0;
#define X(e, name, family, desc)                                                        \
  {                                                                                     \
    FamilyInfo fi = family_info(Family::family);                                        \
    t[i] = OpDef{OpKind::e, name, Family::family, fi.traits | extra_traits(OpKind::e),  \
                 fi.infer};                                                             \
    ++i;                                                                                \
  }
#include "ops/op_list.h"
#undef X
  return t;
}

const std::array<OpDef, kNumOps>& table() {
  static const std::array<OpDef, kNumOps> t = build_table();
  return t;
}

}  // namespace

const OpDef& op_def(OpKind k) { return table()[static_cast<size_t>(k)]; }

namespace {
// Families that take 8-bit floats: they move or reinterpret bytes, convert, or are FP8's matmul.
bool takes_float8(Family f) {
  switch (f) {
    case Family::source: case Family::variable: case Family::read_variable: case Family::assign:
    case Family::cast: case Family::bitcast: case Family::reshape: case Family::expand_dims:
    case Family::squeeze: case Family::transpose: case Family::concat: case Family::scaled_matmul:
      return true;
    default: return false;
  }
}
}  // namespace

InferResult OpDef::infer(const InferContext& c) const {
  if (!takes_float8(family) && kind != OpKind::Identity)
    for (const TensorType& t : c.inputs)
      if (is_float8(t.dtype)) {
        std::string operands;
        for (const TensorType& u : c.inputs) operands += (operands.empty() ? "" : ", ") + u.str();
        return op_error(c, std::string("does not take ") + dtype_name(t.dtype) + " operands (" + operands +
                               "): 8-bit floats are for storage, casts and scaled_matmul; cast to f16, bf16 "
                               "or f32 first");
      }
  return family_infer(c);
}

OpKind op_kind_from_name(const std::string& name) {
  static const std::unordered_map<std::string, OpKind> by_name = [] {
    std::unordered_map<std::string, OpKind> m;
    for (const OpDef& d : table()) m.emplace(d.name, d.kind);
    return m;
  }();
  auto it = by_name.find(name);
  if (it == by_name.end()) throw Error("[ops] unknown op '" + name + "'");
  return it->second;
}

}  // namespace tg::detail
