// Reference convolution (2-D / 3-D, grouped, dilated, padded, any layout), its transposed form
// and gradients, and 2-D pooling with its gradients. Every conv variant is the same loop over
// (image, output channel, output position, input channel in the group, kernel position) of a
// forward convolution; they differ only in which tensor accumulates.
#include <algorithm>
#include <cmath>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

bool channels_last(Layout l) { return l == Layout::nhwc || l == Layout::ndhwc; }
bool spatial_first(Layout l) { return l == Layout::hwio || l == Layout::dhwio; }

// Geometry of a forward window op from x (input) to y (output).
struct Window {
  Dims xsp, ysp, k, stride, dil, pad;  // pad: before per spatial dim
};

// Padding before each spatial dim: explicit values, 0 for valid, or TensorFlow's same split
// (total = max((out-1)*stride + window - in, 0); same puts the odd unit after, same_lower before).
Dims pads_before(PaddingStyle p, const std::vector<int64_t>& expl, const Window& w) {
  Dims pb(w.xsp.size(), 0);
  for (size_t i = 0; i < pb.size(); ++i) {
    int64_t ke = (w.k[i] - 1) * w.dil[i] + 1;
    int64_t total = std::max<int64_t>((w.ysp[i] - 1) * w.stride[i] + ke - w.xsp[i], 0);
    if (p == PaddingStyle::explicit_) pb[i] = expl.empty() ? 0 : expl[2 * i];
    else if (p == PaddingStyle::same) pb[i] = total / 2;
    else if (p == PaddingStyle::same_lower) pb[i] = (total + 1) / 2;
  }
  return pb;
}

Dims or_ones(const std::vector<int64_t>& v, size_t n) { return v.empty() ? Dims(n, 1) : v; }

// Index of (batch n, channel ch, spatial sp) in an activation of dims d.
int64_t act_index(const Dims& d, bool last, int64_t n, int64_t ch, const Dims& sp) {
  Dims idx{n};
  if (!last) idx.push_back(ch);
  idx.insert(idx.end(), sp.begin(), sp.end());
  if (last) idx.push_back(ch);
  return ravel(idx, d);
}

struct Conv {
  Dims xd, yd, wd;
  bool last, sfirst;
  int64_t groups;
  Window win;
  int64_t N() const { return xd[0]; }
  int64_t C() const { return last ? xd.back() : xd[1]; }
  int64_t O() const { return last ? yd.back() : yd[1]; }
  int64_t w_index(int64_t o, int64_t i, const Dims& k) const {
    Dims idx;
    if (!sfirst) idx = {o, i};
    idx.insert(idx.end(), k.begin(), k.end());
    if (sfirst) idx.insert(idx.end(), {i, o});
    return ravel(idx, wd);
  }
};

Conv make_conv(const ConvDesc& d, const Dims& xd, const Dims& yd, const Dims& wd) {
  const size_t ns = xd.size() - 2;
  Conv c{xd, yd, wd, channels_last(d.data_layout), spatial_first(d.weights_layout), d.groups, {}};
  auto spatial = [&](const Dims& a) { return c.last ? Dims(a.begin() + 1, a.end() - 1) : Dims(a.begin() + 2, a.end()); };
  c.win.xsp = spatial(xd);
  c.win.ysp = spatial(yd);
  c.win.k = c.sfirst ? Dims(wd.begin(), wd.end() - 2) : Dims(wd.begin() + 2, wd.end());
  c.win.stride = or_ones(d.stride, ns);
  c.win.dil = or_ones(d.dilation, ns);
  c.win.pad = pads_before(d.padding, d.explicit_padding, c.win);
  return c;
}

enum class Acc { y, x, w };  // which tensor accumulates: forward, data grad, weight grad

// acc += the products of the forward convolution that touch it; a/b are the two operands.
void conv_loop(const Conv& cv, Acc mode, const TensorData& a, const TensorData& b, std::vector<double>& acc) {
  const int64_t G = cv.groups, cpg = cv.C() / G, opg = cv.O() / G;
  std::vector<Dims> ypos, kpos;
  for (int64_t p = 0; p < numel(cv.win.ysp); ++p) ypos.push_back(unravel(p, cv.win.ysp));
  for (int64_t q = 0; q < numel(cv.win.k); ++q) kpos.push_back(unravel(q, cv.win.k));
  for (int64_t n = 0; n < cv.N(); ++n)
    for (int64_t o = 0; o < cv.O(); ++o)
      for (const Dims& yp : ypos) {
        int64_t yi = act_index(cv.yd, cv.last, n, o, yp);
        for (int64_t i = 0; i < cpg; ++i)
          for (const Dims& kp : kpos) {
            Dims xp(kp.size());
            bool inside = true;
            for (size_t s = 0; s < kp.size(); ++s) {
              xp[s] = yp[s] * cv.win.stride[s] + kp[s] * cv.win.dil[s] - cv.win.pad[s];
              inside &= xp[s] >= 0 && xp[s] < cv.win.xsp[s];
            }
            if (!inside) continue;
            int64_t xi = act_index(cv.xd, cv.last, n, (o / opg) * cpg + i, xp), wi = cv.w_index(o, i, kp);
            switch (mode) {
              case Acc::y: acc[static_cast<size_t>(yi)] += a.at(xi) * b.at(wi); break;        // (x, w)
              case Acc::x: acc[static_cast<size_t>(xi)] += a.at(yi) * b.at(wi); break;        // (dy, w)
              case Acc::w: acc[static_cast<size_t>(wi)] += a.at(yi) * b.at(xi); break;        // (dy, x)
            }
          }
      }
}

TensorData conv(const Ctx& c) {
  TensorData out = c.output(0);
  std::vector<double> acc(static_cast<size_t>(out.num_elements()), 0.0);
  const TensorData &a = c.in[0], &b = c.in[1];
  switch (c.kind()) {
    case OpKind::Conv2d: case OpKind::Conv3d:
      conv_loop(make_conv(c.attr<ConvDesc>(), dims(a), dims(out), dims(b)), Acc::y, a, b, acc);
      break;
    case OpKind::ConvTranspose2d:  // the data gradient of the conv from `out` to `a`
      conv_loop(make_conv(c.attr<ConvDesc>(), dims(out), dims(a), dims(b)), Acc::x, a, b, acc);
      break;
    case OpKind::Conv2dDataGrad: case OpKind::Conv3dDataGrad:
      conv_loop(make_conv(c.attr<ConvGradDesc>().conv, dims(out), dims(a), dims(b)), Acc::x, a, b, acc);
      break;
    default:  // weight grads: (dy, x) -> w
      conv_loop(make_conv(c.attr<ConvGradDesc>().conv, dims(b), dims(a), dims(out)), Acc::w, a, b, acc);
  }
  for (int64_t i = 0; i < out.num_elements(); ++i) out.set(i, acc[static_cast<size_t>(i)]);
  return out;
}

// ---- pooling ----------------------------------------------------------------------------------

struct Pool {
  Dims xd, yd;
  bool last;
  Window win;
  Dims pad_after;
};

Pool make_pool(const PoolDesc& d, const Dims& xd, const Dims& yd) {
  Pool p{xd, yd, channels_last(d.data_layout), {}, {}};
  auto spatial = [&](const Dims& a) { return p.last ? Dims{a[1], a[2]} : Dims{a[2], a[3]}; };
  p.win = {spatial(xd), spatial(yd), d.kernel, d.stride.empty() ? d.kernel : d.stride,
           or_ones(d.dilation, 2), {}};
  p.win.pad = pads_before(d.padding, d.explicit_padding, p.win);
  for (size_t i = 0; i < 2; ++i) {
    int64_t ke = (d.kernel[i] - 1) * p.win.dil[i] + 1;
    int64_t total = std::max<int64_t>((p.win.ysp[i] - 1) * p.win.stride[i] + ke - p.win.xsp[i], 0);
    p.pad_after.push_back(d.padding == PaddingStyle::explicit_
                              ? (d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i + 1])
                              : d.padding == PaddingStyle::valid ? 0 : total - p.win.pad[i]);
  }
  return p;
}

// One pooling window: its taps inside x (flat h*W + w per image-channel) and how many taps lie
// inside the padded extent [-before, in + after).
struct Taps {
  std::vector<int64_t> inside;
  int64_t in_padded = 0;
};

Taps taps(const Pool& p, int64_t oh, int64_t ow) {
  Taps t;
  const Window& w = p.win;
  for (int64_t kh = 0; kh < w.k[0]; ++kh)
    for (int64_t kw = 0; kw < w.k[1]; ++kw) {
      int64_t h = oh * w.stride[0] + kh * w.dil[0] - w.pad[0], x = ow * w.stride[1] + kw * w.dil[1] - w.pad[1];
      bool in_h = h >= 0 && h < w.xsp[0], in_w = x >= 0 && x < w.xsp[1];
      if (in_h && in_w) t.inside.push_back(h * w.xsp[1] + x);
      if (h >= -w.pad[0] && h < w.xsp[0] + p.pad_after[0] && x >= -w.pad[1] && x < w.xsp[1] + p.pad_after[1])
        ++t.in_padded;
    }
  return t;
}

// Position in `flat` of the first maximum of x over those indices (a NaN wins); -1 if empty.
int64_t argmax_tap(const TensorData& x, const std::vector<int64_t>& flat) {
  int64_t best = -1;
  for (size_t k = 0; k < flat.size(); ++k) {
    if (best < 0) {
      best = static_cast<int64_t>(k);
      continue;
    }
    int64_t bi = flat[static_cast<size_t>(best)], vi = flat[k];
    bool greater;
    if (int_like(x.dtype())) {
      greater = load_int(x, vi) > load_int(x, bi);
    } else {
      double b = x.at(bi), v = x.at(vi);
      greater = !std::isnan(b) && (std::isnan(v) || v > b);
    }
    if (greater) best = static_cast<int64_t>(k);
  }
  return best;
}

std::vector<TensorData> pool(const Ctx& c) {
  const auto& d = c.attr<PoolDesc>();
  const bool grad = c.kind() == OpKind::MaxPool2dGrad || c.kind() == OpKind::AvgPool2dGrad;
  const TensorData& x = grad ? c.in[1] : c.in[0];
  const bool is_max = c.kind() == OpKind::MaxPool2d || c.kind() == OpKind::MaxPool2dWithIndices ||
                      c.kind() == OpKind::MaxPool2dGrad;
  std::vector<TensorData> out;
  for (size_t k = 0; k < c.out_types.size(); ++k) out.push_back(c.output(k));
  const Dims& yd = grad ? dims(c.in[0]) : dims(out[0]);
  Pool p = make_pool(d, dims(x), yd);
  std::vector<double> dx(grad ? static_cast<size_t>(x.num_elements()) : 0, 0.0);
  const int64_t N = dims(x)[0], C = p.last ? dims(x)[3] : dims(x)[1];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t oh = 0; oh < p.win.ysp[0]; ++oh)
        for (int64_t ow = 0; ow < p.win.ysp[1]; ++ow) {
          Taps t = taps(p, oh, ow);
          std::vector<int64_t> flat;  // the taps' indices into x
          for (int64_t f : t.inside) flat.push_back(act_index(dims(x), p.last, n, ch, {f / p.win.xsp[1], f % p.win.xsp[1]}));
          int64_t yi = act_index(yd, p.last, n, ch, {oh, ow});
          if (is_max) {
            int64_t b = argmax_tap(x, flat);
            if (grad) {
              if (b >= 0) dx[static_cast<size_t>(flat[static_cast<size_t>(b)])] += c.in[0].at(yi);
              continue;
            }
            if (b >= 0) copy_elem(out[0], yi, x, flat[static_cast<size_t>(b)]);
            else out[0].set(yi, lowest_of<double>(x.dtype()));
            if (out.size() > 1) store_int(out[1], yi, b >= 0 ? t.inside[static_cast<size_t>(b)] : -1);
            continue;
          }
          double div = static_cast<double>(d.count_include_pad ? t.in_padded : static_cast<int64_t>(flat.size()));
          if (grad) {
            for (int64_t f : flat) dx[static_cast<size_t>(f)] += div > 0 ? c.in[0].at(yi) / div : 0.0;
            continue;
          }
          double s = 0;
          for (int64_t f : flat) s += x.at(f);
          out[0].set(yi, div > 0 ? s / div : 0.0);
        }
  if (grad)
    for (int64_t i = 0; i < out[0].num_elements(); ++i) out[0].set(i, dx[static_cast<size_t>(i)]);
  return out;
}

}  // namespace

std::vector<TensorData> eval_conv(const Ctx& c) { return {conv(c)}; }
std::vector<TensorData> eval_pool(const Ctx& c) { return pool(c); }

}  // namespace tg::detail::ref
