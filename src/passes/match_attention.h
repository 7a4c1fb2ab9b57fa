#pragma once
// Attention written out as matmul, scale, mask, softmax, matmul (match_attention.cpp) becomes
// one scaled_dot_product_attention node, for a backend with a fused attention kernel (CUDA,
// under bf16 / f16 precision: PipelineOptions::before_decompose).
#include "passes/module.h"

namespace tg::detail {

struct MatchAttention : Pass {
  const char* name() const override { return "match_attention"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
