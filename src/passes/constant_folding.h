#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Evaluates pure ops whose inputs are all constants (with the reference interpreter) and
/// replaces them by constants. Results larger than kMaxElements, and shape ops that would
/// expand a constant (broadcast_to, tile), are left to run time -- but a cast or transpose of a
/// constant nothing else reads is folded up to kMaxRelayout elements (no more bytes than the
/// constant it replaces: a weight transposed or cast to half once, not in every run).
struct ConstantFolding : Pass {
  static constexpr int64_t kMaxElements = 1 << 20;
  static constexpr int64_t kMaxRelayout = int64_t{1} << 28;
  const char* name() const override { return "constant_folding"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
