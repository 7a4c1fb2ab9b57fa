// Gradient rules of the shape ops beyond the core, gather / scatter, sorting, the remaining
// scans, dropout and stencil. Gathers scatter-add their gradient back; scatters gather it.
#include <algorithm>

#include "ops/vjp.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;
Tensor k(VjpContext& c, double v) { return c.g.scalar(v, c.in[0].dtype()); }
Tensor zeros_like(Graph& g, Tensor x) { return filled_like(g, x, 0.0); }

[[noreturn]] void no_rule(VjpContext& c, const std::string& why) {
  throw Error(std::string("[gradients] no gradient rule for op '") + op_name(c.node.kind) + "': " + why);
}

int64_t axis_of(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// The static size of dim `axis` of x, or an error naming the op.
int64_t static_dim(VjpContext& c, Tensor x, int64_t axis) {
  int64_t n = x.shape().dim(axis);
  if (n < 0)
    throw Error(std::string("[gradients] ") + op_name(c.node.kind) + ": needs a static dim " + std::to_string(axis) +
                ", x is " + x.shape().str());
  return n;
}
std::vector<int64_t> static_dims(VjpContext& c, Tensor x) {
  if (!x.shape().is_static())
    throw Error(std::string("[gradients] ") + op_name(c.node.kind) + ": needs a static shape, x is " + x.shape().str());
  return x.shape().dims();
}

// ---- shape ops ---------------------------------------------------------------------------

V none_vjp(VjpContext&) { return {Tensor()}; }
V strided_slice_vjp(VjpContext& c) {
  return {c.g.slice_update(zeros_like(c.g, c.in[0]), c.dout[0], c.attr<SliceDesc>())};
}
V slice_update_vjp(VjpContext& c) {
  const auto& d = c.attr<SliceDesc>();
  return {c.g.slice_update(c.dout[0], zeros_like(c.g, c.in[1]), d), c.g.strided_slice(c.dout[0], d)};
}

// t[begin:end] along one axis (static bounds), the other dims whole.
Tensor slice_axis(Graph& g, Tensor t, int64_t axis, int64_t begin, int64_t end) {
  size_t r = static_cast<size_t>(t.rank());
  SliceDesc s{std::vector<int64_t>(r, 0), std::vector<int64_t>(r, 0), std::vector<int64_t>(r, 1), 0, 0, 0};
  s.begin[static_cast<size_t>(axis)] = begin;
  s.end[static_cast<size_t>(axis)] = end;
  s.begin_mask = s.end_mask = ((int64_t{1} << r) - 1) & ~(int64_t{1} << axis);
  return g.strided_slice(t, s);
}
// t zero-padded along one axis.
Tensor pad_axis(Graph& g, Tensor t, int64_t axis, int64_t before, int64_t after) {
  std::vector<int64_t> b(static_cast<size_t>(t.rank()), 0), a = b;
  b[static_cast<size_t>(axis)] = before;
  a[static_cast<size_t>(axis)] = after;
  return g.pad(t, b, a);
}

// pad: the interior of dy, plus (edge / reflect / symmetric) the padded borders folded back
// onto the source elements they copy, one dim at a time (the modes are separable).
V pad_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<PadDesc>();
  Tensor x = c.in[0], gr = c.dout[0];
  const int64_t r = x.rank();
  if (d.mode == PadMode::constant) {
    SliceDesc s{d.before, std::vector<int64_t>(static_cast<size_t>(r), 0), std::vector<int64_t>(static_cast<size_t>(r), 1), 0, 0, 0};
    for (int64_t i = 0; i < r; ++i) {
      int64_t a = d.after[static_cast<size_t>(i)];
      if (a == 0) s.end_mask |= int64_t{1} << i;
      else s.end[static_cast<size_t>(i)] = -a;
    }
    return {g.strided_slice(gr, s)};
  }
  for (int64_t i = 0; i < r; ++i) {
    const int64_t b = d.before[static_cast<size_t>(i)], a = d.after[static_cast<size_t>(i)];
    if (b == 0 && a == 0) continue;
    const int64_t n = static_dim(c, x, i);
    Tensor mid = slice_axis(g, gr, i, b, b + n);
    if (b > 0) {
      Tensor left = slice_axis(g, gr, i, 0, b);
      Tensor fold = d.mode == PadMode::edge      ? pad_axis(g, g.reduce_sum(left, {i}, true), i, 0, n - 1)
                    : d.mode == PadMode::reflect ? pad_axis(g, g.reverse(left, {i}), i, 1, n - 1 - b)
                                                 : pad_axis(g, g.reverse(left, {i}), i, 0, n - b);
      mid = g.add(mid, fold);
    }
    if (a > 0) {
      Tensor right = slice_axis(g, gr, i, b + n, b + n + a);
      Tensor fold = d.mode == PadMode::edge      ? pad_axis(g, g.reduce_sum(right, {i}, true), i, n - 1, 0)
                    : d.mode == PadMode::reflect ? pad_axis(g, g.reverse(right, {i}), i, n - 1 - a, 1)
                                                 : pad_axis(g, g.reverse(right, {i}), i, n - a, 0);
      mid = g.add(mid, fold);
    }
    gr = mid;
  }
  return {gr};
}

// tile: output dim i is [m_i, n_i] row-major; sum over the copies.
V tile_vjp(VjpContext& c) {
  const auto& m = c.attr<TileDesc>().multiples;
  std::vector<int64_t> xd = static_dims(c, c.in[0]), split, axes;
  for (size_t i = 0; i < xd.size(); ++i) {
    axes.push_back(static_cast<int64_t>(split.size()));
    split.push_back(m[i]);
    split.push_back(xd[i]);
  }
  if (axes.empty()) return {c.dout[0]};
  return {c.g.reshape(c.g.reduce_sum(c.g.reshape(c.dout[0], split), axes), xd)};
}
V reverse_vjp(VjpContext& c) { return {c.g.reverse(c.dout[0], c.attr<AxesDesc>().axes)}; }
V space_to_depth_vjp(VjpContext& c) {
  const auto& d = c.attr<BlockDesc>();
  return {c.g.depth_to_space(c.dout[0], d.block, d.data_layout)};
}
V depth_to_space_vjp(VjpContext& c) {
  const auto& d = c.attr<BlockDesc>();
  return {c.g.space_to_depth(c.dout[0], d.block, d.data_layout)};
}

// Interpolation matrix [m, n] of one spatial dim (bilinear resize is separable and linear):
// the identity, as an image whose channels index the basis vectors, resized along that dim.
Tensor resize_matrix(Graph& g, const ResizeDesc& d, DType t, int64_t n, int64_t m, bool along_h) {
  std::vector<double> eye(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) eye[static_cast<size_t>(i * n + i)] = 1;
  ResizeDesc dn = d;
  dn.data_layout = Layout::nhwc;
  dn.size = along_h ? std::vector<int64_t>{m, 1} : std::vector<int64_t>{1, m};
  Tensor img = g.constant(TensorData::from_vector(along_h ? Shape{1, n, 1, n} : Shape{1, 1, n, n}, t, eye));
  return g.reshape(g.resize(img, dn), {m, n});
}

// resize nearest: resizing an image of flat source indices gives, per output pixel, the pixel
// it copies; dy is scatter-added there. bilinear: dx = A_h^T dy A_w per image and channel.
V resize_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<ResizeDesc>();
  std::vector<int64_t> xd = static_dims(c, c.in[0]);
  const bool last = d.data_layout == Layout::nhwc;
  const int64_t N = xd[0], C = last ? xd[3] : xd[1], H = last ? xd[1] : xd[2], W = last ? xd[2] : xd[3];
  if (d.mode == ResizeMode::bilinear) {
    Tensor ah = resize_matrix(g, d, c.in[0].dtype(), H, d.size[0], true);
    Tensor aw = resize_matrix(g, d, c.in[0].dtype(), W, d.size[1], false);
    Tensor dy = last ? g.transpose(c.dout[0], {0, 3, 1, 2}) : c.dout[0];  // [N, C, Ho, Wo]
    Tensor dx = g.matmul(g.matmul(ah, dy, true, false), aw);
    return {last ? g.transpose(dx, {0, 2, 3, 1}) : dx};
  }
  const int64_t P = d.size[0] * d.size[1];
  ResizeDesc dn = d;
  dn.data_layout = Layout::nhwc;
  Tensor src = g.reshape(g.resize(g.reshape(g.arange(0, static_cast<double>(H * W), 1, DType::i32), {1, H, W, 1}), dn), {P});
  std::vector<int64_t> flat = last ? std::vector<int64_t>{N, H * W, C} : std::vector<int64_t>{N, C, H * W};
  Tensor zeros = g.broadcast_to(k(c, 0.0), flat);
  Tensor dyr = g.reshape(c.dout[0], last ? std::vector<int64_t>{N, P, C} : std::vector<int64_t>{N, C, P});
  return {g.reshape(g.scatter(zeros, src, dyr, last ? 1 : 2, ScatterMode::add), xd)};
}

// ---- gather / scatter ----------------------------------------------------------------------

V gather_vjp(VjpContext& c) {
  const auto& d = c.attr<GatherDesc>();
  Tensor z = zeros_like(c.g, c.in[0]);
  return {c.g.scatter(z, c.in[1], c.dout[0], d.axis, ScatterMode::add, d.batch_dims), Tensor()};
}
V gather_nd_vjp(VjpContext& c) {
  Tensor z = zeros_like(c.g, c.in[0]);
  return {c.g.scatter_nd(z, c.in[1], c.dout[0], ScatterMode::add, c.attr<GatherDesc>().batch_dims), Tensor()};
}
V gather_along_axis_vjp(VjpContext& c) {
  Tensor z = zeros_like(c.g, c.in[0]);
  return {c.g.scatter_along_axis(z, c.in[1], c.dout[0], c.attr<GatherDesc>().axis, ScatterMode::add), Tensor()};
}

// What the scatter's matching gather reads of t, and t with `u` scattered in (same indices).
Tensor gather_match(VjpContext& c, Tensor t) {
  const auto& d = c.attr<ScatterDesc>();
  if (c.node.kind == OpKind::Scatter) return c.g.gather(t, c.in[1], d.axis, d.batch_dims);
  if (c.node.kind == OpKind::ScatterNd) return c.g.gather_nd(t, c.in[1], d.batch_dims);
  return c.g.gather_along_axis(t, c.in[1], d.axis);
}
Tensor scatter_match(VjpContext& c, Tensor t, Tensor u, ScatterMode m) {
  const auto& d = c.attr<ScatterDesc>();
  if (c.node.kind == OpKind::Scatter) return c.g.scatter(t, c.in[1], u, d.axis, m, d.batch_dims);
  if (c.node.kind == OpKind::ScatterNd) return c.g.scatter_nd(t, c.in[1], u, m, d.batch_dims);
  return c.g.scatter_along_axis(t, c.in[1], u, d.axis, m);
}

// add / sub: x passes dy through, updates gather it (negated for sub). set: the overwritten
// positions of x get nothing; each update gets dy at its position if it won (the last
// duplicate in row-major order), found by scattering the updates' ordinals (exact below 2^24
// updates in f32) and reading back.
// mul / div: product rule (an update of 0 gives inf / NaN, as reduce_prod's rule). min / max:
// like maximum, to the operand that equals the result.
V scatter_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor dy = c.dout[0], u = c.in[2];
  switch (c.attr<ScatterDesc>().mode) {
    case ScatterMode::add: return {dy, Tensor(), gather_match(c, dy)};
    case ScatterMode::sub: return {dy, Tensor(), g.neg(gather_match(c, dy))};
    case ScatterMode::set: {
      Tensor dx = scatter_match(c, dy, zeros_like(g, u), ScatterMode::set);
      Tensor du = gather_match(c, dy);
      if (u.shape().is_static() && u.shape().num_elements() > 0) {
        Tensor ids = g.reshape(g.arange(0, static_cast<double>(u.shape().num_elements()), 1, u.dtype()), u.shape().dims());
        Tensor won = g.equal(gather_match(c, scatter_match(c, filled_like(g, c.in[0], -1.0), ids, ScatterMode::set)), ids);
        du = g.select(won, du, k(c, 0.0));
      }
      return {dx, Tensor(), du};
    }
    case ScatterMode::mul: case ScatterMode::div: {  // y = x * P or x / P, P = product of the updates there
      ScatterMode m = c.attr<ScatterDesc>().mode;
      Tensor dx = g.mul(dy, scatter_match(c, filled_like(g, c.in[0], 1.0), u, m));
      Tensor du = g.div(gather_match(c, g.mul(dy, c.out[0])), u);
      return {dx, Tensor(), m == ScatterMode::mul ? du : g.neg(du)};
    }
    default: {  // min / max: the gradient goes to the operand equal to the result (ties: to each)
      Tensor zero = k(c, 0.0);
      Tensor dx = g.select(g.equal(c.in[0], c.out[0]), dy, zero);
      Tensor du = g.select(g.equal(u, gather_match(c, c.out[0])), gather_match(c, dy), zero);
      return {dx, Tensor(), du};
    }
  }
}

// ---- sorting, scans, dropout ----------------------------------------------------------------

V top_k_vjp(VjpContext& c) {
  int64_t axis = c.attr<TopKDesc>().axis;
  return {c.g.scatter_along_axis(zeros_like(c.g, c.in[0]), c.out[1], c.dout[0], axis, ScatterMode::add)};
}
V sort_vjp(VjpContext& c) {
  const auto& d = c.attr<SortDesc>();
  Tensor idx = c.g.argsort(c.in[0], d.axis, d.descending);  // stable, as sort
  return {c.g.scatter_along_axis(zeros_like(c.g, c.in[0]), idx, c.dout[0], d.axis, ScatterMode::add)};
}
// cumprod: dx_j = sum over the outputs i that include x_j of dy_i * y_i / x_j (x_j = 0 gives
// inf / NaN, as reduce_prod's rule).
V cumprod_vjp(VjpContext& c) {
  const auto& d = c.attr<CumulativeDesc>();
  Graph& g = c.g;
  return {g.div(g.cumsum(g.mul(c.dout[0], c.out[0]), d.axis, d.exclusive, !d.reverse), c.in[0])};
}
// cummax / cummin: each output's gradient goes to the element that holds the running extreme:
// the latest (in scan order) position where x equals the inclusive scan. That position is a
// scan (cummax forward, cummin reverse) of the positions marked that way; an exclusive scan's
// first output reads nothing and gets no source.
V cumextreme_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<CumulativeDesc>();
  Tensor x = c.in[0], dy = c.dout[0];
  const int64_t ax = axis_of(d.axis, x.rank()), n = static_dim(c, x, ax);
  const bool is_max = c.node.kind == OpKind::CumMax;
  Tensor incl = !d.exclusive ? c.out[0] : is_max ? g.cummax(x, ax, false, d.reverse) : g.cummin(x, ax, false, d.reverse);
  std::vector<int64_t> iota_dims(static_cast<size_t>(x.rank()), 1);
  iota_dims[static_cast<size_t>(ax)] = n;
  Tensor iota = g.reshape(g.arange(0, static_cast<double>(n), 1, x.dtype()), iota_dims);
  Tensor mark = g.select(g.equal(x, incl), iota, k(c, d.reverse ? static_cast<double>(n) : -1.0));
  Tensor idx = d.reverse ? g.cummin(mark, ax, d.exclusive, true) : g.cummax(mark, ax, d.exclusive, false);
  Tensor valid = g.logical_and(g.greater_equal(idx, k(c, 0.0)), g.less(idx, k(c, static_cast<double>(n))));
  Tensor safe = g.cast(g.select(valid, idx, k(c, 0.0)), DType::i32);
  Tensor dyv = g.select(valid, dy, k(c, 0.0));
  return {g.scatter_along_axis(zeros_like(g, x), safe, dyv, ax, ScatterMode::add)};
}
// dropout: the same mask (same state) applied to dy.
V dropout_vjp(VjpContext& c) {
  double rate = c.attr<DropoutDesc>().rate;
  Tensor mask = c.g.dropout(filled_like(c.g, c.in[0], 1.0), c.in[1], rate).first;
  return {c.g.mul(c.dout[0], mask), Tensor()};
}

// ---- stencil (sum) -------------------------------------------------------------------------

// Resolves source coordinate s of a dim of size n for the boundary (as the reference): the
// factor of the value read, 0 where the tap reads the padding value, -1 for an odd number of
// anti-periodic wraps.
double resolve_coord(Boundary b, int64_t& s, int64_t n) {
  if (s >= 0 && s < n) return 1;
  switch (b) {
    case Boundary::zero: case Boundary::constant: s = 0; return 0;
    case Boundary::clamp_to_edge: s = std::clamp<int64_t>(s, 0, n - 1); return 1;
    case Boundary::reflect:
      if (n == 1) s = 0;
      while (s < 0 || s >= n) s = s < 0 ? -s : 2 * (n - 1) - s;
      return 1;
    case Boundary::symmetric:
      while (s < 0 || s >= n) s = s < 0 ? -s - 1 : 2 * n - 1 - s;
      return 1;
    case Boundary::periodic: case Boundary::anti_periodic: {
      int64_t wraps = s >= 0 ? s / n : -((-s + n - 1) / n);
      s -= wraps * n;
      return b == Boundary::anti_periodic && wraps % 2 != 0 ? -1 : 1;
    }
  }
  return 0;
}

// Per window dim i the taps of a stencil read fixed (boundary-resolved) coordinates, so the
// source unfolds into U[..., P0*T0, .., P3*T3] by four gathers with constant index tables,
// each times a constant factor (padding 0, anti-periodic sign); y reduces v = U * w over the
// taps. With dv = dy (sum), dy * y / v (product; v = 0 gives inf / NaN) or dy where v equals
// the extreme (min / max; ties each get it): dw = sum of dv * U over the leading and output
// dims, and dsource = the gathers' adjoints (scatter-adds) applied to dv * w. Static shapes.
V stencil_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<StencilDesc>();
  if (d.reduction == Reduction::argmin || d.reduction == Reduction::argmax)
    no_rule(c, "argmin / argmax give integers");
  std::vector<int64_t> sd = static_dims(c, c.in[0]), wd = static_dims(c, c.in[1]), yd = static_dims(c, c.out[0]);
  const size_t lead = sd.size() - 4;
  auto fill = [](const std::vector<int64_t>& v, size_t n, int64_t dflt) { return v.empty() ? std::vector<int64_t>(n, dflt) : v; };
  const auto stride = fill(d.strides, 4, 1), dil = fill(d.dilation_rates, 4, 1), offs = fill(d.offsets, 4, 0),
             expl = fill(d.explicit_padding, 8, 0);
  std::vector<Tensor> idx, fac;
  std::vector<int64_t> ud(sd.begin(), sd.begin() + static_cast<int64_t>(lead)), ye(ud), wb(lead, 1), red;
  for (size_t j = 0; j < lead; ++j) red.push_back(static_cast<int64_t>(j));
  for (size_t i = 0; i < 4; ++i) {
    const int64_t n = sd[lead + i], P = yd[lead + i], T = wd[i], ke = (T - 1) * dil[i] + 1;
    const int64_t total = std::max<int64_t>((P - 1) * stride[i] + ke - n, 0);
    const int64_t pad = d.padding_style == PaddingStyle::explicit_ || d.padding_style == PaddingStyle::explicit_offset
                            ? expl[2 * i]
                        : d.padding_style == PaddingStyle::same       ? total / 2
                        : d.padding_style == PaddingStyle::same_lower ? (total + 1) / 2
                                                                      : 0;
    std::vector<double> iv, fv;
    for (int64_t p = 0; p < P; ++p)
      for (int64_t t = 0; t < T; ++t) {
        int64_t s = p * stride[i] + t * dil[i] - pad + offs[i];
        fv.push_back(resolve_coord(d.boundary, s, n));
        iv.push_back(static_cast<double>(s));
      }
    std::vector<int64_t> bd(sd.size(), 1);
    bd[lead + i] = P * T;
    idx.push_back(g.constant(TensorData::from_vector(Shape{P * T}, DType::i32, iv)));
    fac.push_back(g.constant(TensorData::from_vector(Shape(bd), c.in[0].dtype(), fv)));
    ud.insert(ud.end(), {P, T});
    ye.insert(ye.end(), {P, 1});
    wb.insert(wb.end(), {1, T});
    red.push_back(static_cast<int64_t>(lead + 2 * i));
  }
  Tensor u = c.in[0];
  for (size_t i = 0; i < 4; ++i) u = g.mul(g.gather(u, idx[i], static_cast<int64_t>(lead + i)), fac[i]);
  if (d.boundary == Boundary::constant && d.padding_constant != 0) {
    Tensor inside = g.mul(g.mul(fac[0], fac[1]), g.mul(fac[2], fac[3]));
    u = g.add(u, g.mul(g.sub(k(c, 1.0), inside), k(c, d.padding_constant)));
  }
  std::vector<int64_t> flat = u.shape().dims();
  // dv: the gradient of each tap's value v = U * w, whose reduction is y.
  Tensor u6 = g.reshape(u, ud), w6 = g.reshape(c.in[1], wb), dv = g.reshape(c.dout[0], ye);
  if (d.reduction != Reduction::sum) {
    Tensor v = g.mul(u6, w6), ye_v = g.reshape(c.out[0], ye);
    dv = d.reduction == Reduction::product ? g.mul(dv, g.div(ye_v, v))
                                           : g.select(g.equal(v, ye_v), dv, k(c, 0.0));
  }
  Tensor dw = g.reshape(g.reduce_sum(g.mul(dv, u6), red), wd);
  Tensor du = g.reshape(g.mul(dv, w6), flat);
  for (size_t i = 4; i-- > 0;) {
    std::vector<int64_t> zd = du.shape().dims();
    zd[lead + i] = sd[lead + i];
    du = g.scatter(g.broadcast_to(k(c, 0.0), zd), idx[i], g.mul(du, fac[i]), static_cast<int64_t>(lead + i), ScatterMode::add);
  }
  return {du, dw};
}

}  // namespace

void register_indexing_vjps(VjpTable& t) {
  auto set = [&](OpKind kind, VjpFn f) { t[static_cast<size_t>(kind)] = f; };
  set(OpKind::StridedSlice, strided_slice_vjp);
  set(OpKind::SliceUpdate, slice_update_vjp);
  set(OpKind::Pad, pad_vjp);
  set(OpKind::Tile, tile_vjp);
  set(OpKind::Reverse, reverse_vjp);
  set(OpKind::OneHot, none_vjp);
  set(OpKind::SpaceToDepth, space_to_depth_vjp);
  set(OpKind::DepthToSpace, depth_to_space_vjp);
  set(OpKind::Resize, resize_vjp);
  set(OpKind::Gather, gather_vjp);
  set(OpKind::GatherNd, gather_nd_vjp);
  set(OpKind::GatherAlongAxis, gather_along_axis_vjp);
  for (OpKind s : {OpKind::Scatter, OpKind::ScatterNd, OpKind::ScatterAlongAxis}) set(s, scatter_vjp);
  set(OpKind::TopK, top_k_vjp);
  set(OpKind::Sort, sort_vjp);
  set(OpKind::CumProd, cumprod_vjp);
  set(OpKind::CumMax, cumextreme_vjp);
  set(OpKind::CumMin, cumextreme_vjp);
  set(OpKind::Dropout, dropout_vjp);
  set(OpKind::Stencil, stencil_vjp);
}

}  // namespace tg::detail
