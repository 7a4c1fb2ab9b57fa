// Max pooling (see kernels_max_pool.h). The forward runs a thread per output element, or per V
// neighbouring channels of one in NHWC (V = 16 bytes of the dtype, one vector load per tap);
// the gradient is a gather: a thread per element (or V channels) of x visits the windows that
// hold it and sums the dy of those whose index names it — no atomics, no zero fill, and the
// reference's order. The gradient of a training step pools once more to find the indices (the
// graph's max_pool2d_grad takes x, not them): reading x again costs less than cuDNN's
// backward, which recomputed the pooled y and ran at an eighth of the bandwidth.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "backends/cuda/kernels_convert.cuh"
#include "backends/cuda/kernels_max_pool.h"

namespace tg::detail {
namespace {

template <class T>
constexpr bool is_float_storage =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, dev::F16> || std::is_same_v<T, dev::BF16>;

// What elements compare as: every float dtype but f64 exactly as float, f64 as double,
// integers as int64.
template <class T>
using Cmp = std::conditional_t<std::is_same_v<T, double>, double,
                               std::conditional_t<is_float_storage<T>, float, long long>>;

template <class T>
__device__ __forceinline__ Cmp<T> cmp_value(T v) {
  if constexpr (std::is_same_v<T, dev::BF16>)
    return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
  else if constexpr (std::is_same_v<T, dev::F16>)
    return dev::half_to_float(v.bits);
  else if constexpr (is_float_storage<T>)
    return v;
  else
    return dev::to_int(v);
}

// The reference's rule: the first tap wins, then a NaN, then anything greater; a NaN stays.
template <class C>
__device__ __forceinline__ bool takes(bool first, C best, C v) {
  if constexpr (std::is_floating_point_v<C>)
    return first || (best == best && (v != v || v > best));
  else
    return first || v > best;
}

// V elements loaded or stored at once (16-byte aligned at most: the launchers check that).
template <class T, int V>
struct alignas(sizeof(T) * V > 16 ? 16 : sizeof(T) * V) Vec {
  T v[V];
};

// The accumulator of the gradient: double for f32 / f64 (the reference sums in double), float
// for f16 / bf16.
template <class T>
using Acc = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, double, float>;

template <class T, int V>
__global__ void __launch_bounds__(256)
    max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ idx, const PoolGeometry g,
                    T lowest, long long total) {
  const long long cv = g.c / V;  // channel groups (V == 1 in NCHW)
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    long long n, c, oh, ow;
    if (V > 1) {  // NHWC, V channels from c on
      long long r = f;
      c = (r % cv) * V, r /= cv, ow = r % g.ow, r /= g.ow, oh = r % g.oh, n = r / g.oh;
    } else {
      g.coords(f, g.oh, g.ow, n, c, oh, ow);
    }
    int best[V];
    Cmp<T> bv[V];
    T bx[V];
#pragma unroll
    for (int j = 0; j < V; ++j) best[j] = -1, bv[j] = 0, bx[j] = lowest;
    for (long long kh = 0; kh < g.kh; ++kh) {
      const long long h = oh * g.sh + kh * g.dh - g.ph;
      if (h < 0 || h >= g.ih) continue;
      for (long long kw = 0; kw < g.kw; ++kw) {
        const long long w = ow * g.sw + kw * g.dw - g.pw;
        if (w < 0 || w >= g.iw) continue;
        const long long at = g.index(n, c, h, w, g.ih, g.iw);
        Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(x + at);
        const int here = static_cast<int>(h * g.iw + w);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const Cmp<T> cv_ = cmp_value(v.v[j]);
          if (takes(best[j] < 0, bv[j], cv_)) best[j] = here, bv[j] = cv_, bx[j] = v.v[j];
        }
      }
    }
    const long long out = V > 1 ? f * V : f;
    if (y) {
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = bx[j];
      *reinterpret_cast<Vec<T, V>*>(y + out) = o;
    }
    if (idx) {
#pragma unroll
      for (int j = 0; j < V; ++j) idx[out + j] = best[j];
    }
  }
}

// Each element (h, w) of x is a tap of the windows oh * sh + kh * dh - ph == h (and likewise
// along W): walking kh downwards visits those windows in ascending oh.
template <class T, int V>
__global__ void __launch_bounds__(256)
    max_pool_grad_kernel(const T* __restrict__ dy, const int32_t* __restrict__ idx, T* __restrict__ dx,
                         const PoolGeometry g, long long total) {
  const long long cv = g.c / V;
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    long long n, c, h, w;
    if (V > 1) {
      long long r = f;
      c = (r % cv) * V, r /= cv, w = r % g.iw, r /= g.iw, h = r % g.ih, n = r / g.ih;
    } else {
      g.coords(f, g.ih, g.iw, n, c, h, w);
    }
    const int me = static_cast<int>(h * g.iw + w);
    Acc<T> s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 0;
    for (long long kh = g.kh - 1; kh >= 0; --kh) {
      const long long th = h + g.ph - kh * g.dh;
      if (th < 0 || th % g.sh) continue;
      const long long oh = th / g.sh;
      if (oh >= g.oh) break;
      for (long long kw = g.kw - 1; kw >= 0; --kw) {
        const long long tw = w + g.pw - kw * g.dw;
        if (tw < 0 || tw % g.sw) continue;
        const long long ow = tw / g.sw;
        if (ow >= g.ow) break;
        const long long at = g.index(n, c, oh, ow, g.oh, g.ow);
        Vec<int32_t, V> i = *reinterpret_cast<const Vec<int32_t, V>*>(idx + at);
        bool any = false;
#pragma unroll
        for (int j = 0; j < V; ++j) any |= i.v[j] == me;
        if (!any) continue;  // the common case: this window's maxima are elsewhere
        Vec<T, V> d = *reinterpret_cast<const Vec<T, V>*>(dy + at);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (i.v[j] == me) s[j] += static_cast<Acc<T>>(dev::to_double(d.v[j]));
      }
    }
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = dev::from_double<T>(static_cast<double>(s[j]));
    *reinterpret_cast<Vec<T, V>*>(dx + (V > 1 ? f * V : f)) = o;
  }
}

bool geometry_ok(const PoolGeometry& g) {
  return g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.dh >= 1 && g.dw >= 1 && g.ih * g.iw <= INT32_MAX;
}

// Channels per thread: a 16-byte vector of T in NHWC when the channels divide into them and
// every buffer is 16-byte aligned.
template <class T>
int lanes(const PoolGeometry& g, std::initializer_list<const void*> buffers) {
  constexpr int v = static_cast<int>(16 / sizeof(T));
  for (const void* p : buffers)
    if (reinterpret_cast<uintptr_t>(p) % 16) return 1;
  return v > 1 && g.channels_last && g.c % v == 0 ? v : 1;
}

}  // namespace

cudaError_t launch_max_pool(const void* x, void* y, int32_t* idx, DType t, const PoolGeometry& g,
                            unsigned long long lowest, cudaStream_t stream) {
  const long long total = g.n * g.c * g.oh * g.ow;
  if (total == 0) return cudaSuccess;
  if ((!y && !idx) || t == DType::boolean || !geometry_ok(g)) return cudaErrorInvalidValue;
  if (!x && g.ih * g.iw > 0) return cudaErrorInvalidValue;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    T low;
    std::memcpy(&low, &lowest, sizeof(T));
    constexpr int v = static_cast<int>(16 / sizeof(T));
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if constexpr (v > 1) {
      if (lanes<T>(g, {x, y, idx}) == v) {
        max_pool_kernel<T, v><<<dev::grid_for(total / v), 256, 0, stream>>>(xt, yt, idx, g, low, total / v);
        return;
      }
    }
    max_pool_kernel<T, 1><<<dev::grid_for(total), 256, 0, stream>>>(xt, yt, idx, g, low, total);
  });
  return cudaGetLastError();
}

cudaError_t launch_max_pool_grad(const void* dy, const int32_t* idx, void* dx, DType t, const PoolGeometry& g,
                                 cudaStream_t stream) {
  const long long total = g.n * g.c * g.ih * g.iw;
  if (total == 0) return cudaSuccess;
  if (!dx || !geometry_ok(g) || ((!dy || !idx) && g.oh * g.ow > 0)) return cudaErrorInvalidValue;
  bool ok = false;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_storage<T>) {
      ok = true;
      constexpr int v = static_cast<int>(16 / sizeof(T));
      const T* dyt = static_cast<const T*>(dy);
      T* dxt = static_cast<T*>(dx);
      if (lanes<T>(g, {dy, idx, dx}) == v)
        max_pool_grad_kernel<T, v><<<dev::grid_for(total / v), 256, 0, stream>>>(dyt, idx, dxt, g, total / v);
      else
        max_pool_grad_kernel<T, 1><<<dev::grid_for(total), 256, 0, stream>>>(dyt, idx, dxt, g, total);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tg::detail
