#pragma once
// Precision of matmul and convolution (CompileOptions::precision, docs/decisions.md).
#include "passes/module.h"
#include "tgraph/graph.h"

namespace tg::detail {

/// Mixed-precision autocast: every matmul, convolution, conv_transpose and convolution
/// gradient, and every max pooling and its gradient, whose operands are f32 is computed in
/// `half` (bf16 or f16). Each f32 operand gets
/// one cast to half, placed right after its producer (so it fuses into the producer's
/// elementwise kernel) and shared by every op that reads that value; an operand that is itself
/// a cast from half is read as the half value (the round trip is exact). The op's result is
/// cast back to f32 right after it, under the result's old value id, so every consumer,
/// gradient, optimizer update and graph output keeps its f32 type. Everything else (norms,
/// softmax, reductions, losses, variables) is untouched and stays f32. Backends accumulate the
/// half products in f32 (cuBLASLt COMPUTE_32F, cuDNN FLOAT compute, the CPU reference in
/// double).
struct Autocast : Pass {
  explicit Autocast(DType half) : half(half) {}
  const char* name() const override { return "autocast"; }
  bool run(Module& m) override;
  DType half;
};

/// Applies `p` to the module: f32 changes nothing; tf32 lets f32 matmul and convolution use
/// TF32 tensor cores (GraphImpl::allow_tf32; the CPU computes in f32); bf16 and f16 run
/// Autocast. Returns whether the graph changed; throws tg::Error for an unknown precision.
bool apply_precision(Module& m, Precision p);

}  // namespace tg::detail
