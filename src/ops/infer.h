#pragma once
// Inference rules, one per family, and helpers they share. Each rule is a pure function of
// the input types and the attribute; errors name the op and the shapes.
#include <optional>
#include <string>
#include <vector>

#include "ops/op_def.h"

namespace tg::detail {

/// "[op] " prefix for messages.
std::string op_tag(OpKind k);
/// Error result "[op] msg".
InferResult op_error(const InferContext& c, const std::string& msg);
/// Normalises a possibly negative axis against rank; nullopt if out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);
/// numpy broadcast of two shapes (-1 propagates); nullopt when incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
/// "a is [2,3], b is [4]" style list of the inputs.
std::string describe_inputs(const InferContext& c, std::initializer_list<const char*> names);
/// The target dims of reshape / broadcast_to with their shape sources resolved: a dim
/// kDimFromSource - j (j >= 0) is the j-th dim of the sources (inputs 1.., their shapes
/// concatenated), -1 where that dim is not known until run time; `from_source[i]` marks those.
/// False (with `err` set) when a code points past the sources' dims.
bool resolve_dim_sources(const InferContext& c, std::vector<int64_t>& dims, std::vector<bool>& from_source,
                         InferResult& err);
/// Spatial dim positions of a rank-4 activation in layout l; false if l is not nhwc / nchw.
bool spatial_axes(Layout l, int64_t& h, int64_t& w, int64_t& ch);
/// Requires exactly n inputs.
bool arity_ok(const InferContext& c, size_t n, InferResult& err);

#define TG_FAMILY(f) InferResult infer_##f(const InferContext& c);
TG_FAMILY(source) TG_FAMILY(variable) TG_FAMILY(read_variable) TG_FAMILY(assign)
TG_FAMILY(unary) TG_FAMILY(unary_float) TG_FAMILY(unary_logical) TG_FAMILY(unary_bitwise)
TG_FAMILY(unary_predicate) TG_FAMILY(cast) TG_FAMILY(bitcast) TG_FAMILY(binary)
TG_FAMILY(binary_float) TG_FAMILY(compare) TG_FAMILY(binary_logical) TG_FAMILY(binary_bitwise)
TG_FAMILY(select) TG_FAMILY(clamp) TG_FAMILY(reduce) TG_FAMILY(reduce_float)
TG_FAMILY(reduce_logical) TG_FAMILY(arg_reduce) TG_FAMILY(cumulative) TG_FAMILY(top_k)
TG_FAMILY(sort) TG_FAMILY(matmul) TG_FAMILY(scaled_matmul) TG_FAMILY(band_part) TG_FAMILY(conv) TG_FAMILY(conv_grad)
TG_FAMILY(pool) TG_FAMILY(pool_grad) TG_FAMILY(norm) TG_FAMILY(softmax) TG_FAMILY(loss)
TG_FAMILY(attention) TG_FAMILY(reshape) TG_FAMILY(transpose) TG_FAMILY(broadcast_to) TG_FAMILY(broadcast_like) TG_FAMILY(sum_to_like)
TG_FAMILY(expand_dims) TG_FAMILY(squeeze) TG_FAMILY(concat) TG_FAMILY(split)
TG_FAMILY(strided_slice) TG_FAMILY(slice_update) TG_FAMILY(pad) TG_FAMILY(tile)
TG_FAMILY(reverse) TG_FAMILY(shape_of) TG_FAMILY(arange) TG_FAMILY(one_hot)
TG_FAMILY(space_depth) TG_FAMILY(resize) TG_FAMILY(sized) TG_FAMILY(random_state) TG_FAMILY(random)
TG_FAMILY(dropout) TG_FAMILY(gather) TG_FAMILY(scatter) TG_FAMILY(non_zero) TG_FAMILY(stencil)
TG_FAMILY(collective)
TG_FAMILY(if_else) TG_FAMILY(for_loop) TG_FAMILY(while_loop)
#undef TG_FAMILY

}  // namespace tg::detail
