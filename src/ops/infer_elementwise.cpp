// Inference for elementwise ops. Builders broadcast and promote explicitly, so binary ops
// see operands of one dtype whose shapes are equal (or dynamic where they will be equal).
#include "ops/infer.h"

namespace tg::detail {
namespace {

InferResult same_as_input(const InferContext& c) { return {{c.inputs[0]}, {}}; }

InferResult need_unary(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  return same_as_input(c);
}

// Binary: one dtype; the shapes broadcast (builders make them equal, but the rule is general
// so a graph made by hand or imported still infers).
InferResult binary_shape(const InferContext& c, DType out) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  const TensorType &a = c.inputs[0], &b = c.inputs[1];
  if (a.dtype != b.dtype)
    return op_error(c, "operand dtypes differ: " + describe_inputs(c, {"a", "b"}));
  auto s = broadcast_shapes(a.shape, b.shape);
  if (!s) return op_error(c, "shapes do not broadcast: " + describe_inputs(c, {"a", "b"}));
  return {{TensorType(*s, out)}, {}};
}

}  // namespace

InferResult infer_unary(const InferContext& c) {
  InferResult r = need_unary(c);
  if (r.ok() && c.inputs[0].dtype == DType::boolean)
    return op_error(c, "does not take bool input " + c.inputs[0].str());
  return r;
}

InferResult infer_unary_float(const InferContext& c) {
  InferResult r = need_unary(c);
  if (r.ok() && !is_float(c.inputs[0].dtype))
    return op_error(c, "needs a floating-point input, got " + c.inputs[0].str() +
                           " (cast it first)");
  return r;
}

InferResult infer_unary_logical(const InferContext& c) {
  InferResult r = need_unary(c);
  if (r.ok() && c.inputs[0].dtype != DType::boolean)
    return op_error(c, "needs a bool input, got " + c.inputs[0].str());
  return r;
}

InferResult infer_unary_bitwise(const InferContext& c) {
  InferResult r = need_unary(c);
  if (r.ok() && !is_integer(c.inputs[0].dtype) && c.inputs[0].dtype != DType::boolean)
    return op_error(c, "needs an integer or bool input, got " + c.inputs[0].str());
  return r;
}

InferResult infer_unary_predicate(const InferContext& c) {
  InferResult r = need_unary(c);
  if (!r.ok()) return r;
  if (!is_float(c.inputs[0].dtype))
    return op_error(c, "needs a floating-point input, got " + c.inputs[0].str());
  return {{TensorType(c.inputs[0].shape, DType::boolean)}, {}};
}

InferResult infer_cast(const InferContext& c) {
  InferResult r = need_unary(c);
  if (!r.ok()) return r;
  return {{TensorType(c.inputs[0].shape, std::get<CastDesc>(c.attr).to)}, {}};
}

InferResult infer_bitcast(const InferContext& c) {
  InferResult r = need_unary(c);
  if (!r.ok()) return r;
  DType to = std::get<CastDesc>(c.attr).to;
  if (dtype_size(to) != dtype_size(c.inputs[0].dtype))
    return op_error(c, std::string("element sizes differ: ") + dtype_name(c.inputs[0].dtype) +
                           " is " + std::to_string(dtype_size(c.inputs[0].dtype)) + " bytes, " +
                           dtype_name(to) + " is " + std::to_string(dtype_size(to)));
  return {{TensorType(c.inputs[0].shape, to)}, {}};
}

InferResult infer_binary(const InferContext& c) {
  InferResult r = binary_shape(c, c.inputs.empty() ? DType::f32 : c.inputs[0].dtype);
  if (r.ok() && c.inputs[0].dtype == DType::boolean)
    return op_error(c, "does not take bool operands (" + describe_inputs(c, {"a", "b"}) + ")");
  return r;
}

InferResult infer_binary_float(const InferContext& c) {
  InferResult r = binary_shape(c, c.inputs.empty() ? DType::f32 : c.inputs[0].dtype);
  if (r.ok() && !is_float(c.inputs[0].dtype))
    return op_error(c, "needs floating-point operands (" + describe_inputs(c, {"a", "b"}) + ")");
  return r;
}

InferResult infer_compare(const InferContext& c) { return binary_shape(c, DType::boolean); }

InferResult infer_binary_logical(const InferContext& c) {
  InferResult r = binary_shape(c, DType::boolean);
  if (r.ok() && c.inputs[0].dtype != DType::boolean)
    return op_error(c, "needs bool operands (" + describe_inputs(c, {"a", "b"}) + ")");
  return r;
}

InferResult infer_binary_bitwise(const InferContext& c) {
  InferResult r = binary_shape(c, c.inputs.empty() ? DType::i32 : c.inputs[0].dtype);
  if (r.ok() && !is_integer(c.inputs[0].dtype) && c.inputs[0].dtype != DType::boolean)
    return op_error(c, "needs integer operands (" + describe_inputs(c, {"a", "b"}) + ")");
  return r;
}

InferResult infer_select(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 3, r)) return r;
  if (c.inputs[0].dtype != DType::boolean)
    return op_error(c, "condition must be bool, got " + c.inputs[0].str());
  if (c.inputs[1].dtype != c.inputs[2].dtype)
    return op_error(c, "branch dtypes differ: " + describe_inputs(c, {"cond", "a", "b"}));
  auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
  if (s) s = broadcast_shapes(*s, c.inputs[2].shape);
  if (!s) return op_error(c, "shapes do not broadcast: " + describe_inputs(c, {"cond", "a", "b"}));
  return {{TensorType(*s, c.inputs[1].dtype)}, {}};
}

InferResult infer_clamp(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 3, r)) return r;
  if (c.inputs[0].dtype != c.inputs[1].dtype || c.inputs[0].dtype != c.inputs[2].dtype)
    return op_error(c, "dtypes differ: " + describe_inputs(c, {"x", "lo", "hi"}));
  auto s = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
  if (s) s = broadcast_shapes(*s, c.inputs[2].shape);
  if (!s) return op_error(c, "shapes do not broadcast: " + describe_inputs(c, {"x", "lo", "hi"}));
  return {{TensorType(*s, c.inputs[0].dtype)}, {}};
}

}  // namespace tg::detail
