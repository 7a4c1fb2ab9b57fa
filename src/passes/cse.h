#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Common-subexpression elimination: pure ops with the same kind, inputs, attribute and
/// control dependencies (and constants with equal bytes) are computed once.
struct CommonSubexpressionElimination : Pass {
  const char* name() const override { return "cse"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
