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
  // Applied by cuBLASLt before the store (matmul_epilogue.h): a bias of length n (dtype, broadcast
  // over rows and batches), then relu or the tanh form of gelu. The aux forms also store, for
  // the backward, an "aux" m x n matrix: relu's bit mask (one bit per element, n a multiple of
  // 128), or gelu's input (n a multiple of 8). bias_grad: the vector of length n written with the
  // column sums of b (its sum over k), for weight gradients x^T dy. drelu / dgelu_tanh: the
  // product times relu' / gelu_tanh' at the forward's pre-activation, read from its aux matrix.
  enum class Epilogue {
    none, bias, relu_bias, gelu_tanh_bias, relu_aux_bias, gelu_tanh_aux_bias, bias_grad, drelu, dgelu_tanh,
    count  // (the number of kinds)
  } epilogue = Epilogue::none;
  /// True for the backward forms, which read the aux matrix (and add no bias).
  static bool reads_aux(Epilogue e) { return e == Epilogue::drelu || e == Epilogue::dgelu_tanh; }
  /// True for relu's aux forms, whose aux matrix is a bit mask.
  static bool mask_aux(Epilogue e) { return e == Epilogue::relu_aux_bias || e == Epilogue::drelu; }
  /// True for the epilogues that read or write the bias vector.
  bool uses_bias() const { return epilogue != Epilogue::none && !reads_aux(epilogue); }
  /// True for the epilogues with an aux matrix (written by the aux forms, read by the backward ones).
  bool uses_aux() const {
    return reads_aux(epilogue) || epilogue == Epilogue::relu_aux_bias || epilogue == Epilogue::gelu_tanh_aux_bias;
  }
};

/// c = op(a) op(b) on `stream` (s.epilogue must be none); throws tg::Error on an unsupported combination.
void matmul_lt(const MatmulShape& s, const void* a, const void* b, void* c, cudaStream_t stream, int device);
/// Like matmul_lt with s.epilogue set, but false (nothing launched) when cuBLASLt has no algorithm
/// for that epilogue (the caller then runs the bias and activation itself). `bias` is read, or
/// written for bias_grad; `aux` is written by the aux forms and read by drelu and dgelu_tanh.
bool matmul_lt_epilogue(const MatmulShape& s, const void* a, const void* b, const void* bias, void* aux, void* c,
                        cudaStream_t stream, int device);
/// Where a first run computes a matmul whose cuBLASLt kernel has not run in this process with
/// tgraph's own kernel (kernels_matmul.h) and loads the kernel after the run: `off` (the
/// default, and under TGRAPH_NO_PROVISIONAL_CHOICES=1 or TGRAPH_NO_LIBRARY_WARMUP=1);
/// `loaded` under TGRAPH_INTERIM_MATMUL=loaded, only for the algorithms an executable's file
/// saved (whose loads a load began); `everywhere` under TGRAPH_INTERIM_MATMUL=1.
enum class MatmulStandIn { off, loaded, everywhere };
MatmulStandIn matmul_stand_in_mode();
/// matmul_stand_in_mode() != off: a load's saved matmuls are loaded beside its first run.
bool matmul_stand_in_enabled();
/// The matmuls tgraph's kernel computed in this process in cuBLASLt's stead (for tests).
long long matmul_stand_ins();
/// Matmuls launched with an epilogue in this process (for tests); of one kind, or all.
long long matmul_epilogue_launches(MatmulShape::Epilogue kind = MatmulShape::Epilogue::none);

/// Throws tg::Error when CUDA device `device` cannot compute matmul and convolution in
/// precision `p` (bf16 needs compute capability 8.0; tf32 on older GPUs computes in f32).
void check_cuda_precision(Precision p, int device);

}  // namespace tg::detail
