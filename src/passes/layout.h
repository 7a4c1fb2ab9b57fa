#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Runs NCHW convolution networks channels-last: each nchw conv2d / max_pool2d / avg_pool2d
/// and their gradients become transpose -> the nhwc op -> transpose back, and those transposes
/// sink through what follows (elementwise ops whose operands carry the same transpose,
/// reductions) so that one op's transpose back meets the next op's transpose in and the two
/// cancel (AlgebraicSimplify composes them into the identity). oneDNN's and cuDNN's
/// convolutions are fastest channels-last (cuDNN transposes nchw bf16 data itself, around
/// every call), and channels-last batch-norm statistics are column reductions. Top-level
/// block only; run before the optimisation rounds.
struct ChannelsLast : Pass {
  const char* name() const override { return "channels_last"; }
  bool run(Module& m) override;
};

/// CompileOptions::free_output_layouts: each rank-4 target that the layout pass left as a
/// transpose back to nchw becomes the channels-last value itself (the transpose goes).
/// Returns, per target, the permutation that views the new target as the old one (empty
/// where the target is unchanged).
std::vector<std::vector<int64_t>> free_output_layouts(Module& m);

}  // namespace tg::detail
