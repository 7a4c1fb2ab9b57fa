// Nearest and bilinear resize of the two spatial dims (see kernels_resize.h). Source
// coordinates are computed in double with explicitly rounded operations, in the order of the
// reference (src/backends/cpu/ref_shape_more.cpp), so the same pixels and weights come out.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels_convert.cuh"
#include "backends/cuda/kernels_resize.h"

namespace tg::detail {
namespace {

// tg::CoordinateMode: half_pixel, align_corners, asymmetric, pytorch_half_pixel.
__device__ double source_coord(int mode, long long o, long long n, long long m) {
  const double scale = __ddiv_rn(static_cast<double>(n), static_cast<double>(m)), x = static_cast<double>(o);
  switch (mode) {
    case 0: return __dsub_rn(__dmul_rn(__dadd_rn(x, 0.5), scale), 0.5);
    case 1:
      return m > 1 ? __ddiv_rn(__dmul_rn(x, static_cast<double>(n - 1)), static_cast<double>(m - 1)) : 0.0;
    case 2: return __dmul_rn(x, scale);
    default: return m > 1 ? __dsub_rn(__dmul_rn(__dadd_rn(x, 0.5), scale), 0.5) : 0.0;
  }
}

// tg::NearestRounding: round_prefer_floor, round_prefer_ceil, floor, ceil.
__device__ long long nearest(int r, double v, long long n) {
  double i = r == 0   ? ceil(__dsub_rn(v, 0.5))
             : r == 1 ? floor(__dadd_rn(v, 0.5))
             : r == 2 ? floor(v)
                      : ceil(v);
  long long k = static_cast<long long>(i);
  return k < 0 ? 0 : k > n - 1 ? n - 1 : k;
}

struct Pixel {
  long long n, c, y, x;
};

__device__ __forceinline__ Pixel unravel(const ResizeGeometry& g, long long f) {
  Pixel p;
  if (g.channels_last) {
    p.c = f % g.c;
    f /= g.c;
    p.x = f % g.ow;
    f /= g.ow;
    p.y = f % g.oh;
    p.n = f / g.oh;
  } else {
    p.x = f % g.ow;
    f /= g.ow;
    p.y = f % g.oh;
    f /= g.oh;
    p.c = f % g.c;
    p.n = f / g.c;
  }
  return p;
}

__device__ __forceinline__ long long in_index(const ResizeGeometry& g, const Pixel& p, long long y,
                                              long long x) {
  return g.channels_last ? ((p.n * g.ih + y) * g.iw + x) * g.c + p.c
                         : ((p.n * g.c + p.c) * g.ih + y) * g.iw + x;
}

template <class T>
__global__ void __launch_bounds__(256)
    nearest_kernel(const T* __restrict__ in, T* __restrict__ out, const ResizeGeometry g, int coord,
                   int rounding, long long total) {
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    Pixel p = unravel(g, f);
    long long y = nearest(rounding, source_coord(coord, p.y, g.ih, g.oh), g.ih);
    long long x = nearest(rounding, source_coord(coord, p.x, g.iw, g.ow), g.iw);
    out[f] = in[in_index(g, p, y, x)];
  }
}

template <class T>
__global__ void __launch_bounds__(256) bilinear_kernel(const T* __restrict__ in, T* __restrict__ out,
                                                       const ResizeGeometry g, int coord, long long total) {
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    Pixel p = unravel(g, f);
    // The source coordinate is clamped to [0, n-1]; the far neighbour to n-1.
    double sy = source_coord(coord, p.y, g.ih, g.oh), sx = source_coord(coord, p.x, g.iw, g.ow);
    const double hy = static_cast<double>(g.ih - 1), hx = static_cast<double>(g.iw - 1);
    sy = sy < 0.0 ? 0.0 : hy < sy ? hy : sy;
    sx = sx < 0.0 ? 0.0 : hx < sx ? hx : sx;
    long long y0 = static_cast<long long>(floor(sy)), x0 = static_cast<long long>(floor(sx));
    long long y1 = y0 + 1 < g.ih - 1 ? y0 + 1 : g.ih - 1, x1 = x0 + 1 < g.iw - 1 ? x0 + 1 : g.iw - 1;
    double wy = __dsub_rn(sy, static_cast<double>(y0)), wx = __dsub_rn(sx, static_cast<double>(x0));
    double a00 = dev::to_double(in[in_index(g, p, y0, x0)]), a01 = dev::to_double(in[in_index(g, p, y0, x1)]);
    double a10 = dev::to_double(in[in_index(g, p, y1, x0)]), a11 = dev::to_double(in[in_index(g, p, y1, x1)]);
    double ux = __dsub_rn(1.0, wx), uy = __dsub_rn(1.0, wy);
    double top = __dadd_rn(__dmul_rn(ux, a00), __dmul_rn(wx, a01));
    double bottom = __dadd_rn(__dmul_rn(ux, a10), __dmul_rn(wx, a11));
    out[f] = dev::from_double<T>(__dadd_rn(__dmul_rn(uy, top), __dmul_rn(wy, bottom)));
  }
}

}  // namespace

cudaError_t launch_resize(const void* in, void* out, DType t, const ResizeGeometry& g, bool bilinear,
                          int coordinates, int rounding, cudaStream_t stream) {
  const long long total = g.n * g.c * g.oh * g.ow;
  if (total == 0) return cudaSuccess;
  if (!in || !out || g.ih < 1 || g.iw < 1 || g.oh < 1 || g.ow < 1) return cudaErrorInvalidValue;
  bool ok = false;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if (!bilinear) {
      using U =
          std::conditional_t<sizeof(T) == 1, uint8_t,
                             std::conditional_t<sizeof(T) == 2, uint16_t,
                                                std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
      nearest_kernel<U><<<dev::grid_for(total), 256, 0, stream>>>(
          static_cast<const U*>(in), static_cast<U*>(out), g, coordinates, rounding, total);
      ok = true;
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                         std::is_same_v<T, dev::F16> || std::is_same_v<T, dev::BF16>) {
      bilinear_kernel<T><<<dev::grid_for(total), 256, 0, stream>>>(
          static_cast<const T*>(in), static_cast<T*>(out), g, coordinates, total);
      ok = true;
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tg::detail
