#pragma once
// The stencil on the GPU: an NVRTC kernel specialised per reduction, window, strides,
// dilation, boundary mode, dtype and tile, in one of two forms. The direct (register-blocked)
// kernel, the default for windows of up to kUnrolledTaps taps: each thread computes V
// consecutive outputs along the innermost dim times R along a slide dim, walking the rows of its
// input footprint once (16-byte vector loads where aligned) with every accumulator in registers;
// threads whose footprint lies inside the source take a path without boundary logic. The tile
// kernel (other windows, or TGRAPH_STENCIL_CONFIG=tile): each block loads its output tile plus
// halo into shared memory once (boundary mode applied while loading), then computes every output
// of the tile from there. TGRAPH_STENCIL_CONFIG=v=4,r=8,tx=32 picks the direct kernel's shape. A stencil may be stitched with the elementwise group computing its source
// (applied to each real source element as it is loaded) and the one consuming its result
// (applied to each output before the store): fusion.h StencilStitch.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "passes/fusion.h"

namespace tg::detail {

inline constexpr int kStencilOperands = 16;

/// Kernel arguments (passed by value); the generated source declares the same struct.
struct StencilArgs {
  const void* in[kStencilOperands];  // StencilStitch::inputs, in order
  void* out[kStencilOperands];       // StencilStitch::outputs, in order
  long long n[4], o[4], base[4];     // source and output window dims; offset - pad_before
  long long sstride[5], ostride[5];  // element strides: [0] the flattened leading dims, then dims 0..3
  long long nt[4];                   // tiles per window dim
  long long gdims[2][8];             // prologue / epilogue group shapes (broadcast operands)
  long long gstride[2][kStencilOperands][8];
  int grank[2];
  int vec_in, vec_out;  // direct kernel: 16-byte vector loads / stores allowed (operands aligned)
};

/// A planned kernel: its source and arguments (operand pointers unset) and grid.
struct StencilKernelPlan {
  std::string source;  // kernel `tg_stencil`, 256 threads a block
  StencilArgs args{};
  long long blocks = 0;
  std::vector<TensorType> output_types;  // one per StencilStitch::outputs
  bool direct = false;                   // the register-blocked kernel (else the shared-memory tile)
  std::vector<int> vec_in_operands;      // a.in indices read by vector loads (a.vec_in: all 16-byte aligned)
};

/// The stitch of a stencil with no prologue or epilogue (inputs source and weights, output y).
StencilStitch lone_stencil(const GraphImpl& g, int32_t node);
/// Plans the kernel for these concrete input types (one per s.inputs); nothing when the kernel
/// does not cover them (dtype, shapes, operand counts, shared memory), so the caller falls back.
std::optional<StencilKernelPlan> plan_stencil_kernel(const GraphImpl& g, const StencilStitch& s,
                                                     const std::vector<TensorType>& in);

/// A stitched stencil ready to launch once its operands are bound.
struct StencilLaunch {
  std::vector<TensorType> output_types;  // one per StencilStitch::outputs
  std::shared_ptr<const void> kernel;    // compiled kernel and plan
};
/// Launches prepared for one step, by input types: the executor keeps one per step, so a run
/// costs a lookup, not a plan (timed runs measure the kernel, not the host).
struct StencilStepCache {
  std::vector<std::pair<std::vector<TensorType>, std::optional<StencilLaunch>>> entries;
};
/// Plans and compiles (first use only) the fused kernel; nothing when it does not cover these
/// input types (the executor then runs s.pieces one by one). With a cache, reuses its entry.
std::optional<StencilLaunch> prepare_stencil_stitch(const GraphImpl& g, const StencilStitch& s,
                                                    const std::vector<TensorType>& in, int device,
                                                    StencilStepCache* cache = nullptr);
/// Enqueues a prepared launch over device operands (s.inputs order) and outputs (s.outputs order).
void launch_stencil_stitch(const StencilLaunch& l, const std::vector<const void*>& in,
                           const std::vector<void*>& out, cudaStream_t stream);

}  // namespace tg::detail
