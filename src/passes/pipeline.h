#pragma once
// The ordered list of compile passes.
#include <functional>

#include "passes/module.h"
#include "tgraph/graph.h"

namespace tg::detail {

/// Runs verify, then (for backends without composite kernels) decomposition of composite
/// ops, then `precision` (autocast.h: bf16 / f16 autocast, the tf32 permission), then (when
/// optimize) channels-last rewriting of nchw convolution networks when `channels_last`
/// (layout.h; inference graphs only), dce, constant folding, cse, algebraic simplification to
/// a fixed point (at most a few rounds), then dce. With TGRAPH_DUMP=dir set, writes the
/// graph after every pass as dir/NN-pass.txt and .dot. Verifies after each pass in debug
/// builds or with TGRAPH_VERIFY=1.
void run_pipeline(Module& m, bool optimize, bool decompose_composites = false,
                  Precision precision = Precision::f32, bool channels_last = false);

/// What run_pipeline does, named. `space_to_depth`: strided few-channel convolutions as
/// stride-1 ones over a space-to-depth view (space_to_depth.h; for cuDNN), after the layout
/// pass; TGRAPH_NO_SPACE_TO_DEPTH=1 turns it off.
/// `before_decompose`: the backend's own rewrites, first. `keep_composite`: composites a decomposing backend runs itself, asked before precision sets
/// their dtypes; `lower_kept` then (after precision) rewrites them into what the backend runs,
/// or decomposes those it cannot run after all (the CUDA backend's fused attention).
struct PipelineOptions {
  bool optimize = true;
  bool decompose_composites = false;
  Precision precision = Precision::f32;
  bool channels_last = false;
  bool space_to_depth = false;
  std::function<bool(const GraphImpl&, const Node&)> keep_composite;
  std::function<bool(Module&)> lower_kept;
  /// Rewrites the backend runs first (before decomposition; the CUDA backend's MatchAttention).
  std::function<bool(Module&)> before_decompose;
};
void run_pipeline(Module& m, const PipelineOptions& o);

}  // namespace tg::detail
