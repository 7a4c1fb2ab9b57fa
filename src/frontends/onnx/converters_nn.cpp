// Converters of ONNX's neural-network ops: Conv, ConvTranspose, pooling (1-D to 3-D), MaxUnpool,
// normalisations, Gemm, MatMul, softmax family, Dropout, losses.
#include <cmath>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// ONNX pads [b0, b1, ..., e0, e1, ...] -> tgraph [b0, e0, b1, e1, ...].
std::vector<int64_t> interleave_pads(const std::vector<int64_t>& p) {
  std::vector<int64_t> r;
  size_t k = p.size() / 2;
  for (size_t i = 0; i < k; ++i) {
    r.push_back(p[i]);
    r.push_back(p[i + k]);
  }
  return r;
}

PaddingStyle auto_pad(Ctx& c) {
  std::string a = c.attr_s("auto_pad", "NOTSET");
  if (a == "NOTSET") return PaddingStyle::explicit_;
  if (a == "VALID") return PaddingStyle::valid;
  if (a == "SAME_UPPER") return PaddingStyle::same;
  if (a == "SAME_LOWER") return PaddingStyle::same_lower;
  c.fail("unknown auto_pad '" + a + "'");
}

// 1-D windows run as 2-D ones with H = 1: inserts a unit dim at 2 and a unit value in lists.
void lift_1d(std::vector<int64_t>& v, int64_t unit, bool pads) {
  if (v.empty()) return;
  if (v.size() != (pads ? 2u : 1u)) throw Error("[onnx] a 1-D window attribute has " + std::to_string(v.size()) + " values");
  if (pads) v = {0, v[0], 0, v[1]};
  else v.insert(v.begin(), unit);
}

}  // namespace

Tensor bias_nchw(Graph& g, Tensor y, Tensor b) {
  std::vector<int64_t> s(static_cast<size_t>(y.rank()), 1);
  s[1] = -1;
  return g.add(y, g.reshape(b, s));
}

// The convolution of x and w with the node's attributes (no bias).
Tensor conv_core(Ctx& c, Tensor x, Tensor w) {
  Graph& g = c.g;
  int64_t r = x.rank();
  ConvDesc d;
  d.stride = c.attr_ints("strides");
  d.dilation = c.attr_ints("dilations");
  std::vector<int64_t> pads = c.attr_ints("pads");
  d.padding = auto_pad(c);
  d.groups = c.attr_i("group", 1);
  bool one_d = r == 3;
  if (one_d) {
    x = g.expand_dims(x, {2});
    w = g.expand_dims(w, {2});
    lift_1d(d.stride, 1, false);
    lift_1d(d.dilation, 1, false);
    lift_1d(pads, 0, true);
  } else if (r != 4 && r != 5) {
    c.fail("only 1-D, 2-D and 3-D convolutions are supported");
  }
  d.explicit_padding = interleave_pads(pads);
  d.data_layout = r == 5 ? Layout::ncdhw : Layout::nchw;
  d.weights_layout = r == 5 ? Layout::oidhw : Layout::oihw;
  Tensor y = r == 5 ? g.conv3d(x, w, d) : g.conv2d(x, w, d);
  return one_d ? g.squeeze(y, {2}) : y;
}

namespace {

void conv(Ctx& c) {
  Tensor y = conv_core(c, c.in(0), c.in(1));
  if (c.has_input(2)) y = bias_nchw(c.g, y, c.in(2));
  c.out(0, y);
}

// Scatters X into zeros at the flat indices I. The indices address the default unpooled shape;
// a larger output_shape keeps each value at the same spatial coordinates (ONNX's reference).
void max_unpool(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  Shape s = x.shape();
  if (!s.is_static()) c.fail("MaxUnpool needs a static shape");
  auto k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides"), pads = c.attr_ints("pads");
  size_t n = k.size();
  if (static_cast<int64_t>(n) != s.rank() - 2 || (!st.empty() && st.size() != n) || (!pads.empty() && pads.size() != 2 * n))
    c.fail("kernel_shape, strides and pads do not match the input's rank");
  std::vector<int64_t> def = {s[0], s[1]};
  for (size_t i = 0; i < n; ++i) {
    int64_t stride = st.empty() ? 1 : st[i];
    int64_t pb = pads.empty() ? 0 : pads[i], pe = pads.empty() ? 0 : pads[i + n];
    def.push_back((s[static_cast<int64_t>(i) + 2] - 1) * stride + k[i] - pb - pe);
  }
  std::vector<int64_t> out = c.has_input(2) ? c.ints_in(2) : def;
  if (out.size() != def.size()) c.fail("output_shape must have the input's rank");
  double total = 1;
  for (int64_t v : out) total *= static_cast<double>(v);
  require_size(c, total, "the output");
  Tensor idx = g.cast(g.reshape(c.in(1), {-1}), DType::i64);
  if (out != def) {  // flat index in `def` -> the same coordinates in `out`
    Tensor acc = g.scalar(0, DType::i64), rem = idx;
    int64_t stride_out = 1;
    for (size_t i = def.size(); i-- > 2;) {
      Tensor sz = g.scalar(static_cast<double>(def[i]), DType::i64);
      Tensor coord = g.floor_mod(rem, sz);
      rem = g.div(rem, sz);
      acc = g.add(acc, g.mul(coord, g.scalar(static_cast<double>(stride_out), DType::i64)));
      stride_out *= out[i];
    }
    idx = g.add(acc, g.mul(rem, g.scalar(static_cast<double>(stride_out), DType::i64)));
  }
  Tensor zeros = g.constant(TensorData::zeros(Shape{static_cast<int64_t>(total)}, x.dtype()));
  Tensor y = g.scatter(zeros, idx, g.reshape(x, {-1}), 0);
  c.out(0, g.reshape(y, out));
}

void conv_transpose(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), w = c.in(1);
  int64_t r = x.rank();
  if (r < 3 || r > 5) c.fail("only 1-D, 2-D and 3-D transposed convolutions are supported");
  if (w.rank() != r) c.fail("the weights must have the input's rank");
  bool one_d = r == 3;
  if (one_d) {
    x = g.expand_dims(x, {2});
    w = g.expand_dims(w, {2});
  }
  const size_t n = one_d ? 2 : static_cast<size_t>(r - 2);
  Shape xs = x.shape(), ws = w.shape();
  int64_t groups = c.attr_i("group", 1);
  auto fix = [&](std::vector<int64_t> v, int64_t def) {
    if (v.empty()) v.assign(n, def);
    else if (one_d) v.insert(v.begin(), def);
    if (v.size() != n) c.fail("a window attribute has the wrong number of values");
    return v;
  };
  std::vector<int64_t> stride = fix(c.attr_ints("strides"), 1), dil = fix(c.attr_ints("dilations"), 1);
  std::vector<int64_t> outpad = fix(c.attr_ints("output_padding"), 0);
  std::vector<int64_t> pads = c.attr_ints("pads");
  if (pads.empty()) pads.assign(2 * n, 0);
  else if (one_d && pads.size() == 2) pads = {0, pads[0], 0, pads[1]};
  if (pads.size() != 2 * n) c.fail("pads has the wrong number of values");
  std::vector<int64_t> out_shape = c.attr_ints("output_shape");
  std::string ap = c.attr_s("auto_pad", "NOTSET");
  if (!out_shape.empty() || ap == "SAME_UPPER" || ap == "SAME_LOWER") {
    size_t given = one_d ? 1 : n;
    if (out_shape.size() > given) out_shape.erase(out_shape.begin(), out_shape.end() - static_cast<long>(given));
    if (one_d && out_shape.size() == 1) out_shape.insert(out_shape.begin(), 1);
    if (!out_shape.empty() && out_shape.size() != n) c.fail("output_shape has the wrong number of values");
    for (size_t i = 0; i < n; ++i) {
      int64_t in = xs[static_cast<int64_t>(2 + i)], ke = (ws[static_cast<int64_t>(2 + i)] - 1) * dil[i] + 1;
      if (in < 0) c.fail("output_shape / SAME padding needs static spatial dims");
      int64_t want = out_shape.empty() ? in * stride[i] : out_shape[i];
      int64_t total = stride[i] * (in - 1) + outpad[i] + ke - want;
      if (total < 0) {
        outpad[i] -= total;
        total = 0;
      }
      bool upper = ap != "SAME_LOWER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[i + n] = total - pads[i];
    }
  }
  if (ap == "VALID") pads.assign(2 * n, 0);
  ConvDesc d;
  d.stride = stride;
  d.dilation = dil;
  d.explicit_padding = interleave_pads(pads);
  d.groups = groups;
  Tensor y;
  if (n == 2) {
    d.output_padding = outpad;
    d.data_layout = Layout::nchw;
    d.weights_layout = Layout::oihw;
    y = g.conv_transpose2d(x, w, d);
  } else {
    // The 3-D transposed convolution is the data gradient of the conv3d it transposes.
    if (!xs.is_static() || !ws.is_static()) c.fail("3-D transposed convolution needs static shapes");
    d.data_layout = Layout::ncdhw;
    d.weights_layout = Layout::oidhw;
    std::vector<int64_t> out = {xs[0], ws[1] * groups};
    for (size_t i = 0; i < n; ++i)
      out.push_back((xs[static_cast<int64_t>(2 + i)] - 1) * stride[i] + (ws[static_cast<int64_t>(2 + i)] - 1) * dil[i] + 1 -
                    pads[i] - pads[i + n] + outpad[i]);
    y = g.conv3d_data_grad(x, w, Shape(out), d);
  }
  if (one_d) y = g.squeeze(y, {2});
  if (c.has_input(2)) y = bias_nchw(g, y, c.in(2));
  c.out(0, y);
}

// 3-D pooling, separably: the 2-D pool over H, W of [N, C*D, H, W], then a 1-D pool over D
// built from slices (max never takes padding; avg divides by the per-dim counts' product).
template <bool is_max>
Tensor pool3d_of(Ctx& c, Tensor x, bool incl) {
  Graph& g = c.g;
  Shape s = x.shape();
  if (!s.is_static()) c.fail("3-D pooling needs a static shape");
  if (c.wants_output(1)) c.fail("3-D max pooling indices are not supported");
  std::vector<int64_t> k = c.attr_ints("kernel_shape"), st = c.attr_ints("strides"), dil = c.attr_ints("dilations");
  std::vector<int64_t> pads = c.attr_ints("pads");
  if (k.size() != 3) c.fail("kernel_shape must have 3 values");
  if (st.empty()) st.assign(3, 1);
  if (dil.empty()) dil.assign(3, 1);
  if (pads.empty()) pads.assign(6, 0);
  if (st.size() != 3 || dil.size() != 3 || pads.size() != 6) c.fail("strides, dilations and pads do not match");
  for (size_t i = 0; i < 3; ++i)
    if (k[i] <= 0 || st[i] <= 0 || dil[i] <= 0 || pads[i] < 0 || pads[i + 3] < 0)
      c.fail("kernel_shape, strides and dilations must be positive and pads non-negative (input " + s.str() +
             ")");
  PaddingStyle style = auto_pad(c);
  bool ceil_mode = c.attr_i("ceil_mode", 0) != 0;
  PoolDesc d;
  d.kernel = {k[1], k[2]};
  d.stride = {st[1], st[2]};
  d.dilation = {dil[1], dil[2]};
  d.explicit_padding = {pads[1], pads[4], pads[2], pads[5]};
  d.padding = style;
  d.ceil_mode = ceil_mode;
  d.count_include_pad = incl;
  d.data_layout = Layout::nchw;
  Tensor y = g.reshape(x, {s[0], s[1] * s[2], s[3], s[4]});
  y = is_max ? g.max_pool2d(y, d) : g.avg_pool2d(y, d);
  Shape ys = y.shape();
  y = g.reshape(y, {s[0], s[1], s[2], ys[2], ys[3]});
  int64_t D = s[2], ke = (k[0] - 1) * dil[0] + 1, pb = pads[0], pe = pads[3], out;
  if (style == PaddingStyle::same || style == PaddingStyle::same_lower) {
    out = (D + st[0] - 1) / st[0];
    int64_t total = std::max<int64_t>((out - 1) * st[0] + ke - D, 0);
    pb = style == PaddingStyle::same ? total / 2 : total - total / 2;
    pe = total - pb;
  } else {
    if (style == PaddingStyle::valid) pb = pe = 0;
    int64_t span = D + pb + pe - ke;
    if (span < 0) c.fail("the window is larger than the padded input");
    out = (ceil_mode ? (span + st[0] - 1) / st[0] : span / st[0]) + 1;
    if (ceil_mode && (out - 1) * st[0] >= D + pb) --out;
  }
  std::vector<Tensor> planes;
  for (int64_t o = 0; o < out; ++o) {
    Tensor acc;
    int64_t count = 0;  // the divisor along D: taps inside the input (or the padded extent)
    for (int64_t t = 0; t < k[0]; ++t) {
      int64_t p = o * st[0] + t * dil[0] - pb;
      count += incl ? (p >= -pb && p < D + pe) : (p >= 0 && p < D);
      if (p < 0 || p >= D) continue;
      Tensor sl = g.slice(y, {0, 0, p, 0, 0}, {-1, -1, p + 1, -1, -1});
      acc = !acc.valid() ? sl : is_max ? g.maximum_nan(acc, sl) : g.add(acc, sl);
    }
    if (!acc.valid()) c.fail("a pooling window covers only padding");
    if (!is_max) acc = g.div(acc, scalar_like(g, static_cast<double>(count), acc));
    planes.push_back(acc);
  }
  return planes.size() == 1 ? planes[0] : g.concat(planes, 2);
}

template <bool is_max>
void pool3d(Ctx& c) {
  c.out(0, pool3d_of<is_max>(c, c.in(0), c.attr_i("count_include_pad", 0) != 0));
}

// The 2-D pooling of a 1-D or 2-D ONNX pooling node over x (a 1-D one on x with a unit H,
// which one_d reports).
PoolDesc pool_desc(Ctx& c, Tensor& x, bool& one_d) {
  PoolDesc d;
  d.kernel = c.attr_ints("kernel_shape");
  d.stride = c.attr_ints("strides");
  if (d.stride.empty()) d.stride.assign(d.kernel.size(), 1);
  d.dilation = c.attr_ints("dilations");
  std::vector<int64_t> pads = c.attr_ints("pads");
  d.padding = auto_pad(c);
  d.ceil_mode = c.attr_i("ceil_mode", 0) != 0;
  d.count_include_pad = c.attr_i("count_include_pad", 0) != 0;
  d.data_layout = Layout::nchw;
  one_d = x.rank() == 3;
  if (one_d) {
    x = c.g.expand_dims(x, {2});
    lift_1d(d.kernel, 1, false);
    lift_1d(d.stride, 1, false);
    lift_1d(d.dilation, 1, false);
    lift_1d(pads, 0, true);
  }
  d.explicit_padding = interleave_pads(pads);
  return d;
}

// LpPool: (sum of |x|^p over each window)^(1/p), padding counting as zeros: the average over
// the full window (count_include_pad) times its size. 1-D to 3-D; ceil_mode windows past the
// padding would divide by fewer taps, so it is refused.
void lp_pool(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  if (x.rank() < 3 || x.rank() > 5)
    c.fail("only 1-D, 2-D and 3-D LpPool is supported, not rank " + std::to_string(x.rank()));
  if (c.attr_i("ceil_mode", 0)) c.fail("ceil_mode is not supported");
  const double p = static_cast<double>(c.attr_i("p", 2));
  if (p < 1) c.fail("p must be at least 1");
  Tensor v = p == 1 ? g.abs(x) : p == 2 ? g.square(x) : g.pow(g.abs(x), scalar_like(g, p, x));
  double taps = 1;
  for (int64_t k : c.attr_ints("kernel_shape")) taps *= static_cast<double>(k);
  bool one_d = false;
  Tensor avg;
  if (x.rank() == 5) {
    avg = pool3d_of<false>(c, v, true);
  } else {
    PoolDesc d = pool_desc(c, v, one_d);
    d.count_include_pad = true;
    avg = g.avg_pool2d(v, d);
  }
  Tensor sum = g.mul(avg, scalar_like(g, taps, v));
  Tensor y = p == 1 ? sum : p == 2 ? g.sqrt(sum) : g.pow(sum, scalar_like(g, 1 / p, sum));
  c.out(0, one_d ? g.squeeze(y, {2}) : y);
}

template <bool is_max>
void pool(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  int64_t r = x.rank();
  if (r == 5) return pool3d<is_max>(c);
  if (r != 3 && r != 4) c.fail("only 1-D, 2-D and 3-D pooling is supported");
  bool col_major = c.attr_i("storage_order", 0) != 0;
  bool one_d;
  PoolDesc d = pool_desc(c, x, one_d);
  if (!is_max) {
    Tensor y = g.avg_pool2d(x, d);
    return c.out(0, one_d ? g.squeeze(y, {2}) : y);
  }
  if (!c.wants_output(1)) {
    Tensor y = g.max_pool2d(x, d);
    return c.out(0, one_d ? g.squeeze(y, {2}) : y);
  }
  auto [y, idx] = g.max_pool2d_with_indices(x, d);
  Shape s = x.shape();
  if (!s.is_static()) c.fail("indices need a static input shape");
  // ONNX indices are flat over the whole NCHW tensor.
  int64_t plane = s[2] * s[3];
  TensorData base(Shape{s[0], s[1], 1, 1}, DType::i64);
  for (int64_t i = 0; i < s[0] * s[1]; ++i) base.ptr<int64_t>()[i] = i * plane;
  Tensor local = g.cast(idx, DType::i64);
  if (col_major) {  // h * W + w -> w * H + h
    Tensor W = g.scalar(static_cast<double>(s[3]), DType::i64), H = g.scalar(static_cast<double>(s[2]), DType::i64);
    local = g.add(g.mul(g.floor_mod(local, W), H), g.div(local, W));
  }
  Tensor flat = g.add(local, g.constant(base));
  c.out(0, one_d ? g.squeeze(y, {2}) : y);
  c.out(1, one_d ? g.squeeze(flat, {2}) : flat);
}

std::vector<int64_t> spatial_axes(Tensor x) {
  std::vector<int64_t> a;
  for (int64_t i = 2; i < x.rank(); ++i) a.push_back(i);
  return a;
}

void global_avg(Ctx& c) { c.out(0, c.g.reduce_mean(c.in(0), spatial_axes(c.in(0)), true)); }
void global_max(Ctx& c) { c.out(0, c.g.reduce_max(c.in(0), spatial_axes(c.in(0)), true)); }

void batch_norm(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), scale = c.in(1), b = c.in(2), mean = c.in(3), var = c.in(4);
  double eps = c.attr_f("epsilon", 1e-5f);
  // Opsets before 7 say so with is_test (their extra outputs are the statistics of training).
  bool training = c.opset >= 14 ? c.attr_i("training_mode", 0) != 0
                  : c.opset < 7  ? c.attr_i("is_test", 0) == 0 && c.num_outputs() > 1
                                 : c.num_outputs() > 1 && c.opset >= 9;
  if (c.opset < 9 && c.attr_i("spatial", 1) == 0) c.fail("spatial=0 is not supported");
  if (!training) return c.out(0, g.batch_norm(x, mean, var, scale, b, 1, eps));
  double mom = c.attr_f("momentum", 0.9f);
  auto r = g.batch_norm_training(x, scale, b, 1, eps);
  c.out(0, r[0]);
  auto blend = [&](Tensor run, Tensor cur) {
    cur = g.cast(cur, run.dtype());
    return g.add(g.mul(run, scalar_like(g, mom, run)), g.mul(cur, scalar_like(g, 1 - mom, run)));
  };
  c.out(1, blend(mean, r[1]));
  c.out(2, blend(var, r[2]));
}

// (x - mean) / sqrt(var + eps) over `axes`, returning also mean and 1/sqrt(var + eps).
std::vector<Tensor> normalise(Graph& g, Tensor x, const std::vector<int64_t>& axes, double eps) {
  Tensor mean = g.reduce_mean(x, axes, true);
  Tensor d = g.sub(x, mean);
  Tensor var = g.reduce_mean(g.mul(d, d), axes, true);
  Tensor inv = g.rsqrt(g.add(var, scalar_like(g, eps, var)));
  return {g.mul(d, inv), mean, inv};
}

void instance_norm(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  require_rank(c, x, 3, 8, "the input (N, C, D1, ...)");  // s[1] below: found by fuzzing
  Tensor y = normalise(g, x, spatial_axes(x), c.attr_f("epsilon", 1e-5f))[0];
  std::vector<int64_t> s(static_cast<size_t>(x.rank()), 1);
  s[1] = -1;
  c.out(0, g.add(g.mul(y, g.reshape(c.in(1), s)), g.reshape(c.in(2), s)));
}

void layer_norm(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  int64_t axis = norm_axis(c, c.attr_i("axis", -1), x.rank());
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < x.rank(); ++i) axes.push_back(i);
  const bool wide = x.dtype() == DType::f32 || x.dtype() == DType::f64;
  // The usual case (transformers: f32, scale and bias over the normalised dims, no Mean or
  // InvStdDev output) is tgraph's layer_norm: one pass on the CPU, decomposed for CUDA.
  if (wide && x.shape().is_static() && c.has_input(2) && !c.wants_output(1) && !c.wants_output(2)) {
    const std::vector<int64_t> dims = x.shape().dims();
    const std::vector<int64_t> norm_dims(dims.begin() + axis, dims.end());
    auto fits = [&](const Tensor& p) { return p.dtype() == x.dtype() && p.shape().dims() == norm_dims; };
    if (fits(c.in(1)) && fits(c.in(2))) {
      c.out(0, g.layer_norm(x, c.in(1), c.in(2), axis, c.attr_f("epsilon", 1e-5f)));
      return;
    }
  }
  Tensor xs = x;
  if (!wide && c.attr_i("stash_type", 1) == 1) xs = g.cast(x, DType::f32);
  auto n = normalise(g, xs, axes, c.attr_f("epsilon", 1e-5f));
  Tensor y = g.mul(g.cast(n[0], x.dtype()), c.in(1));
  if (c.has_input(2)) y = g.add(y, c.in(2));
  c.out(0, y);
  c.out(1, n[1]);
  c.out(2, n[2]);
}

// Statistics per (image, group) over the group's channels and the spatial dims. Opset 18's
// scale / bias hold one value per group, opset 21's one per channel.
void group_norm(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  require_rank(c, x, 3, 64, "X");
  std::vector<int64_t> d = static_dims(c, x, "GroupNormalization");
  int64_t groups = c.attr_i("num_groups", 0), C = d[1];
  if (groups < 1 || C % groups) c.fail("num_groups must divide the channels");
  std::vector<int64_t> grouped = {d[0], groups, -1};
  Tensor y = g.reshape(normalise(g, g.reshape(x, grouped), {2}, c.attr_f("epsilon", 1e-5f))[0], d);
  std::vector<int64_t> bshape(d.size(), 1);
  bshape[1] = C;
  auto per_channel = [&](Tensor t) {
    if (c.opset < 21) t = g.reshape(g.broadcast_to(g.reshape(t, {groups, 1}), {groups, C / groups}), {C});
    return g.reshape(t, bshape);
  };
  c.out(0, g.add(g.mul(y, per_channel(c.in(1))), per_channel(c.in(2))));
}

void lp_norm(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  int64_t axis = norm_axis(c, c.attr_i("axis", -1), x.rank()), p = c.attr_i("p", 2);
  Tensor n;
  if (p == 1) n = g.reduce_sum(g.abs(x), {axis}, true);
  else if (p == 2) n = g.sqrt(g.reduce_sum(g.mul(x, x), {axis}, true));
  else c.fail("p must be 1 or 2");
  c.out(0, g.div_no_nan(x, n));  // a zero norm gives 0 (ONNX's reference), not NaN
}

void lrn(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  int64_t size = c.attr_i("size", 1);
  require_rank(c, x, 2, 64, "the input");
  if (size < 1) c.fail("size must be positive");
  double alpha = c.attr_f("alpha", 1e-4f), beta = c.attr_f("beta", 0.75f), bias = c.attr_f("bias", 1.f);
  Shape s = x.shape();
  if (!s.is_static()) c.fail("LRN needs a static shape");
  int64_t r = x.rank(), ch = s[1];
  std::vector<int64_t> before(static_cast<size_t>(r), 0), after(static_cast<size_t>(r), 0);
  before[1] = (size - 1) / 2;
  after[1] = size - 1 - before[1];
  Tensor sq = g.pad(g.mul(x, x), before, after);
  Tensor sum;
  for (int64_t k = 0; k < size; ++k) {
    std::vector<int64_t> b(static_cast<size_t>(r), 0), e(static_cast<size_t>(r), -1);
    b[1] = k;
    e[1] = k + ch;
    Tensor part = g.slice(sq, b, e);
    sum = sum.valid() ? g.add(sum, part) : part;
  }
  Tensor den = g.pow(g.add(g.mul(sum, scalar_like(g, alpha / static_cast<double>(size), x)), scalar_like(g, bias, x)),
                     scalar_like(g, beta, x));
  c.out(0, g.div(x, den));
}

// op(a) @ op(b) of inputs 0 and 1 when both are matrices dequantized from FP8 by one scale
// each: tgraph's scaled_matmul (FP8 tensor cores on CUDA; the 8-bit values are exact in the
// dequantized ones, the scales multiply the f32 sum once). None otherwise.
std::optional<Tensor> fp8_product(Ctx& c, bool ta, bool tb) {
  const Tensor a = c.in(0), b = c.in(1);
  const std::optional<Fp8Dequantized> qa = c.value_in(0).fp8, qb = c.value_in(1).fp8;
  if (!qa || !qb || a.rank() != 2 || b.rank() != 2 || (qa->format == DType::f8e5m2 && qb->format == DType::f8e5m2) ||
      a.dtype() != b.dtype() || (a.dtype() != DType::f32 && a.dtype() != DType::f16 && a.dtype() != DType::bf16))
    return std::nullopt;
  return c.g.scaled_matmul(c.g.cast(qa->q, qa->format), c.g.cast(qb->q, qb->format), qa->scale, qb->scale, a.dtype(),
                           ta, tb);
}

void gemm(Ctx& c) {
  Graph& g = c.g;
  const bool ta = c.attr_i("transA", 0) != 0, tb = c.attr_i("transB", 0) != 0;
  std::optional<Tensor> fp8 = fp8_product(c, ta, tb);
  Tensor y = fp8 ? *fp8 : g.matmul(c.in(0), c.in(1), ta, tb);
  double alpha = c.attr_f("alpha", 1.f), beta = c.attr_f("beta", 1.f);
  if (alpha != 1.0) y = g.mul(y, scalar_like(g, alpha, y));
  if (c.has_input(2)) {
    Tensor b = c.in(2);
    if (beta != 1.0) b = g.mul(b, scalar_like(g, beta, b));
    y = g.add(y, b);
  }
  c.out(0, y);
}

void matmul(Ctx& c) {
  Graph& g = c.g;
  Tensor a = c.in(0), b = c.in(1);
  if (std::optional<Tensor> fp8 = fp8_product(c, false, false)) return c.out(0, *fp8);
  bool va = a.rank() == 1, vb = b.rank() == 1;
  if (va) a = g.expand_dims(a, {0});
  if (vb) b = g.expand_dims(b, {1});
  Tensor y = g.matmul(a, b);
  if (va && vb) y = g.reshape(y, {});
  else if (va) y = g.squeeze(y, {y.rank() - 2});
  else if (vb) y = g.squeeze(y, {y.rank() - 1});
  c.out(0, y);
}

// Softmax-like ops: opsets before 13 flatten to [prod(:axis), prod(axis:)].
template <int kind>  // 0 softmax, 1 log_softmax, 2 hardmax
void softmax(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  auto op = [&](Tensor t, int64_t axis) {
    if (kind == 0) return g.softmax(t, axis);
    if (kind == 1) return g.log_softmax(t, axis);
    int64_t n = t.shape()[axis];
    if (n < 0) c.fail("Hardmax needs a static size along the axis");
    return g.one_hot(g.argmax(t, axis), n, axis, t.dtype());
  };
  if (c.opset >= 13) {
    int64_t axis = norm_axis(c, c.attr_i("axis", -1), x.rank());
    return c.out(0, op(x, axis));
  }
  int64_t axis = norm_axis(c, c.attr_i("axis", 1), x.rank());
  Shape s = x.shape();
  if (!s.is_static()) c.fail("needs a static shape before opset 13");
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < x.rank(); ++i) (i < axis ? a : b) *= s[i];
  c.out(0, g.reshape(op(g.reshape(x, {a, b}), 1), s.dims()));
}

// Inference: the identity. Training: keep where a uniform draw (tgraph's Philox stream, seeded
// by the `seed` attribute or 0) is >= ratio, scaled by 1 / (1 - ratio).
void dropout(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  bool training = false;
  double ratio = c.attr_f("ratio", 0.5f);
  if (c.opset >= 12) {
    if (c.has_input(1)) ratio = c.const_in(1).at(0);
    if (c.has_input(2)) training = c.const_in(2).at(0) != 0;
  } else if (c.opset < 7) {
    training = c.attr_i("is_test", 0) == 0;
  }
  if (!training || ratio == 0) {
    c.alias(0, 0);
    if (c.wants_output(1)) c.out(1, g.broadcast_like(g.scalar(1, DType::boolean), x));
    return;
  }
  if (ratio < 0 || ratio >= 1) c.fail("ratio must be in [0, 1)");
  Shape s = x.shape();
  if (!s.is_static()) c.fail("training-mode dropout needs a static shape");
  RandomDesc d;
  d.shape = s.dims();
  d.dtype = DType::f32;
  auto [u, next] = g.random(g.random_state(c.attr_i("seed", 0)), d);
  Tensor keep = g.greater_equal(u, g.scalar(ratio, DType::f32));
  c.out(0, g.select(keep, g.mul(x, scalar_like(g, 1 / (1 - ratio), x)), scalar_like(g, 0, x)));
  c.out(1, keep);
}

void mvn(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  std::vector<int64_t> axes = c.attr_ints("axes", {0, 2, 3});
  for (auto& a : axes) a = norm_axis(c, a, x.rank());
  Tensor mean = g.reduce_mean(x, axes, true);
  Tensor var = g.sub(g.reduce_mean(g.mul(x, x), axes, true), g.mul(mean, mean));
  Tensor std = g.add(g.sqrt(var), scalar_like(g, 1e-9, x));
  c.out(0, g.div(g.sub(x, mean), std));
}

// -log_prob[n, t[n, d...], d...] * weight[t], with ignore_index and reduction.
Tensor nll(Ctx& c, Tensor logp, Tensor target, std::optional<Tensor> weight) {
  Graph& g = c.g;
  std::string red = c.attr_s("reduction", "mean");
  Tensor t = target;
  Tensor mask;
  if (c.has_attr("ignore_index")) {
    mask = g.not_equal(t, g.scalar(static_cast<double>(c.attr_i("ignore_index", 0)), t.dtype()));
    t = g.select(mask, t, g.scalar(0, t.dtype()));
  }
  Tensor picked = g.squeeze(g.gather_along_axis(logp, g.expand_dims(t, {1}), 1), {1});
  Tensor w = weight ? g.gather(*weight, t, 0) : g.broadcast_like(scalar_like(g, 1, logp), picked);
  if (mask.valid()) w = g.mul(w, g.cast(mask, w.dtype()));
  Tensor loss = g.neg(g.mul(picked, w));
  if (red == "none") return loss;
  Tensor sum = g.reduce_sum(loss);
  if (red == "sum") return sum;
  if (red != "mean") c.fail("unknown reduction '" + red + "'");
  return g.div(sum, g.reduce_sum(w));
}

void nll_loss(Ctx& c) {
  std::optional<Tensor> w;
  if (c.has_input(2)) w = c.in(2);
  c.out(0, nll(c, c.in(0), c.in(1), w));
}

void sce_loss(Ctx& c) {
  std::optional<Tensor> w;
  if (c.has_input(2)) w = c.in(2);
  Tensor logp = c.g.log_softmax(c.in(0), 1);
  c.out(0, nll(c, logp, c.in(1), w));
  c.out(1, logp);
}

}  // namespace

const std::vector<Converter>& nn_converters() {
  static const std::vector<Converter> t = {
      {"Conv", 1, kNewestOpset, conv},
      {"ConvTranspose", 1, kNewestOpset, conv_transpose},
      {"MaxPool", 1, kNewestOpset, pool<true>},
      {"AveragePool", 1, kNewestOpset, pool<false>},
      {"LpPool", 1, kNewestOpset, lp_pool},
      {"GlobalAveragePool", 1, kNewestOpset, global_avg},
      {"GlobalMaxPool", 1, kNewestOpset, global_max},
      {"BatchNormalization", 1, kNewestOpset, batch_norm},
      {"InstanceNormalization", 6, kNewestOpset, instance_norm},
      {"LayerNormalization", 17, kNewestOpset, layer_norm},
      {"LRN", 1, kNewestOpset, lrn},
      {"GroupNormalization", 18, kNewestOpset, group_norm},
      {"LpNormalization", 1, kNewestOpset, lp_norm},
      {"Gemm", 1, kNewestOpset, gemm},  // opsets < 7: C broadcast only with broadcast=1, as numpy's
      {"MatMul", 1, kNewestOpset, matmul},
      {"Softmax", 1, kNewestOpset, softmax<0>},
      {"LogSoftmax", 1, kNewestOpset, softmax<1>},
      {"Hardmax", 1, kNewestOpset, softmax<2>},
      {"Dropout", 1, kNewestOpset, dropout},
      {"MeanVarianceNormalization", 9, kNewestOpset, mvn},
      {"NegativeLogLikelihoodLoss", 12, kNewestOpset, nll_loss},
      {"SoftmaxCrossEntropyLoss", 12, kNewestOpset, sce_loss},
      {"MaxUnpool", 9, kNewestOpset, max_unpool},
  };
  return t;
}

}  // namespace tg::onnx_import
