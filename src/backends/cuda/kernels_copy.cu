// Data-movement kernels: one strided copy (with a tiled variant for minor-dim transposes),
// pad, band_part, and the small generators shape_of / arange. See kernels_copy.h.
#include <cstdint>
#include <cstring>

#include "backends/cuda/kernels_convert.cuh"
#include "backends/cuda/kernels_copy.h"

namespace tg::detail {
namespace {

constexpr int R = kCopyMaxRank;

// Index arithmetic in 32 bits when every index fits (integer division is the cost of these
// kernels, and 64-bit division is several times slower).
template <class I>
struct CopyArgs {
  int rank;
  I dims[R], in_strides[R], out_strides[R];
  I in_offset, out_offset;
};

template <class T, class I, bool Dense>
__global__ void __launch_bounds__(256)
    copy_kernel(const T* __restrict__ in, T* __restrict__ out, const CopyArgs<I> a, I n) {
  const I step = static_cast<I>(gridDim.x) * 256;
  for (I i = static_cast<I>(blockIdx.x) * 256 + threadIdx.x; i < n; i += step) {
    I rest = i, src = a.in_offset, dst = a.out_offset;
    for (int d = a.rank - 1; d > 0; --d) {
      I c = rest % a.dims[d];
      rest /= a.dims[d];
      src += c * a.in_strides[d];
      if (!Dense) dst += c * a.out_strides[d];
    }
    src += rest * a.in_strides[0];
    if (!Dense) dst += rest * a.out_strides[0];
    out[Dense ? i : dst] = in[src];
  }
}

// A copy whose dim p is contiguous in the input and whose innermost dim q is contiguous in the
// output: 32x32 tiles go through shared memory so both sides are read / written in rows.
template <class I>
struct TileArgs {
  I dp, dq, in_sp, in_sq, out_sp, out_sq;
  int brank;
  I bdims[R], bin[R], bout[R];
  I in_offset, out_offset, batches;
};

template <class T, class I>
__global__ void __launch_bounds__(256)
    tile_kernel(const T* __restrict__ in, T* __restrict__ out, const TileArgs<I> a) {
  __shared__ T tile[32][33];
  const I tq = static_cast<I>(blockIdx.x) * 32, tp = static_cast<I>(blockIdx.y) * 32;
  for (I b = blockIdx.z; b < a.batches; b += gridDim.z) {
    I rest = b, ib = a.in_offset, ob = a.out_offset;
    for (int d = a.brank - 1; d >= 0; --d) {
      I c = rest % a.bdims[d];
      rest /= a.bdims[d];
      ib += c * a.bin[d];
      ob += c * a.bout[d];
    }
    for (int k = threadIdx.y; k < 32; k += 8) {
      I p = tp + threadIdx.x, q = tq + k;
      if (p < a.dp && q < a.dq) tile[k][threadIdx.x] = in[ib + p * a.in_sp + q * a.in_sq];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
      I q = tq + threadIdx.x, p = tp + k;
      if (p < a.dp && q < a.dq) out[ob + p * a.out_sp + q * a.out_sq] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

// Calls f(T{}) with an unsigned type of `size` bytes (1, 2, 4, 8).
template <class F>
bool with_size(int size, F&& f) {
  switch (size) {
    case 1: f(uint8_t{}); return true;
    case 2: f(uint16_t{}); return true;
    case 4: f(uint32_t{}); return true;
    case 8: f(static_cast<unsigned long long>(0)); return true;
    default: return false;
  }
}
// The same, also taking 16-byte words (uint4) for widened copies.
template <class F>
bool with_word(int size, F&& f) {
  if (size != 16) return with_size(size, f);
  f(uint4{});
  return true;
}

// Largest index any side of the copy reaches (for choosing 32-bit arithmetic).
long long reach(const StridedCopy& c, long long n) {
  long long in = c.in_offset < 0 ? -c.in_offset : c.in_offset, out = c.out_offset;
  for (int d = 0; d < c.rank; ++d) {
    long long si = c.in_strides[d] < 0 ? -c.in_strides[d] : c.in_strides[d];
    long long so = c.out_strides[d] < 0 ? -c.out_strides[d] : c.out_strides[d];
    in += (c.dims[d] - 1) * si;
    out += (c.dims[d] - 1) * so;
  }
  long long m = n > in ? n : in;
  return m > out ? m : out;
}

template <class I>
CopyArgs<I> copy_args(const StridedCopy& c) {
  CopyArgs<I> a{};
  a.rank = c.rank;
  for (int d = 0; d < c.rank; ++d) {
    a.dims[d] = static_cast<I>(c.dims[d]);
    a.in_strides[d] = static_cast<I>(c.in_strides[d]);
    a.out_strides[d] = static_cast<I>(c.out_strides[d]);
  }
  a.in_offset = static_cast<I>(c.in_offset);
  a.out_offset = static_cast<I>(c.out_offset);
  return a;
}

template <class I>
cudaError_t launch_tiled(const void* in, void* out, const StridedCopy& c, int p, int elem_size,
                         cudaStream_t stream) {
  const int q = c.rank - 1;
  TileArgs<I> a{};
  a.dp = static_cast<I>(c.dims[p]);
  a.dq = static_cast<I>(c.dims[q]);
  a.in_sp = static_cast<I>(c.in_strides[p]);
  a.in_sq = static_cast<I>(c.in_strides[q]);
  a.out_sp = static_cast<I>(c.out_strides[p]);
  a.out_sq = static_cast<I>(c.out_strides[q]);
  a.in_offset = static_cast<I>(c.in_offset);
  a.out_offset = static_cast<I>(c.out_offset);
  long long batches = 1;
  for (int d = 0; d < q; ++d) {
    if (d == p) continue;
    a.bdims[a.brank] = static_cast<I>(c.dims[d]);
    a.bin[a.brank] = static_cast<I>(c.in_strides[d]);
    a.bout[a.brank++] = static_cast<I>(c.out_strides[d]);
    batches *= c.dims[d];
  }
  a.batches = static_cast<I>(batches);
  dim3 grid(static_cast<unsigned>((c.dims[q] + 31) / 32), static_cast<unsigned>((c.dims[p] + 31) / 32),
            static_cast<unsigned>(batches < 65535 ? batches : 65535));
  with_size(elem_size, [&](auto t) {
    using T = decltype(t);
    tile_kernel<T, I><<<grid, dim3(32, 8), 0, stream>>>(static_cast<const T*>(in), static_cast<T*>(out), a);
  });
  return cudaGetLastError();
}

template <class I>
cudaError_t launch_generic(const void* in, void* out, const StridedCopy& c, long long n, int elem_size,
                           cudaStream_t stream) {
  CopyArgs<I> a = copy_args<I>(c);
  bool dense = c.out_offset == 0;
  long long s = 1;
  for (int d = c.rank - 1; d >= 0; --d) {
    dense &= c.out_strides[d] == s;
    s *= c.dims[d];
  }
  with_word(elem_size, [&](auto t) {
    using T = decltype(t);
    auto* src = static_cast<const T*>(in);
    auto* dst = static_cast<T*>(out);
    if (dense)
      copy_kernel<T, I, true><<<dev::grid_for(n), 256, 0, stream>>>(src, dst, a, static_cast<I>(n));
    else
      copy_kernel<T, I, false><<<dev::grid_for(n), 256, 0, stream>>>(src, dst, a, static_cast<I>(n));
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_strided_copy(const void* in, void* out, const StridedCopy& src, int elem_size,
                                cudaStream_t stream) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) return cudaErrorInvalidValue;
  if (src.rank < 0 || src.rank > R) return cudaErrorInvalidValue;
  // Drop size-1 dims and merge each dim into the next inner one where both tensors are
  // contiguous across the pair.
  StridedCopy c;
  c.in_offset = src.in_offset;
  c.out_offset = src.out_offset;
  for (int d = 0; d < src.rank; ++d) {
    if (src.dims[d] < 0) return cudaErrorInvalidValue;
    if (src.dims[d] == 0) return cudaSuccess;
    if (src.dims[d] == 1) continue;
    c.dims[c.rank] = src.dims[d];
    c.in_strides[c.rank] = src.in_strides[d];
    c.out_strides[c.rank++] = src.out_strides[d];
  }
  if (!in || !out) return cudaErrorInvalidValue;
  int m = 0;
  for (int d = 0; d < c.rank; ++d) {
    if (m > 0 && c.in_strides[m - 1] == c.in_strides[d] * c.dims[d] &&
        c.out_strides[m - 1] == c.out_strides[d] * c.dims[d]) {
      c.dims[m - 1] *= c.dims[d];
      c.in_strides[m - 1] = c.in_strides[d];
      c.out_strides[m - 1] = c.out_strides[d];
      continue;
    }
    c.dims[m] = c.dims[d];
    c.in_strides[m] = c.in_strides[d];
    c.out_strides[m++] = c.out_strides[d];
  }
  c.rank = m;
  if (c.rank == 0) {  // one element
    c.rank = 1;
    c.dims[0] = 1;
    c.in_strides[0] = c.out_strides[0] = 1;
  }
  const int last = c.rank - 1;
  // Contiguous innermost dim on both sides: move whole words of up to 16 bytes.
  if (c.in_strides[last] == 1 && c.out_strides[last] == 1) {
    for (int v = 16; v > elem_size; v /= 2) {
      long long k = v / elem_size;
      bool ok = c.dims[last] % k == 0 && c.in_offset % k == 0 && c.out_offset % k == 0 &&
                reinterpret_cast<uintptr_t>(in) % v == 0 && reinterpret_cast<uintptr_t>(out) % v == 0;
      for (int d = 0; d < last && ok; ++d) ok = c.in_strides[d] % k == 0 && c.out_strides[d] % k == 0;
      if (!ok) continue;
      c.dims[last] /= k;
      for (int d = 0; d < last; ++d) {
        c.in_strides[d] /= k;
        c.out_strides[d] /= k;
      }
      c.in_offset /= k;
      c.out_offset /= k;
      elem_size = v;
      break;
    }
  }
  long long n = 1;
  for (int d = 0; d < c.rank; ++d) n *= c.dims[d];
  const bool small = reach(c, n) < (1LL << 30);
  // Innermost dim contiguous only in the output, another dim contiguous in the input: tiled.
  if (c.out_strides[last] == 1 && c.in_strides[last] != 1 && c.dims[last] >= 16) {
    for (int p = 0; p < last; ++p) {
      if (c.in_strides[p] != 1 || c.dims[p] < 16 || (c.dims[p] + 31) / 32 > 65535) continue;
      return small ? launch_tiled<int>(in, out, c, p, elem_size, stream)
                   : launch_tiled<long long>(in, out, c, p, elem_size, stream);
    }
  }
  return small ? launch_generic<int>(in, out, c, n, elem_size, stream)
               : launch_generic<long long>(in, out, c, n, elem_size, stream);
}

// ---- many small copies ----

namespace {

struct CopyPiece {
  const void* src;
  unsigned long long off, bytes;
};
struct CopyMany {
  char* dst;
  int n;
  CopyPiece p[kCopyManyPieces];
};

// Block (x, y) copies the x-th kCopyChunk bytes of piece y: a piece of a megabyte is spread
// over 32 blocks instead of walked by one (46 us a launch for a training forward's small outputs).
constexpr unsigned long long kCopyChunk = 32 * 1024;

__global__ void __launch_bounds__(256) copy_many_kernel(const CopyMany a) {
  const int k = blockIdx.y;
  const unsigned long long begin = blockIdx.x * kCopyChunk, n = a.p[k].bytes;
  if (begin >= n) return;
  const unsigned long long end = n - begin < kCopyChunk ? n : begin + kCopyChunk;
  const char* s = static_cast<const char*>(a.p[k].src);
  char* d = a.dst + a.p[k].off;
  unsigned long long done = begin;
  if ((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) % 16 == 0) {
    const unsigned long long words = (end - begin) / 16;
    const uint4* sw = reinterpret_cast<const uint4*>(s + begin);
    uint4* dw = reinterpret_cast<uint4*>(d + begin);
    for (unsigned long long i = threadIdx.x; i < words; i += blockDim.x) dw[i] = sw[i];
    done = begin + words * 16;
  }
  for (unsigned long long i = done + threadIdx.x; i < end; i += blockDim.x) d[i] = s[i];
}

}  // namespace

cudaError_t launch_copy_many(void* dst, const void* const* srcs, const size_t* offsets, const size_t* bytes, int n,
                             cudaStream_t stream) {
  if (n < 0 || (n > 0 && (!dst || !srcs || !offsets || !bytes))) return cudaErrorInvalidValue;
  for (int k0 = 0; k0 < n; k0 += kCopyManyPieces) {
    CopyMany a{};
    a.dst = static_cast<char*>(dst);
    a.n = n - k0 < kCopyManyPieces ? n - k0 : kCopyManyPieces;
    unsigned long long most = 0;
    for (int k = 0; k < a.n; ++k) {
      if (!srcs[k0 + k] && bytes[k0 + k]) return cudaErrorInvalidValue;
      a.p[k] = CopyPiece{srcs[k0 + k], offsets[k0 + k], bytes[k0 + k]};
      most = bytes[k0 + k] > most ? bytes[k0 + k] : most;
    }
    const unsigned long long chunks = (most + kCopyChunk - 1) / kCopyChunk;
    if (chunks == 0) continue;
    if (chunks > 2147483647ULL) return cudaErrorInvalidValue;
    copy_many_kernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(a.n)), 256, 0, stream>>>(a);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// ---- pad ----

namespace {

template <class I>
struct PadArgs {
  int rank, mode;
  I out_dims[R], in_dims[R], in_strides[R], before[R];
};

template <class T, int V>
struct alignas(sizeof(T) * V) PadVec {
  T v[V];
};

// The input coordinate that output coordinate c of a dim of extent m (padded by `before`)
// reads: the pad modes' rules; -1 for constant padding outside.
template <class I>
__device__ __forceinline__ I pad_source(I c, I before, I m, int mode) {
  I j = c - before;
  if (j >= 0 && j < m) return j;
  if (mode == static_cast<int>(PadKind::constant) || m == 0) return -1;
  if (mode == static_cast<int>(PadKind::edge)) return j < 0 ? 0 : m - 1;
  if (mode == static_cast<int>(PadKind::reflect)) {  // mirror, edge not repeated
    if (m == 1) return 0;
    while (j < 0 || j >= m) j = j < 0 ? -j : 2 * (m - 1) - j;
    return j;
  }
  while (j < 0 || j >= m) j = j < 0 ? -j - 1 : 2 * m - 1 - j;  // symmetric: mirror, edge repeated
  return j;
}

// A thread per V neighbouring output elements along the last dim (V divides it): the outer
// coordinates are found once for the V (divisions per element had held a bf16 pad to 0.5 TB/s:
// ResNet-50's space-to-depth stem input), the V written as one vector.
template <class T, int V, class I>
__global__ void __launch_bounds__(256)
    pad_kernel(const T* __restrict__ in, T* __restrict__ out, const PadArgs<I> a, T fill, I n) {
  const int L = a.rank - 1;
  const I step = static_cast<I>(gridDim.x) * 256;
  for (I v = static_cast<I>(blockIdx.x) * 256 + threadIdx.x; v * V < n; v += step) {
    const I i = v * V;
    I rest = i / a.out_dims[L], src = 0;
    const I c0 = i - rest * a.out_dims[L];
    bool inside = true;
    for (int d = L - 1; d >= 0 && inside; --d) {
      const I c = rest % a.out_dims[d];
      rest /= a.out_dims[d];
      const I j = pad_source<I>(c, a.before[d], a.in_dims[d], a.mode);
      inside = j >= 0;
      src += j * a.in_strides[d];
    }
    PadVec<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const I j = inside ? pad_source<I>(c0 + k, a.before[L], a.in_dims[L], a.mode) : -1;
      o.v[k] = j >= 0 ? in[src + j] : fill;
    }
    *reinterpret_cast<PadVec<T, V>*>(out + i) = o;
  }
}

template <class I>
cudaError_t launch_pad_t(const void* in, void* out, int rank, const long long* in_dims,
                         const long long* out_dims, const long long* before, PadKind mode,
                         unsigned long long fill, int elem_size, long long n, cudaStream_t stream) {
  PadArgs<I> a{};
  a.rank = rank;
  a.mode = static_cast<int>(mode);
  long long s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    a.out_dims[d] = static_cast<I>(out_dims[d]);
    a.in_dims[d] = static_cast<I>(in_dims[d]);
    a.before[d] = static_cast<I>(before[d]);
    a.in_strides[d] = static_cast<I>(s);
    s *= in_dims[d];
  }
  with_size(elem_size, [&](auto t) {
    using T = decltype(t);
    T f;
    std::memcpy(&f, &fill, sizeof(T));  // the low bytes (little-endian)
    constexpr int v = sizeof(T) >= 8 ? 2 : static_cast<int>(8 / sizeof(T));  // 8-byte vectors
    const T* ti = static_cast<const T*>(in);
    T* to = static_cast<T*>(out);
    if (rank >= 1 && out_dims[rank - 1] % v == 0 && reinterpret_cast<uintptr_t>(out) % (v * sizeof(T)) == 0)
      pad_kernel<T, v, I><<<dev::grid_for(n / v), 256, 0, stream>>>(ti, to, a, f, static_cast<I>(n));
    else if (rank >= 1 && out_dims[rank - 1] % 4 == 0 && reinterpret_cast<uintptr_t>(out) % (4 * sizeof(T)) == 0)
      pad_kernel<T, 4, I><<<dev::grid_for(n / 4), 256, 0, stream>>>(ti, to, a, f, static_cast<I>(n));
    else
      pad_kernel<T, 1, I><<<dev::grid_for(n), 256, 0, stream>>>(ti, to, a, f, static_cast<I>(n));
  });
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_pad(const void* in, void* out, int rank, const long long* in_dims,
                       const long long* out_dims, const long long* before, PadKind mode,
                       unsigned long long fill, int elem_size, cudaStream_t stream) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8) return cudaErrorInvalidValue;
  if (rank < 0 || rank > R) return cudaErrorInvalidValue;
  if (rank == 0) {  // a scalar: the kernel walks a last dim
    const long long one = 1, zero = 0;
    return launch_pad(in, out, 1, &one, &one, &zero, mode, fill, elem_size, stream);
  }
  long long n = 1, nin = 1;
  for (int d = 0; d < rank; ++d) {
    n *= out_dims[d];
    nin *= in_dims[d];
  }
  if (n == 0) return cudaSuccess;
  if (!out || (nin > 0 && !in)) return cudaErrorInvalidValue;
  if (n < (1LL << 30) && nin < (1LL << 30))
    return launch_pad_t<int>(in, out, rank, in_dims, out_dims, before, mode, fill, elem_size, n, stream);
  return launch_pad_t<long long>(in, out, rank, in_dims, out_dims, before, mode, fill, elem_size, n, stream);
}

// ---- band_part, shape_of, arange ----

namespace {

template <class T, class I>
__global__ void __launch_bounds__(256) band_kernel(const T* __restrict__ in, T* __restrict__ out, I n, I rows,
                                                   I cols, long long lower, long long upper) {
  const I step = static_cast<I>(gridDim.x) * 256;
  for (I f = static_cast<I>(blockIdx.x) * 256 + threadIdx.x; f < n; f += step) {
    long long j = f % cols, i = (f / cols) % rows;
    bool keep = (lower < 0 || i - j <= lower) && (upper < 0 || j - i <= upper);
    out[f] = keep ? in[f] : T{};
  }
}

struct I64Values {
  long long v[32];
  int n;
};

__global__ void write_i64_kernel(long long* out, const I64Values a) {
  if (threadIdx.x < a.n) out[threadIdx.x] = a.v[threadIdx.x];
}

// The product and the sum are rounded separately (no FMA), as on the host.
template <class T>
__global__ void __launch_bounds__(256)
    arange_kernel(T* __restrict__ out, long long n, double start, double delta) {
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < n; i += 256LL * gridDim.x)
    out[i] = dev::from_double<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), delta)));
}

}  // namespace

cudaError_t launch_band_part(const void* in, void* out, long long n, long long rows, long long cols,
                             long long lower, long long upper, int elem_size, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (!in || !out || rows <= 0 || cols <= 0) return cudaErrorInvalidValue;
  if (!with_size(elem_size, [&](auto t) {
        using T = decltype(t);
        auto* s = static_cast<const T*>(in);
        auto* d = static_cast<T*>(out);
        if (n < (1LL << 30))
          band_kernel<T, int><<<dev::grid_for(n), 256, 0, stream>>>(
              s, d, static_cast<int>(n), static_cast<int>(rows), static_cast<int>(cols), lower, upper);
        else
          band_kernel<T, long long><<<dev::grid_for(n), 256, 0, stream>>>(s, d, n, rows, cols, lower, upper);
      }))
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_write_i64(void* out, const long long* v, int n, cudaStream_t stream) {
  for (int base = 0; base < n; base += 32) {
    I64Values a{};
    a.n = n - base < 32 ? n - base : 32;
    for (int i = 0; i < a.n; ++i) a.v[i] = v[base + i];
    write_i64_kernel<<<1, 32, 0, stream>>>(static_cast<long long*>(out) + base, a);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t launch_arange(void* out, long long n, double start, double delta, DType t, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (!out) return cudaErrorInvalidValue;
  dev::with_storage(t, [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<dev::grid_for(n), 256, 0, stream>>>(static_cast<T*>(out), n, start, delta);
  });
  return cudaGetLastError();
}

}  // namespace tg::detail
