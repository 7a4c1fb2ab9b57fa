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
//
// With gelu_tanh, training keeps the pre-activation h = x w + b for the backward: the forward
// then writes it as cuBLASLt's aux matrix beside gelu(h) (GELU_AUX_BIAS), and the backward's
// gelu_tanh_grad(dg, h), dg the matmul dy w^T, folds into that matmul (DGELU, reading h). The
// fusion planner keeps such a gelu_tanh_grad a step of its own (epilogue_pinned) so that it is
// not fused or recomputed away from the matmul.
// relu's pair works the same way (RELU_AUX_BIAS stores a bit mask, DRELU reads it) but only
// with TGRAPH_DRELU=1: measured on the H200 (bench_gpu mlp, 2026-11-30) the pair made a bf16
// MLP step slower, 0.819 ms against 0.680 ms with relu_bias and a generated relu_grad kernel.
// TGRAPH_NO_EPILOGUE=1 turns it off (read when a block's plan is first walked).
#include <vector>

#include "backends/cuda/matmul_lt.h"
#include "passes/fusion.h"

namespace tg::detail {

struct EpilogueMatch {
  int32_t bias = -1;    // value added to the matmul result (-1 for dgelu_tanh)
  int32_t aux = -1;     // gelu_tanh_aux_bias: the pre-activation it writes; dgelu_tanh: the one it reads
  int32_t output = -1;  // value the epilogue produces (the add's or the activation's result)
  MatmulShape::Epilogue kind = MatmulShape::Epilogue::none;
  size_t steps = 0;     // plan steps after the matmul's that the epilogue replaces
  // kind bias_grad: the reduce_sum's result that the epilogue writes, its plan step, and the
  // steps moved to run right after the matmul (that step first, then views of its result).
  // kind dgelu_tanh: moved are the later steps it computes (a view of the result, maybe, and the
  // gelu_tanh_grad). The epilogue computes the first `computed` of them; without it (no
  // algorithm) all run right after the matmul.
  int32_t grad = -1;
  size_t grad_step = 0;
  std::vector<size_t> moved;
  size_t computed = 0;
  // Set on the moved steps themselves (kind none): a bias-gradient matmul runs this step.
  bool runs_at_matmul = false;
};

/// The epilogue for the matmul at plan.steps[step] (a lone MatMul), or kind none. `uses` is
/// use_counts of the module. Checks graph types only; the caller checks run shapes again, and
/// gives the result the type of `output` (a reshape between may change its shape).
EpilogueMatch match_epilogue(const GraphImpl& g, const std::vector<int32_t>& uses, const FusionPlan& plan, size_t step);
/// The activation-gradient epilogue (dgelu_tanh or drelu) for the matmul at plan.steps[step], or
/// kind none. A drelu match stands only when the forward's relu_aux_bias in the plan stores the
/// mask it reads (match_epilogues checks).
EpilogueMatch match_activation_grad(const GraphImpl& g, const std::vector<int32_t>& uses, const FusionPlan& plan,
                                    size_t step);
/// True for a gelu_tanh_grad or relu_grad that match_activation_grad may fold into the matmul
/// computing its incoming gradient: FusionOptions::pin for the CUDA backend (false when
/// epilogues are disabled).
bool epilogue_pinned(const GraphImpl& g, const std::vector<int32_t>& uses, const Node& n);
/// The fusion options the CUDA backend plans its blocks with.
FusionOptions cuda_fusion_options();
/// The bias-gradient epilogue for the matmul at plan.steps[step], or kind none.
EpilogueMatch match_bias_grad(const GraphImpl& g, const FusionPlan& plan, size_t step);
/// Matches for every step of a plan (kind none where nothing folds); all none when disabled.
std::vector<EpilogueMatch> match_epilogues(const Module& m, const FusionPlan& plan);
/// True when a bias of shape `bias` broadcasts along the last dim of a matmul result `out` only.
bool bias_fits(const Shape& bias, const Shape& out);
/// True when TGRAPH_NO_EPILOGUE=1 is set.
bool epilogue_disabled();
/// True when TGRAPH_DRELU=1 is set: relu's gradient folds too (RELU_AUX_BIAS + DRELU).
bool drelu_enabled();

}  // namespace tg::detail
