#pragma once
// The CPU executor's schedule of the top-level block. Elementwise ops (with the broadcasts
// that feed them and the per-channel / full reductions that consume them) are grouped into
// kernels: one loop over the elements of a shape that reads each input once and writes only
// the values something outside the loop needs. A value read only by other elementwise ops is
// recomputed where it is needed instead of stored, and kernels of the same shape that can run
// at the same point are merged into one multi-output loop. The arena is planned for this
// schedule (the compile-time buffer plan follows the unfused node order).
//
// Unlike passes/fusion.h's plan_fusion (which the CUDA backend runs and which keeps node order
// and a single open group), this planner moves independent work past other ops, duplicates
// cheap producers and folds reductions into their producer's loop: choices that suit a CPU,
// where the cost is memory passes, not kernel launches.
#include <cstdint>
#include <memory>
#include <vector>

#include "passes/module.h"

namespace tg::detail {

struct FusedProgram;

/// One fused loop over the elements of `shape`.
struct CpuKernel {
  Shape shape;
  std::vector<int32_t> nodes;       // elementwise members in run order (broadcasts are loaders)
  std::vector<int32_t> leaves;      // values read from memory
  std::vector<int32_t> outputs;     // member values written to memory
  std::vector<int32_t> reductions;  // reduce_sum / reduce_mean / sum_to_like nodes folded into the loop
  std::shared_ptr<const FusedProgram> program;  // null: run the members one by one
};

/// Elementwise ops that an f32 convolution or matmul applies to its result as oneDNN post-ops
/// (post_op_plan.cpp): bias, residual add, activation, without a pass over memory each.
struct CpuPostOps {
  std::vector<int32_t> ops;       // the chain in order; the first reads the convolution's result
  std::vector<int32_t> operands;  // per op: the other operand's value (a broadcast's source), or -1
  std::vector<int32_t> through;   // per op: the broadcast it reads through its source, or -1
  std::vector<int32_t> absorbed;  // every node the step computes (chain, broadcasts, reshapes), run order
  int32_t end = -1;               // the value the step writes
  int32_t sum = -1;               // the operand of the result's shape (a residual add), or -1
};

/// One step of the schedule: a single op (node >= 0) or a fused kernel. A
/// batch_norm_training whose normalised output is only read inside kernels computes just its
/// statistics (`stats`); the kernels apply them as they read x. A convolution or matmul step
/// with `post` >= 0 also computes plan.posts[post].
struct CpuStep {
  int32_t node = -1;
  int32_t kernel = -1;
  bool stats = false;
  int32_t post = -1;
};

struct CpuPlan {
  std::vector<CpuStep> steps;
  std::vector<CpuKernel> kernels;
  std::vector<CpuPostOps> posts;
  std::vector<int64_t> offset;  // per value id: byte offset in the run's arena, or -1
  int64_t arena_bytes = 0;
};

/// Plans block 0 of the module for the fused CPU executor.
CpuPlan plan_cpu_fusion(const Module& m);

/// The convolutions and matmuls of block 0 that take chains of elementwise ops as post-ops, given each
/// node's position in run order (-1: not in block 0), each value's readers, the values that
/// must stay in memory (targets, region results) and the nodes the loops could compute
/// (`elementwise`). Chains stop where a value has another reader, an op is not a post-op, or
/// an operand is not in memory before the convolution runs. TGRAPH_NO_CONV_POST_OPS=1: none.
std::vector<std::pair<int32_t, CpuPostOps>> plan_post_ops(const GraphImpl& g, const std::vector<int32_t>& pos,
                                                              const std::vector<std::vector<int32_t>>& users,
                                                              const std::vector<char>& external,
                                                              const std::vector<char>& elementwise);

}  // namespace tg::detail
