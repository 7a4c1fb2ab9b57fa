#pragma once
// What the compile pipeline works on: a private copy of the graph plus the feeds, targets and
// target operations that decide what is live.
#include <memory>
#include <string>
#include <vector>

#include "ir/graph_impl.h"

namespace tg::detail {

struct Module {
  GraphImpl graph;
  std::vector<int32_t> feeds;       // value ids of the fed placeholders, in feed order
  std::vector<int32_t> targets;     // value ids to return, in order
  std::vector<int32_t> target_ops;  // node ids that must run
  bool dynamic_shapes = false;      // disable_type_inference: -1 dims stay dynamic
};

/// A compile pass. run() reports whether it changed the module.
struct Pass {
  virtual ~Pass() = default;
  virtual const char* name() const = 0;
  virtual bool run(Module& m) = 0;
};

/// Re-runs inference over every block in order (after feed types change or a rewrite);
/// throws tg::Error when a node no longer type-checks.
void reinfer(GraphImpl& g);
/// Replaces every use of value `from` (inputs, region results, targets) by `to`.
void replace_uses(Module& m, int32_t from, int32_t to);
/// Number of uses of each value (inputs of live nodes, region results, targets).
std::vector<int32_t> use_counts(const Module& m);

}  // namespace tg::detail
