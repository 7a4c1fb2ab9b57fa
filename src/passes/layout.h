#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Runs NCHW convolution networks channels-last on the CPU: each nchw conv2d / max_pool2d /
/// avg_pool2d becomes transpose -> the nhwc op -> transpose back, and those transposes sink
/// through what follows (elementwise ops whose operands carry the same transpose, keep-dims
/// reductions) so that one op's transpose back meets the next op's transpose in and the two
/// cancel (AlgebraicSimplify composes them into the identity). oneDNN's convolutions are
/// fastest channels-last; an nchw model otherwise pays a reorder of its activations into and
/// out of every convolution. Top-level block only; run before the optimisation rounds.
struct ChannelsLast : Pass {
  const char* name() const override { return "channels_last"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
