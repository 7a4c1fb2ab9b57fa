// Inference for matmul and band_part.
#include "ops/infer.h"

namespace tg::detail {

InferResult infer_matmul(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  const auto& d = std::get<MatmulDesc>(c.attr);
  const Shape &a = c.inputs[0].shape, &b = c.inputs[1].shape;
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return op_error(c, "operand dtypes differ: " + describe_inputs(c, {"a", "b"}));
  if (c.inputs[0].dtype == DType::boolean) return op_error(c, "does not take bool operands");
  if (!a.ranked() || !b.ranked()) return {{TensorType(Shape::unranked(), c.inputs[0].dtype)}, {}};
  if (a.rank() < 2 || b.rank() < 2)
    return op_error(c, "operands need rank >= 2: a is " + a.str() + ", b is " + b.str());
  int64_t m = d.transpose_a ? a.dim(-1) : a.dim(-2), ka = d.transpose_a ? a.dim(-2) : a.dim(-1);
  int64_t kb = d.transpose_b ? b.dim(-1) : b.dim(-2), n = d.transpose_b ? b.dim(-2) : b.dim(-1);
  if (ka >= 0 && kb >= 0 && ka != kb)
    return op_error(c, "inner dimensions differ: a is " + a.str() + ", b is " + b.str() +
                           (d.transpose_a || d.transpose_b ? " (with transposes)" : ""));
  Shape ba(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2));
  Shape bb(std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2));
  auto batch = broadcast_shapes(ba, bb);
  if (!batch)
    return op_error(c, "batch dimensions do not broadcast: a is " + a.str() + ", b is " + b.str());
  std::vector<int64_t> out = batch->dims();
  out.push_back(m);
  out.push_back(n);
  return {{TensorType(Shape(out), c.inputs[0].dtype)}, {}};
}

InferResult infer_scaled_matmul(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 4, r)) return r;
  const auto& d = std::get<ScaledMatmulDesc>(c.attr);
  const TensorType &a = c.inputs[0], &b = c.inputs[1];
  const std::string operands = describe_inputs(c, {"a", "b", "scale_a", "scale_b"});
  if (!is_float8(a.dtype) || !is_float8(b.dtype))
    return op_error(c, "operands a and b must be 8-bit floats (f8e4m3 / f8e5m2): " + operands);
  if (a.dtype == DType::f8e5m2 && b.dtype == DType::f8e5m2)
    return op_error(c, "f8e5m2 times f8e5m2 is not an FP8 product (one operand must be f8e4m3): " + operands);
  // One element: every dim 1, or dynamic (a run with more fails at the reshape it implies).
  auto one_element = [](const Shape& s) {
    if (!s.ranked()) return true;
    for (int64_t d : s.dims())
      if (d != 1 && d != -1) return false;
    return true;
  };
  for (size_t i = 2; i < 4; ++i)
    if (c.inputs[i].dtype != DType::f32 || !one_element(c.inputs[i].shape))
      return op_error(c, "scales must be f32 with one element (per-tensor scaling): " + operands);
  if (d.out != DType::f32 && d.out != DType::f16 && d.out != DType::bf16)
    return op_error(c, std::string("result dtype must be f32, f16 or bf16, not ") + dtype_name(d.out));
  if (!a.shape.ranked() || !b.shape.ranked()) return {{TensorType(Shape::unranked(), d.out)}, {}};
  if (a.shape.rank() != 2 || b.shape.rank() != 2)
    return op_error(c, "operands must be matrices (rank 2): " + operands);
  const int64_t m = d.transpose_a ? a.shape[1] : a.shape[0], ka = d.transpose_a ? a.shape[0] : a.shape[1];
  const int64_t kb = d.transpose_b ? b.shape[1] : b.shape[0], n = d.transpose_b ? b.shape[0] : b.shape[1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return op_error(c, "inner dimensions differ: " + operands +
                           (d.transpose_a || d.transpose_b ? " (with transposes)" : ""));
  return {{TensorType(Shape({m, n}), d.out)}, {}};
}

InferResult infer_band_part(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (c.inputs[0].shape.ranked() && c.inputs[0].shape.rank() < 2)
    return op_error(c, "needs rank >= 2, got " + c.inputs[0].shape.str());
  return {{c.inputs[0]}, {}};
}

}  // namespace tg::detail
