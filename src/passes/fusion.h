#pragma once
// Fusion analysis: groups chains of elementwise ops (with the broadcasts and casts that feed
// them) so a backend can run each group as one generated kernel. It does not rewrite the
// graph: it returns the steps of a block in run order, each a single op or a group, and the
// reason each time a group had to be closed. TGRAPH_NO_FUSION=1 turns grouping off.
#include <string>
#include <vector>

#include "passes/module.h"

namespace tg::detail {

struct FusionGroup {
  std::vector<int32_t> nodes;    // members, in run order
  std::vector<int32_t> inputs;   // values read from outside the group
  std::vector<int32_t> outputs;  // member values used outside the group
};

/// One step of a block: a lone op (group empty, node >= 0) or a fused group.
struct Step {
  int32_t node = -1;
  FusionGroup group;
  bool fused() const { return node < 0; }
};

struct FusionPlan {
  std::vector<Step> steps;
  std::vector<std::string> decisions;  // why groups were closed (for TGRAPH_DUMP and tests)
};

/// True when an op may be computed inside a fused elementwise kernel.
bool fusible_elementwise(const GraphImpl& g, const Node& n);
/// Plans the steps of `block` of the module.
FusionPlan plan_fusion(const Module& m, int32_t block);
/// True when TGRAPH_NO_FUSION=1 is set.
bool fusion_disabled();

}  // namespace tg::detail
