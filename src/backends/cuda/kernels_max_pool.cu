// Max pooling (see kernels_max_pool.h). The forward runs a thread per output element, or per V
// neighbouring channels of one in NHWC (V = 16 bytes of the dtype, one vector load per tap);
// the gradient is a gather: a thread per element (or V channels) of x visits the windows that
// hold it and sums the dy of those whose winning tap it is — no atomics, no zero fill, and the
// reference's order. The gradient of a training step pools once more to find the taps (the
// graph's max_pool2d_grad takes x, not indices), 16 bits per output: ResNet-50's pooling at
// batch 256 moved 0.2 GB of i32 indices twice with flat ones. Index math in int where the
// tensors allow (64-bit division made the kernels 4x their bytes' time, bench/RESULTS.md).
// A 3x3 window (every ResNet's) is a compile-time size, K = 3: the tap loops unroll and every
// tap's load is in flight at once; with the size read at run time each load waited for the
// one before (both kernels ran at a quarter of their bytes' time on the H200). f32 / f16 / bf16
// with that window take max_pool_float_kernel (fewer instructions a tap), and a stride of 2 is
// a compile-time size in the gradient.
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

// Flat (n, c, h, w) -> offset in a [n, c, hh, ww] activation; I the index type (int when every
// offset fits: 32-bit division is several times cheaper than 64-bit, and each thread divides
// its flat index by three extents).
template <class I>
__device__ __forceinline__ I at_of(const PoolGeometry& g, I n, I c, I h, I w, I hh, I ww) {
  const I C = static_cast<I>(g.c);
  return g.channels_last ? ((n * hh + h) * ww + w) * C + c : ((n * C + c) * hh + h) * ww + w;
}

// (n, c, h, w) of thread f's first element: V channels from c on in NHWC (V > 1), else one.
template <class I, int V>
__device__ __forceinline__ void split(const PoolGeometry& g, I f, I hh, I ww, I& n, I& c, I& h, I& w) {
  const I C = static_cast<I>(g.c);
  if (V > 1 || g.channels_last) {
    const I cv = C / V;
    c = (f % cv) * V, f /= cv, w = f % ww, f /= ww, h = f % hh, n = f / hh;
  } else {
    w = f % ww, f /= ww, h = f % hh, f /= hh, c = f % C, n = f / C;
  }
}

// Writes the winning taps of output element `out`'s V lanes (tap kh * kw_count + kw, -1 for
// none): as flat image positions (idx, max_pool2d_with_indices) and / or as 16-bit taps for
// the gradient, whichever is given.
template <int V, class I>
__device__ __forceinline__ void store_taps(const int* best, int kw_count, I h0, I w0, I iw, const PoolGeometry& g,
                                           int32_t* idx, uint16_t* taps, I out) {
  if (idx) {
#pragma unroll
    for (int j = 0; j < V; ++j)
      idx[out + j] = best[j] < 0 ? -1
                                 : static_cast<int32_t>((h0 + (best[j] / kw_count) * static_cast<I>(g.dh)) * iw + w0 +
                                                        (best[j] % kw_count) * static_cast<I>(g.dw));
  }
  if (taps) {
    Vec<uint16_t, V> t;
#pragma unroll
    for (int j = 0; j < V; ++j) t.v[j] = static_cast<uint16_t>(best[j] < 0 ? 65535 : best[j]);
    *reinterpret_cast<Vec<uint16_t, V>*>(taps + out) = t;
  }
}

// One thread per output element, or per V neighbouring channels of one in NHWC. Writes the
// maxima (y), the flat index h * iw + w of each (idx: max_pool2d_with_indices) and / or the
// window tap kh * kw_count + kw of each (taps: 16 bits, for the gradient), whichever is given.
template <class T, int V, class I, int K>
__global__ void __launch_bounds__(256)
    max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ idx,
                    uint16_t* __restrict__ taps, const PoolGeometry g, T lowest, I total) {
  const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw), oh_ = static_cast<I>(g.oh), ow_ = static_cast<I>(g.ow);
  const int KH = K ? K : static_cast<int>(g.kh), KW = K ? K : static_cast<int>(g.kw);
  for (I f = static_cast<I>(blockIdx.x) * 256 + threadIdx.x; f < total; f += static_cast<I>(gridDim.x) * 256) {
    I n, c, oh, ow;
    split<I, V>(g, f, oh_, ow_, n, c, oh, ow);
    int best[V];
    Cmp<T> bv[V];
    T bx[V];
#pragma unroll
    for (int j = 0; j < V; ++j) best[j] = -1, bv[j] = 0, bx[j] = lowest;
    const I h0 = oh * static_cast<I>(g.sh) - static_cast<I>(g.ph), w0 = ow * static_cast<I>(g.sw) - static_cast<I>(g.pw);
#pragma unroll
    for (int kh = 0; kh < KH; ++kh) {
      const I h = h0 + kh * static_cast<I>(g.dh);
      if (h < 0 || h >= ih) continue;
#pragma unroll
      for (int kw = 0; kw < KW; ++kw) {
        const I w = w0 + kw * static_cast<I>(g.dw);
        if (w < 0 || w >= iw) continue;
        Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(x + at_of<I>(g, n, c, h, w, ih, iw));
        const int tap = kh * KW + kw;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const Cmp<T> cv_ = cmp_value(v.v[j]);
          if (takes(best[j] < 0, bv[j], cv_)) best[j] = tap, bv[j] = cv_, bx[j] = v.v[j];
        }
      }
    }
    const I out = f * V;
    if (y) {
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = bx[j];
      *reinterpret_cast<Vec<T, V>*>(y + out) = o;
    }
    store_taps<V, I>(best, KW, h0, w0, iw, g, idx, taps, out);
  }
}

template <class T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, dev::BF16>)
    return dev::BF16{dev::float_to_bf16(v)};
  else if constexpr (std::is_same_v<T, dev::F16>)
    return dev::F16{dev::float_to_half(v)};
  else
    return v;
}

// The same for f32 / f16 / bf16 in far fewer instructions a tap (the kernel above is bound by
// its per-lane compare-and-select chains: 82% of the H100's issue rate at 29% of its memory
// bandwidth on ResNet-50's pooling): each lane's maximum with fmaxf and a NaN flag and, where
// the taps or indices are asked for (Taps), the tap of the first strictly greater value or of
// the first NaN, the first valid tap where none was greater than -inf. The reference's rule
// gives the same taps: the first maximum, a NaN before everything. (Keeping the window's loads
// for a second pass that finds the first tap equal to the maximum took 123 registers and ran
// slower than this.)
template <class T, int V, class I, int K, bool Taps>
__global__ void __launch_bounds__(256)
    max_pool_float_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ idx,
                          uint16_t* __restrict__ taps, const PoolGeometry g, T lowest, I total) {
  const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw), oh_ = static_cast<I>(g.oh), ow_ = static_cast<I>(g.ow);
  for (I f = static_cast<I>(blockIdx.x) * 256 + threadIdx.x; f < total; f += static_cast<I>(gridDim.x) * 256) {
    I n, c, oh, ow;
    split<I, V>(g, f, oh_, ow_, n, c, oh, ow);
    float m[V];
    bool nan[V];
    int best[V];
#pragma unroll
    for (int j = 0; j < V; ++j) m[j] = -__int_as_float(0x7f800000), nan[j] = false, best[j] = -1;
    int first = -1;  // the first valid tap (the same for every lane)
    const I h0 = oh * static_cast<I>(g.sh) - static_cast<I>(g.ph), w0 = ow * static_cast<I>(g.sw) - static_cast<I>(g.pw);
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
      const I h = h0 + kh * static_cast<I>(g.dh);
      if (h < 0 || h >= ih) continue;
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        const I w = w0 + kw * static_cast<I>(g.dw);
        if (w < 0 || w >= iw) continue;
        const int t = kh * K + kw;
        if (first < 0) first = t;
        const Vec<T, V> a = *reinterpret_cast<const Vec<T, V>*>(x + at_of<I>(g, n, c, h, w, ih, iw));
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float e = cmp_value(a.v[j]);
          if constexpr (Taps)
            if (!nan[j] && (e > m[j] || e != e)) best[j] = t;
          nan[j] |= e != e;
          m[j] = fmaxf(m[j], e);
        }
      }
    }
    const I out = f * V;
    if (y) {
      Vec<T, V> o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = first < 0 ? lowest : from_float<T>(nan[j] ? __int_as_float(0x7fffffff) : m[j]);
      *reinterpret_cast<Vec<T, V>*>(y + out) = o;
    }
    if constexpr (Taps) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (best[j] < 0) best[j] = first;
      store_taps<V, I>(best, K, h0, w0, iw, g, idx, taps, out);
    }
  }
}

// Each element (h, w) of x is tap (kh, kw) of the windows oh * sh + kh * dh - ph == h (and
// likewise along W): walking kh downwards visits those windows in ascending oh, the
// reference's order of summation. A window gives its dy where its winning tap is this one.
// S: the strides as a compile-time size too (2, every ResNet's pooling), else 0: the window
// tests divide by them, and a division by a run-time value costs a few dozen instructions.
template <class T, int V, class I, int K, int S>
__global__ void __launch_bounds__(256)
    max_pool_grad_kernel(const T* __restrict__ dy, const uint16_t* __restrict__ taps, T* __restrict__ dx,
                         const PoolGeometry g, I total) {
  const I ih = static_cast<I>(g.ih), iw = static_cast<I>(g.iw), oh_ = static_cast<I>(g.oh), ow_ = static_cast<I>(g.ow);
  const I sh = S ? S : static_cast<I>(g.sh), sw = S ? S : static_cast<I>(g.sw);
  const int KH = K ? K : static_cast<int>(g.kh), KW = K ? K : static_cast<int>(g.kw);
  for (I f = static_cast<I>(blockIdx.x) * 256 + threadIdx.x; f < total; f += static_cast<I>(gridDim.x) * 256) {
    I n, c, h, w;
    split<I, V>(g, f, ih, iw, n, c, h, w);
    Acc<T> s[V];
#pragma unroll
    for (int j = 0; j < V; ++j) s[j] = 0;
#pragma unroll
    for (int kh = KH - 1; kh >= 0; --kh) {
      const I th = h + static_cast<I>(g.ph) - kh * static_cast<I>(g.dh);
      if (th < 0 || th % sh) continue;
      const I oh = th / sh;
      if (oh >= oh_) continue;  // (larger for every smaller kh: nothing more along H)
#pragma unroll
      for (int kw = KW - 1; kw >= 0; --kw) {
        const I tw = w + static_cast<I>(g.pw) - kw * static_cast<I>(g.dw);
        if (tw < 0 || tw % sw) continue;
        const I ow = tw / sw;
        if (ow >= ow_) continue;
        const I at = at_of<I>(g, n, c, oh, ow, oh_, ow_);
        Vec<uint16_t, V> t = *reinterpret_cast<const Vec<uint16_t, V>*>(taps + at);
        const uint16_t me = static_cast<uint16_t>(kh * KW + kw);
        bool any = false;
#pragma unroll
        for (int j = 0; j < V; ++j) any |= t.v[j] == me;
        if (!any) continue;  // the common case: this window's maxima are elsewhere
        Vec<T, V> d = *reinterpret_cast<const Vec<T, V>*>(dy + at);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (t.v[j] == me) s[j] += static_cast<Acc<T>>(dev::to_double(d.v[j]));
      }
    }
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = dev::from_double<T>(static_cast<double>(s[j]));
    *reinterpret_cast<Vec<T, V>*>(dx + f * V) = o;
  }
}

bool geometry_ok(const PoolGeometry& g) {
  return g.kh >= 1 && g.kw >= 1 && g.sh >= 1 && g.sw >= 1 && g.dh >= 1 && g.dw >= 1 && g.ih * g.iw <= INT32_MAX &&
         g.kh * g.kw < 65535;
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

// Whether every flat offset of x and y fits in int.
bool fits_int(const PoolGeometry& g) {
  return g.n * g.c * g.ih * g.iw < INT32_MAX && g.n * g.c * g.oh * g.ow < INT32_MAX;
}

}  // namespace

bool max_pool_taps_ok(const PoolGeometry& g) { return geometry_ok(g); }

cudaError_t launch_max_pool(const void* x, void* y, int32_t* idx, uint16_t* taps, DType t, const PoolGeometry& g,
                            unsigned long long lowest, cudaStream_t stream) {
  const long long total = g.n * g.c * g.oh * g.ow;
  if (total == 0) return cudaSuccess;
  if ((!y && !idx && !taps) || t == DType::boolean || !geometry_ok(g)) return cudaErrorInvalidValue;
  if (!x && g.ih * g.iw > 0) return cudaErrorInvalidValue;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    T low;
    std::memcpy(&low, &lowest, sizeof(T));
    constexpr int v = static_cast<int>(16 / sizeof(T));
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    auto go = [&](auto vtag, long long threads) {
      constexpr int V = decltype(vtag)::value;
      const unsigned grid = dev::grid_for(threads);
      if constexpr (is_float_storage<T> && !std::is_same_v<T, double>) {
        if (fits_int(g) && g.kh == 3 && g.kw == 3) {
          if (idx || taps)
            max_pool_float_kernel<T, V, int, 3, true>
                <<<grid, 256, 0, stream>>>(xt, yt, idx, taps, g, low, static_cast<int>(threads));
          else
            max_pool_float_kernel<T, V, int, 3, false>
                <<<grid, 256, 0, stream>>>(xt, yt, idx, taps, g, low, static_cast<int>(threads));
          return;
        }
      }
      if (fits_int(g) && g.kh == 3 && g.kw == 3)
        max_pool_kernel<T, V, int, 3><<<grid, 256, 0, stream>>>(xt, yt, idx, taps, g, low, static_cast<int>(threads));
      else if (fits_int(g))
        max_pool_kernel<T, V, int, 0><<<grid, 256, 0, stream>>>(xt, yt, idx, taps, g, low, static_cast<int>(threads));
      else
        max_pool_kernel<T, V, long long, 0><<<grid, 256, 0, stream>>>(xt, yt, idx, taps, g, low, threads);
    };
    if constexpr (v > 1) {
      if (lanes<T>(g, {x, y, idx}) == v && reinterpret_cast<uintptr_t>(taps) % (2 * v) == 0) {
        go(std::integral_constant<int, v>{}, total / v);
        return;
      }
    }
    go(std::integral_constant<int, 1>{}, total);
  });
  return cudaGetLastError();
}

cudaError_t launch_max_pool_grad(const void* dy, const uint16_t* taps, void* dx, DType t, const PoolGeometry& g,
                                 cudaStream_t stream) {
  const long long total = g.n * g.c * g.ih * g.iw;
  if (total == 0) return cudaSuccess;
  if (!dx || !geometry_ok(g) || ((!dy || !taps) && g.oh * g.ow > 0)) return cudaErrorInvalidValue;
  bool ok = false;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_float_storage<T>) {
      ok = true;
      constexpr int v = static_cast<int>(16 / sizeof(T));
      const T* dyt = static_cast<const T*>(dy);
      T* dxt = static_cast<T*>(dx);
      auto go = [&](auto vtag, long long threads) {
        constexpr int V = decltype(vtag)::value;
        const unsigned grid = dev::grid_for(threads);
        if (fits_int(g) && g.kh == 3 && g.kw == 3 && g.sh == 2 && g.sw == 2)
          max_pool_grad_kernel<T, V, int, 3, 2><<<grid, 256, 0, stream>>>(dyt, taps, dxt, g, static_cast<int>(threads));
        else if (fits_int(g) && g.kh == 3 && g.kw == 3)
          max_pool_grad_kernel<T, V, int, 3, 0><<<grid, 256, 0, stream>>>(dyt, taps, dxt, g, static_cast<int>(threads));
        else if (fits_int(g))
          max_pool_grad_kernel<T, V, int, 0, 0><<<grid, 256, 0, stream>>>(dyt, taps, dxt, g, static_cast<int>(threads));
        else
          max_pool_grad_kernel<T, V, long long, 0, 0><<<grid, 256, 0, stream>>>(dyt, taps, dxt, g, threads);
      };
      if (lanes<T>(g, {dy, dx}) == v && reinterpret_cast<uintptr_t>(taps) % (2 * v) == 0)
        go(std::integral_constant<int, v>{}, total / v);
      else
        go(std::integral_constant<int, 1>{}, total);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace tg::detail
