#pragma once
// The memory traffic of the CUDA backend's fusion plan, without a GPU: what each generated
// kernel (fused group, stitched reduction or stencil, lone elementwise op) reads and writes
// when the executor runs a module's top-level block. Generated kernels are bound by memory,
// so these bytes over the device's copy rate are their floor; comparing two plans' totals says
// whether a planning change moves fewer bytes before any GPU time is spent
// (bench_fusion_traffic, Graph._cuda_plan_traffic in Python).
#include <string>
#include <vector>

#include "passes/module.h"

namespace tg::detail {

/// A table of kernels and bytes by kind, a total with its floor at `copy_gbps`, then the `top`
/// kernels moving the most bytes with their ops.
std::string cuda_plan_traffic(const Module& m, int top = 15, double copy_gbps = 4260);

/// The most bytes the values of the plan's steps hold at once when each buffer dies after its
/// last reader (as the executor frees them; views share their operand's buffer), where in the
/// step that is, and what made the values live there (the `top` largest kinds).
std::string cuda_plan_memory(const Module& m, int top = 12);

/// Compiles (NVRTC, for sm_90; no GPU needed) the kernel of every stitched reduction of the
/// CUDA plan of m's top-level block; returns one line per kernel that fails, with NVRTC's log.
std::vector<std::string> cuda_plan_compile_errors(const Module& m);

}  // namespace tg::detail
