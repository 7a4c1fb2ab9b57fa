#pragma once
#include "passes/module.h"

namespace tg::detail {

/// Dead-code elimination. Live: producers of targets and feeds, target operations, and
/// transitively their inputs, control dependencies and region contents; inside a live region
/// every op with side effects is live too. Top-level side effects nothing depends on are removed.
/// A for_loop / while_loop keeps only the carried values something needs (a used output, the
/// predicate, a side effect, or another needed value): the others lose their init, params,
/// results and outputs, so a gradient tape costs nothing in a forward-only executable.
struct DeadCodeElimination : Pass {
  const char* name() const override { return "dce"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
