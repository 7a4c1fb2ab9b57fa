// Reference strided_slice, slice_update, pad, tile, reverse, one_hot, space_to_depth /
// depth_to_space and resize: each output coordinate is mapped back to the input coordinate
// it reads (see docs/ops-semantics.md for every mapping).
#include <algorithm>
#include <cmath>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

// Where each output dim of a strided slice reads: input dim `in_dim`, coordinate
// start + j * stride; squeezed dims read the fixed coordinate `start` and have no output dim.
struct SliceMap {
  std::vector<int64_t> start, stride;  // per input dim
  std::vector<bool> squeezed;
};

SliceMap slice_map(const Ctx& c, const Dims& x) {
  const auto& d = c.attr<SliceDesc>();
  SliceMap m{Dims(x.size(), 0), Dims(x.size(), 1), std::vector<bool>(x.size(), false)};
  for (size_t i = 0; i < d.begin.size(); ++i) {
    int64_t n = x[i], s = d.strides.empty() ? 1 : d.strides[i], b = d.begin[i];
    if (b < 0) b += n;
    if ((d.squeeze_mask >> i) & 1) {
      if (b < 0 || b >= n) c.fail("index " + std::to_string(d.begin[i]) + " out of range for dim " +
                                  std::to_string(i) + " of size " + std::to_string(n));
      m.start[i] = b;
      m.squeezed[i] = true;
      continue;
    }
    bool bmask = (d.begin_mask >> i) & 1;
    m.start[i] = s > 0 ? (bmask ? 0 : std::clamp<int64_t>(b, 0, n))
                       : (bmask ? n - 1 : std::clamp<int64_t>(b, -1, n - 1));
    m.stride[i] = s;
  }
  return m;
}

// Input flat index that slice output coordinates `o` refer to.
int64_t slice_source(const SliceMap& m, const Dims& o, const Dims& x) {
  Dims idx(x.size());
  size_t k = 0;
  for (size_t i = 0; i < x.size(); ++i) idx[i] = m.squeezed[i] ? m.start[i] : m.start[i] + o[k++] * m.stride[i];
  return ravel(idx, x);
}

TensorData strided_slice(const Ctx& c) {
  const TensorData& x = c.in[0];
  SliceMap m = slice_map(c, dims(x));
  TensorData y = c.output(0);
  for (int64_t i = 0; i < y.num_elements(); ++i)
    copy_elem(y, i, x, slice_source(m, unravel(i, dims(y)), dims(x)));
  return y;
}

TensorData slice_update(const Ctx& c) {
  const TensorData &x = c.in[0], &u = c.in[1];
  SliceMap m = slice_map(c, dims(x));
  TensorData y = x.clone();
  for (int64_t i = 0; i < u.num_elements(); ++i)
    copy_elem(y, slice_source(m, unravel(i, dims(u)), dims(x)), u, i);
  return y;
}

// Source coordinate of padded coordinate i (already shifted by `before`) in a dim of size n;
// -1 means "the constant".
int64_t pad_source(PadMode mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::constant: return -1;
    case PadMode::edge: return std::clamp<int64_t>(i, 0, n - 1);
    case PadMode::reflect:  // mirror about the edge element, which is not repeated
      while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
      return i;
    case PadMode::symmetric:  // mirror about the edge, which is repeated
      while (i < 0 || i >= n) i = i < 0 ? -i - 1 : 2 * n - 1 - i;
      return i;
  }
  return -1;
}

TensorData pad(const Ctx& c) {
  const auto& d = c.attr<PadDesc>();
  const TensorData& x = c.in[0];
  TensorData y = c.output(0);
  for (int64_t f = 0; f < y.num_elements(); ++f) {
    Dims o = unravel(f, dims(y));
    bool inside = true;
    for (size_t k = 0; k < o.size(); ++k) {
      o[k] = pad_source(d.mode, o[k] - d.before[k], dims(x)[k]);
      inside &= o[k] >= 0;
    }
    if (inside) copy_elem(y, f, x, ravel(o, dims(x)));
    else y.set(f, d.constant);
  }
  return y;
}

TensorData one_hot(const Ctx& c) {
  const auto& d = c.attr<OneHotDesc>();
  const TensorData& ind = c.in[0];
  TensorData y = c.output(0);
  const size_t ax = static_cast<size_t>(norm_axis(c, d.axis, ind.shape().rank() + 1));
  for (int64_t f = 0; f < y.num_elements(); ++f) {
    Dims o = unravel(f, dims(y));
    int64_t pos = o[ax];
    o.erase(o.begin() + static_cast<long>(ax));
    int64_t k = load_int(ind, ravel(o, dims(ind)));
    if (k < 0) k += d.depth;  // -depth..-1 count from the end; anything else out of range is off
    y.set(f, k == pos ? d.on_value : d.off_value);
  }
  return y;
}

// space_to_depth / depth_to_space in TensorFlow's DCR order: the depth index of block offset
// (bh, bw) and channel ch is (bh * block + bw) * C + ch, C being the shallow tensor's channels.
TensorData space_depth(const Ctx& c) {
  const auto& d = c.attr<BlockDesc>();
  const TensorData& x = c.in[0];
  TensorData y = c.output(0);
  const bool last = d.data_layout == Layout::nhwc;
  const size_t H = last ? 1 : 2, W = H + 1, C = last ? 3 : 1;
  const int64_t b = d.block;
  const bool to_depth = c.kind() == OpKind::SpaceToDepth;
  const Dims& shallow = to_depth ? dims(x) : dims(y);  // the [.., H, W, C] side
  const Dims& deep = to_depth ? dims(y) : dims(x);
  for (int64_t f = 0; f < numel(shallow); ++f) {
    Dims s = unravel(f, shallow), dp = s;
    dp[H] = s[H] / b;
    dp[W] = s[W] / b;
    dp[C] = ((s[H] % b) * b + s[W] % b) * shallow[C] + s[C];
    if (to_depth) copy_elem(y, ravel(dp, deep), x, f);
    else copy_elem(y, f, x, ravel(dp, deep));
  }
  return y;
}

// Source coordinate (continuous) of output coordinate o for a dim resized from n to m.
double resize_coord(CoordinateMode mode, int64_t o, int64_t n, int64_t m) {
  const double scale = static_cast<double>(n) / static_cast<double>(m), x = static_cast<double>(o);
  switch (mode) {
    case CoordinateMode::half_pixel: return (x + 0.5) * scale - 0.5;
    case CoordinateMode::pytorch_half_pixel: return m > 1 ? (x + 0.5) * scale - 0.5 : 0.0;
    case CoordinateMode::align_corners: return m > 1 ? x * static_cast<double>(n - 1) / static_cast<double>(m - 1) : 0.0;
    case CoordinateMode::asymmetric: return x * scale;
  }
  return 0;
}

int64_t nearest(NearestRounding r, double v, int64_t n) {
  double i = r == NearestRounding::round_prefer_floor ? std::ceil(v - 0.5)
             : r == NearestRounding::round_prefer_ceil ? std::floor(v + 0.5)
             : r == NearestRounding::floor ? std::floor(v) : std::ceil(v);
  return std::clamp<int64_t>(static_cast<int64_t>(i), 0, n - 1);
}

TensorData resize(const Ctx& c) {
  const auto& d = c.attr<ResizeDesc>();
  const TensorData& x = c.in[0];
  TensorData y = c.output(0);
  const size_t H = d.data_layout == Layout::nhwc ? 1 : 2, W = H + 1;
  const int64_t ih = dims(x)[H], iw = dims(x)[W], oh = dims(y)[H], ow = dims(y)[W];
  for (int64_t f = 0; f < y.num_elements(); ++f) {
    Dims o = unravel(f, dims(y)), s = o;
    double sy = resize_coord(d.coordinates, o[H], ih, oh), sx = resize_coord(d.coordinates, o[W], iw, ow);
    if (d.mode == ResizeMode::nearest) {
      s[H] = nearest(d.rounding, sy, ih);
      s[W] = nearest(d.rounding, sx, iw);
      copy_elem(y, f, x, ravel(s, dims(x)));
      continue;
    }
    // Bilinear: the source coordinate is clamped to [0, n-1]; the far neighbour to n-1.
    sy = std::clamp(sy, 0.0, static_cast<double>(ih - 1));
    sx = std::clamp(sx, 0.0, static_cast<double>(iw - 1));
    int64_t y0 = static_cast<int64_t>(std::floor(sy)), x0 = static_cast<int64_t>(std::floor(sx));
    int64_t y1 = std::min(y0 + 1, ih - 1), x1 = std::min(x0 + 1, iw - 1);
    double wy = sy - static_cast<double>(y0), wx = sx - static_cast<double>(x0);
    auto at = [&](int64_t yy, int64_t xx) {
      s[H] = yy;
      s[W] = xx;
      return x.at(ravel(s, dims(x)));
    };
    y.set(f, (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) +
                 wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1)));
  }
  return y;
}

}  // namespace

std::vector<TensorData> eval_shape_more(const Ctx& c) {
  const TensorData& x = c.in[0];
  switch (c.kind()) {
    case OpKind::StridedSlice: return {strided_slice(c)};
    case OpKind::SliceUpdate: return {slice_update(c)};
    case OpKind::Pad: return {pad(c)};
    case OpKind::Tile: case OpKind::Reverse: {
      TensorData y = c.output(0);
      std::vector<bool> rev(dims(x).size(), false);
      if (c.kind() == OpKind::Reverse)
        for (int64_t a : c.attr<AxesDesc>().axes) rev[static_cast<size_t>(norm_axis(c, a, x.shape().rank()))] = true;
      for (int64_t f = 0; f < y.num_elements(); ++f) {
        Dims o = unravel(f, dims(y));
        for (size_t k = 0; k < o.size(); ++k) o[k] = rev[k] ? dims(x)[k] - 1 - o[k] : o[k] % dims(x)[k];
        copy_elem(y, f, x, ravel(o, dims(x)));
      }
      return {y};
    }
    case OpKind::OneHot: return {one_hot(c)};
    case OpKind::SpaceToDepth: case OpKind::DepthToSpace: return {space_depth(c)};
    case OpKind::Resize: return {resize(c)};
    default: c.fail("is not a shape op");
  }
}

}  // namespace tg::detail::ref
