#pragma once
// Launchers of the kernels in kernels_layout.cu (kernels only there; host logic in .cpp).
#include <cuda_runtime_api.h>

namespace tg::detail {

/// Most dims launch_permute takes.
constexpr int kMaxPermuteRank = 6;

/// out = transpose(in, perm): out has dims out_dims[i] = in_dims[perm[i]] (row-major, dense),
/// elements of `elem_size` bytes (1, 2, 4 or 8). Returns cudaErrorInvalidValue for a rank
/// outside [1, kMaxPermuteRank], a bad perm or element size; otherwise the launch status.
cudaError_t launch_permute(const void* in, void* out, int rank, const long long* in_dims, const int* perm,
                           int elem_size, cudaStream_t stream);

}  // namespace tg::detail
