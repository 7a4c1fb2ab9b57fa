// max_pool2d_with_indices (see kernels_pool_indices.h): a thread per output element walks its
// window in row-major order; floats compare as double (exact for every float dtype), integers
// as int64; the winning element is copied bit for bit.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cuda/kernels_convert.cuh"
#include "backends/cuda/kernels_pool_indices.h"

namespace tg::detail {
namespace {

template <class T>
__global__ void __launch_bounds__(256)
    max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ idx,
                    const PoolGeometry g, T lowest, long long total) {
  constexpr bool fl = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, dev::F16> ||
                      std::is_same_v<T, dev::BF16>;
  for (long long f = blockIdx.x * 256LL + threadIdx.x; f < total; f += 256LL * gridDim.x) {
    long long n, c, oh, ow;
    g.coords(f, g.oh, g.ow, n, c, oh, ow);
    long long best = -1, best_at = 0;
    double bd = 0;
    long long bi = 0;
    for (long long kh = 0; kh < g.kh; ++kh) {
      const long long h = oh * g.sh + kh * g.dh - g.ph;
      if (h < 0 || h >= g.ih) continue;
      for (long long kw = 0; kw < g.kw; ++kw) {
        const long long w = ow * g.sw + kw * g.dw - g.pw;
        if (w < 0 || w >= g.iw) continue;
        const long long at = g.index(n, c, h, w, g.ih, g.iw);
        bool take;
        if constexpr (fl) {
          double v = dev::to_double(x[at]);
          take = best < 0 || (bd == bd && (v != v || v > bd));
          if (take) bd = v;
        } else {
          long long v = dev::to_int(x[at]);
          take = best < 0 || v > bi;
          if (take) bi = v;
        }
        if (take) {
          best = h * g.iw + w;
          best_at = at;
        }
      }
    }
    y[f] = best >= 0 ? x[best_at] : lowest;
    idx[f] = static_cast<int32_t>(best);
  }
}

}  // namespace

cudaError_t launch_max_pool_indices(const void* x, void* y, int32_t* idx, DType t, const PoolGeometry& g,
                                    unsigned long long lowest, cudaStream_t stream) {
  const long long total = g.n * g.c * g.oh * g.ow;
  if (total == 0) return cudaSuccess;
  if (!y || !idx || t == DType::boolean) return cudaErrorInvalidValue;
  if (!x && g.ih * g.iw > 0) return cudaErrorInvalidValue;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    T low;
    std::memcpy(&low, &lowest, sizeof(T));
    max_pool_kernel<T><<<dev::grid_for(total), 256, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                 idx, g, low, total);
  });
  return cudaGetLastError();
}

}  // namespace tg::detail
