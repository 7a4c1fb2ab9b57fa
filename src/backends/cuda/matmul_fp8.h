#pragma once
// scaled_matmul on FP8 tensor cores through cuBLASLt (matmul_fp8.cpp): which nodes the CUDA
// backend keeps whole in the compile pipeline, and their layout.
#include "passes/module.h"

namespace tg::detail {

/// True when `device` has FP8 tensor cores (compute capability 8.9 or newer).
bool cuda_has_fp8(int device);
/// True for a scaled_matmul node cuBLASLt's FP8 kernels take on `device`: static shapes, k and
/// n multiples of 16 (its 16-byte leading dimensions). Others are decomposed (widened to f32).
bool cuda_keeps_scaled_matmul(const GraphImpl& g, const Node& n, int device);
/// After decomposition: puts each kept scaled_matmul in the one layout FP8 kernels take (both
/// operands k-major: a [m, k], b [n, k] transposed), with transposes where it is not (folded
/// into a constant weight). Returns whether the graph changed.
bool lower_cuda_scaled_matmul(Module& m);
/// FP8 matmuls launched on cuBLASLt so far, in this process (tests read it).
long long fp8_matmul_launches();

}  // namespace tg::detail
