#pragma once
// Launchers of the sort kernels in kernels_sort.cu: top_k / sort / argsort along any axis,
// and the stable radix sort of (key, index) pairs the ordered scatter uses. Plain header:
// the key mapping below is host-testable.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/host_device.h"
#include "tgraph/dtype.h"

namespace tg::detail {

/// Unsigned radix key of IEEE bits of a `bits`-wide float whose exponent field is
/// `inf_bits` (f16 0x7c00, bf16 0x7f80, f32 0x7f800000, f64 0x7ff0...): keys compare as the
/// reference orders values: -0 equals +0, every NaN equals every NaN and is above +inf.
template <class U>
TG_HD inline U float_sort_key(U b, U inf_bits) {
  const U sign = static_cast<U>(U{1} << (sizeof(U) * 8 - 1));
  const U mag = static_cast<U>(b & ~sign);
  if (mag > inf_bits) return static_cast<U>(~U{0});
  if (mag == 0) return sign;
  return (b & sign) ? static_cast<U>(~b) : static_cast<U>(b | sign);
}
/// Unsigned radix key of a signed integer (sign bit flipped).
template <class U>
TG_HD inline U signed_sort_key(U b) {
  return static_cast<U>(b ^ (U{1} << (sizeof(U) * 8 - 1)));
}

/// Workspace of launch_sort_lines for `lines` lines of `len` elements.
size_t sort_lines_workspace(long long lines, long long len, DType t);
/// Sorts each line of x (viewed [outer, len, inner]; a line is (outer, inner)) stably,
/// ascending or descending (NaN above every number), and writes the first k of each
/// (viewed [outer, k, inner]): their values into `values` and / or their positions in the
/// line (i32) into `positions` (either may be null). Returns cudaErrorInvalidValue when the
/// sizes exceed 2^31 elements.
cudaError_t launch_sort_lines(const void* x, DType t, long long outer, long long len, long long inner, long long k,
                              bool descending, void* values, int32_t* positions, void* workspace,
                              size_t workspace_bytes, int sm_count, cudaStream_t stream);

/// Stable radix sort of n (key, value) pairs on bits [0, end_bit) of the keys (uint32 or,
/// with key64, uint64). keys / vals are double buffers: the sorted pairs end in
/// keys[*which] / vals[*which]. Query the workspace with workspace == nullptr.
cudaError_t launch_radix_sort_pairs(void* keys[2], int key64, uint32_t* vals[2], long long n, int end_bit,
                                    int* which, void* workspace, size_t& workspace_bytes, cudaStream_t stream);

}  // namespace tg::detail
