// Converters of image-geometry ops: CenterCropPad (slice and pad), AffineGrid (a constant base
// grid times theta), Col2Im (the data gradient of the convolution whose im2col it inverts) and
// DeformConv (bilinear taps at offset positions, then a grouped matmul).
#include <algorithm>
#include <cmath>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// Each listed axis cropped or zero-padded to its size, centred (the odd leftover at the end).
void center_crop_pad(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const std::vector<int64_t> xd = static_dims(c, x, "input_data");
  const int64_t rank = x.rank();
  const std::vector<int64_t> shape = c.ints_in(1);
  std::vector<int64_t> axes = c.attr_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  if (shape.size() != axes.size())
    c.fail("shape has " + std::to_string(shape.size()) + " values for " + std::to_string(axes.size()) +
           " axes of " + x.shape().str());
  std::vector<int64_t> lo(static_cast<size_t>(rank), 0), hi = xd, before(lo), after(lo);
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto a = static_cast<size_t>(norm_axis(c, axes[i], rank));
    if (shape[i] < 0) c.fail("shape holds the negative size " + std::to_string(shape[i]));
    if (shape[i] < xd[a]) {
      lo[a] = (xd[a] - shape[i]) / 2;
      hi[a] = lo[a] + shape[i];
    } else {
      before[a] = (shape[i] - xd[a]) / 2;
      after[a] = shape[i] - xd[a] - before[a];
    }
  }
  Tensor y = g.slice(x, lo, hi);
  if (std::any_of(after.begin(), after.end(), [](int64_t v) { return v > 0; }))
    y = g.pad(y, before, after, PadMode::constant, 0.0);
  c.out(0, y);
}

// The normalised coordinates of n samples over [-1, 1]: pixel centres, or corners included.
std::vector<double> grid_line(int64_t n, bool corners) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        corners ? (n > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1) : -1.0)
                : -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(n);
  return v;
}

// grid[n, (d,) h, w] = theta[n] @ (x, y, (z,) 1): the base grid [points, k + 1] is a constant.
void affine_grid(Ctx& c) {
  Graph& g = c.g;
  Tensor theta = c.in(0);
  const std::vector<int64_t> size = c.ints_in(1);
  const std::vector<int64_t> td = static_dims(c, theta, "theta");
  if (size.size() != 4 && size.size() != 5)
    c.fail("size must hold 4 (N, C, H, W) or 5 (N, C, D, H, W) values, not " + std::to_string(size.size()));
  const int64_t k = static_cast<int64_t>(size.size()) - 2;
  if (td.size() != 3 || td[1] != k || td[2] != k + 1)
    c.fail("theta is " + theta.shape().str() + ", expected [N, " + std::to_string(k) + ", " +
           std::to_string(k + 1) + "]");
  if (td[0] != size[0])
    c.fail("theta's batch " + std::to_string(td[0]) + " is not size's N " + std::to_string(size[0]));
  const std::vector<int64_t> sp(size.begin() + 2, size.end());  // (D,) H, W
  double points = 1;
  for (int64_t s : sp) {
    if (s <= 0) c.fail("size holds the non-positive spatial size " + std::to_string(s));
    points *= static_cast<double>(s);
  }
  require_size(c, points * static_cast<double>(k + 1), "the base grid");
  const bool corners = c.attr_i("align_corners", 0) != 0;
  std::vector<std::vector<double>> lines;
  lines.reserve(sp.size());
  for (int64_t s : sp) lines.push_back(grid_line(s, corners));
  const auto np = static_cast<int64_t>(points);
  std::vector<double> base(static_cast<size_t>(np * (k + 1)));
  for (int64_t p = 0; p < np; ++p) {
    int64_t rest = p;
    // Components in x, y, (z) order: x runs along the last spatial dim.
    for (int64_t d = k - 1; d >= 0; --d) {
      const int64_t n = sp[static_cast<size_t>(d)];
      base[static_cast<size_t>(p * (k + 1) + (k - 1 - d))] =
          lines[static_cast<size_t>(d)][static_cast<size_t>(rest % n)];
      rest /= n;
    }
    base[static_cast<size_t>(p * (k + 1) + k)] = 1.0;
  }
  Tensor b = g.constant(TensorData::from_vector(Shape({1, np, k + 1}), theta.dtype(), base));
  Tensor grid = g.matmul(g.broadcast_to(b, {td[0], np, k + 1}), theta, false, true);  // [N, points, k]
  std::vector<int64_t> out = {td[0]};
  out.insert(out.end(), sp.begin(), sp.end());
  out.push_back(k);
  c.out(0, g.reshape(grid, out));
}

// [N, C * K, L] columns -> [N, C, *image_shape]: each image is the data gradient of the
// convolution that extracts its K-tap blocks (a one-hot [K, 1, *block] kernel).
void col2im(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const std::vector<int64_t> xd = static_dims(c, x, "input");
  std::vector<int64_t> image = c.ints_in(1), block = c.ints_in(2);
  const size_t n = image.size();
  if (xd.size() != 3) c.fail("input must be [N, C * prod(block_shape), L], got " + x.shape().str());
  if (n < 1 || n > 3 || block.size() != n)
    c.fail("image_shape and block_shape must both hold 1 to 3 values (got " + std::to_string(n) + " and " +
           std::to_string(block.size()) + ")");
  auto fix = [&](const char* name, size_t count, int64_t def) {
    std::vector<int64_t> v = c.attr_ints(name);
    if (v.empty()) v.assign(count, def);
    if (v.size() != count)
      c.fail(std::string(name) + " needs " + std::to_string(count) + " values, has " +
             std::to_string(v.size()));
    return v;
  };
  std::vector<int64_t> stride = fix("strides", n, 1), dil = fix("dilations", n, 1),
                       pads = fix("pads", 2 * n, 0);
  int64_t kprod = 1, blocks = 1;
  std::vector<int64_t> cols;
  for (size_t i = 0; i < n; ++i) {
    if (image[i] <= 0 || block[i] <= 0 || stride[i] <= 0 || dil[i] <= 0)
      c.fail("image_shape, block_shape, strides and dilations must be positive");
    kprod *= block[i];
    const int64_t col = (image[i] + pads[i] + pads[i + n] - dil[i] * (block[i] - 1) - 1) / stride[i] + 1;
    if (col < 1) c.fail("the blocks do not fit in the padded image along dim " + std::to_string(i));
    cols.push_back(col);
    blocks *= col;
  }
  if (xd[1] % kprod || xd[2] != blocks)
    c.fail("input " + x.shape().str() + " must be [N, C * " + std::to_string(kprod) + ", " +
           std::to_string(blocks) + "] for these image_shape, block_shape, strides, dilations and pads");
  const int64_t ch = xd[1] / kprod;
  if (n == 1) {  // 1-D runs as 2-D with unit height
    image.insert(image.begin(), 1);
    block.insert(block.begin(), 1);
    stride.insert(stride.begin(), 1);
    dil.insert(dil.begin(), 1);
    cols.insert(cols.begin(), 1);
    pads = {0, pads[0], 0, pads[1]};
  }
  const size_t m = image.size();
  std::vector<double> onehot(static_cast<size_t>(kprod * kprod), 0.0);
  for (int64_t i = 0; i < kprod; ++i) onehot[static_cast<size_t>(i * kprod + i)] = 1.0;
  std::vector<int64_t> wshape = {kprod, 1}, dy = {xd[0] * ch, kprod}, in = {xd[0] * ch, 1};
  wshape.insert(wshape.end(), block.begin(), block.end());
  dy.insert(dy.end(), cols.begin(), cols.end());
  in.insert(in.end(), image.begin(), image.end());
  Tensor w = g.constant(TensorData::from_vector(Shape(wshape), x.dtype(), onehot));
  ConvDesc d;
  d.stride = stride;
  d.dilation = dil;
  for (size_t i = 0; i < m; ++i) {
    d.explicit_padding.push_back(pads[i]);
    d.explicit_padding.push_back(pads[i + m]);
  }
  d.data_layout = m == 3 ? Layout::ncdhw : Layout::nchw;
  d.weights_layout = m == 3 ? Layout::oidhw : Layout::oihw;
  Tensor y = m == 3 ? g.conv3d_data_grad(g.reshape(x, dy), w, Shape(in), d)
                    : g.conv2d_data_grad(g.reshape(x, dy), w, Shape(in), d);
  std::vector<int64_t> out = {xd[0], ch};
  const std::vector<int64_t> orig = c.ints_in(1);
  out.insert(out.end(), orig.begin(), orig.end());
  c.out(0, g.reshape(y, out));
}

// DeformConv (2-D): each kernel tap samples X bilinearly (zero outside) at its grid position
// moved by the per-output offset, scaled by the mask; the sampled columns [N, C * K, P] are
// multiplied by the weights per group. Positions and tap weights in f64, as ONNX's reference.
void deform_conv(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), w = c.in(1), off = c.in(2);
  const std::vector<int64_t> xd = static_dims(c, x, "X"), wd = static_dims(c, w, "W"),
                             od = static_dims(c, off, "offset");
  if (xd.size() != 4 || wd.size() != 4 || od.size() != 4)
    c.fail("only 2-D DeformConv is supported: X " + x.shape().str() + ", W " + w.shape().str() + ", offset " +
           off.shape().str());
  const int64_t n = xd[0], ch = xd[1], h = xd[2], wi = xd[3], oc = wd[0];
  const int64_t group = c.attr_i("group", 1), og = c.attr_i("offset_group", 1);
  auto two = [&](const char* name, int64_t def) {
    std::vector<int64_t> v = c.attr_ints(name);
    if (v.empty()) v.assign(2, def);
    if (v.size() != 2) c.fail(std::string(name) + " needs 2 values, has " + std::to_string(v.size()));
    return v;
  };
  std::vector<int64_t> ks = c.attr_ints("kernel_shape", {wd[2], wd[3]}), st = two("strides", 1),
                       dil = two("dilations", 1);
  std::vector<int64_t> pads = c.attr_ints("pads", {0, 0, 0, 0});
  if (ks.size() != 2 || pads.size() != 4 || ks[0] != wd[2] || ks[1] != wd[3])
    c.fail("kernel_shape and pads must match the 2-D weights " + w.shape().str());
  if (group <= 0 || og <= 0 || ch != wd[1] * group || oc % group || ch % og)
    c.fail("X " + x.shape().str() + " and W " + w.shape().str() + " do not fit group " +
           std::to_string(group) + " and offset_group " + std::to_string(og));
  for (int i = 0; i < 2; ++i)
    if (ks[i] <= 0 || st[i] <= 0 || dil[i] <= 0 || pads[i] < 0 || pads[i + 2] < 0)
      c.fail("kernel_shape, strides and dilations must be positive and pads non-negative (W " +
             w.shape().str() + ")");
  const int64_t kk = ks[0] * ks[1];
  const int64_t oh = (h + pads[0] + pads[2] - ((ks[0] - 1) * dil[0] + 1)) / st[0] + 1;
  const int64_t ow = (wi + pads[1] + pads[3] - ((ks[1] - 1) * dil[1] + 1)) / st[1] + 1;
  if (oh < 1 || ow < 1) c.fail("the kernel does not fit in the padded input " + x.shape().str());
  if (od[0] != n || od[1] != og * kk * 2 || od[2] != oh || od[3] != ow)
    c.fail("offset is " + off.shape().str() + ", expected " + Shape({n, og * kk * 2, oh, ow}).str());
  const int64_t p = oh * ow, cg = ch / og;
  require_size(c, static_cast<double>(n) * static_cast<double>(ch) * static_cast<double>(kk * p),
               "the sampled columns");
  const DType f = DType::f64;
  auto k = [&](double v) { return g.scalar(v, f); };
  // The undeformed tap positions [K, P] along H and W.
  std::vector<double> bh(static_cast<size_t>(kk * p)), bw(bh.size());
  for (int64_t t = 0; t < kk; ++t)
    for (int64_t q = 0; q < p; ++q) {
      const int64_t oy = q / ow, ox = q % ow, ky = t / ks[1], kx = t % ks[1];  // output and tap position
      bh[static_cast<size_t>(t * p + q)] = static_cast<double>(-pads[0] + st[0] * oy + ky * dil[0]);
      bw[static_cast<size_t>(t * p + q)] = static_cast<double>(-pads[1] + st[1] * ox + kx * dil[1]);
    }
  Tensor o = g.reshape(g.cast(off, f), {n, og, kk, 2, p});
  auto comp = [&](int64_t i) {
    return g.reshape(g.slice(o, {0, 0, 0, i, 0}, {n, og, kk, i + 1, p}), {n, og, kk * p});
  };
  Tensor ph = g.add(comp(0), g.constant(TensorData::from_vector(Shape({kk * p}), f, bh)));
  Tensor pw = g.add(comp(1), g.constant(TensorData::from_vector(Shape({kk * p}), f, bw)));
  Tensor h0 = g.floor(ph), w0 = g.floor(pw), fh = g.sub(ph, h0), fw = g.sub(pw, w0);
  // Positions and tap weights in f64; the samples and the matmul in f32 (f64 for f64 inputs).
  const DType ct = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  auto as_ct = [&](Tensor t) { return t.dtype() == ct ? t : g.cast(t, ct); };
  Tensor flat = g.reshape(as_ct(x), {n, og, cg, h * wi});
  Tensor cols;
  for (int corner = 0; corner < 4; ++corner) {
    const bool dy = corner & 2, dx = corner & 1;
    Tensor hh = dy ? g.add(h0, k(1)) : h0, ww = dx ? g.add(w0, k(1)) : w0;
    Tensor wt = g.mul(dy ? fh : g.sub(k(1), fh), dx ? fw : g.sub(k(1), fw));
    Tensor inside =
        g.logical_and(g.logical_and(g.greater_equal(hh, k(0)), g.less(hh, k(static_cast<double>(h)))),
                      g.logical_and(g.greater_equal(ww, k(0)), g.less(ww, k(static_cast<double>(wi)))));
    Tensor idx = g.add(
        g.mul(g.minimum(g.maximum(hh, k(0)), k(static_cast<double>(h - 1))), k(static_cast<double>(wi))),
        g.minimum(g.maximum(ww, k(0)), k(static_cast<double>(wi - 1))));
    idx = g.broadcast_to(g.reshape(g.cast(idx, DType::i64), {n, og, 1, kk * p}), {n, og, cg, kk * p});
    Tensor v = g.mul(g.gather_along_axis(flat, idx, 3),
                     g.reshape(as_ct(g.mul(wt, g.cast(inside, f))), {n, og, 1, kk * p}));
    cols = corner == 0 ? v : g.add(cols, v);
  }
  if (c.has_input(4)) cols = g.mul(cols, g.reshape(as_ct(c.in(4)), {n, og, 1, kk * p}));
  const int64_t cpg = ch / group, opg = oc / group;
  cols = g.reshape(cols, {n, group, cpg * kk, p});
  Tensor wm = g.reshape(as_ct(w), {1, group, opg, cpg * kk});
  Tensor y = g.reshape(g.matmul(g.broadcast_to(wm, {n, group, opg, cpg * kk}), cols), {n, oc, oh, ow});
  if (c.has_input(3)) y = bias_nchw(g, y, as_ct(c.in(3)));
  c.out(0, g.cast(y, x.dtype()));
}

}  // namespace

const std::vector<Converter>& image_converters() {
  static const std::vector<Converter> t = {
      {"CenterCropPad", 18, kNewestOpset, center_crop_pad},
      {"AffineGrid", 20, kNewestOpset, affine_grid},
      {"Col2Im", 18, kNewestOpset, col2im},
      {"DeformConv", 19, kNewestOpset, deform_conv},
  };
  return t;
}

}  // namespace tg::onnx_import
