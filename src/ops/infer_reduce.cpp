// Inference for reductions, scans, top_k and sort.
#include <algorithm>

#include "ops/infer.h"

namespace tg::detail {
namespace {

// Output shape of reducing `axes` (empty = all) of `in`; error text on a bad axis.
InferResult reduced(const InferContext& c, DType out) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<ReduceDesc>(c.attr);
  const Shape& s = c.inputs[0].shape;
  if (!s.ranked()) return {{TensorType(Shape::unranked(), out)}, {}};
  std::vector<bool> red(static_cast<size_t>(s.rank()), d.axes.empty());
  for (int64_t a : d.axes) {
    auto n = normalize_axis(a, s.rank());
    if (!n) return op_error(c, "axis " + std::to_string(a) + " out of range for input " + s.str());
    if (red[static_cast<size_t>(*n)] && !d.axes.empty())
      return op_error(c, "axis " + std::to_string(a) + " given twice for input " + s.str());
    red[static_cast<size_t>(*n)] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < s.rank(); ++i) {
    if (!red[static_cast<size_t>(i)]) dims.push_back(s[i]);
    else if (d.keep_dims) dims.push_back(1);
  }
  return {{TensorType(Shape(dims), out)}, {}};
}

InferResult one_axis(const InferContext& c, int64_t axis, int64_t& out) {
  const Shape& s = c.inputs[0].shape;
  auto n = normalize_axis(axis, s.rank());
  if (!n) return op_error(c, "axis " + std::to_string(axis) + " out of range for input " + s.str());
  out = *n;
  return {};
}

}  // namespace

InferResult infer_reduce(const InferContext& c) {
  InferResult r = reduced(c, c.inputs.empty() ? DType::f32 : c.inputs[0].dtype);
  if (r.ok() && c.inputs[0].dtype == DType::boolean)
    return op_error(c, "does not take bool input (use reduce_all / reduce_any)");
  return r;
}

InferResult infer_reduce_float(const InferContext& c) {
  InferResult r = reduced(c, c.inputs.empty() ? DType::f32 : c.inputs[0].dtype);
  if (r.ok() && !is_float(c.inputs[0].dtype))
    return op_error(c, "needs a floating-point input, got " + c.inputs[0].str());
  return r;
}

InferResult infer_reduce_logical(const InferContext& c) {
  InferResult r = reduced(c, DType::boolean);
  if (r.ok() && c.inputs[0].dtype != DType::boolean)
    return op_error(c, "needs a bool input, got " + c.inputs[0].str());
  return r;
}

InferResult infer_arg_reduce(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (std::get<ReduceDesc>(c.attr).axes.size() != 1)
    return op_error(c, "takes exactly one axis");
  return reduced(c, DType::i32);
}

InferResult infer_cumulative(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  int64_t ax;
  if (r = one_axis(c, std::get<CumulativeDesc>(c.attr).axis, ax); !r.ok()) return r;
  if (c.inputs[0].dtype == DType::boolean) return op_error(c, "does not take bool input");
  return {{c.inputs[0]}, {}};
}

InferResult infer_top_k(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<TopKDesc>(c.attr);
  int64_t ax;
  if (r = one_axis(c, d.axis, ax); !r.ok()) return r;
  Shape s = c.inputs[0].shape;
  std::vector<int64_t> dims = s.dims();
  if (d.k < 0 || (dims[static_cast<size_t>(ax)] >= 0 && d.k > dims[static_cast<size_t>(ax)]))
    return op_error(c, "k=" + std::to_string(d.k) + " is out of range for input " + s.str() +
                           " along axis " + std::to_string(d.axis));
  dims[static_cast<size_t>(ax)] = d.k;
  return {{TensorType(Shape(dims), c.inputs[0].dtype), TensorType(Shape(dims), DType::i32)}, {}};
}

InferResult infer_sort(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  int64_t ax;
  if (r = one_axis(c, std::get<SortDesc>(c.attr).axis, ax); !r.ok()) return r;
  if (c.kind == OpKind::ArgSort) return {{TensorType(c.inputs[0].shape, DType::i32)}, {}};
  return {{c.inputs[0]}, {}};
}

}  // namespace tg::detail
