#pragma once
// Activations stored in half under mixed precision (CompileOptions::precision bf16 / f16).
#include "passes/module.h"
#include "tgraph/dtype.h"

namespace tg::detail {

/// After Autocast, the f32 values that carry activations and their gradients leave every fused
/// kernel in `half`, as PyTorch's autocast keeps them, while the arithmetic stays f32 in
/// registers. A value qualifies when it is the f32 view of a half result (the cast back after a
/// convolution or matmul; not a weight gradient, nor a value shaped like a variable), or an
/// elementwise op's f32 result whose full-size f32 operands all qualify (smaller ones, such as
/// broadcast per-channel statistics and scalars, may be anything). Such a value v with
/// several readers, a reader that is not a same-shape elementwise op, or a half copy already
/// made for a convolution is rewritten: its producer writes h = cast(v, half) (the existing copy
/// if there is one) and each reader gets its own cast(h, f32) right before it, which the fuser
/// loads inside that reader's kernel. A value read once inside a fused chain stays f32 in
/// registers. Targets, values read in other blocks and region results are left alone. The pass
/// runs last in the pipeline, after common-subexpression elimination (which would merge the
/// readers' casts back into one materialised f32 tensor).
struct HalfStorage : Pass {
  explicit HalfStorage(DType half) : half(half) {}
  const char* name() const override { return "half_storage"; }
  bool run(Module& m) override;
  DType half;
};

}  // namespace tg::detail
