// Inference for the core shape ops: reshape, transpose, broadcast_to, expand_dims, squeeze,
// concat, split, shape_of, arange.
#include <algorithm>
#include <cmath>

#include "ops/infer.h"

namespace tg::detail {

InferResult infer_reshape(const InferContext& c) {
  InferResult r;
  if (c.inputs.empty()) return op_error(c, "expects an input");
  std::vector<int64_t> dims = std::get<ShapeDesc>(c.attr).shape;
  std::vector<bool> from_source;
  if (!resolve_dim_sources(c, dims, from_source, r)) return r;
  const Shape& in = c.inputs[0].shape;
  int64_t known = 1, infer_at = -1;
  bool unknown = false;  // a dim taken from a source that is dynamic until run time
  for (size_t i = 0; i < dims.size(); ++i) {
    if (from_source[i] && dims[i] < 0) {
      unknown = true;
    } else if (dims[i] == -1) {
      if (infer_at >= 0) return op_error(c, "more than one -1 in target " + Shape(dims).str());
      infer_at = static_cast<int64_t>(i);
    } else if (dims[i] < 0) {
      return op_error(c, "negative dimension in target " + Shape(dims).str());
    } else if (__builtin_mul_overflow(known, dims[i], &known)) {
      return op_error(c, "target " + Shape(dims).str() + " has more elements than fit in 64 bits");
    }
  }
  if (unknown) {  // resolved at run time, when the sources' dims are known
    if (infer_at >= 0) dims[static_cast<size_t>(infer_at)] = -1;
    return {{TensorType(Shape(dims), c.inputs[0].dtype)}, {}};
  }
  int64_t n = in.num_elements();
  if (n >= 0) {
    if (infer_at >= 0) {
      if (known == 0 || n % known != 0)
        return op_error(c, "cannot reshape " + in.str() + " (" + std::to_string(n) +
                               " elements) to " + Shape(dims).str());
      dims[static_cast<size_t>(infer_at)] = n / known;
    } else if (known != n) {
      return op_error(c, "cannot reshape " + in.str() + " (" + std::to_string(n) +
                             " elements) to " + Shape(dims).str());
    }
  }
  return {{TensorType(Shape(dims), c.inputs[0].dtype)}, {}};
}

InferResult infer_transpose(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& perm = std::get<AxesDesc>(c.attr).axes;
  const Shape& in = c.inputs[0].shape;
  if (!in.ranked()) return {{c.inputs[0]}, {}};
  if (static_cast<int64_t>(perm.size()) != in.rank())
    return op_error(c, "permutation " + Shape(perm).str() + " does not match input " + in.str());
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> out;
  for (int64_t p : perm) {
    auto n = normalize_axis(p, in.rank());
    if (!n || seen[static_cast<size_t>(*n)])
      return op_error(c, "permutation " + Shape(perm).str() + " is not a permutation of rank " +
                             std::to_string(in.rank()));
    seen[static_cast<size_t>(*n)] = true;
    out.push_back(in[*n]);
  }
  return {{TensorType(Shape(out), c.inputs[0].dtype)}, {}};
}

InferResult infer_broadcast_to(const InferContext& c) {
  InferResult r;
  if (c.inputs.empty()) return op_error(c, "expects an input");
  std::vector<int64_t> dims = std::get<ShapeDesc>(c.attr).shape;
  std::vector<bool> from_source;
  if (!resolve_dim_sources(c, dims, from_source, r)) return r;
  for (int64_t d : dims)
    if (d < -1) return op_error(c, "negative dimension in target " + Shape(dims).str());
  Shape target(dims);
  const Shape& in = c.inputs[0].shape;
  // A -1 in the target (not taken from a source) keeps x's size there: where x has 1 there, or
  // no dim at all, no run can ever give it a size.
  if (in.ranked())
    for (int64_t i = 0; i < target.rank(); ++i) {
      const int64_t j = i - (target.rank() - in.rank());
      if (dims[static_cast<size_t>(i)] == -1 && !from_source[static_cast<size_t>(i)] && (j < 0 || in[j] == 1))
        return op_error(c, "target " + target.str() + " leaves dim " + std::to_string(i) + " as -1 where x " +
                               in.str() + " has " + (j < 0 ? std::string("no dim") : std::string("1")) +
                               ": its size is unknown (give it, or a shape source that has it)");
    }
  auto b = broadcast_shapes(in, target);
  if (!b || b->rank() != target.rank())
    return op_error(c, "cannot broadcast " + in.str() + " to " + target.str());
  for (int64_t i = 0; i < target.rank(); ++i)
    if (target[i] >= 0 && (*b)[i] != target[i])
      return op_error(c, "cannot broadcast " + in.str() + " to " + target.str());
  return {{TensorType(*b, c.inputs[0].dtype)}, {}};
}

InferResult infer_broadcast_like(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  auto b = broadcast_shapes(c.inputs[0].shape, c.inputs[1].shape);
  if (!b || b->rank() != c.inputs[1].shape.rank())
    return op_error(c, "cannot broadcast " + describe_inputs(c, {"x", "like"}));
  return {{TensorType(*b, c.inputs[0].dtype)}, {}};
}

InferResult infer_sum_to_like(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  auto b = broadcast_shapes(c.inputs[1].shape, c.inputs[0].shape);
  if (!b || b->rank() != c.inputs[0].shape.rank())
    return op_error(c, "like does not broadcast to x: " + describe_inputs(c, {"x", "like"}));
  if (c.inputs[0].dtype == DType::boolean) return op_error(c, "does not take bool input");
  return {{TensorType(c.inputs[1].shape, c.inputs[0].dtype)}, {}};
}

InferResult infer_expand_dims(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& axes = std::get<AxesDesc>(c.attr).axes;
  const Shape& in = c.inputs[0].shape;
  int64_t out_rank = in.rank() + static_cast<int64_t>(axes.size());
  std::vector<int64_t> dims(static_cast<size_t>(out_rank), -2);
  for (int64_t a : axes) {
    auto n = normalize_axis(a, out_rank);
    if (!n || dims[static_cast<size_t>(*n)] == 1)
      return op_error(c, "axis " + std::to_string(a) + " invalid for input " + in.str());
    dims[static_cast<size_t>(*n)] = 1;
  }
  int64_t k = 0;
  for (auto& d : dims)
    if (d == -2) d = in[k++];
  return {{TensorType(Shape(dims), c.inputs[0].dtype)}, {}};
}

InferResult infer_squeeze(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& axes = std::get<AxesDesc>(c.attr).axes;
  const Shape& in = c.inputs[0].shape;
  std::vector<bool> drop(static_cast<size_t>(in.rank()), false);
  if (axes.empty()) {
    for (int64_t i = 0; i < in.rank(); ++i) drop[static_cast<size_t>(i)] = in[i] == 1;
  }
  for (int64_t a : axes) {
    auto n = normalize_axis(a, in.rank());
    if (!n) return op_error(c, "axis " + std::to_string(a) + " out of range for input " + in.str());
    if (in[*n] != 1 && in[*n] != -1)
      return op_error(c, "cannot squeeze axis " + std::to_string(a) + " of size " +
                             std::to_string(in[*n]) + " in input " + in.str());
    drop[static_cast<size_t>(*n)] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < in.rank(); ++i)
    if (!drop[static_cast<size_t>(i)]) dims.push_back(in[i]);
  return {{TensorType(Shape(dims), c.inputs[0].dtype)}, {}};
}

InferResult infer_concat(const InferContext& c) {
  if (c.inputs.empty()) return op_error(c, "needs at least one input");
  const Shape& s0 = c.inputs[0].shape;
  auto ax = normalize_axis(std::get<AxisDesc>(c.attr).axis, s0.rank());
  if (!ax) return op_error(c, "axis " + std::to_string(std::get<AxisDesc>(c.attr).axis) +
                                  " out of range for input " + s0.str());
  std::vector<int64_t> dims = s0.dims();
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const Shape& s = c.inputs[i].shape;
    if (c.inputs[i].dtype != c.inputs[0].dtype || s.rank() != s0.rank())
      return op_error(c, "input " + std::to_string(i) + " is " + c.inputs[i].str() +
                             " but input 0 is " + c.inputs[0].str());
    for (int64_t k = 0; k < s.rank(); ++k) {
      size_t kk = static_cast<size_t>(k);
      if (k == *ax) {
        if (dims[kk] < 0 || s[k] < 0) dims[kk] = -1;
        else if (__builtin_add_overflow(dims[kk], s[k], &dims[kk]))
          return op_error(c, "the inputs' dims along axis " + std::to_string(*ax) + " add up to more than fit in 64 bits");
      } else if (s[k] >= 0 && dims[kk] >= 0 && s[k] != dims[kk]) {
        return op_error(c, "input " + std::to_string(i) + " is " + s.str() + " but input 0 is " +
                               s0.str() + " (only axis " + std::to_string(*ax) + " may differ)");
      } else if (dims[kk] < 0) {
        dims[kk] = s[k];
      }
    }
  }
  return {{TensorType(Shape(dims), c.inputs[0].dtype)}, {}};
}

InferResult infer_split(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<SplitDesc>(c.attr);
  const Shape& in = c.inputs[0].shape;
  auto ax = normalize_axis(d.axis, in.rank());
  if (!ax) return op_error(c, "axis " + std::to_string(d.axis) + " out of range for input " + in.str());
  int64_t total = 0;
  for (int64_t s : d.sizes) {
    if (s < 0) return op_error(c, "negative split size in " + Shape(d.sizes).str());
    total += s;
  }
  if (in[*ax] >= 0 && total != in[*ax])
    return op_error(c, "sizes " + Shape(d.sizes).str() + " sum to " + std::to_string(total) +
                           " but axis " + std::to_string(d.axis) + " of " + in.str() + " has " +
                           std::to_string(in[*ax]));
  std::vector<TensorType> out;
  for (int64_t s : d.sizes) {
    std::vector<int64_t> dims = in.dims();
    dims[static_cast<size_t>(*ax)] = s;
    out.emplace_back(Shape(dims), c.inputs[0].dtype);
  }
  return {out, {}};
}

InferResult infer_shape_of(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  return {{TensorType(Shape{c.inputs[0].shape.rank()}, DType::i64)}, {}};
}

InferResult infer_arange(const InferContext& c) {
  if (!c.inputs.empty()) return op_error(c, "takes no inputs");
  const auto& d = std::get<ArangeDesc>(c.attr);
  if (d.delta == 0) return op_error(c, "delta must not be 0");
  int64_t n = static_cast<int64_t>(std::ceil((d.limit - d.start) / d.delta));
  return {{TensorType(Shape{std::max<int64_t>(0, n)}, d.dtype)}, {}};
}

}  // namespace tg::detail
