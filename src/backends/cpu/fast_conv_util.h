#pragma once
// Geometry of a 2-D convolution for the oneDNN kernels (fast_conv_grad.cpp): layouts, sizes,
// strides, dilations and the padding before / after each spatial dim, computed exactly as the
// inference rule does (src/ops/infer_conv.cpp) and as fast_conv.cpp does for the forward conv.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ir/graph_impl.h"

namespace tg::detail::fast {

struct ConvGeom {
  bool last = true, sfirst = true;           // nhwc activations, hwio weights
  int64_t N = 0, C = 0, O = 0, I = 0, G = 1;
  int64_t sp[2] = {0, 0}, k[2] = {0, 0}, stride[2] = {1, 1}, dil[2] = {1, 1};
  int64_t pl[2] = {0, 0}, pr[2] = {0, 0}, os[2] = {0, 0};

  std::vector<int64_t> key() const {
    return {last, sfirst, G, N, C, sp[0], sp[1], O, k[0], k[1], stride[0], stride[1],
            dil[0], dil[1], pl[0], pl[1], pr[0], pr[1]};
  }
  dnnl::memory::dims x_dims() const { return {N, C, sp[0], sp[1]}; }
  dnnl::memory::dims y_dims() const { return {N, O, os[0], os[1]}; }
  /// tgraph's dims of the output activation.
  std::vector<int64_t> y_shape() const {
    return last ? std::vector<int64_t>{N, os[0], os[1], O} : std::vector<int64_t>{N, O, os[0], os[1]};
  }
  dnnl::memory::format_tag act_tag() const {
    return last ? dnnl::memory::format_tag::nhwc : dnnl::memory::format_tag::nchw;
  }
  /// oneDNN weights dims ([G,] O/G, I, KH, KW) and the strides of tgraph's hwio / oihw storage.
  void weights(dnnl::memory::dims& wdims, dnnl::memory::dims& wstr) const {
    const int64_t OG = O / G, KH = k[0], KW = k[1];
    wdims = {OG, I, KH, KW};
    if (sfirst) wstr = {1, O, KW * I * O, I * O};
    else wstr = {I * KH * KW, KH * KW, KW, 1};
    if (G > 1) {
      wdims.insert(wdims.begin(), G);
      wstr.insert(wstr.begin(), sfirst ? OG : OG * I * KH * KW);
    }
  }
};

/// Fills g from the conv descriptor and the dims of x and w; false where oneDNN is not used
/// (other layouts, output padding, windows starting in padding only, non-positive sizes).
inline bool conv_geometry(const ConvDesc& d, const std::vector<int64_t>& xd, const std::vector<int64_t>& wd,
                          ConvGeom& g) {
  if (xd.size() != 4 || wd.size() != 4) return false;
  if (d.data_layout == Layout::nhwc) g.last = true;
  else if (d.data_layout == Layout::nchw) g.last = false;
  else return false;
  if (d.weights_layout == Layout::hwio) g.sfirst = true;
  else if (d.weights_layout == Layout::oihw) g.sfirst = false;
  else return false;
  if (std::any_of(d.output_padding.begin(), d.output_padding.end(), [](int64_t v) { return v != 0; }))
    return false;
  const bool last = g.last, sfirst = g.sfirst;
  g.N = xd[0];
  g.C = last ? xd[3] : xd[1];
  g.sp[0] = last ? xd[1] : xd[2];
  g.sp[1] = last ? xd[2] : xd[3];
  g.O = sfirst ? wd[3] : wd[0];
  g.I = sfirst ? wd[2] : wd[1];
  g.k[0] = sfirst ? wd[0] : wd[2];
  g.k[1] = sfirst ? wd[1] : wd[3];
  g.G = d.groups;
  if (g.G < 1 || g.C % g.G != 0 || g.O % g.G != 0 || g.I * g.G != g.C) return false;
  for (int64_t v : {g.N, g.C, g.sp[0], g.sp[1], g.O, g.I, g.k[0], g.k[1]})
    if (v <= 0) return false;
  auto two = [](const std::vector<int64_t>& v, int64_t out[2]) {
    if (v.empty()) {
      out[0] = out[1] = 1;
      return true;
    }
    if (v.size() != 2 || v[0] < 1 || v[1] < 1) return false;
    out[0] = v[0];
    out[1] = v[1];
    return true;
  };
  if (!two(d.stride, g.stride) || !two(d.dilation, g.dil)) return false;
  for (int i = 0; i < 2; ++i) {
    const int64_t ke = (g.k[i] - 1) * g.dil[i] + 1;
    switch (d.padding) {
      case PaddingStyle::explicit_:
        if (d.explicit_padding.empty()) {
          g.pl[i] = g.pr[i] = 0;
        } else {
          if (d.explicit_padding.size() != 4) return false;
          g.pl[i] = d.explicit_padding[2 * i];
          g.pr[i] = d.explicit_padding[2 * i + 1];
          if (g.pl[i] < 0 || g.pr[i] < 0) return false;
        }
        break;
      case PaddingStyle::valid:
        g.pl[i] = g.pr[i] = 0;
        break;
      case PaddingStyle::same:
      case PaddingStyle::same_lower: {
        const int64_t o = (g.sp[i] + g.stride[i] - 1) / g.stride[i];
        const int64_t total = std::max<int64_t>((o - 1) * g.stride[i] + ke - g.sp[i], 0);
        g.pl[i] = d.padding == PaddingStyle::same ? total / 2 : (total + 1) / 2;
        g.pr[i] = total - g.pl[i];
        break;
      }
      default:
        return false;
    }
    const int64_t span = g.sp[i] + g.pl[i] + g.pr[i] - ke;
    if (span < 0) return false;
    g.os[i] = span / g.stride[i] + 1;
    if (g.pl[i] >= ke || g.pr[i] >= ke) return false;
  }
  return true;
}

}  // namespace tg::detail::fast
