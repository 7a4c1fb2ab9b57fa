// Converters of ONNX's resampling ops: Resize, Upsample, GridSample, RoiAlign.
#include <algorithm>
#include <cmath>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// Resize / Upsample: each resized axis is a linear map, applied as a matmul with a constant
// [in, out] interpolation matrix built here with the coefficients of ONNX's reference.
struct ResizeAxis {
  int64_t axis, in, out;
  double scale;  // the scale ONNX uses in the coordinate transform
  double roi_start = 0, roi_end = 1;
};

struct ResizeParams {
  std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false, antialias = false;
};

// Resize-18's antialias (linear and cubic): the kernel stretched by 1 / scale when it shrinks,
// over 2 * ceil(support / scale) taps, normalised to sum 1 (ONNX's reference).
std::vector<double> antialias_coeffs(const ResizeParams& p, double ratio, double scale) {
  scale = std::min(scale, 1.0);
  const bool cubic = p.mode == "cubic";
  const double support = cubic ? 2 : 1, A = p.cubic_a;
  const auto start = static_cast<int64_t>(std::floor(-support / scale) + 1);
  std::vector<double> co;
  double sum = 0;
  for (int64_t i = start; i < 2 - start; ++i) {
    const double x = std::abs(scale * (static_cast<double>(i) - ratio));
    double v;
    if (!cubic)
      v = std::clamp(1 - x, 0.0, 1.0);
    else if (x <= 1)
      v = ((A + 2) * x - (A + 3)) * x * x + 1;
    else if (x < 2)
      v = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    else
      v = 0;
    co.push_back(v);
    sum += v;
  }
  for (double& v : co) v /= sum;
  return co;
}

std::vector<double> resize_coeffs(const ResizeParams& p, double ratio, bool integer, double scale) {
  if (p.antialias && p.mode != "nearest") return antialias_coeffs(p, ratio, scale);
  if (p.mode == "nearest") {
    if (integer) return {0, 1};
    if (p.nearest == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (p.nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (p.nearest == "floor") return {1, 0};
    return {0, 1};
  }
  if (p.mode == "linear") return {1 - ratio, ratio};
  double A = p.cubic_a, r = ratio, q = 1 - ratio;
  return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
          ((A + 2) * q - (A + 3)) * q * q + 1, ((A * (q + 1) - 5 * A) * (q + 1) + 8 * A) * (q + 1) - 4 * A};
}

// Fills w ([in, out], row-major) and marks outputs that take the extrapolation value.
void resize_matrix(const ResizeParams& p, const ResizeAxis& ax, TensorData& w, std::vector<bool>& outside) {
  int64_t in = ax.in, out = ax.out;
  double out_w = ax.scale * static_cast<double>(in);
  for (int64_t o = 0; o < out; ++o) {
    double x = static_cast<double>(o), xo;
    const std::string& c = p.coord;
    if (c == "align_corners") xo = out_w == 1 ? 0.0 : x * static_cast<double>(in - 1) / (out_w - 1);
    else if (c == "asymmetric") xo = x / ax.scale;
    else if (c == "tf_crop_and_resize") {
      xo = out_w == 1 ? (ax.roi_end - ax.roi_start) * static_cast<double>(in - 1) / 2
                      : x * (ax.roi_end - ax.roi_start) * static_cast<double>(in - 1) / (out_w - 1);
      xo += ax.roi_start * static_cast<double>(in - 1);
      if (xo < 0 || xo > static_cast<double>(in - 1)) {
        outside[static_cast<size_t>(o)] = true;
        continue;
      }
    } else if (c == "tf_half_pixel_for_nn") xo = (x + 0.5) / ax.scale;
    else if (c == "pytorch_half_pixel") xo = out_w == 1 ? -0.5 : (x + 0.5) / ax.scale - 0.5;
    else if (c == "half_pixel_symmetric") {  // Resize-19
      double adjust = static_cast<double>(out) / out_w, center = static_cast<double>(in) / 2;
      xo = center * (1 - adjust) + (x + 0.5) / ax.scale - 0.5;
    } else xo = (x + 0.5) / ax.scale - 0.5;
    double fl = std::floor(xo);
    bool integer = xo == fl;
    double ratio = integer ? 1.0 : xo - fl;
    std::vector<double> co = resize_coeffs(p, ratio, integer, ax.scale);
    int64_t n = static_cast<int64_t>(co.size());
    int64_t first = static_cast<int64_t>(fl) - (integer ? 1 : 0) - (n / 2 - 1);
    if (p.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t idx = first + k;
        if (idx < 0 || idx >= in) co[static_cast<size_t>(k)] = 0;
        sum += co[static_cast<size_t>(k)];
      }
      if (sum != 0)
        for (auto& v : co) v /= sum;
    }
    for (int64_t k = 0; k < n; ++k) {
      int64_t idx = std::clamp<int64_t>(first + k, 0, in - 1);
      w.set(idx * out + o, w.at(idx * out + o) + co[static_cast<size_t>(k)]);
    }
  }
}

void resize_apply(Ctx& c, const ResizeParams& p, std::vector<ResizeAxis> axes) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  int64_t r = x.rank();
  DType dt = x.dtype();
  Tensor y = is_float(dt) ? x : g.cast(x, DType::f64);
  DType wt = y.dtype();
  std::vector<int64_t> out_dims = x.shape().dims();
  std::vector<std::pair<int64_t, std::vector<bool>>> outside_axes;
  for (const ResizeAxis& ax : axes) {
    out_dims[static_cast<size_t>(ax.axis)] = ax.out;
    TensorData w = TensorData::zeros(Shape{ax.in, ax.out}, DType::f64);
    std::vector<bool> outside(static_cast<size_t>(ax.out), false);
    resize_matrix(p, ax, w, outside);
    bool identity = ax.in == ax.out && p.coord != "tf_crop_and_resize";
    for (int64_t i = 0; identity && i < ax.in; ++i)
      for (int64_t o = 0; o < ax.out; ++o)
        if (w.at(i * ax.out + o) != (i == o ? 1.0 : 0.0)) identity = false;
    if (std::find(outside.begin(), outside.end(), true) != outside.end()) outside_axes.emplace_back(ax.axis, outside);
    if (identity) continue;
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < r; ++i)
      if (i != ax.axis) perm.push_back(i);
    perm.push_back(ax.axis);
    std::vector<int64_t> inv(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) inv[static_cast<size_t>(perm[static_cast<size_t>(i)])] = i;
    Tensor t = ax.axis == r - 1 ? y : g.transpose(y, perm);
    t = g.matmul(t, g.constant(w.cast(wt)));
    y = ax.axis == r - 1 ? t : g.transpose(t, inv);
  }
  if (!outside_axes.empty()) {
    std::vector<int64_t> ms(static_cast<size_t>(r), 1);
    for (auto& [a, v] : outside_axes) ms[static_cast<size_t>(a)] = static_cast<int64_t>(v.size());
    TensorData mask(Shape(ms), DType::boolean);
    for (int64_t i = 0; i < mask.num_elements(); ++i) {
      int64_t rem = i;
      bool out = false;
      for (int64_t d = r - 1; d >= 0; --d) {
        int64_t k = rem % ms[static_cast<size_t>(d)];
        rem /= ms[static_cast<size_t>(d)];
        for (auto& [a, v] : outside_axes)
          if (a == d && v[static_cast<size_t>(k)]) out = true;
      }
      mask.set(i, out);
    }
    y = g.select(g.constant(mask), g.scalar(p.extrapolation, wt), y);
  }
  c.out(0, y.dtype() == dt ? y : g.cast(g.rint(y), dt));
}

// A resize of an NCHW tensor whose image size is not known at import (a model exported with
// dynamic axes): tgraph's resize op, its [h, w] known per size — given (sizes, a constant or
// computed from sizes) or x's times integer scales (where ONNX's scale is exactly out / in, the
// ratio the op uses). Nearest and linear with the coordinate modes the op has.
void resize_dynamic(Ctx& c, const ResizeParams& p, const std::vector<int64_t>& axes, const std::vector<double>& scales,
                    std::optional<Tensor> sizes) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const std::string why = " with a dynamic image size";
  if (x.rank() != 4) c.fail("resizes a rank-4 NCHW input" + why + ", got " + x.shape().str());
  ResizeDesc d;
  d.data_layout = Layout::nchw;
  if (p.mode == "nearest") d.mode = ResizeMode::nearest;
  else if (p.mode == "linear") d.mode = ResizeMode::bilinear;
  else c.fail("mode '" + p.mode + "' is supported" + why + " as nearest or linear only");
  if (p.coord == "half_pixel") d.coordinates = CoordinateMode::half_pixel;
  else if (p.coord == "pytorch_half_pixel") d.coordinates = CoordinateMode::pytorch_half_pixel;
  else if (p.coord == "align_corners") d.coordinates = CoordinateMode::align_corners;
  else if (p.coord == "asymmetric") d.coordinates = CoordinateMode::asymmetric;
  else c.fail("coordinate_transformation_mode '" + p.coord + "' is not supported" + why);
  if (p.nearest == "round_prefer_floor") d.rounding = NearestRounding::round_prefer_floor;
  else if (p.nearest == "round_prefer_ceil") d.rounding = NearestRounding::round_prefer_ceil;
  else if (p.nearest == "floor") d.rounding = NearestRounding::floor;
  else d.rounding = NearestRounding::ceil;
  if (p.antialias) c.fail("antialias is not supported" + why);
  if (c.attr_s("keep_aspect_ratio_policy", "stretch") != "stretch")
    c.fail("keep_aspect_ratio_policy other than stretch is not supported" + why);
  // The [h, w] operand: sizes of axes 2 and 3 (N and C must stay).
  Tensor hw;
  if (sizes) {
    std::vector<int64_t> at(4, -1);  // position of each dim in the sizes
    for (size_t i = 0; i < axes.size(); ++i) at[static_cast<size_t>(axes[i])] = static_cast<int64_t>(i);
    auto sym = c.sym_in(3);
    for (int64_t a = 0; a < 2; ++a) {
      if (at[static_cast<size_t>(a)] < 0) continue;
      const bool kept = sym && at[static_cast<size_t>(a)] < static_cast<int64_t>(sym->size()) &&
                        [&] {
                          const SymDim& e = (*sym)[static_cast<size_t>(at[static_cast<size_t>(a)])];
                          if (e.kind == SymDim::Kind::known) return e.value == x.shape()[a];
                          return e.kind == SymDim::Kind::dim && e.source == x && e.dim == a;
                        }();
      if (!kept) c.fail("sizes must keep dims 0 and 1 (N, C) of x " + x.shape().str() + why);
    }
    if (at[2] < 0 || at[3] < 0) c.fail("sizes must give both spatial dims" + why);
    Tensor s64 = g.cast(*sizes, DType::i64);
    hw = g.concat({g.slice(s64, {at[2]}, {at[2] + 1}), g.slice(s64, {at[3]}, {at[3] + 1})}, 0);
  } else {
    std::vector<double> k(4, 1.0);
    for (size_t i = 0; i < axes.size(); ++i) k[static_cast<size_t>(axes[i])] = scales[i];
    if (k[0] != 1 || k[1] != 1) c.fail("scales must keep dims 0 and 1 (N, C)" + why);
    for (int a : {2, 3})
      if (k[static_cast<size_t>(a)] < 1 || k[static_cast<size_t>(a)] != std::floor(k[static_cast<size_t>(a)]))
        c.fail("scales " + std::to_string(k[2]) + ", " + std::to_string(k[3]) + " are supported" + why +
               " only as whole numbers >= 1");
    Tensor factor = g.constant(TensorData::from_vector(Shape{2}, DType::i64, {k[2], k[3]}));
    hw = g.mul(g.slice(g.shape_of(x), {2}, {4}), factor);
  }
  c.out(0, g.resize_sized(x, hw, d));
}

void resize(Ctx& c) {
  Tensor x = c.in(0);
  if (!x.shape().ranked()) c.fail("Resize needs a ranked input");
  const std::vector<int64_t> d = x.shape().dims();
  int64_t r = x.rank();
  ResizeParams p;
  p.mode = c.attr_s("mode", "nearest");
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic") c.fail("unknown mode '" + p.mode + "'");
  p.coord = c.opset < 11 ? "asymmetric" : c.attr_s("coordinate_transformation_mode", "half_pixel");
  static const char* coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                 "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find_if(std::begin(coords), std::end(coords), [&](const char* m) { return p.coord == m; }) == std::end(coords))
    c.fail("coordinate_transformation_mode '" + p.coord + "' is not supported");
  p.nearest = c.opset < 11 ? "round_prefer_floor" : c.attr_s("nearest_mode", "round_prefer_floor");
  p.cubic_a = c.attr_f("cubic_coeff_a", -0.75f);
  p.exclude_outside = c.attr_i("exclude_outside", 0) != 0;
  p.extrapolation = c.attr_f("extrapolation_value", 0.f);
  p.antialias = c.attr_i("antialias", 0) != 0;
  const std::string policy = c.attr_s("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    c.fail("keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, not '" + policy + "'");
  std::vector<int64_t> axes = c.attr_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (auto& a : axes) a = norm_axis(c, a, r);
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  std::optional<Tensor> sized;  // sizes computed from the inputs' sizes
  if (c.opset < 11) {
    scales = c.const_in(1).to_vector();
  } else {
    if (c.has_input(1) && c.const_in(1).num_elements()) roi = c.const_in(1).to_vector();
    if (c.has_input(2) && c.const_in(2).num_elements()) scales = c.const_in(2).to_vector();
    if (c.sized_in(3)) sized = c.in(3);
    else if (c.has_input(3) && c.const_in(3).num_elements()) sizes = c.ints_in(3);
  }
  if (scales.empty() == (sizes.empty() && !sized)) c.fail("exactly one of scales and sizes must be given");
  size_t k = axes.size();
  if ((!scales.empty() && scales.size() != k) || (!sizes.empty() && sizes.size() != k))
    c.fail("scales / sizes must have one value per resized axis");
  if (sized) return resize_dynamic(c, p, axes, scales, sized);
  // Axes kept at their size are left out (a dynamic batch's, with scale 1); any other axis whose
  // size is dynamic takes the op (its interpolation matrix needs the size).
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = d[static_cast<size_t>(axes[i])];
    const bool kept = p.coord != "tf_crop_and_resize" && (sizes.empty() ? scales[i] == 1 : sizes[i] == in);
    if (in < 0 && !kept) {
      if (!sizes.empty())
        return resize_dynamic(c, p, axes, scales, c.g.constant(TensorData::from_vector(
                                                       Shape{static_cast<int64_t>(k)}, DType::i64,
                                                       std::vector<double>(sizes.begin(), sizes.end()))));
      return resize_dynamic(c, p, axes, scales, std::nullopt);
    }
  }
  // With sizes, not_larger / not_smaller keep the aspect ratio: every resized axis takes the
  // smallest / largest of the per-axis scales, its size rounded half up.
  double kept = 0;
  if (!sizes.empty() && policy != "stretch")
    for (size_t i = 0; i < k; ++i) {
      const double sc = static_cast<double>(sizes[i]) / static_cast<double>(d[static_cast<size_t>(axes[i])]);
      kept = i == 0 ? sc : policy == "not_larger" ? std::min(kept, sc) : std::max(kept, sc);
    }
  std::vector<ResizeAxis> list;
  for (size_t i = 0; i < k; ++i) {
    ResizeAxis ax;
    ax.axis = axes[i];
    ax.in = d[static_cast<size_t>(ax.axis)];
    if (ax.in < 0) continue;  // kept at its (dynamic) size
    if (!sizes.empty() && kept > 0) {
      ax.scale = kept;
      ax.out = static_cast<int64_t>(std::floor(kept * static_cast<double>(ax.in) + 0.5));  // half up
    } else if (!sizes.empty()) {
      ax.out = sizes[i];
      ax.scale = static_cast<double>(ax.out) / static_cast<double>(ax.in);
    } else {
      ax.scale = scales[i];
      ax.out = static_cast<int64_t>(std::floor(static_cast<double>(ax.in) * ax.scale));
    }
    if (roi.size() == 2 * k) {
      ax.roi_start = roi[i];
      ax.roi_end = roi[i + k];
    } else if (roi.size() == 2 * static_cast<size_t>(r)) {
      ax.roi_start = roi[static_cast<size_t>(ax.axis)];
      ax.roi_end = roi[static_cast<size_t>(ax.axis + r)];
    }
    if (ax.out <= 0 || ax.scale <= 0 || ax.in <= 0) c.fail("input and output sizes must be positive");
    require_size(c, static_cast<double>(ax.in) * static_cast<double>(ax.out), "the interpolation matrix");
    list.push_back(ax);
  }
  resize_apply(c, p, list);
}

void upsample(Ctx& c) {
  Tensor x = c.in(0);
  auto d = static_dims(c, x, "Upsample");
  std::vector<double> scales;
  if (c.opset < 9) {
    for (float v : c.attr_floats("scales")) scales.push_back(v);
  } else {
    scales = c.const_in(1).to_vector();
  }
  if (scales.size() != d.size()) c.fail("scales must have one value per dim");
  ResizeParams p;
  p.mode = c.attr_s("mode", "nearest");
  if (p.mode == "bilinear") p.mode = "linear";
  if (p.mode != "nearest" && p.mode != "linear") c.fail("unknown mode '" + p.mode + "'");
  p.coord = "asymmetric";
  p.nearest = "floor";
  std::vector<ResizeAxis> list;
  for (size_t i = 0; i < d.size(); ++i) {
    double out = std::floor(static_cast<double>(d[i]) * scales[i]);
    if (!(out >= 1) || d[i] < 1) c.fail("input and output sizes must be positive");
    require_size(c, out * static_cast<double>(d[i]), "the interpolation matrix");
    ResizeAxis ax{static_cast<int64_t>(i), d[i], static_cast<int64_t>(std::floor(static_cast<double>(d[i]) * scales[i])),
                  scales[i]};
    list.push_back(ax);
  }
  resize_apply(c, p, list);
}

// ---- GridSample (PyTorch's grid_sample, 4-D and 5-D): taps gathered from [N, C, H*W] with run-time indices
// ----

void grid_sample(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), grid = c.in(1);
  require_rank(c, x, 4, 5, "X");
  Shape xs = x.shape(), gs = grid.shape();
  if (!xs.is_static() || !gs.is_static()) c.fail("GridSample needs static shapes");
  const int64_t S = x.rank() - 2;  // spatial dims: H, W or D, H, W
  if (grid.rank() != S + 2 || gs[0] != xs[0] || gs[S + 1] != S)
    c.fail("grid must be [N, out spatial..., " + std::to_string(S) + "] for X " + xs.str() + ", got " +
           gs.str());
  const int64_t N = xs[0], C = xs[1];
  std::vector<int64_t> sp, osp;  // input and output spatial sizes
  int64_t in_pts = 1, out_pts = 1;
  for (int64_t i = 0; i < S; ++i) {
    sp.push_back(xs[2 + i]);
    osp.push_back(gs[1 + i]);
    in_pts *= xs[2 + i];
    out_pts *= gs[1 + i];
  }
  std::string mode = c.attr_s("mode", "bilinear"), pad = c.attr_s("padding_mode", "zeros");
  bool align = c.attr_i("align_corners", 0) != 0;
  if (mode == "linear") mode = "bilinear";  // GridSample-20's names
  if (mode == "cubic") mode = "bicubic";
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") c.fail("unknown mode '" + mode + "'");
  if (mode == "bicubic" && S != 2) c.fail("cubic mode is only defined for 4-D inputs (X " + xs.str() + ")");
  if (pad != "zeros" && pad != "border" && pad != "reflection") c.fail("unknown padding_mode '" + pad + "'");
  const DType f = DType::f64;
  auto k = [&](double v) { return g.scalar(v, f); };
  Tensor gf = g.cast(grid, f);
  // The unnormalised source coordinate [N, out...] along spatial dim d (grid component S-1-d).
  auto coord = [&](int64_t d) {
    const int64_t comp = S - 1 - d;
    std::vector<int64_t> b(static_cast<size_t>(S + 2), 0), e(static_cast<size_t>(S + 2), -1);
    b.back() = comp;
    e.back() = comp + 1;
    Tensor v = g.squeeze(g.slice(gf, b, e), {S + 1});
    double n = static_cast<double>(sp[static_cast<size_t>(d)]);
    return align ? g.mul(g.add(v, k(1)), k((n - 1) / 2)) : g.div(g.sub(g.mul(g.add(v, k(1)), k(n)), k(1)), k(2));
  };
  auto reflect = [&](Tensor v, double lo2, double hi2) {
    if (lo2 == hi2) return g.mul(v, k(0));
    double mn = lo2 / 2, span = (hi2 - lo2) / 2;
    Tensor a = g.abs(g.sub(v, k(mn)));
    Tensor extra = g.mod(a, k(span));
    Tensor flips = g.floor(g.div(a, k(span)));
    Tensor even = g.equal(g.floor_mod(flips, k(2)), k(0));
    return g.select(even, g.add(extra, k(mn)), g.add(g.sub(k(span), extra), k(mn)));
  };
  auto bound = [&](Tensor v, int64_t size) {  // border / reflection applied to a coordinate
    double n = static_cast<double>(size);
    if (pad == "border") return g.minimum(g.maximum(v, k(0)), k(n - 1));
    if (pad == "reflection") {
      v = align ? reflect(v, 0, 2 * (n - 1)) : reflect(v, -1, 2 * n - 1);
      return g.minimum(g.maximum(v, k(0)), k(n - 1));
    }
    return v;
  };
  std::vector<Tensor> pos;  // per spatial dim
  for (int64_t d = 0; d < S; ++d) {
    Tensor v = coord(d);
    pos.push_back(mode != "bicubic" ? bound(v, sp[static_cast<size_t>(d)]) : v);
  }
  Tensor flat = g.reshape(g.cast(x, f), {N, C, in_pts});
  std::vector<int64_t> wshape = {N, 1};
  wshape.insert(wshape.end(), osp.begin(), osp.end());
  std::vector<int64_t> yshape = wshape;
  yshape[1] = C;
  auto w4 = [&](Tensor t) { return g.reshape(t, wshape); };
  // The value at integer coordinates [N, out...] per dim, 0 outside (after per-tap bounding).
  auto tap = [&](std::vector<Tensor> at) {
    Tensor inside, idx;
    for (int64_t d = 0; d < S; ++d) {
      Tensor v = at[static_cast<size_t>(d)];
      const double n = static_cast<double>(sp[static_cast<size_t>(d)]);
      if (mode == "bicubic" && pad != "zeros") v = bound(v, sp[static_cast<size_t>(d)]);
      Tensor in_d = g.logical_and(g.greater_equal(v, k(0)), g.less(v, k(n)));
      inside = d == 0 ? in_d : g.logical_and(inside, in_d);
      Tensor cv = g.minimum(g.maximum(v, k(0)), k(n - 1));
      idx = d == 0 ? cv : g.add(g.mul(idx, k(n)), cv);
    }
    Tensor ii = g.broadcast_to(g.reshape(g.cast(idx, DType::i64), {N, 1, out_pts}), {N, C, out_pts});
    Tensor v = g.reshape(g.gather_along_axis(flat, ii, 2), yshape);
    return g.mul(v, w4(g.cast(inside, f)));
  };
  Tensor y;
  if (mode == "nearest") {
    std::vector<Tensor> at;
    at.reserve(pos.size());
    for (Tensor p : pos) at.push_back(g.rint(p));
    y = tap(at);
  } else if (mode == "bilinear") {  // 2^S corners, each weighted by the product of its fractions
    std::vector<Tensor> lo, fr;
    for (Tensor p : pos) {
      lo.push_back(g.floor(p));
      fr.push_back(g.sub(p, lo.back()));
    }
    const int64_t corners = S == 3 ? 8 : 4;
    for (int64_t corner = 0; corner < corners; ++corner) {
      std::vector<Tensor> at;
      Tensor w;
      for (int64_t d = 0, bit = corners / 2; d < S; ++d, bit /= 2) {
        const bool up = (corner & bit) != 0;
        at.push_back(up ? g.add(lo[static_cast<size_t>(d)], k(1)) : lo[static_cast<size_t>(d)]);
        Tensor wd = up ? fr[static_cast<size_t>(d)] : g.sub(k(1), fr[static_cast<size_t>(d)]);
        w = d == 0 ? wd : g.mul(w, wd);
      }
      Tensor v = g.mul(tap(at), w4(w));
      y = y.valid() ? g.add(y, v) : v;
    }
  } else {
    const double A = -0.75;
    auto coeffs = [&](Tensor t) {  // the 4 cubic weights for fraction t
      auto near = [&](Tensor d) {  // ((A + 2) d - (A + 3)) d d + 1
        return g.add(g.mul(g.mul(g.sub(g.mul(k(A + 2), d), k(A + 3)), d), d), k(1));
      };
      auto far = [&](Tensor d) {  // ((A d - 5A) d + 8A) d - 4A
        return g.sub(g.mul(g.add(g.mul(g.sub(g.mul(k(A), d), k(5 * A)), d), k(8 * A)), d), k(4 * A));
      };
      return std::vector<Tensor>{far(g.add(t, k(1))), near(t), near(g.sub(k(1), t)), far(g.sub(k(2), t))};
    };
    Tensor iy = pos[0], ix = pos[1];
    Tensor x0 = g.floor(ix), y0 = g.floor(iy);
    auto cx = coeffs(g.sub(ix, x0)), cy = coeffs(g.sub(iy, y0));
    for (int j = 0; j < 4; ++j) {
      Tensor row;
      for (int i = 0; i < 4; ++i) {
        Tensor v = g.mul(tap({g.add(y0, k(j - 1)), g.add(x0, k(i - 1))}), w4(cx[static_cast<size_t>(i)]));
        row = row.valid() ? g.add(row, v) : v;
      }
      row = g.mul(row, w4(cy[static_cast<size_t>(j)]));
      y = y.valid() ? g.add(y, row) : row;
    }
  }
  c.out(0, g.cast(y, x.dtype()));
}

// ---- RoiAlign (avg and max modes, fixed sampling_ratio): bilinear samples gathered per ROI ----

void roi_align(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), rois = c.in(1), bidx = c.in(2);
  require_rank(c, x, 4, 4, "X");
  require_rank(c, rois, 2, 2, "rois");
  Shape xs = x.shape(), rs = rois.shape();
  if (!xs.is_static() || !rs.is_static()) c.fail("RoiAlign needs static shapes");
  const std::string mode = c.attr_s("mode", "avg");
  if (mode != "avg" && mode != "max") c.fail("mode must be avg or max, not '" + mode + "'");
  int64_t sr = c.attr_i("sampling_ratio", 0);
  if (sr <= 0) c.fail("an adaptive sampling_ratio (0) is data-dependent; it is not supported");
  int64_t C = xs[1], H = xs[2], W = xs[3], R = rs[0];
  int64_t oh = c.attr_i("output_height", 1), ow = c.attr_i("output_width", 1);
  if (oh < 1 || ow < 1) c.fail("output sizes must be positive");
  double scale = c.attr_f("spatial_scale", 1.f);
  bool half = c.opset >= 16 ? c.attr_s("coordinate_transformation_mode", "half_pixel") == "half_pixel" : false;
  const DType f = DType::f64;
  auto k = [&](double v) { return g.scalar(v, f); };
  Tensor rf = g.mul(g.cast(rois, f), k(scale));
  if (half) rf = g.sub(rf, k(0.5));
  auto col = [&](int64_t i) { return g.reshape(g.slice(rf, {0, i}, {-1, i + 1}), {R, 1, 1}); };
  Tensor x1 = col(0), y1 = col(1), x2 = col(2), y2 = col(3);
  Tensor rw = g.sub(x2, x1), rh = g.sub(y2, y1);
  if (!half) {
    rw = g.maximum(rw, k(1));
    rh = g.maximum(rh, k(1));
  }
  auto offsets = [&](int64_t n) {  // bin + (sample + 0.5) / sr, per sample position
    TensorData t(Shape{n * sr}, f);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t i = 0; i < sr; ++i) t.set(p * sr + i, static_cast<double>(p) + (static_cast<double>(i) + 0.5) / static_cast<double>(sr));
    return g.constant(t);
  };
  int64_t P = oh * sr, Q = ow * sr;
  Tensor Y = g.broadcast_to(g.add(y1, g.mul(g.reshape(offsets(oh), {1, P, 1}), g.div(rh, k(static_cast<double>(oh))))), {R, P, Q});
  Tensor X = g.broadcast_to(g.add(x1, g.mul(g.reshape(offsets(ow), {1, 1, Q}), g.div(rw, k(static_cast<double>(ow))))), {R, P, Q});
  Tensor valid = g.logical_and(g.logical_and(g.greater_equal(Y, k(-1)), g.less_equal(Y, k(static_cast<double>(H)))),
                               g.logical_and(g.greater_equal(X, k(-1)), g.less_equal(X, k(static_cast<double>(W)))));
  auto axis = [&](Tensor v, int64_t n, Tensor& lo, Tensor& hi, Tensor& frac) {
    v = g.maximum(v, k(0));
    Tensor fl = g.floor(v);
    Tensor edge = g.greater_equal(fl, k(static_cast<double>(n - 1)));
    lo = g.select(edge, k(static_cast<double>(n - 1)), fl);
    hi = g.select(edge, k(static_cast<double>(n - 1)), g.add(fl, k(1)));
    frac = g.select(edge, k(0), g.sub(v, fl));
  };
  Tensor yl, yh, ly, xl, xh, lx;
  axis(Y, H, yl, yh, ly);
  axis(X, W, xl, xh, lx);
  Tensor feat = g.reshape(g.cast(g.gather(x, bidx, 0), f), {R, C, H * W});
  auto tap = [&](Tensor yy, Tensor xx) {
    Tensor idx = g.cast(g.add(g.mul(yy, k(static_cast<double>(W))), xx), DType::i64);
    idx = g.broadcast_to(g.reshape(idx, {R, 1, P * Q}), {R, C, P * Q});
    return g.reshape(g.gather_along_axis(feat, idx, 2), {R, C, P, Q});
  };
  auto w4 = [&](Tensor t) { return g.reshape(t, {R, 1, P, Q}); };
  Tensor hy = g.sub(k(1), ly), hx = g.sub(k(1), lx);
  Tensor t1 = g.mul(tap(yl, xl), w4(g.mul(hy, hx))), t2 = g.mul(tap(yl, xh), w4(g.mul(hy, lx)));
  Tensor t3 = g.mul(tap(yh, xl), w4(g.mul(ly, hx))), t4 = g.mul(tap(yh, xh), w4(g.mul(ly, lx)));
  // avg: the mean of the interpolated samples; max (ONNX's reference): the largest weighted tap.
  const bool avg = mode == "avg";
  Tensor v = avg ? g.add(g.add(t1, t2), g.add(t3, t4)) : g.maximum(g.maximum(t1, t2), g.maximum(t3, t4));
  v = g.mul(v, w4(g.cast(valid, f)));
  v = g.reshape(v, {R, C, oh, sr, ow, sr});
  Tensor y = avg ? g.reduce_mean(v, {3, 5}) : g.reduce_max(v, {3, 5});
  c.out(0, g.cast(y, x.dtype()));
}

}  // namespace

const std::vector<Converter>& sampling_converters() {
  static const std::vector<Converter> t = {
      {"RoiAlign", 10, kNewestOpset, roi_align},
      {"GridSample", 16, kNewestOpset, grid_sample},
      {"Resize", 10, kNewestOpset, resize},
      {"Upsample", 7, kNewestOpset, upsample},
  };
  return t;
}

}  // namespace tg::onnx_import
