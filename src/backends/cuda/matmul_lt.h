#pragma once
// Batched matmul through cuBLASLt (row-major operands, transposes without copies, batch dims
// broadcast when one side has a single batch). Heuristic choices are cached per shape.
#include <cuda_runtime_api.h>

#include "tgraph/dtype.h"
#include "tgraph/graph.h"

namespace tg::detail {

struct MatmulShape {
  long long m, n, k, batch;
  long long stride_a, stride_b;  // elements between batches (0 = shared)
  bool transpose_a, transpose_b;
  DType dtype;  // of a, b and c; f16 / bf16 products are accumulated in f32
  bool tf32;    // allow TF32 tensor cores for f32
};

/// c = op(a) op(b) on `stream`; throws tg::Error on an unsupported combination.
void matmul_lt(const MatmulShape& s, const void* a, const void* b, void* c, cudaStream_t stream, int device);

/// Throws tg::Error when CUDA device `device` cannot compute matmul and convolution in
/// precision `p` (bf16 needs compute capability 8.0; tf32 on older GPUs computes in f32).
void check_cuda_precision(Precision p, int device);

}  // namespace tg::detail
