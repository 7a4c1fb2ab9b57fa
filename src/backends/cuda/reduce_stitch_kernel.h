#pragma once
// The generated kernel of a stitched reduction (passes/reduce_stitch.h): every reduction of the
// step accumulates in one pass over the input geometry, each input element computed by the
// prologue as it is read. Two layouts, as the plain reductions (reduce_kernels.cpp): kept dims
// innermost (a column reduction, batch-norm statistics of NHWC: threads of a warp read
// neighbouring columns, rows split over the grid into partials combined by a second kernel in a
// fixed order; kept dims before the reduced ones are a batch of such columns) or reduced dims innermost (a row reduction: a warp, or a block for long rows,
// per output; with interleaved dims, the same with each element's offset computed from its
// coordinates). Sums accumulate in double (the vector column kernel: in float per thread over
// tens of rows, in double from there); a variance sums (x - K) and (x - K)^2 with K an
// element of its own row or column (no cancellation when the mean is large against the spread).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "passes/reduce_stitch.h"

namespace tg::detail {


/// Kernel arguments (passed by value; the generated source declares the same struct).
struct ReduceStitchArgs {
  const void* in[kMaxOperands];
  void* out[kStitchOutputs];
  void* part;                    // column layout: [planes][split][outer] partials
  long long outer, inner, split;  // outputs, elements per output, row splits (column layout)
  long long cols;                 // column layout: kept elements after the reduced dims (outer
                                  // = batch x cols: [batch, inner, cols] geometry)
  int grank;
  long long gdims[kMaxRank];
  long long gstride[kMaxOperands][kMaxRank];  // broadcast operands: element strides (0 = broadcast)
  // The general layout (reduced and kept dims interleaved): element offsets of the kept dims
  // (output index) and of the reduced dims (index within the reduction).
  int krank, rrank;
  long long kdims[kMaxRank], kstrides[kMaxRank], rdims[kMaxRank], rstrides[kMaxRank];
  // The general layout whose innermost reduced dim is contiguous (batch-norm statistics of
  // NCHW): index j within the reduction is run j / rdims[rrank-1] at j % rdims[rrank-1], the
  // division by multiply-shift (fast_divisor).
  unsigned run_mul, run_shift;
  int fcols;  // pass 2: columns per block (a power of two; 256 / fcols partial phases each)
};

/// A prepared launch: source, layout, sizes and the output types.
struct ReduceStitchLaunch {
  std::string source;
  bool column = false;
  bool general = false;  // row kernel with interleaved dims
  bool runs = false;     // general, its innermost reduced dim contiguous: found by runs (run_mul)
  int threads_per_output = 32;  // row layout: a warp (32) or a block (256) per output
  size_t planes = 0;            // accumulators per output (a variance has two)
  ReduceStitchArgs args{};
  std::vector<TensorType> output_types;
  unsigned grid_x = 1, grid_y = 1, final_x = 1;  // final_x: pass 2's blocks (set at each launch)
  // Column layout: `vec` neighbouring columns per thread (tg_rs_vpartial: vector loads, float
  // accumulators, partials combined in double) when every operand allows it; 1 for none. Its
  // grid and row splits; launches whose operands are not aligned to a vector take the scalar
  // kernel.
  int vec = 1, vtx = 1;            // columns per thread; threads across columns in a block
  int vrows = 2;                   // rows each thread has in flight per step of its loop
  int stages = 0;                  // or: rows staged ahead through shared memory (cp.async)
  size_t stage_bytes = 0;          // the staging's shared memory
  int sm_count = 1;                // the device's, to size the grid at the first launch
  bool vgrid_sized = false;        // vgrid_y cut to one wave of resident blocks (first launch)
  std::vector<size_t> vec_align;  // per input: the bytes its pointer must be aligned to (0: any)
  unsigned vgrid_x = 1, vgrid_y = 1;
  // The row kernel, or the column partials and final (on first launch); vfirst: the vector
  // column partial or the row-slice partial.
  CompiledKernel first, second, vfirst;
  long long row_split = 1;  // row layout: slices per row (tg_rs_rpartial, then tg_rs_final), 1 for none
  size_t workspace_bytes() const {
    if (!column) return row_split > 1 ? planes * static_cast<size_t>(row_split * args.outer) * 8 : 0;
    return planes * static_cast<size_t>(std::max<long long>(args.split, vgrid_y) * args.outer) * 8;
  }
};

/// Compiles l's kernels and sizes its grid for the device (once): workspace_bytes() is final
/// after it, so every run asks for the same workspace (a capture's memory plan replays the
/// sizes an earlier run allocated).
void ready_reduce_stitch(ReduceStitchLaunch& l, int device);

/// Plans the kernel for inputs of types `types` (of s.inputs) on a device of `sm_count` SMs and
/// compute capability `sm_major`; nothing when the step's geometry or members are not covered
/// (the caller runs s.pieces one by one).
std::optional<ReduceStitchLaunch> prepare_reduce_stitch(const GraphImpl& g, const ReduceStitch& s,
                                                        const std::vector<TensorType>& types, int sm_count,
                                                        int sm_major = 9);
/// Launches it (compiling its kernels on the first launch): `ins` per s.inputs, `outs` per
/// s.outputs, `workspace` of workspace_bytes().
void launch_reduce_stitch(ReduceStitchLaunch& l, const std::vector<const void*>& ins,
                          const std::vector<void*>& outs, void* workspace, cudaStream_t stream, int device);

}  // namespace tg::detail
