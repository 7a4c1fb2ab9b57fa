#pragma once
// Half-precision (and TF32) convolutions through cuDNN's graph API (cudnn_frontend): an execution plan
// built once per problem, kept, and executed by each later call. cuDNN 9's legacy calls
// (cudnnConvolutionForward ...) build their plan inside every call: 0.15-0.6 ms on the host
// per call on the H100 even for the problem it ran just before (bench/cudnn_call_cost.cpp),
// where executing a kept plan takes 0.01-0.05 ms and building one for a known engine at a new
// batch size 0.2-0.3 ms (bench/cudnn_plan_cost.cpp). ResNet-50's first call at a new batch
// size runs its 53 convolutions op by op, and its second call captures them: both paid the
// legacy calls' cost. cudnn_conv.cpp prepares the operands (padding, filter layout, channel
// padding) as for a legacy call and hands the call here; what the graph API declines (or
// TGRAPH_CUDNN_LEGACY=1) goes on through the legacy calls.
//
// Choices are an engine and its knobs ("g <engine> <knob>=<value>,..."), remembered like the
// legacy algorithms (conv_choices.h): by problem, by family (a new batch size builds the
// nearest one's engine within a factor of 4; a first run takes one of any ratio provisionally
// and asks the heuristics after the run, ProvisionalChoices), on disk, and in a saved
// executable (kind "convg", library_plans.h).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tgraph/dtype.h"

namespace tg::detail {

/// A convolution as the graph API takes it, the forward x (*) w = y it belongs to: dims in
/// N, C, spatial order (w: K, C / groups, spatial), memory channels last or first, padding
/// before each spatial dim (after: what the output extents leave).
struct GraphConv {
  int dir = 0;  // 0 forward (x, w -> y), 1 data gradient (dy, w -> dx), 2 filter gradient (dy, x -> dw)
  DType dtype = DType::f16;  // f16, bf16, or f32 computed with TF32 allowed
  bool channels_last = true;
  std::vector<int64_t> x, w, y, pad, stride, dil;
};

/// True when `dtype` convolutions go through the graph API: f16, bf16, and f32 where TF32 is
/// allowed (`tf32`); not under TGRAPH_CUDNN_LEGACY=1 nor TGRAPH_CUDNN_FIND=1, which times the
/// legacy algorithms.
bool graph_conv_takes(DType dtype, bool tf32);

/// Where a call stands. `key` / `family` / `problem` are cudnn_conv.cpp's (the problem with the
/// device, without the batch, without the device).
struct GraphConvKeys {
  std::string key, family, problem;
  int64_t batch = 0;
};

/// A first run's question: whether the call would build a plan or run one no call has run yet
/// (its kernels not loaded): then it is made ahead on a warm-up thread, with another size's
/// engine where the run would take one (`provisional_fits`: its operands are small enough for
/// the question put off to run on scratch memory). False once the graph API declined the
/// problem (the legacy path answers then).
bool graph_conv_cold(const GraphConvKeys& k, int device, bool provisional_fits);
/// True when the graph API declined the problem (the legacy calls run it).
bool graph_conv_declined(const GraphConvKeys& k);

/// Runs the convolution on `h` and `stream`: x, w, y are the forward's operands, the one
/// written is dir's output. `may_provisional`: a first run (ProvisionalChoices installed, the
/// operands small enough) may take another batch size's engine of any ratio (never into a
/// captured stream; a later call finding one asks the heuristics instead); `*provisional` is
/// set when it did, and the caller puts the question off (graph_conv_drop_provisional, then the
/// call again on scratch). False when the graph API declines it (nothing written).
bool graph_conv_run(const GraphConv& c, const GraphConvKeys& k, cudnnHandle_t h, cudaStream_t stream,
                    int device, void* x, void* w, void* y, bool may_provisional, bool* provisional);
/// Forgets a provisional plan, so the next call asks the heuristics (the put-off question).
void graph_conv_drop_provisional(const std::string& key);

/// How many convolutions this process executed through the graph API (tests read it).
int64_t graph_conv_executions();

/// How many plans are kept now; with `max_plans` > 0 the most kept from now on (2048 by
/// default; the least recently used goes). For tests.
size_t graph_conv_plans_kept(size_t max_plans = 0);

/// Whether `text` is an engine as a saved executable or the disk cache holds one ("g <engine>
/// <knob>=<value>,..." or "g <engine> -"): whole numbers only, at most 64 knobs, nothing after.
/// Anything else is ignored (the heuristics asked). For tests.
bool graph_conv_engine_parses(const std::string& text);

/// A choice saved with an executable (kind "convg"), for this process's cache.
void cudnn_conv_graph_provide(const std::string& problem, const std::string& value, int device);

}  // namespace tg::detail
