// Converters of image-geometry ops: CenterCropPad (slice and pad), AffineGrid (a constant base
// grid times theta) and Col2Im (the data gradient of the convolution whose im2col it inverts).
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
    c.fail("shape has " + std::to_string(shape.size()) + " values for " + std::to_string(axes.size()) + " axes of " +
           x.shape().str());
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
    v[static_cast<size_t>(i)] = corners ? (n > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(n - 1) : -1.0)
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
    c.fail("theta is " + theta.shape().str() + ", expected [N, " + std::to_string(k) + ", " + std::to_string(k + 1) + "]");
  if (td[0] != size[0]) c.fail("theta's batch " + std::to_string(td[0]) + " is not size's N " + std::to_string(size[0]));
  const std::vector<int64_t> sp(size.begin() + 2, size.end());  // (D,) H, W
  double points = 1;
  for (int64_t s : sp) {
    if (s <= 0) c.fail("size holds the non-positive spatial size " + std::to_string(s));
    points *= static_cast<double>(s);
  }
  require_size(c, points * static_cast<double>(k + 1), "the base grid");
  const bool corners = c.attr_i("align_corners", 0) != 0;
  std::vector<std::vector<double>> lines;
  for (int64_t s : sp) lines.push_back(grid_line(s, corners));
  const auto np = static_cast<int64_t>(points);
  std::vector<double> base(static_cast<size_t>(np * (k + 1)));
  for (int64_t p = 0; p < np; ++p) {
    int64_t rest = p;
    // Components in x, y, (z) order: x runs along the last spatial dim.
    for (int64_t d = k - 1; d >= 0; --d) {
      const int64_t n = sp[static_cast<size_t>(d)];
      base[static_cast<size_t>(p * (k + 1) + (k - 1 - d))] = lines[static_cast<size_t>(d)][static_cast<size_t>(rest % n)];
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
    if (v.size() != count) c.fail(std::string(name) + " needs " + std::to_string(count) + " values, has " + std::to_string(v.size()));
    return v;
  };
  std::vector<int64_t> stride = fix("strides", n, 1), dil = fix("dilations", n, 1), pads = fix("pads", 2 * n, 0);
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
    c.fail("input " + x.shape().str() + " must be [N, C * " + std::to_string(kprod) + ", " + std::to_string(blocks) +
           "] for these image_shape, block_shape, strides, dilations and pads");
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
  Tensor y = m == 3 ? g.conv3d_data_grad(g.reshape(x, dy), w, Shape(in), d) : g.conv2d_data_grad(g.reshape(x, dy), w, Shape(in), d);
  std::vector<int64_t> out = {xd[0], ch};
  const std::vector<int64_t> orig = c.ints_in(1);
  out.insert(out.end(), orig.begin(), orig.end());
  c.out(0, g.reshape(y, out));
}

}  // namespace

const std::vector<Converter>& image_converters() {
  static const std::vector<Converter> t = {
      {"CenterCropPad", 18, kNewestOpset, center_crop_pad},
      {"AffineGrid", 20, kNewestOpset, affine_grid},
      {"Col2Im", 18, kNewestOpset, col2im},
  };
  return t;
}

}  // namespace tg::onnx_import
