// Converters of ONNX's shape and data-movement ops: Reshape, Flatten, (Un)Squeeze, Transpose,
// Concat, Split, Slice, Gather*, Scatter*, Compress, ReverseSequence, Expand, Tile, Pad, Shape,
// Size, Constant*, Range, OneHot, NonZero, Trilu, EyeLike, DepthToSpace, SpaceToDepth.
#include <algorithm>
#include <cmath>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

TensorData i64_tensor(const std::vector<int64_t>& v) {
  TensorData t(Shape{static_cast<int64_t>(v.size())}, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.ptr<int64_t>()[i] = v[i];
  return t;
}

// A shape operand that depends on dynamic dims (sym_shape.cpp): its dims as reshape /
// broadcast_to codes; ONNX's 0 ("copy the input's dim", Reshape without allowzero) and 1 under
// Expand's broadcasting take x's dim, as a number or as x itself for a source.
struct DynTarget {
  std::vector<int64_t> codes;
  std::vector<Tensor> sources;
};
std::optional<DynTarget> dyn_target(Ctx& c, int i, Tensor x, bool zero_copies, bool one_broadcasts) {
  if (c.is_const(i)) return std::nullopt;
  auto t = sym_target(c, i);
  if (!t) return std::nullopt;
  DynTarget r{t->codes, t->sources};
  const int64_t lead = static_cast<int64_t>(r.codes.size()) - x.rank();
  for (size_t k = 0; k < r.codes.size(); ++k) {
    const int64_t xi = static_cast<int64_t>(k) - (one_broadcasts ? lead : 0);
    const bool take_x = (zero_copies && r.codes[k] == 0) || (one_broadcasts && r.codes[k] == 1);
    if (!take_x || xi < 0 || xi >= x.rank()) continue;
    if (one_broadcasts && x.shape()[xi] == 1) continue;
    if (x.shape()[xi] >= 0) {
      r.codes[k] = x.shape()[xi];
      continue;
    }
    int64_t offset = 0;
    size_t s = 0;
    for (; s < r.sources.size() && !(r.sources[s] == x); ++s) offset += r.sources[s].rank();
    if (s == r.sources.size()) r.sources.push_back(x);
    r.codes[k] = dim_from_source(offset + xi);
  }
  return r;
}

// 0, 1, ..., n - 1 (i64) for a length n that is target code `code` of `sources`.
Tensor iota(Graph& g, int64_t code, const std::vector<Tensor>& sources) {
  Tensor one = g.constant(TensorData::from_vector(Shape{}, DType::i64, {1.0}));
  return g.sub(g.cumsum(g.broadcast_to(one, {code}, sources), 0), one);
}

void reshape(Ctx& c) {
  Tensor x = c.in(0);
  if (c.opset >= 5) {
    const bool copy_zeros = c.attr_i("allowzero", 0) == 0;
    auto t = dyn_target(c, 1, x, copy_zeros, false);
    if (t && std::count(t->codes.begin(), t->codes.end(), -1) <= 1) return c.out(0, c.g.reshape(x, t->codes, t->sources));
    // Sizes the importer cannot name dim by dim (a product of dynamic dims, floor divisions):
    // computed in the graph, known per size.
    if (c.sized_in(1)) return c.out(0, c.g.reshape_sized(x, c.in(1), copy_zeros));
  }
  std::vector<int64_t> shape = c.opset < 5 ? c.attr_ints("shape") : c.ints_in(1);
  bool allowzero = c.attr_i("allowzero", 0) != 0;
  Shape xs = x.shape();
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= xs.rank()) c.fail("shape has a 0 beyond the input's rank");
      shape[i] = xs[static_cast<int64_t>(i)];
    }
  c.out(0, c.g.reshape(x, shape));
}

void flatten(Ctx& c) {
  Tensor x = c.in(0);
  int64_t r = x.rank();
  int64_t axis = c.attr_i("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.fail("axis out of range");
  Shape s = x.shape();
  int64_t a = 1, b = 1;
  bool dyn_a = false, dyn_b = false;
  for (int64_t i = 0; i < r; ++i) {
    bool dyn = s[i] < 0;
    (i < axis ? dyn_a : dyn_b) |= dyn;
    if (!dyn) (i < axis ? a : b) *= s[i];
  }
  // One side may be dynamic: it becomes reshape's -1.
  if (dyn_a && dyn_b) c.fail("Flatten needs static dims on at least one side of the axis, got " + s.str());
  c.out(0, c.g.reshape(x, {dyn_a ? -1 : a, dyn_b ? -1 : b}));
}

void squeeze(Ctx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = c.opset < 13 ? c.attr_ints("axes") : (c.has_input(1) ? c.ints_in(1) : std::vector<int64_t>{});
  for (auto& a : axes) a = norm_axis(c, a, x.rank());
  c.out(0, c.g.squeeze(x, axes));
}

void unsqueeze(Ctx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = c.opset < 13 ? c.attr_ints("axes") : c.ints_in(1);
  int64_t r = x.rank() + static_cast<int64_t>(axes.size());
  for (auto& a : axes) a = norm_axis(c, a, r);
  std::sort(axes.begin(), axes.end());
  c.out(0, c.g.expand_dims(x, axes));
}

void transpose(Ctx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> perm = c.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  c.out(0, c.g.transpose(x, perm));
}

void concat(Ctx& c) {
  std::vector<Tensor> xs;
  for (int i = 0; i < c.num_inputs(); ++i)
    if (c.has_input(i)) xs.push_back(c.in(i));
  c.out(0, c.g.concat(xs, norm_axis(c, c.attr_i("axis", 0), xs.at(0).rank())));
}

void split(Ctx& c) {
  Tensor x = c.in(0);
  int64_t axis = norm_axis(c, c.attr_i("axis", 0), x.rank());
  std::vector<int64_t> sizes = c.opset < 13 ? c.attr_ints("split") : (c.has_input(1) ? c.ints_in(1) : std::vector<int64_t>{});
  int64_t n = x.shape()[axis];
  if (sizes.empty()) {
    int64_t k = c.opset >= 18 && c.has_attr("num_outputs") ? c.attr_i("num_outputs", 1) : c.num_outputs();
    if (n < 0) c.fail("splitting a dynamic dim needs explicit sizes");
    if (k < 1) c.fail("needs at least one output");
    int64_t each = (n + k - 1) / k;
    for (int64_t i = 0; i < k; ++i) sizes.push_back(std::min(each, n - i * each));
  }
  auto parts = c.g.split(x, sizes, axis);
  for (size_t i = 0; i < parts.size(); ++i) c.out(static_cast<int>(i), parts[i]);
}

// Slice bounds computed from sizes (x[:, h // 2:], x[..., :n - 1]): a sized_op over the listed axes.
void sized_slice(Ctx& c, Tensor x) {
  if (c.has_input(3) && !c.is_const(3)) c.fail("axes that depend on the inputs are not supported");
  Tensor starts = c.in(1);
  const int64_t k = starts.shape().ranked() && starts.rank() == 1 ? starts.shape()[0] : -1;
  if (k < 0) c.fail("starts must be a 1-D tensor of static length, got " + starts.type().str());
  std::vector<int64_t> axes;
  if (c.has_input(3)) axes = c.ints_in(3);
  else
    for (int64_t i = 0; i < k; ++i) axes.push_back(i);
  Tensor steps = c.has_input(4) ? c.in(4) : c.g.constant(TensorData::full(Shape{k}, 1.0, DType::i64));
  c.out(0, c.g.slice_sized(x, starts, c.in(2), steps, axes));
}

void slice(Ctx& c) {
  Tensor x = c.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset >= 10 && !c.is_const(2) && c.is_const(1) && (!c.has_input(3) || c.is_const(3)) &&
      (!c.has_input(4) || c.is_const(4))) {
    // x[..., 0:n, ...] with n a dynamic dim: all of an axis that is that dim, else the first n
    // rows gathered (a position table cut to the sequence length); other bounds below
    auto t = sym_target(c, 2);
    starts = c.ints_in(1);
    axes = c.has_input(3) ? c.ints_in(3) : std::vector<int64_t>{0};
    steps = c.has_input(4) ? c.ints_in(4) : std::vector<int64_t>{1};
    if (t && t->codes.size() == 1 && starts.size() == 1 && axes.size() == 1 && steps.size() == 1 && starts[0] == 0 &&
        steps[0] == 1 && t->codes[0] <= kDimFromSource) {
      const int64_t a = norm_axis(c, axes[0], x.rank());
      auto e = c.sym_in(2);
      const SymDim& d = (*e)[0];
      if (d.source == x && d.dim == a) return c.alias(0, 0);
      return c.out(0, c.g.gather(x, iota(c.g, t->codes[0], t->sources), a));
    }
  }
  if (c.opset >= 10) {  // bounds computed from sizes; values known only at run time fail below
    bool sized = false, other = false;
    for (int i : {1, 2, 4})
      if (c.has_input(i) && !c.is_const(i)) (c.sized_in(i) ? sized : other) = true;
    if (sized && !other) return sized_slice(c, x);
  }
  if (c.opset < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  } else {
    starts = c.ints_in(1);
    ends = c.ints_in(2);
    if (c.has_input(3)) axes = c.ints_in(3);
    if (c.has_input(4)) steps = c.ints_in(4);
  }
  int64_t r = x.rank();
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.fail("starts, ends, axes and steps must have the same length");
  SliceDesc d;
  d.begin.assign(static_cast<size_t>(r), 0);
  d.end.assign(static_cast<size_t>(r), 0);
  d.strides.assign(static_cast<size_t>(r), 1);
  d.begin_mask = d.end_mask = (int64_t{1} << r) - 1;
  const int64_t big = int64_t{1} << 62;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = norm_axis(c, axes[i], r);
    if (steps[i] == 0) c.fail("a step is 0");
    d.begin[static_cast<size_t>(a)] = std::clamp(starts[i], -big, big);
    d.end[static_cast<size_t>(a)] = std::clamp(ends[i], -big, big);
    d.strides[static_cast<size_t>(a)] = steps[i];
    d.begin_mask &= ~(int64_t{1} << a);
    d.end_mask &= ~(int64_t{1} << a);
  }
  c.out(0, c.g.strided_slice(x, d));
}

void gather(Ctx& c) {
  Tensor x = c.in(0);
  c.out(0, c.g.gather(x, c.in(1), norm_axis(c, c.attr_i("axis", 0), x.rank())));
}

void gather_elements(Ctx& c) {
  Tensor x = c.in(0);
  c.out(0, c.g.gather_along_axis(x, c.in(1), norm_axis(c, c.attr_i("axis", 0), x.rank())));
}

void gather_nd(Ctx& c) { c.out(0, c.g.gather_nd(c.in(0), c.in(1), c.attr_i("batch_dims", 0))); }

ScatterMode scatter_mode(Ctx& c) {
  std::string r = c.attr_s("reduction", "none");
  if (r == "none") return ScatterMode::set;
  if (r == "add") return ScatterMode::add;
  if (r == "mul") return ScatterMode::mul;
  if (r == "max") return ScatterMode::max;
  if (r == "min") return ScatterMode::min;
  c.fail("unknown reduction '" + r + "'");
}

void scatter_elements(Ctx& c) {
  Tensor x = c.in(0);
  c.out(0, c.g.scatter_along_axis(x, c.in(1), c.in(2), norm_axis(c, c.attr_i("axis", 0), x.rank()),
                                  scatter_mode(c)));
}

void scatter_nd(Ctx& c) { c.out(0, c.g.scatter_nd(c.in(0), c.in(1), c.in(2), scatter_mode(c))); }

void compress(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  TensorData cond = c.const_in(1);
  bool has_axis = c.has_attr("axis");
  if (!has_axis) x = g.reshape(x, {-1});
  int64_t axis = has_axis ? norm_axis(c, c.attr_i("axis", 0), x.rank()) : 0;
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < cond.num_elements(); ++i)
    if (cond.at(i) != 0) idx.push_back(i);
  c.out(0, g.gather(x, g.constant(i64_tensor(idx)), axis));
}

void reverse_sequence(Ctx& c) {
  Tensor x = c.in(0);
  auto d = static_dims(c, x, "ReverseSequence");
  std::vector<int64_t> lens = c.ints_in(1);
  int64_t bax = c.attr_i("batch_axis", 1), tax = c.attr_i("time_axis", 0), r = x.rank();
  TensorData idx(Shape(d), DType::i64);
  for (int64_t i = 0; i < idx.num_elements(); ++i) {
    int64_t rem = i, t = 0, b = 0;
    for (int64_t k = r - 1; k >= 0; --k) {
      int64_t v = rem % d[static_cast<size_t>(k)];
      rem /= d[static_cast<size_t>(k)];
      if (k == tax) t = v;
      if (k == bax) b = v;
    }
    int64_t len = lens.at(static_cast<size_t>(b));
    idx.ptr<int64_t>()[i] = t < len ? len - 1 - t : t;
  }
  c.out(0, c.g.gather_along_axis(x, c.g.constant(idx), tax));
}

void expand(Ctx& c) {
  Tensor x = c.in(0);
  if (auto t = dyn_target(c, 1, x, false, true)) {
    if (std::count(t->codes.begin(), t->codes.end(), -1) == 0 && static_cast<int64_t>(t->codes.size()) >= x.rank())
      return c.out(0, c.g.broadcast_to(x, t->codes, t->sources));
  }
  if (c.sized_in(1)) return c.out(0, c.g.broadcast_to_sized(x, c.in(1)));  // known per size
  std::vector<int64_t> shape = c.ints_in(1);
  std::vector<int64_t> xd = x.shape().dims();
  size_t r = std::max(shape.size(), xd.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t a = i + xd.size() >= r ? xd[i + xd.size() - r] : 1;
    int64_t b = i + shape.size() >= r ? shape[i + shape.size() - r] : 1;
    if (a != b && a != 1 && b != 1) c.fail("shapes do not broadcast");
    out[i] = a == 1 ? b : a;
  }
  c.out(0, c.g.broadcast_to(x, out));
}

void tile(Ctx& c) {
  if (c.sized_in(1)) return c.out(0, c.g.tile_sized(c.in(0), c.in(1)));  // multiples known per size
  c.out(0, c.g.tile(c.in(0), c.ints_in(1)));
}

// Pad amounts computed from sizes (up to a multiple of a window): a sized_op, the amounts
// spread over every dim (zeros where `axes` leaves one out).
void sized_pad(Ctx& c, Tensor x, double value) {
  const int64_t r = x.rank();
  std::string mode = c.attr_s("mode", "constant");
  if (mode == "wrap") c.fail("wrap padding by amounts that depend on the inputs' sizes is not supported");
  PadMode m = mode == "constant" ? PadMode::constant
              : mode == "reflect" ? PadMode::reflect
              : mode == "edge"    ? PadMode::edge
                                  : (c.fail("mode '" + mode + "' is not supported"), PadMode::constant);
  Tensor pads = c.g.cast(c.in(1), DType::i64);
  if (c.opset >= 18 && c.has_input(3)) {
    std::vector<int64_t> axes = c.ints_in(3);
    const int64_t k = static_cast<int64_t>(axes.size());
    for (auto& a : axes) a = norm_axis(c, a, r);
    Tensor zero = c.g.constant(TensorData::full(Shape{1}, 0.0, DType::i64));
    std::vector<Tensor> full;
    for (int64_t side = 0; side < 2; ++side)
      for (int64_t d = 0; d < r; ++d) {
        auto it = std::find(axes.begin(), axes.end(), d);
        const int64_t i = it - axes.begin();
        full.push_back(it == axes.end() ? zero : c.g.slice(pads, {side * k + i}, {side * k + i + 1}));
      }
    pads = c.g.concat(full, 0);
  }
  c.out(0, c.g.pad_sized(x, pads, m, value));
}

// Wrap (circular) padding, axis by axis: enough whole copies of x tiled, then the window.
Tensor pad_wrap(Ctx& c, Tensor x, const std::vector<int64_t>& before, const std::vector<int64_t>& after) {
  const std::vector<int64_t> d = static_dims(c, x, "data");
  for (size_t a = 0; a < d.size(); ++a) {
    if (before[a] == 0 && after[a] == 0) continue;
    const int64_t n = d[a];
    if (n == 0) c.fail("wrap padding of an empty axis " + std::to_string(a) + " of " + x.shape().str());
    const int64_t lead = (before[a] + n - 1) / n, trail = (after[a] + n - 1) / n;
    require_size(c, static_cast<double>(x.shape().num_elements()) * static_cast<double>(1 + lead + trail),
                 "the wrapped tensor");
    std::vector<int64_t> reps(d.size(), 1), lo(d.size(), 0), hi = x.shape().dims();
    reps[a] = 1 + lead + trail;
    lo[a] = lead * n - before[a];
    hi[a] = lo[a] + n + before[a] + after[a];
    x = c.g.slice(c.g.tile(x, reps), lo, hi);
  }
  return x;
}

void pad(Ctx& c) {
  Tensor x = c.in(0);
  int64_t r = x.rank();
  std::vector<int64_t> pads;
  double value = 0;
  if (c.opset < 11) {
    pads = c.attr_ints("pads", c.attr_ints("paddings"));
    value = c.attr_f("value", 0.f);
  } else {
    if (c.has_input(2)) value = c.const_in(2).at(0);
    if (c.sized_in(1)) return sized_pad(c, x, value);
    pads = c.ints_in(1);
  }
  std::vector<int64_t> axes;
  if (c.opset >= 18 && c.has_input(3)) axes = c.ints_in(3);
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  if (pads.size() != 2 * axes.size()) c.fail("pads must have 2 values per padded axis");
  std::vector<int64_t> before(static_cast<size_t>(r), 0), after(static_cast<size_t>(r), 0);
  size_t k = axes.size();
  for (size_t i = 0; i < k; ++i) {
    int64_t a = norm_axis(c, axes[i], r);
    before[static_cast<size_t>(a)] = pads[i];
    after[static_cast<size_t>(a)] = pads[i + k];
    if (pads[i] < 0 || pads[i + k] < 0) c.fail("negative pads are not supported");
  }
  std::string mode = c.attr_s("mode", "constant");
  if (mode == "wrap") return c.out(0, pad_wrap(c, x, before, after));
  PadMode m = mode == "constant" ? PadMode::constant
              : mode == "reflect" ? PadMode::reflect
              : mode == "edge"    ? PadMode::edge
                                  : (c.fail("mode '" + mode + "' is not supported"), PadMode::constant);
  c.out(0, c.g.pad(x, before, after, m, value));
}

void shape(Ctx& c) {
  Tensor x = c.in(0);
  int64_t r = x.rank();
  int64_t start = c.attr_i("start", 0), end = c.attr_i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  Shape s = x.shape();
  std::vector<int64_t> d;
  bool known = true;
  for (int64_t i = start; i < end; ++i) {
    d.push_back(s[i]);
    known = known && s[i] >= 0;
  }
  if (known) return c.out_const(0, i64_tensor(d));
  Tensor full = c.g.shape_of(x);
  c.out(0, start == 0 && end == r ? full : c.g.slice(full, {start}, {end}));
}

void size(Ctx& c) {
  Shape s = c.in(0).shape();
  if (!s.is_static()) return c.out(0, c.g.reduce_prod(c.g.shape_of(c.in(0))));
  TensorData t(Shape{}, DType::i64);
  t.ptr<int64_t>()[0] = s.num_elements();
  c.out_const(0, t);
}

void constant(Ctx& c) {
  if (auto t = c.attr_t("value")) return c.out_const(0, *t);
  if (c.has_attr("value_float")) return c.out_const(0, TensorData::scalar(c.attr_f("value_float", 0), DType::f32));
  if (c.has_attr("value_int")) {
    TensorData t(Shape{}, DType::i64);
    t.ptr<int64_t>()[0] = c.attr_i("value_int", 0);
    return c.out_const(0, t);
  }
  if (c.has_attr("value_floats")) {
    auto v = c.attr_floats("value_floats");
    return c.out_const(0, TensorData::from_vector(Shape{static_cast<int64_t>(v.size())}, DType::f32,
                                                  std::vector<double>(v.begin(), v.end())));
  }
  if (c.has_attr("value_ints")) return c.out_const(0, i64_tensor(c.attr_ints("value_ints")));
  c.fail("only tensor, float(s) and int(s) constants are supported");
}

void constant_of_shape(Ctx& c) {
  if (!c.is_const(0)) {
    auto v = c.attr_t("value");
    TensorData one = v && v->num_elements() ? *v : TensorData::full(Shape{1}, 0.0, DType::f32);
    auto t = sym_target(c, 0);
    if (t && !t->unknown) {
      Tensor scalar = c.g.reshape(c.g.constant(one), {});
      return c.out(0, t->codes.empty() ? scalar : c.g.broadcast_to(scalar, t->codes, t->sources));
    }
    if (c.sized_in(0)) return c.out(0, c.g.broadcast_to_sized(c.g.reshape(c.g.constant(one), {}), c.in(0)));
  }
  std::vector<int64_t> shape = c.ints_in(0);
  double total = 1;
  for (int64_t d : shape) total *= static_cast<double>(d);
  require_size(c, total, "the result");
  auto v = c.attr_t("value");
  DType dt = v ? v->dtype() : DType::f32;
  double val = v && v->num_elements() ? v->at(0) : 0.0;
  TensorData t = TensorData::full(Shape(shape), val, dt);
  if (v && dt == DType::i64 && v->num_elements())
    for (int64_t i = 0; i < t.num_elements(); ++i) t.ptr<int64_t>()[i] = v->ptr<int64_t>()[0];
  c.out_const(0, t);
}

void range(Ctx& c) {
  if (!c.is_const(1) && c.is_const(0) && c.is_const(2)) {
    // Range(0, n, 1) with n a dynamic dim (position ids up to a sequence length)
    auto t = sym_target(c, 1);
    TensorData s0 = c.const_in(0), d0 = c.const_in(2);
    if (t && t->codes.size() == 1 && t->codes[0] <= kDimFromSource && s0.at(0) == 0 && d0.at(0) == 1)
      return c.out(0, c.g.cast(iota(c.g, t->codes[0], t->sources), s0.dtype()));
  }
  // Bounds computed from sizes (a grid over a feature map's height): known per size.
  if ((!c.is_const(0) || !c.is_const(1) || !c.is_const(2)) && (c.is_const(0) || c.sized_in(0)) &&
      (c.is_const(1) || c.sized_in(1)) && (c.is_const(2) || c.sized_in(2)))
    return c.out(0, c.g.arange_sized(c.in(0), c.in(1), c.in(2), c.in(0).dtype()));
  TensorData s = c.const_in(0), l = c.const_in(1), d = c.const_in(2);
  // Its length, ceil((limit - start) / delta), within the importer's size limit: a folded
  // constant of a hostile limit had asked for 2^53 bytes (fuzz_onnx_import).
  const double n = std::ceil((l.at(0) - s.at(0)) / d.at(0));
  if (!std::isfinite(n)) c.fail("start, limit and delta give no finite length");
  require_size(c, std::max(n, 0.0), "Range's output");
  c.out(0, c.g.arange(s.at(0), l.at(0), d.at(0), s.dtype()));
}

void one_hot(Ctx& c) {
  Graph& g = c.g;
  Tensor idx = c.in(0);
  int64_t depth = static_cast<int64_t>(c.const_in(1).at(0));
  TensorData vals = c.const_in(2);
  if (vals.num_elements() != 2) c.fail("values must hold [off, on]");
  if (!is_float(idx.dtype()) && idx.dtype() != DType::i32 && idx.dtype() != DType::i64) idx = g.cast(idx, DType::i64);
  if (is_float(idx.dtype())) idx = g.cast(idx, DType::i64);
  c.out(0, g.one_hot(idx, depth, c.attr_i("axis", -1), vals.dtype(), vals.at(1), vals.at(0)));
}

void non_zero(Ctx& c) { c.out(0, c.g.transpose(c.g.non_zero_indices(c.in(0)), {1, 0})); }

void trilu(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  bool upper = c.attr_i("upper", 1) != 0;
  int64_t k = c.has_input(1) ? c.ints_in(1).at(0) : 0;
  require_rank(c, x, 2, 64, "the input");
  Shape s = x.shape();
  int64_t rows = s.dim(-2), cols = s.dim(-1);
  if (rows < 0 || cols < 0) c.fail("Trilu needs static matrix dims");
  TensorData mask(Shape{rows, cols}, DType::boolean);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) mask.set(i * cols + j, upper ? (j - i >= k) : (j - i <= k));
  c.out(0, g.select(g.constant(mask), x, scalar_like(g, 0, x)));
}

void eye_like(Ctx& c) {
  Tensor x = c.in(0);
  auto d = static_dims(c, x, "EyeLike");
  if (d.size() != 2) c.fail("input must be 2-D");
  DType dt = c.has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(c.attr_i("dtype", 1))) : x.dtype();
  int64_t k = c.attr_i("k", 0);
  TensorData t = TensorData::zeros(Shape{d[0], d[1]}, dt);
  for (int64_t i = 0; i < d[0]; ++i)
    if (i + k >= 0 && i + k < d[1]) t.set(i * d[1] + i + k, 1);
  c.out_const(0, t);
}

void depth_to_space(Ctx& c) {
  Tensor x = c.in(0);
  require_rank(c, x, 4, 4, "the input");
  auto d = static_dims(c, x, "DepthToSpace");
  int64_t b = c.attr_i("blocksize", 0), n = d[0], ch = d[1], h = d[2], w = d[3];
  if (b <= 0 || ch % (b * b)) c.fail("blocksize must divide the channels");
  Graph& g = c.g;
  Tensor y;
  if (c.attr_s("mode", "DCR") == "DCR")
    y = g.transpose(g.reshape(x, {n, b, b, ch / (b * b), h, w}), {0, 3, 4, 1, 5, 2});
  else
    y = g.transpose(g.reshape(x, {n, ch / (b * b), b, b, h, w}), {0, 1, 4, 2, 5, 3});
  c.out(0, g.reshape(y, {n, ch / (b * b), h * b, w * b}));
}

void space_to_depth(Ctx& c) {
  Tensor x = c.in(0);
  require_rank(c, x, 4, 4, "the input");
  auto d = static_dims(c, x, "SpaceToDepth");
  int64_t b = c.attr_i("blocksize", 0), n = d[0], ch = d[1], h = d[2], w = d[3];
  if (b <= 0 || h % b || w % b) c.fail("blocksize must divide H and W");
  Graph& g = c.g;
  Tensor y = g.transpose(g.reshape(x, {n, ch, h / b, b, w / b, b}), {0, 3, 5, 1, 2, 4});
  c.out(0, g.reshape(y, {n, ch * b * b, h / b, w / b}));
}

}  // namespace

const std::vector<Converter>& shape_converters() {
  static const std::vector<Converter> t = {
      {"Reshape", 1, kNewestOpset, reshape},
      {"Flatten", 1, kNewestOpset, flatten},
      {"Squeeze", 1, kNewestOpset, squeeze},
      {"Unsqueeze", 1, kNewestOpset, unsqueeze},
      {"Transpose", 1, kNewestOpset, transpose},
      {"Concat", 1, kNewestOpset, concat},
      {"Split", 2, kNewestOpset, split},
      {"Slice", 1, kNewestOpset, slice},
      {"Gather", 1, kNewestOpset, gather},
      {"GatherElements", 11, kNewestOpset, gather_elements},
      {"GatherND", 11, kNewestOpset, gather_nd},
      {"Scatter", 9, 10, scatter_elements},
      {"ScatterElements", 11, kNewestOpset, scatter_elements},
      {"ScatterND", 11, kNewestOpset, scatter_nd},
      {"Expand", 8, kNewestOpset, expand},
      {"Compress", 9, kNewestOpset, compress},
      {"ReverseSequence", 10, kNewestOpset, reverse_sequence},
      {"Tile", 6, kNewestOpset, tile},
      {"Pad", 2, kNewestOpset, pad},
      {"Shape", 1, kNewestOpset, shape},
      {"Size", 1, kNewestOpset, size},
      {"Constant", 1, kNewestOpset, constant},
      {"ConstantOfShape", 9, kNewestOpset, constant_of_shape},
      {"Range", 11, kNewestOpset, range},
      {"OneHot", 9, kNewestOpset, one_hot},
      {"NonZero", 9, kNewestOpset, non_zero},
      {"Trilu", 14, kNewestOpset, trilu},
      {"EyeLike", 9, kNewestOpset, eye_like},
      {"DepthToSpace", 1, kNewestOpset, depth_to_space},
      {"SpaceToDepth", 1, kNewestOpset, space_to_depth},
  };
  return t;
}

}  // namespace tg::onnx_import
