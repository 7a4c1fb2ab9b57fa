#pragma once
// Fused elementwise loops on the CPU. A kernel of the fused schedule (fused_plan.h) is
// compiled into a small program: per tile of a few hundred elements, each input is loaded
// (contiguous inputs in place, broadcast ones by strides, per-channel ones once per run), each
// member op runs as one vectorisable loop over the tile in L1, results are stored and
// per-channel sums accumulated. Tiles are split over OpenMP threads. Every op rounds to its
// dtype exactly as its unfused CPU kernel does, so TGRAPH_NO_FUSION=1 gives the same numbers
// (reductions may differ in the last bit: they sum in another order).
#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/fused_plan.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

namespace fast {
struct BatchNormStats;
}

/// True when a fused CPU loop can compute node n (its op and dtypes; shapes are not checked).
bool fused_supports(const GraphImpl& g, const Node& n);

/// For reduce_sum / reduce_mean / sum_to_like of f32 with static shapes where element i of
/// the input adds to output i mod P (the reduced axes lead): P, else 0.
int64_t fused_reduction_period(const GraphImpl& g, const Node& n);

/// Compiles a kernel of the plan; null when some member cannot run fused.
std::shared_ptr<const FusedProgram> compile_fused(const GraphImpl& g, const CpuKernel& k);

/// Runs a compiled kernel. `leaves` follow CpuKernel::leaves; `outs` (allocated by the caller
/// with the planned types) follow CpuKernel::outputs, then one per reduction; `bns` give the
/// statistics of the batch_norm_training members of CpuKernel::nodes, in order. Returns false,
/// having written nothing, when an input's type differs from the planned one.
bool run_fused(const FusedProgram& p, const std::vector<const TensorData*>& leaves,
               const std::vector<const fast::BatchNormStats*>& bns, std::vector<TensorData>& outs);

}  // namespace tg::detail
