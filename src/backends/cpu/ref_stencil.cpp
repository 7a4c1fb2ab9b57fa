// Reference stencil: a weighted window reduction over the last 4 dims of the source; the
// leading dims pass through. Per window dim i, output p and tap t read source coordinate
//   s = p * stride + t * dilation - pad_before + offset
// and a coordinate outside [0, n) is resolved by the boundary mode (docs/ops-semantics.md).
#include <algorithm>
#include <cmath>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

Dims or_fill(const std::vector<int64_t>& v, size_t n, int64_t dflt) { return v.empty() ? Dims(n, dflt) : v; }

// Maps coordinate s into [0, n) for the boundary mode; false when the tap reads the padding
// value (zero / constant). `flip` toggles once per anti-periodic wrap.
bool resolve(Boundary b, int64_t& s, int64_t n, bool& flip) {
  if (s >= 0 && s < n) return true;
  switch (b) {
    case Boundary::zero: case Boundary::constant: return false;
    case Boundary::clamp_to_edge: s = std::clamp<int64_t>(s, 0, n - 1); return true;
    case Boundary::reflect:  // mirror about the edge element, which is not repeated
      if (n == 1) s = 0;
      while (s < 0 || s >= n) s = s < 0 ? -s : 2 * (n - 1) - s;
      return true;
    case Boundary::symmetric:  // mirror about the edge, which is repeated
      while (s < 0 || s >= n) s = s < 0 ? -s - 1 : 2 * n - 1 - s;
      return true;
    case Boundary::periodic: case Boundary::anti_periodic: {
      int64_t wraps = s >= 0 ? s / n : -((-s + n - 1) / n);  // floor(s / n)
      s -= wraps * n;
      if (b == Boundary::anti_periodic && wraps % 2 != 0) flip = !flip;
      return true;
    }
  }
  return false;
}

}  // namespace

std::vector<TensorData> eval_stencil(const Ctx& c) {
  const auto& d = c.attr<StencilDesc>();
  const TensorData &src = c.in[0], &w = c.in[1];
  TensorData y = c.output(0);
  const Dims &sd = dims(src), &yd = dims(y), &wd = dims(w);
  const size_t lead = sd.size() - 4;
  const Dims stride = or_fill(d.strides, 4, 1), dil = or_fill(d.dilation_rates, 4, 1);
  const Dims offs = or_fill(d.offsets, 4, 0), expl = or_fill(d.explicit_padding, 8, 0);
  Dims pad(4, 0);
  for (size_t i = 0; i < 4; ++i) {
    const int64_t n = sd[lead + i], ke = (wd[i] - 1) * dil[i] + 1;
    const int64_t total = std::max<int64_t>((yd[lead + i] - 1) * stride[i] + ke - n, 0);
    switch (d.padding_style) {
      case PaddingStyle::explicit_: case PaddingStyle::explicit_offset: pad[i] = expl[2 * i]; break;
      case PaddingStyle::same: pad[i] = total / 2; break;
      case PaddingStyle::same_lower: pad[i] = (total + 1) / 2; break;
      case PaddingStyle::valid: break;
    }
  }
  const bool arg = d.reduction == Reduction::argmin || d.reduction == Reduction::argmax;
  const bool is_max = d.reduction == Reduction::max || d.reduction == Reduction::argmax;
  for (int64_t f = 0; f < y.num_elements(); ++f) {
    const Dims o = unravel(f, yd);
    double acc = d.reduction == Reduction::sum ? 0.0 : d.reduction == Reduction::product ? 1.0 : NAN;
    int64_t best = -1;
    for (int64_t t = 0; t < w.num_elements(); ++t) {
      const Dims tap = unravel(t, wd);
      Dims s = o;
      bool inside = true, flip = false;
      for (size_t i = 0; i < 4; ++i) {
        s[lead + i] = o[lead + i] * stride[i] + tap[i] * dil[i] - pad[i] + offs[i];
        inside &= resolve(d.boundary, s[lead + i], sd[lead + i], flip);
      }
      double v = inside ? src.at(ravel(s, sd)) : d.boundary == Boundary::constant ? d.padding_constant : 0.0;
      v = (flip ? -v : v) * w.at(t);
      switch (d.reduction) {
        case Reduction::sum: acc += v; break;
        case Reduction::product: acc *= v; break;
        default: {  // min / max / argmin / argmax: the first extreme; a NaN wins
          bool better = best < 0 || (!std::isnan(acc) && (std::isnan(v) || (is_max ? v > acc : v < acc)));
          if (better) {
            acc = v;
            best = t;
          }
        }
      }
    }
    if (arg) store_int(y, f, best);
    else y.set(f, acc);
  }
  return {y};
}

}  // namespace tg::detail::ref
