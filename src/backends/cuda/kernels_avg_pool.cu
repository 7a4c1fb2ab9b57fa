// avg_pool2d and its gradient (see kernels_avg_pool.h). The forward runs a thread per output
// element over its window's taps inside x; the gradient a thread per element of x over the
// windows that hold it (a gather: no atomics, and each sum in the reference's row-major window
// order). A window is a rectangle, so its divisor is the product of per-dim tap counts, each in
// closed form.
#include <cstdint>

#include "backends/cuda/kernels_avg_pool.h"
#include "backends/cuda/kernels_convert.cuh"

namespace tg::detail {
namespace {

// The accumulator: double for f32 / f64 (the reference sums in double), float for f16 / bf16.
template <class T>
struct AccOf {
  using type = double;
};
template <>
struct AccOf<dev::F16> {
  using type = float;
};
template <>
struct AccOf<dev::BF16> {
  using type = float;
};

__device__ __forceinline__ double load(float v) { return v; }
__device__ __forceinline__ double load(double v) { return v; }
__device__ __forceinline__ float load(dev::F16 v) { return dev::half_to_float(v.bits); }
__device__ __forceinline__ float load(dev::BF16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}

// floor(a / b) for b > 0.
__device__ __forceinline__ long long floor_div(long long a, long long b) {
  return a >= 0 ? a / b : -((b - 1 - a) / b);
}

struct TapRange {
  long long first, count;
};

// The taps k in [0, kn) of a window starting at `base` (taps d apart) with lo <= base + k * d < hi.
__device__ __forceinline__ TapRange taps_in(long long base, long long kn, long long d, long long lo,
                                            long long hi) {
  long long first = -floor_div(base - lo, d);  // ceil((lo - base) / d)
  long long last = floor_div(hi - 1 - base, d);
  if (first < 0) first = 0;
  if (last > kn - 1) last = kn - 1;
  return {first, last >= first ? last - first + 1 : 0};
}

// The divisor's factor along one dim for the window starting at `base`.
__device__ __forceinline__ long long divisor_1d(long long base, long long kn, long long d, long long in,
                                                long long before, long long after, bool include_pad) {
  return include_pad ? taps_in(base, kn, d, -before, in + after).count : taps_in(base, kn, d, 0, in).count;
}

template <class T>
__global__ void __launch_bounds__(256)
    avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, const AvgPoolGeometry a, long long total) {
  using Acc = typename AccOf<T>::type;
  const PoolGeometry& g = a.win;
  const long long wstep = g.channels_last ? g.c : 1;
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    long long n, c, oh, ow;
    g.coords(f, g.oh, g.ow, n, c, oh, ow);
    const long long bh = oh * g.sh - g.ph, bw = ow * g.sw - g.pw;
    const TapRange th = taps_in(bh, g.kh, g.dh, 0, g.ih), tw = taps_in(bw, g.kw, g.dw, 0, g.iw);
    Acc s = 0;
    for (long long kh = th.first; kh < th.first + th.count; ++kh) {
      const long long h = bh + kh * g.dh;
      const long long row = g.index(n, c, h, 0, g.ih, g.iw);
      for (long long kw = tw.first; kw < tw.first + tw.count; ++kw)
        s += load(x[row + (bw + kw * g.dw) * wstep]);
    }
    const long long div = a.count_include_pad ? divisor_1d(bh, g.kh, g.dh, g.ih, g.ph, a.pah, true) *
                                                    divisor_1d(bw, g.kw, g.dw, g.iw, g.pw, a.paw, true)
                                              : th.count * tw.count;
    y[f] = dev::from_double<T>(div > 0 ? static_cast<double>(s / static_cast<Acc>(div)) : 0.0);
  }
}

// Each element (h, w) of x is a tap of the windows oh * sh + kh * dh - ph == h (and likewise
// along W): walking kh downwards visits those windows in ascending oh. The divisor of a window
// holding a tap inside x is at least 1.
template <class T>
__global__ void __launch_bounds__(256) avg_pool_grad_kernel(const T* __restrict__ dy, T* __restrict__ dx,
                                                            const AvgPoolGeometry a, long long total) {
  using Acc = typename AccOf<T>::type;
  const PoolGeometry& g = a.win;
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    long long n, c, h, w;
    g.coords(f, g.ih, g.iw, n, c, h, w);
    Acc s = 0;
    for (long long kh = g.kh - 1; kh >= 0; --kh) {
      const long long th = h + g.ph - kh * g.dh;
      if (th < 0 || th % g.sh) continue;
      const long long oh = th / g.sh;
      if (oh >= g.oh) break;
      const long long div_h =
          divisor_1d(oh * g.sh - g.ph, g.kh, g.dh, g.ih, g.ph, a.pah, a.count_include_pad);
      for (long long kw = g.kw - 1; kw >= 0; --kw) {
        const long long tw = w + g.pw - kw * g.dw;
        if (tw < 0 || tw % g.sw) continue;
        const long long ow = tw / g.sw;
        if (ow >= g.ow) break;
        const long long div_w =
            divisor_1d(ow * g.sw - g.pw, g.kw, g.dw, g.iw, g.pw, a.paw, a.count_include_pad);
        const long long at = g.index(n, c, oh, ow, g.oh, g.ow);
        s += load(dy[at]) / static_cast<Acc>(div_h * div_w);
      }
    }
    dx[f] = dev::from_double<T>(static_cast<double>(s));
  }
}

// Calls f(T{}) with T the device storage type of float dtype t; false for other dtypes.
template <class F>
bool with_float(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return true;
    case DType::f64: f(double{}); return true;
    case DType::f16: f(dev::F16{}); return true;
    case DType::bf16: f(dev::BF16{}); return true;
    default: return false;
  }
}

// Windows, strides and dilations of at least 1 (the kernels divide by them).
bool geometry_ok(const AvgPoolGeometry& a) {
  const PoolGeometry& g = a.win;
  return g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.dh >= 1 && g.dw >= 1;
}

}  // namespace

cudaError_t launch_avg_pool(const void* x, void* y, DType t, const AvgPoolGeometry& g, cudaStream_t stream) {
  const PoolGeometry& w = g.win;
  const long long total = w.n * w.c * w.oh * w.ow;
  if (total == 0) return cudaSuccess;
  if (!y || !geometry_ok(g) || (!x && w.ih * w.iw > 0)) return cudaErrorInvalidValue;
  const bool ok = with_float(t, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_kernel<T>
        <<<dev::grid_for(total), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), g, total);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_avg_pool_grad(const void* dy, void* dx, DType t, const AvgPoolGeometry& g,
                                 cudaStream_t stream) {
  const PoolGeometry& w = g.win;
  const long long total = w.n * w.c * w.ih * w.iw;
  if (total == 0) return cudaSuccess;
  if (!dx || !geometry_ok(g) || (!dy && w.oh * w.ow > 0)) return cudaErrorInvalidValue;
  const bool ok = with_float(t, [&](auto tag) {
    using T = decltype(tag);
    avg_pool_grad_kernel<T>
        <<<dev::grid_for(total), 256, 0, stream>>>(static_cast<const T*>(dy), static_cast<T*>(dx), g, total);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tg::detail
