#pragma once
// Launcher of the cumulative scans in kernels_scan.cu (cumsum / cumprod / cummax / cummin).
#include <cuda_runtime_api.h>

#include "tgraph/dtype.h"

namespace tg::detail {

enum class ScanOp : int { sum = 0, prod = 1, max = 2, min = 3 };

/// Scans a dense tensor seen as [outer, len, inner] along the middle dim, as the CPU reference
/// does: floats accumulate in double and each prefix is stored through the dtype's store rule;
/// integers accumulate in wrapping int64 (max / min exactly). max / min give NaN once a NaN
/// is seen and keep the earlier of equal values. `exclusive` shifts by one, the first element
/// getting the identity (`identity_f` for floats, `identity_i` for integers); `reverse` scans
/// from the end. Lines along the last dim are scanned a warp per line (32 at a time with
/// shuffles), others a thread per line (coalesced across the inner dim). Bool is not taken.
cudaError_t launch_scan(const void* in, void* out, DType t, ScanOp op, long long outer, long long len,
                        long long inner, bool exclusive, bool reverse, double identity_f,
                        long long identity_i, cudaStream_t stream);

}  // namespace tg::detail
