// Fast f32 2-D pooling and its gradients as OpenMP loops over images (nhwc / nchw). The window
// geometry is the reference's (src/backends/cpu/ref_conv.cpp): padding before from the
// padding style and the output size (so ceil_mode needs nothing extra), padding after for
// count_include_pad, the first maximum winning (a NaN wins), an empty window giving -inf (max)
// or 0 (avg). Written as plain loops rather than oneDNN pooling so every one of those rules
// holds exactly; gradients accumulate per image in double, as the reference does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/reference.h"

namespace tg::detail::fast {
namespace {

struct PoolGeom {
  bool last;
  int64_t N, C, H, W, OH, OW;
  int64_t k[2], s[2], dil[2], pb[2], pa[2];
  int64_t x_index(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return last ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
  }
  int64_t y_index(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return last ? ((n * OH + h) * OW + w) * C + c : ((n * C + c) * OH + h) * OW + w;
  }
};

bool pool_geometry(const PoolDesc& d, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, PoolGeom& p) {
  if (xd.size() != 4 || yd.size() != 4) return false;
  if (d.data_layout == Layout::nhwc) p.last = true;
  else if (d.data_layout == Layout::nchw) p.last = false;
  else return false;
  p.N = xd[0];
  p.C = p.last ? xd[3] : xd[1];
  p.H = p.last ? xd[1] : xd[2];
  p.W = p.last ? xd[2] : xd[3];
  p.OH = p.last ? yd[1] : yd[2];
  p.OW = p.last ? yd[2] : yd[3];
  if (yd[0] != p.N || (p.last ? yd[3] : yd[1]) != p.C) return false;
  if (d.kernel.size() != 2) return false;
  const std::vector<int64_t> st = d.stride.empty() ? d.kernel : d.stride;
  const std::vector<int64_t> dl = d.dilation.empty() ? std::vector<int64_t>{1, 1} : d.dilation;
  if (st.size() != 2 || dl.size() != 2) return false;
  const int64_t xsp[2] = {p.H, p.W}, ysp[2] = {p.OH, p.OW};
  for (int i = 0; i < 2; ++i) {
    p.k[i] = d.kernel[i];
    p.s[i] = st[i];
    p.dil[i] = dl[i];
    if (p.k[i] < 1 || p.s[i] < 1 || p.dil[i] < 1) return false;
    const int64_t ke = (p.k[i] - 1) * p.dil[i] + 1;
    const int64_t total = std::max<int64_t>((ysp[i] - 1) * p.s[i] + ke - xsp[i], 0);
    switch (d.padding) {
      case PaddingStyle::explicit_:
        if (!d.explicit_padding.empty() && d.explicit_padding.size() != 4) return false;
        p.pb[i] = d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i];
        p.pa[i] = d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i + 1];
        break;
      case PaddingStyle::valid: p.pb[i] = p.pa[i] = 0; break;
      case PaddingStyle::same: p.pb[i] = total / 2; p.pa[i] = total - p.pb[i]; break;
      case PaddingStyle::same_lower: p.pb[i] = (total + 1) / 2; p.pa[i] = total - p.pb[i]; break;
      default: return false;
    }
  }
  return true;
}

// Calls f(h, w) for the taps of window (oh, ow) inside x; returns the count of taps inside the
// padded extent [-before, in + after).
template <class F>
int64_t for_taps(const PoolGeom& p, int64_t oh, int64_t ow, F&& f) {
  int64_t padded = 0;
  for (int64_t kh = 0; kh < p.k[0]; ++kh) {
    const int64_t h = oh * p.s[0] + kh * p.dil[0] - p.pb[0];
    for (int64_t kw = 0; kw < p.k[1]; ++kw) {
      const int64_t w = ow * p.s[1] + kw * p.dil[1] - p.pb[1];
      if (h >= 0 && h < p.H && w >= 0 && w < p.W) f(h, w);
      if (h >= -p.pb[0] && h < p.H + p.pa[0] && w >= -p.pb[1] && w < p.W + p.pa[1]) ++padded;
    }
  }
  return padded;
}

// max(b, x) with the reference's NaN rule: a NaN, once met, stays.
inline float nan_max(float b, float x) { return b != b ? b : (x != x || x > b) ? x : b; }

// best[c] = nan_max(best[c], v[c]) over a row of channels.
TG_CPU_CLONES void max_row(float* best, const float* v, int64_t n) {
  for (int64_t c = 0; c < n; ++c) best[c] = nan_max(best[c], v[c]);
}

// max_pool2d_with_indices: the maxima and, per output, the flat index h * W + w of the first
// maximum within its image and channel (-1 for a window with no input element), as the
// reference computes them; every layout walks the window per output element.
void max_pool_with_indices(const PoolGeom& p, const float* xp, float* yp, int32_t* ip) {
  const bool big = p.N * p.OH * p.OW * p.C * p.k[0] * p.k[1] >= (1 << 15);
#pragma omp parallel for collapse(2) schedule(static) if (big)
  for (int64_t b = 0; b < p.N; ++b)
    for (int64_t c = 0; c < p.C; ++c)
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int64_t at = -1;
          for_taps(p, oh, ow, [&](int64_t h, int64_t w) {
            const float v = xp[p.x_index(b, c, h, w)];
            if (at < 0 || (best == best && (v != v || v > best))) {
              best = v;
              at = h * p.W + w;
            }
          });
          const int64_t yi = p.y_index(b, c, oh, ow);
          yp[yi] = best;
          ip[yi] = static_cast<int32_t>(at);
        }
}

}  // namespace

bool pool(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  if (n.kind == OpKind::MaxPool2dWithIndices) {  // the forward that training saves indices of
    const auto* d = std::get_if<PoolDesc>(&n.attr);
    if (!d || in.size() != 1 || in[0].empty() || in[0].dtype() != DType::f32) return false;
    std::vector<TensorType> types = concrete_output_types(g, n, in);
    if (types.size() != 2 || types[0].dtype != DType::f32 || types[1].dtype != DType::i32) return false;
    PoolGeom p;
    if (!pool_geometry(*d, in[0].shape().dims(), types[0].shape.dims(), p)) return false;
    TensorData y = cpu_output(0, types[0].shape, DType::f32);
    TensorData idx = cpu_output(1, types[1].shape, DType::i32);
    max_pool_with_indices(p, in[0].ptr<float>(), y.ptr<float>(), idx.ptr<int32_t>());
    out.clear();
    out.push_back(std::move(y));
    out.push_back(std::move(idx));
    return true;
  }
  const auto* d = std::get_if<PoolDesc>(&n.attr);
  const bool grad = n.kind == OpKind::MaxPool2dGrad || n.kind == OpKind::AvgPool2dGrad;
  const bool is_max = n.kind == OpKind::MaxPool2d || n.kind == OpKind::MaxPool2dGrad;
  if (!d || in.size() != (grad ? 2u : 1u)) return false;
  if (!is_max && n.kind != OpKind::AvgPool2d && n.kind != OpKind::AvgPool2dGrad) return false;
  for (const TensorData& t : in)
    if (t.empty() || t.dtype() != DType::f32) return false;
  const TensorData& x = grad ? in[1] : in[0];
  std::vector<int64_t> yd;
  if (grad) {
    yd = in[0].shape().dims();
  } else {
    std::vector<TensorType> types = concrete_output_types(g, n, in);
    if (types.size() != 1 || types[0].dtype != DType::f32) return false;
    yd = types[0].shape.dims();
  }
  PoolGeom p;
  if (!pool_geometry(*d, x.shape().dims(), yd, p)) return false;
  const float* xp = x.ptr<float>();
  const bool cip = d->count_include_pad;
  if (!grad) {
    TensorData y = cpu_output(0, Shape(yd), DType::f32);
    float* yp = y.ptr<float>();
    const bool big = p.N * p.OH * p.OW * p.C * p.k[0] * p.k[1] >= (1 << 15);
    if (!p.last && is_max) {
      // nchw max pooling: one image plane at a time, so neighbouring outputs read neighbouring
      // inputs.
#pragma omp parallel for collapse(2) schedule(static) if (big)
      for (int64_t b = 0; b < p.N; ++b)
        for (int64_t c = 0; c < p.C; ++c) {
          const float* plane = xp + (b * p.C + c) * p.H * p.W;
          float* out_plane = yp + (b * p.C + c) * p.OH * p.OW;
          for (int64_t oh = 0; oh < p.OH; ++oh)
            for (int64_t ow = 0; ow < p.OW; ++ow) {
              float best = 0;
              bool any = false;
              for (int64_t kh = 0; kh < p.k[0]; ++kh) {
                const int64_t h = oh * p.s[0] + kh * p.dil[0] - p.pb[0];
                if (h < 0 || h >= p.H) continue;
                const float* row = plane + h * p.W;
                for (int64_t kw = 0; kw < p.k[1]; ++kw) {
                  const int64_t w = ow * p.s[1] + kw * p.dil[1] - p.pb[1];
                  if (w < 0 || w >= p.W) continue;
                  best = any ? nan_max(best, row[w]) : row[w];
                  any = true;
                }
              }
              out_plane[oh * p.OW + ow] = any ? best : -std::numeric_limits<float>::infinity();
            }
        }
    } else if (is_max) {
      // nhwc max pooling: per output pixel, the window's rows of C channels compared a whole
      // row at a time (the loop over channels vectorises).
#pragma omp parallel for collapse(2) schedule(static) if (big)
      for (int64_t b = 0; b < p.N; ++b)
        for (int64_t oh = 0; oh < p.OH; ++oh)
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            float* best = yp + ((b * p.OH + oh) * p.OW + ow) * p.C;
            bool any = false;
            for (int64_t kh = 0; kh < p.k[0]; ++kh) {
              const int64_t h = oh * p.s[0] + kh * p.dil[0] - p.pb[0];
              if (h < 0 || h >= p.H) continue;
              for (int64_t kw = 0; kw < p.k[1]; ++kw) {
                const int64_t w = ow * p.s[1] + kw * p.dil[1] - p.pb[1];
                if (w < 0 || w >= p.W) continue;
                const float* row = xp + ((b * p.H + h) * p.W + w) * p.C;
                if (!any) {
                  std::copy(row, row + p.C, best);
                  any = true;
                  continue;
                }
                max_row(best, row, p.C);
              }
            }
            if (!any) std::fill(best, best + p.C, -std::numeric_limits<float>::infinity());
          }
    } else {  // average pooling, either layout
#pragma omp parallel for collapse(2) schedule(static) if (big)
      for (int64_t b = 0; b < p.N; ++b)
        for (int64_t oh = 0; oh < p.OH; ++oh)
          for (int64_t ow = 0; ow < p.OW; ++ow)
            for (int64_t c = 0; c < p.C; ++c) {
              double s = 0;
              int64_t inside = 0;
              const int64_t padded = for_taps(p, oh, ow, [&](int64_t h, int64_t w) {
                s += xp[p.x_index(b, c, h, w)];
                ++inside;
              });
              const double div = static_cast<double>(cip ? padded : inside);
              yp[p.y_index(b, c, oh, ow)] = static_cast<float>(div > 0 ? s / div : 0.0);
            }
    }
    out.clear();
    out.push_back(std::move(y));
    return true;
  }
  // Gradients: each image scatters into its own slice of dx.
  const float* dy = in[0].ptr<float>();
  TensorData dx = cpu_output(0, x.shape(), DType::f32);
  float* dxp = dx.ptr<float>();
  const int64_t img = p.C * p.H * p.W;
#pragma omp parallel if (p.N * img >= (1 << 14))
  {
    std::vector<double> acc(static_cast<size_t>(img));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < p.N; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const int64_t base = b * img;
      for (int64_t oh = 0; oh < p.OH; ++oh)
        for (int64_t ow = 0; ow < p.OW; ++ow)
          for (int64_t c = 0; c < p.C; ++c) {
            const double g0 = dy[p.y_index(b, c, oh, ow)];
            if (is_max) {
              int64_t bi = -1;
              float best = 0;
              for_taps(p, oh, ow, [&](int64_t h, int64_t w) {
                const int64_t i = p.x_index(b, c, h, w);
                const float v = xp[i];
                if (bi < 0 || (!std::isnan(best) && (std::isnan(v) || v > best))) best = v, bi = i;
              });
              if (bi >= 0) acc[static_cast<size_t>(bi - base)] += g0;
            } else {
              int64_t inside = 0;
              const int64_t padded = for_taps(p, oh, ow, [&](int64_t, int64_t) { ++inside; });
              const double div = static_cast<double>(cip ? padded : inside);
              if (div <= 0) continue;
              const double v = g0 / div;
              for_taps(p, oh, ow, [&](int64_t h, int64_t w) { acc[static_cast<size_t>(p.x_index(b, c, h, w) - base)] += v; });
            }
          }
      for (int64_t i = 0; i < img; ++i) dxp[base + i] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  }
  out.clear();
  out.push_back(std::move(dx));
  return true;
}

}  // namespace tg::detail::fast
