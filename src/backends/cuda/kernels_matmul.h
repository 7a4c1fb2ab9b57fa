#pragma once
// tgraph's own matmul kernel (kernels_matmul.cu): c = op(a) op(b) in matmul_lt's operand forms,
// with its forward epilogues, compiled with the library. Under TGRAPH_INTERIM_MATMUL (`loaded`:
// a loaded executable's saved algorithms; `1`: every plan) it stands in for cuBLASLt in a first
// run while a plan's kernel is not loaded yet:
// a cuBLASLt kernel's first launch in a process loads its module (0.3-19 ms on the H200), and
// a loaded executable's first run meets several (matmul_lt.cpp decides when). CUDA cores, f32
// (f64) accumulation: a stand-in for a few calls, not a replacement. No tgraph headers: nvcc
// compiles it as C++17.
#include <cuda_runtime_api.h>

namespace tg::detail {

/// One call: a [m, k] ([k, m] when ta) at a + i * stride_a for batch i, b [k, n] ([n, k] when
/// tb) at b + i * stride_b, c [m, n] dense per batch; `bias` (length n, broadcast over rows) for
/// the bias epilogues, added before relu / gelu (the tanh form). Accumulates in f32 (f64 for f64)
/// and rounds once, as cuBLASLt does.
struct MatmulKernelArgs {
  enum class Type { f16, bf16, f32, f64 } type = Type::f32;
  enum class Epilogue { none, bias, relu_bias, gelu_tanh_bias } epilogue = Epilogue::none;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;
  void* c = nullptr;
  long long m = 0, n = 0, k = 0, batch = 1, stride_a = 0, stride_b = 0;
  bool ta = false, tb = false;
};

/// Enqueues the call on `stream`; cudaErrorInvalidValue when its grid is beyond CUDA's limits
/// (m over 4 M rows, a batch over 65,535) or a bias epilogue has no bias.
cudaError_t launch_matmul(const MatmulKernelArgs& p, cudaStream_t stream);

}  // namespace tg::detail
