#pragma once
// Folds `matmul(x, w) + b` (and a following relu or gelu_tanh) into the cuBLASLt call as its
// epilogue when that is exactly the unfused graph: the matmul's result is read only by the add,
// the add's only by the activation, b is a vector along the last dim broadcast over rows (and
// batches; an explicit broadcast_to of it is looked through), shapes are static, and the add /
// activation (after at most a reshape view of the result) are the very next plan steps.
//
// In gradient plans it also folds the bias gradient, `reduce_sum(dy, axis 0)`, into the weight
// gradient `matmul(x, dy, transpose_a)` (cuBLASLt's bias-gradient epilogue reduces dy over the
// GEMM's k dimension while it reads it): the plan computes that reduction before the matmul, so
// the reduction and the view steps after it move to the matmul when nothing between reads them.
// TGRAPH_NO_EPILOGUE=1 turns it off (read when a block's plan is first walked).
#include <vector>

#include "backends/cuda/matmul_lt.h"
#include "passes/fusion.h"

namespace tg::detail {

struct EpilogueMatch {
  int32_t bias = -1;    // value added to the matmul result
  int32_t output = -1;  // value the epilogue produces (the add's or the activation's result)
  MatmulShape::Epilogue kind = MatmulShape::Epilogue::none;
  size_t steps = 0;     // plan steps after the matmul's that the epilogue replaces
  // kind bias_grad: the reduce_sum's result that the epilogue writes, its plan step, and the
  // steps moved to run right after the matmul (that step first, then views of its result).
  int32_t grad = -1;
  size_t grad_step = 0;
  std::vector<size_t> moved;
  // Set on the moved steps themselves (kind none): a bias-gradient matmul runs this step.
  bool runs_at_matmul = false;
};

/// The epilogue for the matmul at plan.steps[step] (a lone MatMul), or kind none. `uses` is
/// use_counts of the module. Checks graph types only; the caller checks run shapes again, and
/// gives the result the type of `output` (a reshape between may change its shape).
EpilogueMatch match_epilogue(const GraphImpl& g, const std::vector<int32_t>& uses, const FusionPlan& plan, size_t step);
/// The bias-gradient epilogue for the matmul at plan.steps[step], or kind none.
EpilogueMatch match_bias_grad(const GraphImpl& g, const FusionPlan& plan, size_t step);
/// Matches for every step of a plan (kind none where nothing folds); all none when disabled.
std::vector<EpilogueMatch> match_epilogues(const Module& m, const FusionPlan& plan);
/// True when a bias of shape `bias` broadcasts along the last dim of a matmul result `out` only.
bool bias_fits(const Shape& bias, const Shape& out);
/// True when TGRAPH_NO_EPILOGUE=1 is set.
bool epilogue_disabled();

}  // namespace tg::detail
