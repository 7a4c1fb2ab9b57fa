// Gather / scatter / one_hot / non_zero kernels. Every gather-like op is "rows of x picked by
// an index map" (kernels_indexing.h): the gather copies rows with the widest vector the rows
// and pointers allow (16 bytes for an f32 embedding row), the scatter combines rows with
// atomics or, sorted by destination, in the reference's order.
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <cstring>
#include <type_traits>

#include "backends/cuda/kernels_util.cuh"

namespace tg::detail {
namespace {

__device__ __forceinline__ long long load_index(const IndexMap& m, long long at) {
  return m.indices64 ? __ldg(static_cast<const long long*>(m.indices) + at)
                     : static_cast<long long>(__ldg(static_cast<const int*>(m.indices) + at));
}

// Index k into a dim of size n: negative counts from the end; out of range is clamped into
// the dim (a defined result) and reported, the first report winning. -1 for an empty dim.
__device__ __forceinline__ long long fix_index(const IndexMap& m, long long k, long long n, int dim) {
  long long r = k < 0 ? k + n : k;
  if (r >= 0 && r < n) return r;
  if (m.error && atomicCAS(&m.error->node, 0, m.node + 1) == 0) {
    m.error->dim = dim;
    m.error->index = k;
    m.error->size = n;
  }
  return r < 0 ? (n > 0 ? 0 : -1) : n - 1;
}

// The row of x that row j of the gather output (scatter updates) reads (writes), or -1.
template <class I>
__device__ __forceinline__ long long source_row(const IndexMap& m, I j, const Div<I>& dn, const Div<I>& dp) {
  if (m.kind == IndexKind::axis) {
    I o = dn.div(j);
    I n = j - o * static_cast<I>(m.n_per);
    I b = dp.div(o);
    long long r = fix_index(m, load_index(m, static_cast<long long>(b) * m.n_per + n), m.a, m.dim);
    return r < 0 ? -1 : static_cast<long long>(o) * m.a + r;
  }
  if (m.kind == IndexKind::nd) {
    long long s = static_cast<long long>(dn.div(j)) * m.nd_rows;
    for (int kk = 0; kk < m.k; ++kk) {
      long long r = fix_index(m, load_index(m, static_cast<long long>(j) * m.k + kk), m.nd_dims[kk], m.dim + kk);
      if (r < 0) return -1;
      s += r * m.nd_strides[kk];
    }
    return s;
  }
  long long off = 0;
  I rest = j;
  for (int d = m.rank - 1; d >= 0; --d) {
    I q = rest / static_cast<I>(m.idims[d]);
    if (d != m.dim) off += static_cast<long long>(rest - q * static_cast<I>(m.idims[d])) * m.xstrides[d];
    rest = q;
  }
  long long r = fix_index(m, load_index(m, static_cast<long long>(j)), m.xdims[m.dim], m.dim);
  return r < 0 ? -1 : off + r * m.xstrides[m.dim];
}

// ---- gather: vectors of V, U per thread in flight (loads first, then stores) ----
constexpr int kUnroll = 4;

template <class V, class I>
__global__ void __launch_bounds__(kThreads) gather_kernel(const V* __restrict__ x, V* __restrict__ y, IndexMap m,
                                                          I total, I nvec, Div<I> dvec, Div<I> dn, Div<I> dp) {
  const I step = static_cast<I>(gridDim.x) * (kThreads * kUnroll);
  for (I base = static_cast<I>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x; base < total; base += step) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      I i = base + u * kThreads;
      if (i < total) {
        I row = dvec.div(i);
        long long s = source_row(m, row, dn, dp);
        v[u] = s < 0 ? V{} : x[s * static_cast<long long>(nvec) + (i - row * nvec)];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      I i = base + u * kThreads;
      if (i < total) y[i] = v[u];
    }
  }
}

template <class V, class I>
cudaError_t gather_as(const void* x, void* y, const IndexMap& m, long long nvec, int sm_count, cudaStream_t s) {
  const long long total = m.rows * nvec;
  unsigned grid = grid_for<gather_kernel<V, I>>((total + kThreads * kUnroll - 1) / (kThreads * kUnroll), sm_count);
  gather_kernel<V, I><<<grid, kThreads, 0, s>>>(static_cast<const V*>(x), static_cast<V*>(y), m, static_cast<I>(total),
                                   static_cast<I>(nvec), Div<I>(nvec), Div<I>(m.n_per), Div<I>(m.p_per));
  return cudaGetLastError();
}

template <class V>
cudaError_t gather_vec(const void* x, void* y, const IndexMap& m, long long nvec, int sm_count, cudaStream_t s) {
  if (fits_u32(m.rows * nvec, static_cast<long long>(sm_count) * 64 * kThreads * kUnroll))
    return gather_as<V, uint32_t>(x, y, m, nvec, sm_count, s);
  return gather_as<V, uint64_t>(x, y, m, nvec, sm_count, s);
}

// ---- scatter with atomics ----
template <class F>
__device__ __forceinline__ F nan_of();
template <>
__device__ __forceinline__ float nan_of<float>() { return __uint_as_float(0x7fc00000u); }
template <>
__device__ __forceinline__ double nan_of<double>() { return __longlong_as_double(0x7ff8000000000000LL); }

// The reference's combination in the compute type C (double for f64, float for f32 / f16 /
// bf16: exact to the reference's double arithmetic once rounded to the dtype; int64 for
// integers, wrapping).
template <class C>
__device__ __forceinline__ C combine(ScatterOp op, C old, C u) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case ScatterOp::set: return u;
      case ScatterOp::add: return old + u;
      case ScatterOp::sub: return old - u;
      case ScatterOp::mul: return old * u;
      case ScatterOp::div: return old / u;
      case ScatterOp::min: return isnan(old) || isnan(u) ? nan_of<C>() : (u < old ? u : old);
      case ScatterOp::max: return isnan(old) || isnan(u) ? nan_of<C>() : (old < u ? u : old);
    }
    return u;
  } else {
    using U = unsigned long long;
    switch (op) {
      case ScatterOp::set: return u;
      case ScatterOp::add: return static_cast<C>(static_cast<U>(old) + static_cast<U>(u));
      case ScatterOp::sub: return static_cast<C>(static_cast<U>(old) - static_cast<U>(u));
      case ScatterOp::mul: return static_cast<C>(static_cast<U>(old) * static_cast<U>(u));
      case ScatterOp::div: return u == 0 ? 0 : u == -1 ? static_cast<C>(U{0} - static_cast<U>(old)) : old / u;
      case ScatterOp::min: return u < old ? u : old;
      case ScatterOp::max: return old < u ? u : old;
    }
    return u;
  }
}

__device__ __forceinline__ void atomic_apply(float* p, float v, ScatterOp op) {
  if (op == ScatterOp::add || op == ScatterOp::sub) {
    atomicAdd(p, op == ScatterOp::sub ? -v : v);
    return;
  }
  auto* q = reinterpret_cast<unsigned*>(p);
  unsigned old = *q, seen;
  do {
    seen = old;
    old = atomicCAS(q, seen, __float_as_uint(combine(op, __uint_as_float(seen), v)));
  } while (old != seen);
}
__device__ __forceinline__ void atomic_apply(double* p, double v, ScatterOp op) {
  if (op == ScatterOp::add || op == ScatterOp::sub) {
    atomicAdd(p, op == ScatterOp::sub ? -v : v);
    return;
  }
  auto* q = reinterpret_cast<unsigned long long*>(p);
  unsigned long long old = *q, seen;
  do {
    seen = old;
    old = atomicCAS(q, seen, static_cast<unsigned long long>(
                                 __double_as_longlong(combine(op, __longlong_as_double(static_cast<long long>(seen)), v))));
  } while (old != seen);
}
__device__ __forceinline__ void atomic_apply(float4* p, float4 v, ScatterOp op) {
  if (op == ScatterOp::sub) v = make_float4(-v.x, -v.y, -v.z, -v.w);
  atomicAdd(p, v);  // add / sub only (sm_90: one vector atomic, each lane atomic on its own)
}
__device__ __forceinline__ void atomic_apply(__half2* p, __half2 v, ScatterOp op) {
  atomicAdd(p, op == ScatterOp::sub ? __hneg2(v) : v);
}
__device__ __forceinline__ void atomic_apply(__half* p, __half v, ScatterOp op) {
  atomicAdd(p, op == ScatterOp::sub ? __hneg(v) : v);
}
__device__ __forceinline__ void atomic_apply(__nv_bfloat162* p, __nv_bfloat162 v, ScatterOp op) {
  atomicAdd(p, op == ScatterOp::sub ? __hneg2(v) : v);
}
__device__ __forceinline__ void atomic_apply(__nv_bfloat16* p, __nv_bfloat16 v, ScatterOp op) {
  atomicAdd(p, op == ScatterOp::sub ? __hneg(v) : v);
}
__device__ __forceinline__ void atomic_apply(int* p, int v, ScatterOp op) {
  switch (op) {
    case ScatterOp::add: atomicAdd(p, v); return;
    case ScatterOp::sub: atomicSub(p, v); return;
    case ScatterOp::min: atomicMin(p, v); return;
    case ScatterOp::max: atomicMax(p, v); return;
    default: {
      int old = *p, seen;
      do {
        seen = old;
        old = atomicCAS(p, seen, static_cast<int>(static_cast<unsigned>(seen) * static_cast<unsigned>(v)));
      } while (old != seen);
    }
  }
}
__device__ __forceinline__ void atomic_apply(long long* p, long long v, ScatterOp op) {
  using U = unsigned long long;
  auto* q = reinterpret_cast<U*>(p);
  switch (op) {
    case ScatterOp::add: atomicAdd(q, static_cast<U>(v)); return;
    case ScatterOp::sub: atomicAdd(q, U{0} - static_cast<U>(v)); return;
    case ScatterOp::min: atomicMin(p, v); return;
    case ScatterOp::max: atomicMax(p, v); return;
    default: {
      U old = *q, seen;
      do {
        seen = old;
        old = atomicCAS(q, seen, seen * static_cast<U>(v));
      } while (old != seen);
    }
  }
}

template <class T, class I>
__global__ void __launch_bounds__(kThreads) scatter_atomic_kernel(T* y, const T* __restrict__ u, IndexMap m, I total,
                                                                  I nvec, Div<I> dvec, Div<I> dn, Div<I> dp,
                                                                  ScatterOp op) {
  for (I i = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * kThreads) {
    I row = dvec.div(i);
    long long d = source_row(m, row, dn, dp);
    if (d >= 0) atomic_apply(y + d * static_cast<long long>(nvec) + (i - row * nvec), u[i], op);
  }
}

template <class T>
cudaError_t scatter_atomic_as(void* y, const void* u, const IndexMap& m, long long nvec, ScatterOp op, int sm_count,
                              cudaStream_t s) {
  const long long total = m.rows * nvec;
  const long long blocks = (total + kThreads - 1) / kThreads;
  if (fits_u32(total, static_cast<long long>(sm_count) * 64 * kThreads)) {
    unsigned grid = grid_for<scatter_atomic_kernel<T, uint32_t>>(blocks, sm_count);
    scatter_atomic_kernel<T, uint32_t><<<grid, kThreads, 0, s>>>(
        static_cast<T*>(y), static_cast<const T*>(u), m, static_cast<uint32_t>(total), static_cast<uint32_t>(nvec),
        Div<uint32_t>(nvec), Div<uint32_t>(m.n_per), Div<uint32_t>(m.p_per), op);
  } else {
    unsigned grid = grid_for<scatter_atomic_kernel<T, uint64_t>>(blocks, sm_count);
    scatter_atomic_kernel<T, uint64_t><<<grid, kThreads, 0, s>>>(
        static_cast<T*>(y), static_cast<const T*>(u), m, static_cast<uint64_t>(total), static_cast<uint64_t>(nvec),
        Div<uint64_t>(nvec), Div<uint64_t>(m.n_per), Div<uint64_t>(m.p_per), op);
  }
  return cudaGetLastError();
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0; }

// ---- ordered scatter: destination keys, then one thread per destination element ----
template <class K>
__global__ void __launch_bounds__(kThreads) scatter_keys_kernel(IndexMap m, long long dest_rows, K* keys,
                                                                uint32_t* vals, Div<uint64_t> dn, Div<uint64_t> dp) {
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < static_cast<uint64_t>(m.rows);
       j += static_cast<uint64_t>(gridDim.x) * kThreads) {
    long long d = source_row(m, j, dn, dp);
    keys[j] = static_cast<K>(d < 0 ? dest_rows : d);
    vals[j] = static_cast<uint32_t>(j);
  }
}

// Element type T computed as C (see combine), stored back with the host's rounding.
template <class T>
struct Arith {
  using C = std::conditional_t<std::is_integral_v<T>, long long, T>;
  __device__ static C load(T v) { return static_cast<C>(v); }
  __device__ static T store(C v) { return static_cast<T>(v); }  // integers wrap to the width
};
template <>
struct Arith<__half> {
  using C = float;
  __device__ static C load(__half v) { return __half2float(v); }
  __device__ static __half store(C v) { return to_half(v); }
};
template <>
struct Arith<__nv_bfloat16> {
  using C = float;
  __device__ static C load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(C v) { return to_bf16(v); }
};

template <class T, class K>
__global__ void __launch_bounds__(kThreads) scatter_ordered_kernel(T* y, const T* __restrict__ u,
                                                                   const K* __restrict__ keys,
                                                                   const uint32_t* __restrict__ vals, uint64_t rows,
                                                                   uint64_t row_len, K sentinel, ScatterOp op) {
  const uint64_t total = rows * row_len;
  for (uint64_t t = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; t < total;
       t += static_cast<uint64_t>(gridDim.x) * kThreads) {
    const uint64_t i = t / row_len, col = t - i * row_len;
    const K key = keys[i];
    if (key == sentinel) continue;
    T* dst = y + static_cast<uint64_t>(key) * row_len + col;
    if (op == ScatterOp::set) {  // the last update in the original order wins
      if (i + 1 == rows || keys[i + 1] != key) *dst = u[static_cast<uint64_t>(vals[i]) * row_len + col];
      continue;
    }
    if (i > 0 && keys[i - 1] == key) continue;  // not the first of its destination
    using A = Arith<T>;
    typename A::C acc = A::load(*dst);
    for (uint64_t s = i; s < rows && keys[s] == key; ++s) {
      acc = combine(op, acc, A::load(u[static_cast<uint64_t>(vals[s]) * row_len + col]));
      if constexpr (!std::is_same_v<typename A::C, T>) acc = A::load(A::store(acc));  // round per step, as the reference
    }
    *dst = A::store(acc);
  }
}

template <class T, class K>
cudaError_t scatter_ordered_as(void* y, const void* u, const void* keys, const uint32_t* vals, long long rows,
                               long long row_len, long long dest_rows, ScatterOp op, int sm_count, cudaStream_t s) {
  long long total = rows * row_len;
  unsigned grid = grid_for<scatter_ordered_kernel<T, K>>((total + kThreads - 1) / kThreads, sm_count);
  scatter_ordered_kernel<T, K><<<grid, kThreads, 0, s>>>(
      static_cast<T*>(y), static_cast<const T*>(u), static_cast<const K*>(keys), vals, static_cast<uint64_t>(rows),
      static_cast<uint64_t>(row_len), static_cast<K>(dest_rows), op);
  return cudaGetLastError();
}

template <class K>
cudaError_t scatter_ordered_key(void* y, const void* u, const void* keys, const uint32_t* vals, long long rows,
                                long long row_len, long long dest_rows, DType t, ScatterOp op, int sm_count,
                                cudaStream_t s) {
  auto go = [&](auto tag) {
    return scatter_ordered_as<decltype(tag), K>(y, u, keys, vals, rows, row_len, dest_rows, op, sm_count, s);
  };
  switch (t) {
    case DType::f32: return go(float{});
    case DType::f64: return go(double{});
    case DType::f16: return go(__half{});
    case DType::bf16: return go(__nv_bfloat16{});
    case DType::i8: return go(int8_t{});
    case DType::i16: return go(int16_t{});
    case DType::i32: return go(int32_t{});
    case DType::i64: return go(int64_t{});
    case DType::u8: case DType::boolean: return go(uint8_t{});
  }
  return cudaErrorInvalidValue;
}

// ---- one_hot ----
template <class T, class I>
__global__ void __launch_bounds__(kThreads) one_hot_kernel(const void* __restrict__ indices, int indices64, T* y,
                                                           I total, I depth, I inner, Div<I> d_inner, Div<I> d_depth,
                                                           T on, T off) {
  for (I e = static_cast<I>(blockIdx.x) * kThreads + threadIdx.x; e < total; e += static_cast<I>(gridDim.x) * kThreads) {
    I t = d_inner.div(e), i = e - t * inner;
    I o = d_depth.div(t), j = t - o * depth;
    I at = o * inner + i;
    long long k = indices64 ? static_cast<const long long*>(indices)[at] : static_cast<const int*>(indices)[at];
    if (k < 0) k += static_cast<long long>(depth);
    y[e] = k == static_cast<long long>(j) ? on : off;
  }
}

template <class T>
cudaError_t one_hot_as(const void* ind, int i64, void* y, long long outer, long long depth, long long inner,
                       uint64_t on, uint64_t off, int sm_count, cudaStream_t s) {
  T on_v, off_v;
  memcpy(&on_v, &on, sizeof(T));
  memcpy(&off_v, &off, sizeof(T));
  const long long total = outer * depth * inner, blocks = (total + kThreads - 1) / kThreads;
  if (fits_u32(total, static_cast<long long>(sm_count) * 64 * kThreads)) {
    one_hot_kernel<T, uint32_t><<<grid_for<one_hot_kernel<T, uint32_t>>(blocks, sm_count), kThreads, 0, s>>>(
        ind, i64, static_cast<T*>(y), static_cast<uint32_t>(total), static_cast<uint32_t>(depth),
        static_cast<uint32_t>(inner), Div<uint32_t>(inner), Div<uint32_t>(depth), on_v, off_v);
  } else {
    one_hot_kernel<T, uint64_t><<<grid_for<one_hot_kernel<T, uint64_t>>(blocks, sm_count), kThreads, 0, s>>>(
        ind, i64, static_cast<T*>(y), static_cast<uint64_t>(total), static_cast<uint64_t>(depth),
        static_cast<uint64_t>(inner), Div<uint64_t>(inner), Div<uint64_t>(depth), on_v, off_v);
  }
  return cudaGetLastError();
}

// ---- non_zero_indices ----
// Non-zero: any bit outside the sign for floats (so -0 is zero and NaN is not), any bit for
// integers and bool.
__global__ void non_zero_flags_kernel(const void* __restrict__ x, DType t, long long n, unsigned char* flags) {
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * kThreads) {
    bool nz;
    switch (t) {
      case DType::f32: nz = (static_cast<const uint32_t*>(x)[i] & 0x7fffffffu) != 0; break;
      case DType::f64: nz = (static_cast<const uint64_t*>(x)[i] & 0x7fffffffffffffffull) != 0; break;
      case DType::f16: case DType::bf16: nz = (static_cast<const uint16_t*>(x)[i] & 0x7fffu) != 0; break;
      case DType::i16: nz = static_cast<const uint16_t*>(x)[i] != 0; break;
      case DType::i32: nz = static_cast<const uint32_t*>(x)[i] != 0; break;
      case DType::i64: nz = static_cast<const uint64_t*>(x)[i] != 0; break;
      default: nz = static_cast<const uint8_t*>(x)[i] != 0;
    }
    flags[i] = nz;
  }
}

struct Coords {
  long long dims[kIndexMaxRank];
};

__global__ void non_zero_coords_kernel(const long long* __restrict__ flat, long long count, Coords c, int rank,
                                       long long* y) {
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * kThreads) {
    long long rest = flat[i];
    for (int d = rank - 1; d >= 0; --d) {
      y[i * rank + d] = rest % c.dims[d];
      rest /= c.dims[d];
    }
  }
}

// ---- variable writes of a captured run, skipped when an index was out of range ----
__global__ void copy_unless_error_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t n16,
                                         unsigned char* __restrict__ dst_b, const unsigned char* __restrict__ src_b,
                                         size_t bytes, const IndexError* error) {
  if (error->node != 0) return;
  const size_t first = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x, step = static_cast<size_t>(gridDim.x) * kThreads;
  for (size_t i = first; i < n16; i += step) dst[i] = src[i];
  for (size_t i = n16 * 16 + first; i < bytes; i += step) dst_b[i] = src_b[i];
}

}  // namespace

cudaError_t launch_copy_unless_error(void* dst, const void* src, size_t bytes, const IndexError* error,
                                     cudaStream_t s) {
  if (bytes == 0) return cudaSuccess;
  const size_t n16 = aligned(dst, 16) && aligned(src, 16) ? bytes / 16 : 0;
  const size_t work = (n16 > 0 ? n16 : bytes), blocks = (work + kThreads - 1) / kThreads;
  copy_unless_error_kernel<<<static_cast<unsigned>(blocks < 2048 ? blocks : 2048), kThreads, 0, s>>>(
      static_cast<uint4*>(dst), static_cast<const uint4*>(src), n16, static_cast<unsigned char*>(dst),
      static_cast<const unsigned char*>(src), bytes, error);
  return cudaGetLastError();
}

cudaError_t launch_gather(const void* x, void* y, const IndexMap& m, int elem_size, int sm_count, cudaStream_t s) {
  if (m.rows <= 0 || m.row_len <= 0) return cudaSuccess;
  const long long row_bytes = m.row_len * elem_size;
  for (int w : {16, 8, 4, 2, 1}) {
    if (row_bytes % w != 0 || !aligned(x, w) || !aligned(y, w)) continue;
    const long long nvec = row_bytes / w;
    switch (w) {
      case 16: return gather_vec<uint4>(x, y, m, nvec, sm_count, s);
      case 8: return gather_vec<uint2>(x, y, m, nvec, sm_count, s);
      case 4: return gather_vec<unsigned>(x, y, m, nvec, sm_count, s);
      case 2: return gather_vec<unsigned short>(x, y, m, nvec, sm_count, s);
      default: return gather_vec<unsigned char>(x, y, m, nvec, sm_count, s);
    }
  }
  return cudaErrorInvalidValue;
}

bool scatter_atomic_supported(DType t, ScatterOp op) {
  if (op == ScatterOp::set) return false;
  switch (t) {
    case DType::f32: case DType::f64: return true;
    case DType::f16: case DType::bf16: return op == ScatterOp::add || op == ScatterOp::sub;
    case DType::i32: case DType::i64: return op != ScatterOp::div;
    default: return false;
  }
}

cudaError_t launch_scatter_atomic(void* y, const void* u, const IndexMap& m, DType t, ScatterOp op, int sm_count,
                                  cudaStream_t s) {
  if (!scatter_atomic_supported(t, op)) return cudaErrorInvalidValue;
  if (m.rows <= 0 || m.row_len <= 0) return cudaSuccess;
  const long long r = m.row_len;
  const bool add = op == ScatterOp::add || op == ScatterOp::sub;
  switch (t) {
    case DType::f32:
      if (add && r % 4 == 0 && aligned(y, 16) && aligned(u, 16))
        return scatter_atomic_as<float4>(y, u, m, r / 4, op, sm_count, s);
      return scatter_atomic_as<float>(y, u, m, r, op, sm_count, s);
    case DType::f64: return scatter_atomic_as<double>(y, u, m, r, op, sm_count, s);
    case DType::f16:
      if (r % 2 == 0 && aligned(y, 4) && aligned(u, 4)) return scatter_atomic_as<__half2>(y, u, m, r / 2, op, sm_count, s);
      return scatter_atomic_as<__half>(y, u, m, r, op, sm_count, s);
    case DType::bf16:
      if (r % 2 == 0 && aligned(y, 4) && aligned(u, 4))
        return scatter_atomic_as<__nv_bfloat162>(y, u, m, r / 2, op, sm_count, s);
      return scatter_atomic_as<__nv_bfloat16>(y, u, m, r, op, sm_count, s);
    case DType::i32: return scatter_atomic_as<int>(y, u, m, r, op, sm_count, s);
    case DType::i64: return scatter_atomic_as<long long>(y, u, m, r, op, sm_count, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_scatter_keys(const IndexMap& m, long long dest_rows, void* keys, int key64, uint32_t* vals,
                                int sm_count, cudaStream_t s) {
  if (m.rows <= 0) return cudaSuccess;
  const long long blocks = (m.rows + kThreads - 1) / kThreads;
  if (key64) {
    scatter_keys_kernel<uint64_t><<<grid_for<scatter_keys_kernel<uint64_t>>(blocks, sm_count), kThreads, 0, s>>>(
        m, dest_rows, static_cast<uint64_t*>(keys), vals, Div<uint64_t>(m.n_per), Div<uint64_t>(m.p_per));
  } else {
    scatter_keys_kernel<uint32_t><<<grid_for<scatter_keys_kernel<uint32_t>>(blocks, sm_count), kThreads, 0, s>>>(
        m, dest_rows, static_cast<uint32_t*>(keys), vals, Div<uint64_t>(m.n_per), Div<uint64_t>(m.p_per));
  }
  return cudaGetLastError();
}

cudaError_t launch_scatter_ordered(void* y, const void* u, const void* keys, int key64, const uint32_t* vals,
                                   long long rows, long long row_len, long long dest_rows, DType t, ScatterOp op,
                                   int sm_count, cudaStream_t s) {
  if (rows <= 0 || row_len <= 0) return cudaSuccess;
  return key64 ? scatter_ordered_key<uint64_t>(y, u, keys, vals, rows, row_len, dest_rows, t, op, sm_count, s)
               : scatter_ordered_key<uint32_t>(y, u, keys, vals, rows, row_len, dest_rows, t, op, sm_count, s);
}

cudaError_t launch_one_hot(const void* indices, int indices64, void* y, long long outer, long long depth,
                           long long inner, int elem_size, uint64_t on_bits, uint64_t off_bits, int sm_count,
                           cudaStream_t s) {
  if (outer * depth * inner == 0) return cudaSuccess;
  switch (elem_size) {
    case 1: return one_hot_as<uint8_t>(indices, indices64, y, outer, depth, inner, on_bits, off_bits, sm_count, s);
    case 2: return one_hot_as<uint16_t>(indices, indices64, y, outer, depth, inner, on_bits, off_bits, sm_count, s);
    case 4: return one_hot_as<uint32_t>(indices, indices64, y, outer, depth, inner, on_bits, off_bits, sm_count, s);
    case 8: return one_hot_as<uint64_t>(indices, indices64, y, outer, depth, inner, on_bits, off_bits, sm_count, s);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_non_zero_select(const void* x, DType t, long long n, long long* flat, long long* count,
                                   void* workspace, size_t& workspace_bytes, cudaStream_t s) {
  const size_t flag_bytes = (static_cast<size_t>(n) + 255) / 256 * 256;
  size_t cub_bytes = 0;
  thrust::counting_iterator<long long> positions(0);
  auto* flags = static_cast<unsigned char*>(workspace);
  cudaError_t e = cub::DeviceSelect::Flagged(nullptr, cub_bytes, positions, flags, flat, count, n, s);
  if (e != cudaSuccess) return e;
  if (!workspace) {
    workspace_bytes = flag_bytes + cub_bytes;
    return cudaSuccess;
  }
  if (workspace_bytes < flag_bytes + cub_bytes) return cudaErrorInvalidValue;
  if (n > 0) {
    long long blocks = (n + kThreads - 1) / kThreads;
    non_zero_flags_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kThreads, 0, s>>>(x, t, n, flags);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  return cub::DeviceSelect::Flagged(static_cast<unsigned char*>(workspace) + flag_bytes, cub_bytes, positions, flags,
                                    flat, count, n, s);
}

cudaError_t launch_non_zero_coords(const long long* flat, long long count, const long long* dims, int rank,
                                   long long* y, cudaStream_t s) {
  if (rank < 0 || rank > kIndexMaxRank) return cudaErrorInvalidValue;
  if (count <= 0 || rank == 0) return cudaSuccess;
  Coords c{};
  for (int d = 0; d < rank; ++d) c.dims[d] = dims[d];
  long long blocks = (count + kThreads - 1) / kThreads;
  non_zero_coords_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), kThreads, 0, s>>>(flat, count, c,
                                                                                                    rank, y);
  return cudaGetLastError();
}

}  // namespace tg::detail
