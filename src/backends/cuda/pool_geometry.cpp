// See pool_geometry.h.
#include "backends/cuda/pool_geometry.h"

#include <algorithm>

namespace tg::detail {

bool pool_geometry(const PoolDesc& d, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd,
                   PoolGeometry& g, int64_t* after) {
  const bool last = d.data_layout == Layout::nhwc;
  if (!last && d.data_layout != Layout::nchw) return false;
  if (xd.size() != 4 || yd.size() != 4 || d.kernel.size() != 2) return false;
  for (size_t i = 0; i < 4; ++i)
    if (xd[i] < 0 || yd[i] < 0) return false;
  const int64_t c = last ? xd[3] : xd[1];
  if (yd[0] != xd[0] || (last ? yd[3] : yd[1]) != c) return false;
  const std::vector<int64_t>& stride = d.stride.empty() ? d.kernel : d.stride;
  const std::vector<int64_t> dil = d.dilation.empty() ? std::vector<int64_t>{1, 1} : d.dilation;
  if (stride.size() != 2 || dil.size() != 2) return false;
  if (d.padding == PaddingStyle::explicit_ && !d.explicit_padding.empty() && d.explicit_padding.size() != 4)
    return false;
  const int64_t xsp[2] = {last ? xd[1] : xd[2], last ? xd[2] : xd[3]};
  const int64_t ysp[2] = {last ? yd[1] : yd[2], last ? yd[2] : yd[3]};
  int64_t before[2], aft[2];
  for (size_t i = 0; i < 2; ++i) {
    if (d.kernel[i] < 1 || stride[i] < 1 || dil[i] < 1) return false;
    const int64_t ke = (d.kernel[i] - 1) * dil[i] + 1;
    const int64_t total = std::max<int64_t>((ysp[i] - 1) * stride[i] + ke - xsp[i], 0);
    switch (d.padding) {
      case PaddingStyle::explicit_:
        before[i] = d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i];
        aft[i] = d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i + 1];
        break;
      case PaddingStyle::valid: before[i] = aft[i] = 0; break;
      case PaddingStyle::same: before[i] = total / 2, aft[i] = total - before[i]; break;
      case PaddingStyle::same_lower: before[i] = (total + 1) / 2, aft[i] = total - before[i]; break;
      default: return false;
    }
  }
  g = {xd[0],     c,         xsp[0], xsp[1], ysp[0],    ysp[1],    d.kernel[0], d.kernel[1],
       stride[0], stride[1], dil[0], dil[1], before[0], before[1], last};
  if (after) after[0] = aft[0], after[1] = aft[1];
  return true;
}

}  // namespace tg::detail
