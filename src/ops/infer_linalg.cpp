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

InferResult infer_band_part(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (c.inputs[0].shape.ranked() && c.inputs[0].shape.rank() < 2)
    return op_error(c, "needs rank >= 2, got " + c.inputs[0].shape.str());
  return {{c.inputs[0]}, {}};
}

}  // namespace tg::detail
