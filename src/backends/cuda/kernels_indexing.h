#pragma once
// Launchers of the gather / scatter / one_hot / non_zero kernels in kernels_indexing.cu
// (kernels only there; shapes are resolved by cuda_indexing.cpp). Plain header: no CUDA
// device code, so host files and tests include it.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/host_device.h"
#include "tgraph/dtype.h"

namespace tg::detail {

/// Most dims an index tuple (gather_nd) or an along-axis index tensor may have.
constexpr int kIndexMaxRank = 8;

/// Unsigned division by a run-time constant with a multiply and a shift (Granlund and
/// Montgomery's round-up method): exact for every 32-bit numerator, d >= 1.
struct FastDiv32 {
  uint32_t d = 1, m = 1, l = 0;
  FastDiv32() = default;
  explicit FastDiv32(uint32_t divisor) : d(divisor) {
    while (l < 32 && (uint64_t{1} << l) < d) ++l;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1);
  }
  TG_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    uint64_t hi = __umulhi(n, m);
#else
    uint64_t hi = (static_cast<uint64_t>(n) * m) >> 32;
#endif
    return static_cast<uint32_t>((hi + n) >> l);
  }
};

/// What a kernel writes when it clamped an out-of-range index: the first report wins.
/// node is the node id + 1 (0: nothing reported); dim is the dim of x the index addresses.
struct IndexError {
  int node;
  int dim;
  long long index;
  long long size;
};

/// How an index row maps to a row of x. A gather's output (a scatter's updates) is `rows`
/// rows of `row_len` contiguous elements; row j reads (writes) row source(j) of x, whose
/// rows are also `row_len` long.
///   axis  (gather / scatter):  j = (o, n) with o = j / n_per; o = (b, p) with b = o / p_per;
///                              source = o * a + index[b * n_per + n].
///   nd    (gather_nd / scatter_nd): b = j / n_per; source = b * nd_rows +
///                              sum_k index[j * k + kk] * nd_strides[kk] (row units).
///   along (*_along_axis, row_len 1): element j of the index tensor (dims idims) reads x at
///                              its own coordinates with the axis one replaced by index[j].
enum class IndexKind : int { axis, nd, along };
struct IndexMap {
  IndexKind kind = IndexKind::axis;
  const void* indices = nullptr;
  int indices64 = 0;  // i64 indices (else i32)
  int node = 0;       // reported with an out-of-range index
  IndexError* error = nullptr;
  int dim = 0;        // dim of x the (first) index addresses
  long long rows = 0, row_len = 1;
  long long n_per = 1, p_per = 1, a = 0;                 // axis
  int k = 0;                                               // nd
  long long nd_rows = 1;                                   // nd: rows of x per batch
  long long nd_dims[kIndexMaxRank] = {}, nd_strides[kIndexMaxRank] = {};
  int rank = 0;                                            // along
  long long idims[kIndexMaxRank] = {}, xdims[kIndexMaxRank] = {}, xstrides[kIndexMaxRank] = {};
};

/// y = gather(x) by `m`; elements of `elem_size` bytes (the copy is dtype-blind, vectorised
/// up to 16 bytes when rows and pointers allow).
cudaError_t launch_gather(const void* x, void* y, const IndexMap& m, int elem_size, int sm_count,
                          cudaStream_t stream);

/// dst = src (bytes), skipped on the device when error->node != 0.
cudaError_t launch_copy_unless_error(void* dst, const void* src, size_t bytes, const IndexError* error,
                                     cudaStream_t stream);

/// Scatter modes, as ScatterMode.
enum class ScatterOp : int { set, add, sub, mul, div, min, max };

/// Whether launch_scatter_atomic covers (dtype, op): f32 / f64 every arithmetic op, f16 /
/// bf16 add and sub, i32 / i64 add, sub, mul, min, max.
bool scatter_atomic_supported(DType t, ScatterOp op);
/// y[source(j)] op= u[j] with atomics (y already holds x); the combination order of
/// duplicates is unspecified.
cudaError_t launch_scatter_atomic(void* y, const void* u, const IndexMap& m, DType t, ScatterOp op, int sm_count,
                                  cudaStream_t stream);

/// Keys of the ordered scatter: keys[j] = the destination row of update row j (clamped and
/// reported; dest_rows when x has no row to clamp to), vals[j] = j. keys are uint32 (key64 =
/// 0) or uint64.
cudaError_t launch_scatter_keys(const IndexMap& m, long long dest_rows, void* keys, int key64, uint32_t* vals,
                                int sm_count, cudaStream_t stream);
/// Given update rows sorted stably by destination (keys, vals), combines each destination's
/// updates into y in their original order, one thread per destination element: the result
/// equals the sequential reference bit for bit (`set`: the last update wins).
cudaError_t launch_scatter_ordered(void* y, const void* u, const void* keys, int key64, const uint32_t* vals,
                                   long long rows, long long row_len, long long dest_rows, DType t, ScatterOp op,
                                   int sm_count, cudaStream_t stream);

/// one_hot: y[outer, j, inner] = on if index[outer, inner] (from the end when negative) == j
/// else off; on / off are given as the output dtype's bytes.
cudaError_t launch_one_hot(const void* indices, int indices64, void* y, long long outer, long long depth,
                           long long inner, int elem_size, uint64_t on_bits, uint64_t off_bits, int sm_count,
                           cudaStream_t stream);

/// non_zero_indices, step 1: the flat positions of x's non-zero elements (NaN counts) into
/// `flat` (n entries at most) and their count into *count (device). Query the workspace with
/// workspace == nullptr.
cudaError_t launch_non_zero_select(const void* x, DType t, long long n, long long* flat, long long* count,
                                   void* workspace, size_t& workspace_bytes, cudaStream_t stream);
/// Step 2: y[i, :] = the coordinates of flat[i] in dims (rank entries).
cudaError_t launch_non_zero_coords(const long long* flat, long long count, const long long* dims, int rank,
                                   long long* y, cudaStream_t stream);

}  // namespace tg::detail
