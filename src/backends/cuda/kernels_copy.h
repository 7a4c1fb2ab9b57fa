#pragma once
// Launchers of the data-movement kernels in kernels_copy.cu (kernels only there; the op ->
// copy mapping is host code in cuda_layout.cpp). Elements move by size (1, 2, 4 or 8 bytes),
// so every dtype is copied bit for bit. Every launcher returns the launch status, or
// cudaErrorInvalidValue (having launched nothing) for arguments it does not take.
#include <cuda_runtime_api.h>

#include "tgraph/dtype.h"

namespace tg::detail {

/// Most dims a strided copy takes (after merging dims that are contiguous in both tensors).
constexpr int kCopyMaxRank = 16;

/// For every coordinate c of `dims`:
///   out[out_offset + sum_d c_d * out_strides[d]] = in[in_offset + sum_d c_d * in_strides[d]]
/// Strides count elements; a negative stride walks a dim backwards (reverse, negative slice
/// strides), a zero stride repeats (tile). Transpose, slice, reverse, tile, the parts of
/// concat / split, slice_update's scatter and space/depth shuffles are all this one copy.
struct StridedCopy {
  int rank = 0;
  long long dims[kCopyMaxRank] = {};
  long long in_strides[kCopyMaxRank] = {};
  long long out_strides[kCopyMaxRank] = {};
  long long in_offset = 0, out_offset = 0;
};

/// The copy above. Dims are merged where both tensors are contiguous across them; when the
/// innermost dim is contiguous in both, elements are moved in 16/8/4-byte words; when it is
/// contiguous in only one (a transpose of the minor dim) a shared-memory tiled kernel keeps
/// both reads and writes coalesced.
cudaError_t launch_strided_copy(const void* in, void* out, const StridedCopy& c, int elem_size,
                                cudaStream_t stream);

/// Copies n pieces, piece k's bytes[k] bytes from srcs[k] to dst + offsets[k], in one launch per
/// kCopyManyPieces pieces (a block per 32 KB of a piece, 16-byte words where both ends allow): the small
/// outputs of a run handed to the caller, which were a copy and an allocation each.
constexpr int kCopyManyPieces = 160;  // 24 bytes a piece: the launch's parameters stay under 4 KB
cudaError_t launch_copy_many(void* dst, const void* const* srcs, const size_t* offsets, const size_t* bytes, int n,
                             cudaStream_t stream);
/// Pad modes as the kernel takes them (same order as tg::PadMode).
enum class PadKind : int { constant = 0, reflect = 1, symmetric = 2, edge = 3 };
/// out (dims out_dims, dense) = pad(in (dims in_dims, dense)) with `before[d]` elements before
/// each dim; `fill` holds the constant's bytes in the dtype (low elem_size bytes).
cudaError_t launch_pad(const void* in, void* out, int rank, const long long* in_dims,
                       const long long* out_dims, const long long* before, PadKind mode,
                       unsigned long long fill, int elem_size, cudaStream_t stream);

/// band_part over n elements whose last two dims are [rows, cols]: keeps (i, j) when
/// (lower < 0 || i - j <= lower) && (upper < 0 || j - i <= upper), zero bytes elsewhere.
cudaError_t launch_band_part(const void* in, void* out, long long n, long long rows, long long cols,
                             long long lower, long long upper, int elem_size, cudaStream_t stream);

/// out[i] = v[i] for i < n (i64): small host-known values (shape_of) written by a kernel, so a
/// run stays capturable (no host memcpy).
cudaError_t launch_write_i64(void* out, const long long* v, int n, cudaStream_t stream);

/// out[i] = start + i * delta for i < n, computed in double and stored as dtype t (the CPU's
/// store rules: through float for f16 / bf16, truncated and saturated for integers).
cudaError_t launch_arange(void* out, long long n, double start, double delta, DType t, cudaStream_t stream);

}  // namespace tg::detail
