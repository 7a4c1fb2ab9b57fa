#pragma once
// The CUDA backend's fused attention in the compile pipeline (attention_lowering.cpp):
// PipelineOptions::keep_composite and lower_kept.
#include "passes/module.h"

namespace tg::detail {

/// True for a scaled_dot_product_attention node whose shapes cuDNN's fused kernel may take
/// (asked before precision: its dtypes are not final). False with TGRAPH_NO_FUSED_ATTENTION=1
/// or without the cuDNN frontend.
bool cuda_keeps_attention(const GraphImpl& g, const Node& n);
/// After precision: keeps each attention node cuDNN runs on `device` (its mask rewritten into
/// the kernel's bias), decomposes the others. Returns whether the graph changed.
bool lower_cuda_attention(Module& m, int device);
/// MatchAttention (passes/match_attention.h) where the fused kernel may take the result.
bool match_cuda_attention(Module& m);

}  // namespace tg::detail
