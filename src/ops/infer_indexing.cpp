// Inference for gather / scatter (plain, _nd, _along_axis), non_zero_indices and stencil.
// Every scatter takes (x, indices, updates), returns x's type, and needs updates shaped as
// the matching gather of x by indices would return.
#include "ops/infer.h"

namespace tg::detail {
namespace {

std::string num(int64_t v) { return std::to_string(v); }
using Dims = std::vector<int64_t>;

Dims sub(const Shape& s, int64_t from, int64_t to) {
  return Dims(s.dims().begin() + from, s.dims().begin() + to);
}

InferResult check_indices(const InferContext& c, const TensorType& ind) {
  if (ind.dtype != DType::i32 && ind.dtype != DType::i64)
    return op_error(c, "indices must be i32 or i64, indices is " + ind.str());
  return {};
}

// The leading `n` dims of x and indices must agree (batch dims).
InferResult check_batch(const InferContext& c, const Shape& x, const Shape& ind, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (x[i] >= 0 && ind[i] >= 0 && x[i] != ind[i])
      return op_error(c, "batch dims differ: x is " + x.str() + ", indices is " + ind.str() +
                             " (batch_dims " + num(n) + ")");
  return {};
}

// params[:axis] + indices[batch_dims:] + params[axis+1:].
InferResult gather_shape(const InferContext& c, const Shape& x, const Shape& ind, int64_t axis,
                         int64_t batch_dims) {
  auto ax = normalize_axis(axis, x.rank());
  if (!ax) return op_error(c, "axis " + num(axis) + " out of range for x " + x.str());
  int64_t bd = batch_dims < 0 ? batch_dims + ind.rank() : batch_dims;
  if (bd < 0 || bd > ind.rank() || bd > *ax)
    return op_error(c, "batch_dims " + num(batch_dims) + " must be in [0, min(rank of indices " + ind.str() +
                           ", axis " + num(*ax) + ")]");
  if (InferResult r = check_batch(c, x, ind, bd); !r.ok()) return r;
  Dims out = sub(x, 0, *ax), tail = sub(ind, bd, ind.rank()), rest = sub(x, *ax + 1, x.rank());
  out.insert(out.end(), tail.begin(), tail.end());
  out.insert(out.end(), rest.begin(), rest.end());
  return {{TensorType(Shape(out), DType::f32)}, {}};
}

// indices [..., K] address the dims [batch_dims, batch_dims + K) of x:
// indices.shape[:-1] + x.shape[batch_dims + K:].
InferResult gather_nd_shape(const InferContext& c, const Shape& x, const Shape& ind, int64_t bd) {
  if (ind.rank() < 1) return op_error(c, "indices need rank >= 1, indices is " + ind.str());
  int64_t k = ind.dim(-1);
  if (k < 0) return op_error(c, "the last dim of indices " + ind.str() + " must be static");
  if (bd < 0 || bd >= ind.rank())
    return op_error(c, "batch_dims " + num(bd) + " must be in [0, rank of indices " + ind.str() + ")");
  if (bd + k > x.rank())
    return op_error(c, "indices " + ind.str() + " address " + num(k) + " dims after " + num(bd) +
                           " batch dims, but x " + x.str() + " has rank " + num(x.rank()));
  if (InferResult r = check_batch(c, x, ind, bd); !r.ok()) return r;
  Dims out = sub(ind, 0, ind.rank() - 1), rest = sub(x, bd + k, x.rank());
  out.insert(out.end(), rest.begin(), rest.end());
  return {{TensorType(Shape(out), DType::f32)}, {}};
}

// indices of x's rank, no larger than x off the axis (as PyTorch); result shape of indices.
InferResult along_axis_shape(const InferContext& c, const Shape& x, const Shape& ind, int64_t axis) {
  if (x.rank() != ind.rank())
    return op_error(c, "indices need the rank of x: x is " + x.str() + ", indices is " + ind.str());
  auto ax = normalize_axis(axis, x.rank());
  if (!ax) return op_error(c, "axis " + num(axis) + " out of range for x " + x.str());
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != *ax && x[i] >= 0 && ind[i] > x[i])
      return op_error(c, "indices " + ind.str() + " exceed x " + x.str() + " in dim " + num(i) +
                             " (only axis " + num(*ax) + " may be larger)");
  return {{TensorType(ind, DType::f32)}, {}};
}

// The gathered shape that the op's indexing mode addresses.
InferResult indexed_shape(const InferContext& c, int64_t axis, int64_t batch_dims) {
  const Shape &x = c.inputs[0].shape, &ind = c.inputs[1].shape;
  if (!x.ranked() || !ind.ranked()) return {{TensorType(Shape::unranked(), DType::f32)}, {}};
  switch (c.kind) {
    case OpKind::Gather:
    case OpKind::Scatter: return gather_shape(c, x, ind, axis, batch_dims);
    case OpKind::GatherNd:
    case OpKind::ScatterNd: return gather_nd_shape(c, x, ind, batch_dims);
    default: return along_axis_shape(c, x, ind, axis);
  }
}

}  // namespace

InferResult infer_gather(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  if (r = check_indices(c, c.inputs[1]); !r.ok()) return r;
  const auto& d = std::get<GatherDesc>(c.attr);
  r = indexed_shape(c, d.axis, d.batch_dims);
  if (r.ok()) r.types[0].dtype = c.inputs[0].dtype;
  return r;
}

InferResult infer_scatter(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 3, r)) return r;
  if (r = check_indices(c, c.inputs[1]); !r.ok()) return r;
  const TensorType &x = c.inputs[0], &upd = c.inputs[2];
  auto all = [&] { return describe_inputs(c, {"x", "indices", "updates"}); };
  if (upd.dtype != x.dtype) return op_error(c, "updates dtype differs from x's: " + all());
  const auto& d = std::get<ScatterDesc>(c.attr);
  if (x.dtype == DType::boolean && d.mode != ScatterMode::set)
    return op_error(c, "mode " + enum_name(d.mode) + " does not take bool x (only set)");
  r = indexed_shape(c, d.axis, d.batch_dims);
  if (!r.ok()) return r;
  if (!shape_compatible(r.types[0].shape, upd.shape))
    return op_error(c, "updates must be " + r.types[0].shape.str() +
                           " (what the gather of x by "
                           "indices returns): " +
                           all());
  return {{x}, {}};
}

// Coordinates of the non-zero elements: i64 [n, rank], n known at run time.
InferResult infer_non_zero(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (!c.inputs[0].shape.ranked()) return op_error(c, "needs a ranked input");
  return {{TensorType(Shape{-1, c.inputs[0].shape.rank()}, DType::i64)}, {}};
}

// Window over the last 4 dims of source; leading dims pass through. Per window dim i with
// extent n, kernel k, stride s, dilation r (ke = (k-1)*r + 1):
//   valid: (n - ke) / s + 1;  same / same_lower: ceil(n / s);
//   explicit / explicit_offset: (n + before + after - ke) / s + 1.
InferResult infer_stencil(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  const TensorType &src = c.inputs[0], &w = c.inputs[1];
  auto both = [&] { return describe_inputs(c, {"source", "weights"}); };
  if (src.dtype != w.dtype) return op_error(c, "weights dtype must equal source's: " + both());
  if (src.dtype == DType::boolean) return op_error(c, "does not take bool operands: " + both());
  if (src.shape.rank() < 4 || w.shape.rank() != 4)
    return op_error(c, "needs source of rank >= 4 and weights of rank 4: " + both());
  StencilDesc d = std::get<StencilDesc>(c.attr);
  auto fill = [&](Dims& v, const char* name, size_t n, int64_t dflt, int64_t min) -> std::string {
    if (v.empty()) v.assign(n, dflt);
    if (v.size() != n)
      return std::string(name) + " " + Shape(v).str() + " needs " + num(int64_t(n)) + " values";
    for (int64_t x : v)
      if (x < min) return std::string(name) + " " + Shape(v).str() + " has a value below " + num(min);
    return {};
  };
  for (const std::string& e :
       {fill(d.offsets, "offsets", 4, 0, INT64_MIN), fill(d.strides, "strides", 4, 1, 1),
        fill(d.dilation_rates, "dilation_rates", 4, 1, 1),
        fill(d.explicit_padding, "explicit_padding", 8, 0, 0)})
    if (!e.empty()) return op_error(c, e);
  PaddingStyle p = d.padding_style;
  if (p != PaddingStyle::explicit_offset && d.offsets != Dims(4, 0))
    return op_error(c, "offsets " + Shape(d.offsets).str() + " apply only with explicit_offset padding");
  Dims out = src.shape.dims();
  int64_t lead = src.shape.rank() - 4;
  for (size_t i = 0; i < 4; ++i) {
    int64_t n = out[size_t(lead) + i], k = w.shape[int64_t(i)], s = d.strides[i];
    int64_t& o = out[size_t(lead) + i];
    if (p == PaddingStyle::same || p == PaddingStyle::same_lower) {
      o = n < 0 ? -1 : (n + s - 1) / s;
      continue;
    }
    if (n < 0 || k < 0) {
      o = -1;
      continue;
    }
    int64_t ke = (k - 1) * d.dilation_rates[i] + 1;
    int64_t padded =
        p == PaddingStyle::valid ? n : n + d.explicit_padding[2 * i] + d.explicit_padding[2 * i + 1];
    if (padded < ke)
      return op_error(c, "window " + num(ke) + " (kernel " + num(k) + ", dilation " +
                             num(d.dilation_rates[i]) + ") does not fit window dim " + num(int64_t(i)) +
                             " of the " + enum_name(p) + "-padded source: " + both());
    o = (padded - ke) / s + 1;
  }
  bool arg = d.reduction == Reduction::argmin || d.reduction == Reduction::argmax;
  return {{TensorType(Shape(out), arg ? DType::i32 : src.dtype)}, {}};
}

}  // namespace tg::detail
