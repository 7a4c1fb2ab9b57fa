#pragma once
// Stitched reductions (FusionOptions::stitch_reductions, the CUDA backend): reductions over one
// geometry (the same input shape, the same reduced dims) run as one kernel that reads each input
// element once and keeps an accumulator per reduction, with the elementwise group computing
// their inputs (the prologue) evaluated at each element as it is read instead of being written
// out and read back. A batch norm's statistics (mean and variance of x) and its backward sums
// (of dy and dy * xhat, with xhat recomputed from x) each become one pass; docs/fusion.md. A
// group computed at the reductions' results (the epilogue: rsqrt(var + eps) of a norm), reading
// them directly or through views, runs in the same kernel where each result is stored.
#include <vector>

#include "passes/fusion.h"

namespace tg::detail {

/// The most reductions, and results plus epilogue outputs, one stitched kernel takes.
inline constexpr int kStitchReductions = 8;
inline constexpr int kStitchOutputs = 16;

struct ReduceStitch {
  FusionGroup prologue;             // its outputs: the reductions' inputs it computes
  std::vector<int32_t> reductions;  // reduction nodes, in plan order
  std::vector<int32_t> views;       // view nodes of the results (run by the step, after its kernel)
  FusionGroup epilogue;             // computed at each output index from the results (may be empty)
  std::vector<std::pair<int32_t, size_t>> aliases;  // a value the epilogue reads -> the result it views
  std::vector<int32_t> inputs;      // values read from outside the step
  std::vector<int32_t> outputs;     // the reductions' results in `reductions` order, then the epilogue's outputs
  // The same unfused: the prologue group (if any), each reduction, the views, the epilogue group.
  std::vector<Step> pieces;
};

/// True when node n may be one of a stitch's reductions: sum, mean, max, min, prod or variance
/// (or sum_to_like) of a float tensor of static shape, without control dependencies.
bool stitchable_reduction(const GraphImpl& g, const Node& n);
/// Which dims of its input (static shape `in`) reduction n reduces.
std::vector<bool> reduced_dims(const Node& n, const Shape& in, const Shape& out);
/// Replaces reductions (with the members of the groups computing their inputs) by ReduceStitch
/// steps where that saves a pass over memory: a prologue, or siblings sharing a kernel.
void stitch_reductions(const Module& m, int32_t block, FusionPlan& plan);
/// True when TGRAPH_NO_REDUCE_FUSION=1 is set (reductions and producers planned as before).
bool reduce_fusion_disabled();

}  // namespace tg::detail
