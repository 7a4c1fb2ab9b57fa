// Inference for strided_slice, slice_update, pad, tile, reverse, one_hot, space_to_depth /
// depth_to_space and resize.
#include <algorithm>

#include "ops/infer.h"

namespace tg::detail {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

// Extent of one sliced dim of static size n, Python / TensorFlow rules: negative indices count
// from the end, out-of-range indices clamp, a masked bound means "from the start / to the end"
// in the direction of the stride.
int64_t slice_extent(int64_t n, int64_t b, int64_t e, int64_t s, bool bmask, bool emask) {
  auto clamp = [&](int64_t i, int64_t lo, int64_t hi) { return std::clamp(i < 0 ? i + n : i, lo, hi); };
  int64_t start, stop;
  if (s > 0) {
    start = bmask ? 0 : clamp(b, 0, n);
    stop = emask ? n : clamp(e, 0, n);
    return std::max<int64_t>(0, (stop - start + s - 1) / s);
  }
  start = bmask ? n - 1 : clamp(b, -1, n - 1);
  stop = emask ? -1 : clamp(e, -1, n - 1);
  return std::max<int64_t>(0, (start - stop - s - 1) / -s);
}

// Output shape of a strided slice of `in`; dims past begin.size() are kept whole.
InferResult slice_shape(const InferContext& c, const Shape& in, const SliceDesc& d) {
  size_t n = d.begin.size();
  std::vector<int64_t> strides = d.strides.empty() ? std::vector<int64_t>(n, 1) : d.strides;
  if (d.end.size() != n || strides.size() != n)
    return op_error(c, "begin " + Shape(d.begin).str() + ", end " + Shape(d.end).str() + " and strides " +
                           Shape(d.strides).str() + " need equal lengths");
  if (!in.ranked()) return {{TensorType(Shape::unranked(), DType::f32)}, {}};
  if (static_cast<int64_t>(n) > in.rank())
    return op_error(c, "slices " + num(int64_t(n)) + " dims of x " + in.str());
  for (int64_t m : {d.begin_mask, d.end_mask, d.squeeze_mask})
    if (m < 0 || (n < 63 && (m >> n) != 0))
      return op_error(c, "mask " + num(m) + " has bits beyond the " + num(int64_t(n)) + " sliced dims");
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    int64_t dim = in[int64_t(i)], s = strides[i];
    if (s == 0) return op_error(c, "stride of dim " + num(int64_t(i)) + " is 0");
    if ((d.squeeze_mask >> i) & 1) {
      int64_t b = d.begin[i];
      if (dim >= 0 && (b < -dim || b >= dim))
        return op_error(c, "index " + num(b) + " of squeezed dim " + num(int64_t(i)) +
                               " is out of range for x " + in.str());
      continue;
    }
    out.push_back(
        dim < 0 ? -1
                : slice_extent(dim, d.begin[i], d.end[i], s, (d.begin_mask >> i) & 1, (d.end_mask >> i) & 1));
  }
  out.insert(out.end(), in.dims().begin() + int64_t(n), in.dims().end());
  return {{TensorType(Shape(out), DType::f32)}, {}};
}

}  // namespace

InferResult infer_strided_slice(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  r = slice_shape(c, c.inputs[0].shape, std::get<SliceDesc>(c.attr));
  if (r.ok()) r.types[0].dtype = c.inputs[0].dtype;
  return r;
}

// (x, update) -> x's type; update has the shape of the slice it replaces.
InferResult infer_slice_update(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return op_error(c, "operand dtypes differ: " + describe_inputs(c, {"x", "update"}));
  r = slice_shape(c, c.inputs[0].shape, std::get<SliceDesc>(c.attr));
  if (!r.ok()) return r;
  if (!shape_compatible(r.types[0].shape, c.inputs[1].shape))
    return op_error(c, "update is " + c.inputs[1].shape.str() + " but the slice of x " +
                           c.inputs[0].shape.str() + " is " + r.types[0].shape.str());
  return {{c.inputs[0]}, {}};
}

InferResult infer_pad(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<PadDesc>(c.attr);
  const Shape& x = c.inputs[0].shape;
  if (!x.ranked()) return {{c.inputs[0]}, {}};
  if (int64_t(d.before.size()) != x.rank() || int64_t(d.after.size()) != x.rank())
    return op_error(c, "before " + Shape(d.before).str() + " and after " + Shape(d.after).str() +
                           " need one value per dim of x " + x.str());
  std::vector<int64_t> out = x.dims();
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t b = d.before[i], a = d.after[i], n = out[i];
    if (b < 0 || a < 0)
      return op_error(c, "negative padding: before " + Shape(d.before).str() + ", after " +
                             Shape(d.after).str() + " (use strided_slice to crop)");
    // reflect mirrors without repeating the edge, so it needs pad < dim; symmetric repeats it.
    bool bad = n >= 0 && ((d.mode == PadMode::reflect && (b >= n || a >= n)) ||
                          (d.mode == PadMode::symmetric && (b > n || a > n)) ||
                          (d.mode == PadMode::edge && n == 0 && (a > 0 || b > 0)));
    if (bad)
      return op_error(c, enum_name(d.mode) + " padding " + num(b) + "/" + num(a) + " of dim " +
                             num(int64_t(i)) + " is too large for x " + x.str() +
                             (d.mode == PadMode::reflect ? " (needs pad < dim)" : " (needs pad <= dim)"));
    if (n >= 0 && (__builtin_add_overflow(n, b, &out[i]) || __builtin_add_overflow(out[i], a, &out[i])))
      return op_error(c, "padding " + num(b) + "/" + num(a) + " of dim " + num(int64_t(i)) + " of x " + x.str() +
                             " gives a dim that does not fit in 64 bits");
    if (n < 0) out[i] = -1;
  }
  return {{TensorType(Shape(out), c.inputs[0].dtype)}, {}};
}

InferResult infer_tile(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& m = std::get<TileDesc>(c.attr).multiples;
  const Shape& x = c.inputs[0].shape;
  if (!x.ranked()) return {{c.inputs[0]}, {}};
  if (int64_t(m.size()) != x.rank())
    return op_error(c, "multiples " + Shape(m).str() + " need one value per dim of x " + x.str());
  std::vector<int64_t> out = x.dims();
  for (size_t i = 0; i < out.size(); ++i) {
    if (m[i] < 0) return op_error(c, "multiples " + Shape(m).str() + " has a negative value");
    if (m[i] == 0) out[i] = 0;
    else if (out[i] < 0) out[i] = -1;
    else if (__builtin_mul_overflow(out[i], m[i], &out[i]))
      return op_error(c, "multiples " + Shape(m).str() + " of x " + x.str() + " give a dim that does not fit in 64 bits");
  }
  return {{TensorType(Shape(out), c.inputs[0].dtype)}, {}};
}

InferResult infer_reverse(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& axes = std::get<AxesDesc>(c.attr).axes;
  const Shape& x = c.inputs[0].shape;
  if (!x.ranked()) return {{c.inputs[0]}, {}};
  std::vector<bool> seen(static_cast<size_t>(x.rank()), false);
  for (int64_t a : axes) {
    auto n = normalize_axis(a, x.rank());
    if (!n) return op_error(c, "axis " + num(a) + " out of range for x " + x.str());
    if (seen[size_t(*n)]) return op_error(c, "axis " + num(a) + " given twice for x " + x.str());
    seen[size_t(*n)] = true;
  }
  return {{c.inputs[0]}, {}};
}

// Integer indices -> a new axis of size depth, of OneHotDesc::dtype.
InferResult infer_one_hot(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<OneHotDesc>(c.attr);
  const TensorType& ind = c.inputs[0];
  if (ind.dtype != DType::i32 && ind.dtype != DType::i64)
    return op_error(c, "indices must be i32 or i64, indices is " + ind.str());
  if (d.depth < 1) return op_error(c, "depth must be >= 1, got " + num(d.depth));
  if (!ind.shape.ranked()) return {{TensorType(Shape::unranked(), d.dtype)}, {}};
  auto ax = normalize_axis(d.axis, ind.shape.rank() + 1);
  if (!ax) return op_error(c, "axis " + num(d.axis) + " out of range for indices " + ind.shape.str());
  std::vector<int64_t> out = ind.shape.dims();
  out.insert(out.begin() + *ax, d.depth);
  return {{TensorType(Shape(out), d.dtype)}, {}};
}

// space_to_depth: [N,H,W,C] -> [N,H/b,W/b,C*b*b]; depth_to_space the inverse (NHWC shown).
InferResult infer_space_depth(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<BlockDesc>(c.attr);
  const Shape& x = c.inputs[0].shape;
  int64_t h, w, ch;
  if (!spatial_axes(d.data_layout, h, w, ch))
    return op_error(c, "data_layout " + enum_name(d.data_layout) + " is not nhwc or nchw");
  if (x.rank() != 4) return op_error(c, "needs a rank-4 input, x is " + x.str());
  if (d.block < 1) return op_error(c, "block must be >= 1, got " + num(d.block));
  int64_t b = d.block, bb = b * b;
  std::vector<int64_t> out = x.dims();
  auto known = [](int64_t v) { return v >= 0; };
  if (c.kind == OpKind::SpaceToDepth) {
    for (int64_t a : {h, w})
      if (known(x[a]) && x[a] % b != 0)
        return op_error(c, "block " + num(b) + " does not divide the spatial dims of x " + x.str());
    out[size_t(h)] = known(x[h]) ? x[h] / b : -1;
    out[size_t(w)] = known(x[w]) ? x[w] / b : -1;
    out[size_t(ch)] = known(x[ch]) ? x[ch] * bb : -1;
  } else {
    if (known(x[ch]) && x[ch] % bb != 0)
      return op_error(c, "block^2 = " + num(bb) + " does not divide the channels of x " + x.str());
    out[size_t(h)] = known(x[h]) ? x[h] * b : -1;
    out[size_t(w)] = known(x[w]) ? x[w] * b : -1;
    out[size_t(ch)] = known(x[ch]) ? x[ch] / bb : -1;
  }
  return {{TensorType(Shape(out), c.inputs[0].dtype)}, {}};
}

InferResult infer_resize(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<ResizeDesc>(c.attr);
  const TensorType& x = c.inputs[0];
  int64_t h, w, ch;
  if (!spatial_axes(d.data_layout, h, w, ch))
    return op_error(c, "data_layout " + enum_name(d.data_layout) + " is not nhwc or nchw");
  if (x.shape.rank() != 4) return op_error(c, "needs a rank-4 input, x is " + x.shape.str());
  if (d.size.size() != 2 || d.size[0] < 1 || d.size[1] < 1)
    return op_error(c, "size " + Shape(d.size).str() + " needs 2 values >= 1 ([h, w])");
  if (x.dtype == DType::boolean || (d.mode == ResizeMode::bilinear && !is_float(x.dtype)))
    return op_error(c, enum_name(d.mode) + " resize does not take x " + x.str());
  std::vector<int64_t> out = x.shape.dims();
  out[size_t(h)] = d.size[0];
  out[size_t(w)] = d.size[1];
  return {{TensorType(Shape(out), x.dtype)}, {}};
}

}  // namespace tg::detail
