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

/// One step of the schedule: a single op (node >= 0) or a fused kernel. A
/// batch_norm_training whose normalised output is only read inside kernels computes just its
/// statistics (`stats`); the kernels apply them as they read x.
struct CpuStep {
  int32_t node = -1;
  int32_t kernel = -1;
  bool stats = false;
};

struct CpuPlan {
  std::vector<CpuStep> steps;
  std::vector<CpuKernel> kernels;
  std::vector<int64_t> offset;  // per value id: byte offset in the run's arena, or -1
  int64_t arena_bytes = 0;
};

/// Plans block 0 of the module for the fused CPU executor.
CpuPlan plan_cpu_fusion(const Module& m);

}  // namespace tg::detail
