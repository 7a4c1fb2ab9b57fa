#pragma once
#include <functional>

#include "passes/module.h"

namespace tg::detail {

/// Rewrites composite ops (batch_norm, batch_norm_training, layer_norm, group_norm,
/// softmax_cross_entropy, mse, scaled_dot_product_attention) into primitive ops (reductions, elementwise, log_softmax), for
/// backends that have kernels for the primitives but not the composite: the elementwise parts
/// are then fused. The CPU backend keeps the composites (it has fused kernels for them).
struct DecomposeComposites : Pass {
  /// Composites the backend runs itself (PipelineOptions::keep_composite): left whole.
  std::function<bool(const GraphImpl&, const Node&)> keep;
  const char* name() const override { return "decompose"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
