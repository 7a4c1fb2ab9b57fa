// Stable sorting on the device with CUB's radix sort. A sort along an axis sorts every line
// at once in two stable passes: all elements by value key, then by line number (a stable
// sort keeps the value order inside each line and the input order among equal values).
// DeviceSegmentedSort is not used: with many segments it copies sizes to the host and
// synchronises, which a CUDA graph capture forbids; DeviceRadixSort stays on the stream.
#include <cub/device/device_radix_sort.cuh>

#include "backends/cuda/kernels_sort.h"
#include "backends/cuda/kernels_util.cuh"

namespace tg::detail {
namespace {

int key_bits(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 64;
    case DType::f32: case DType::i32: return 32;
    case DType::f16: case DType::bf16: case DType::i16: return 16;
    default: return 8;
  }
}

int bit_width(unsigned long long v) {
  int b = 0;
  while (v >> b) ++b;
  return b;
}

// The radix key of element i of x (see float_sort_key), zero-extended.
__device__ __forceinline__ unsigned long long element_key(const void* x, DType t, long long i) {
  switch (t) {
    case DType::f64: return float_sort_key<uint64_t>(static_cast<const uint64_t*>(x)[i], 0x7ff0000000000000ull);
    case DType::f32: return float_sort_key<uint32_t>(static_cast<const uint32_t*>(x)[i], 0x7f800000u);
    case DType::f16: return float_sort_key<uint16_t>(static_cast<const uint16_t*>(x)[i], 0x7c00u);
    case DType::bf16: return float_sort_key<uint16_t>(static_cast<const uint16_t*>(x)[i], 0x7f80u);
    case DType::i64: return signed_sort_key<uint64_t>(static_cast<const uint64_t*>(x)[i]);
    case DType::i32: return signed_sort_key<uint32_t>(static_cast<const uint32_t*>(x)[i]);
    case DType::i16: return signed_sort_key<uint16_t>(static_cast<const uint16_t*>(x)[i]);
    case DType::i8: return signed_sort_key<uint8_t>(static_cast<const uint8_t*>(x)[i]);
    default: return static_cast<const uint8_t*>(x)[i];  // u8, bool
  }
}

// Item f = line * len + j of line (o, i) reads x[o, j, i].
template <class K>
__global__ void __launch_bounds__(kThreads) line_keys_kernel(const void* __restrict__ x, DType t, uint32_t len,
                                                             uint32_t inner, uint32_t n, bool descending, K* keys,
                                                             uint32_t* vals) {
  for (uint32_t f = blockIdx.x * kThreads + threadIdx.x; f < n; f += gridDim.x * kThreads) {
    uint32_t line = f / len, j = f - line * len, o = line / inner, i = line - o * inner;
    K key = static_cast<K>(element_key(x, t, (static_cast<long long>(o) * len + j) * inner + i));
    keys[f] = descending ? static_cast<K>(~key) : key;
    vals[f] = f;
  }
}

__global__ void __launch_bounds__(kThreads) line_of_kernel(const uint32_t* __restrict__ vals, uint32_t len,
                                                           uint32_t n, uint32_t* lines) {
  for (uint32_t f = blockIdx.x * kThreads + threadIdx.x; f < n; f += gridDim.x * kThreads) lines[f] = vals[f] / len;
}

// Output (o, j, i) for j < k: the j-th of line (o, i) in sorted order.
__global__ void __launch_bounds__(kThreads) line_out_kernel(const void* __restrict__ x, int elem_size,
                                                            const uint32_t* __restrict__ sorted, uint32_t len,
                                                            uint32_t inner, uint32_t k, uint32_t n_out, void* values,
                                                            int32_t* positions) {
  for (uint32_t e = blockIdx.x * kThreads + threadIdx.x; e < n_out; e += gridDim.x * kThreads) {
    uint32_t t = e / inner, i = e - t * inner, o = t / k, j = t - o * k;
    uint32_t line = o * inner + i;
    uint32_t p = sorted[static_cast<uint64_t>(line) * len + j] - line * len;
    if (positions) positions[e] = static_cast<int32_t>(p);
    if (!values) continue;
    uint64_t src = (static_cast<uint64_t>(o) * len + p) * inner + i;
    switch (elem_size) {
      case 8: static_cast<uint64_t*>(values)[e] = static_cast<const uint64_t*>(x)[src]; break;
      case 4: static_cast<uint32_t*>(values)[e] = static_cast<const uint32_t*>(x)[src]; break;
      case 2: static_cast<uint16_t*>(values)[e] = static_cast<const uint16_t*>(x)[src]; break;
      default: static_cast<uint8_t*>(values)[e] = static_cast<const uint8_t*>(x)[src];
    }
  }
}

template <class K>
cudaError_t radix_pairs(void* keys[2], uint32_t* vals[2], long long n, int end_bit, int* which, void* ws,
                        size_t& bytes, cudaStream_t s) {
  cub::DoubleBuffer<K> k(static_cast<K*>(keys[0]), static_cast<K*>(keys[1]));
  cub::DoubleBuffer<uint32_t> v(vals[0], vals[1]);
  cudaError_t e = cub::DeviceRadixSort::SortPairs(ws, bytes, k, v, static_cast<int>(n), 0, end_bit, s);
  if (which) *which = k.selector;  // keys and values move together: one selector
  return e;
}

// Workspace layout: keys[2] (n keys of kb bytes), vals[2] (n u32), CUB's temporary storage.
struct Layout {
  size_t key_bytes, val_bytes, cub_bytes;
  size_t total() const { return 2 * key_bytes + 2 * val_bytes + cub_bytes; }
};

size_t round_up(size_t v) { return (v + 255) / 256 * 256; }

Layout layout_for(long long n, int kb, long long lines) {
  Layout l{round_up(static_cast<size_t>(n) * kb), round_up(static_cast<size_t>(n) * 4), 0};
  void* none[2] = {nullptr, nullptr};
  uint32_t* vnone[2] = {nullptr, nullptr};
  size_t b1 = 0, b2 = 0;
  if (kb == 8) radix_pairs<uint64_t>(none, vnone, n, 64, nullptr, nullptr, b1, nullptr);
  else radix_pairs<uint32_t>(none, vnone, n, 32, nullptr, nullptr, b1, nullptr);
  if (lines > 1) radix_pairs<uint32_t>(none, vnone, n, 32, nullptr, nullptr, b2, nullptr);
  l.cub_bytes = round_up(b1 > b2 ? b1 : b2);
  return l;
}

}  // namespace

size_t sort_lines_workspace(long long lines, long long len, DType t) {
  return layout_for(lines * len, key_bits(t) == 64 ? 8 : 4, lines).total();
}

cudaError_t launch_sort_lines(const void* x, DType t, long long outer, long long len, long long inner, long long k,
                              bool descending, void* values, int32_t* positions, void* workspace,
                              size_t workspace_bytes, int sm_count, cudaStream_t s) {
  const long long lines = outer * inner, n = lines * len, n_out = lines * k;
  if (n >= (1LL << 31) || k > len || k < 0) return cudaErrorInvalidValue;
  if (n_out == 0) return cudaSuccess;
  const int kb = key_bits(t) == 64 ? 8 : 4;
  const Layout l = layout_for(n, kb, lines);
  if (workspace_bytes < l.total()) return cudaErrorInvalidValue;
  auto* base = static_cast<char*>(workspace);
  void* keys[2] = {base, base + l.key_bytes};
  uint32_t* vals[2] = {reinterpret_cast<uint32_t*>(base + 2 * l.key_bytes),
                       reinterpret_cast<uint32_t*>(base + 2 * l.key_bytes + l.val_bytes)};
  void* cub_ws = base + 2 * l.key_bytes + 2 * l.val_bytes;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  const unsigned grid = blocks < 8u * sm_count ? blocks : 8u * sm_count;
  cudaError_t e;
  if (kb == 8)
    line_keys_kernel<uint64_t><<<grid, kThreads, 0, s>>>(x, t, len, inner, n, descending,
                                                         static_cast<uint64_t*>(keys[0]), vals[0]);
  else
    line_keys_kernel<uint32_t><<<grid, kThreads, 0, s>>>(x, t, len, inner, n, descending,
                                                         static_cast<uint32_t*>(keys[0]), vals[0]);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  int which = 0;
  size_t bytes = l.cub_bytes;
  e = kb == 8 ? radix_pairs<uint64_t>(keys, vals, n, key_bits(t), &which, cub_ws, bytes, s)
              : radix_pairs<uint32_t>(keys, vals, n, key_bits(t), &which, cub_ws, bytes, s);
  if (e != cudaSuccess) return e;
  if (lines > 1) {  // stable by line: the value order stays inside each line
    void* lkeys[2] = {keys[1 - which], keys[which]};
    uint32_t* lvals[2] = {vals[which], vals[1 - which]};
    line_of_kernel<<<grid, kThreads, 0, s>>>(lvals[0], len, n, static_cast<uint32_t*>(lkeys[0]));
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    int w2 = 0;
    bytes = l.cub_bytes;
    e = radix_pairs<uint32_t>(lkeys, lvals, n, bit_width(static_cast<unsigned long long>(lines - 1)), &w2, cub_ws,
                              bytes, s);
    if (e != cudaSuccess) return e;
    which = lvals[w2] == vals[0] ? 0 : 1;
  }
  const unsigned out_blocks = static_cast<unsigned>((n_out + kThreads - 1) / kThreads);
  line_out_kernel<<<out_blocks < 8u * sm_count ? out_blocks : 8u * sm_count, kThreads, 0, s>>>(
      x, static_cast<int>(dtype_size(t)), vals[which], len, inner, k, n_out, values, positions);
  return cudaGetLastError();
}

cudaError_t launch_radix_sort_pairs(void* keys[2], int key64, uint32_t* vals[2], long long n, int end_bit, int* which,
                                    void* workspace, size_t& workspace_bytes, cudaStream_t s) {
  if (n >= (1LL << 31)) return cudaErrorInvalidValue;
  return key64 ? radix_pairs<uint64_t>(keys, vals, n, end_bit, which, workspace, workspace_bytes, s)
               : radix_pairs<uint32_t>(keys, vals, n, end_bit, which, workspace, workspace_bytes, s);
}

}  // namespace tg::detail
