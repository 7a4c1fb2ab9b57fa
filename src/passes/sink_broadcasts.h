#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Elementwise ops whose operands are all broadcasts (or scalars) run on the small shape, and
/// their result is broadcast instead: op(broadcast_to(a, S), broadcast_to(b, S)) becomes
/// broadcast_to(op(a', b'), S), with a' and b' broadcast only to their common shape. A
/// PyTorch backward graph is full of these (an average pooling gradient's dy / (H*W), batch
/// norm's per-channel terms): computed per channel, and one broadcast the layout pass can move
/// past a transpose where a full-size tensor would keep it (layout.cpp). Top-level block.
struct SinkBroadcasts : Pass {
  const char* name() const override { return "sink_broadcasts"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
