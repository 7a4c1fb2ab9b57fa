#pragma once
// Launchers of max pooling's kernels in kernels_max_pool.cu: max_pool2d (with or without the
// indices of the maxima) and max_pool2d_grad from those indices. PoolGeometry is shared with
// the average-pooling kernels.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/host_device.h"
#include "tgraph/dtype.h"

namespace tg::detail {

/// Geometry of a 2-D pooling window over a rank-4 activation (NHWC when channels_last).
struct PoolGeometry {
  long long n, c, ih, iw, oh, ow;
  long long kh, kw, sh, sw, dh, dw, ph, pw;  // window, stride, dilation, padding before
  bool channels_last;

  /// (n, c, h, w) of flat element f of a [n, c, hh, ww] activation in this layout.
  TG_HD void coords(long long f, long long hh, long long ww, long long& nn, long long& cc, long long& h,
                    long long& w) const {
    if (channels_last) {
      cc = f % c, f /= c, w = f % ww, f /= ww, h = f % hh, nn = f / hh;
    } else {
      w = f % ww, f /= ww, h = f % hh, f /= hh, cc = f % c, nn = f / c;
    }
  }
  /// Flat index of (n, c, h, w) in a [n, c, hh, ww] activation in this layout.
  TG_HD long long index(long long nn, long long cc, long long h, long long w, long long hh, long long ww) const {
    return channels_last ? ((nn * hh + h) * ww + w) * c + cc : ((nn * c + cc) * hh + h) * ww + w;
  }
};

/// Max pooling as the CPU reference: y gets the first maximum of each window in row-major tap
/// order (a NaN wins and stays), idx its flat index h * iw + w within the image and channel
/// (i32), taps its window tap kh * kw_count + kw (16 bits, for launch_max_pool_grad); a window
/// with no tap inside x gives `lowest` (the dtype's bytes of -inf / the integer minimum), index
/// -1 and tap 65535. Any output may be null (not written). Any dtype but bool.
cudaError_t launch_max_pool(const void* x, void* y, int32_t* idx, uint16_t* taps, DType t, const PoolGeometry& g,
                            unsigned long long lowest, cudaStream_t stream);

/// dx (x's shape) of max pooling from dy and the taps launch_max_pool wrote (y's shape): each
/// element of x sums the dy of the windows whose winning tap it is, in ascending window order
/// (double for f32 / f64, float for f16 / bf16, as the reference). Float dtypes only.
cudaError_t launch_max_pool_grad(const void* dy, const uint16_t* taps, void* dx, DType t, const PoolGeometry& g,
                                 cudaStream_t stream);

/// Whether the kernels take this geometry (windows, strides, dilations >= 1, an image of at
/// most 2^31 elements, windows of fewer than 65535 taps).
bool max_pool_taps_ok(const PoolGeometry& g);

}  // namespace tg::detail
