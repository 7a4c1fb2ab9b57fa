// What tests and benchmarks read of a CUDA executable (runtime/executable_impl.h): its CUDA
// graph statistics, and device times of its op-by-op runs or of its captured graph's replays
// (CUDA events, after a warm-up).
#include <cuda_runtime_api.h>

#include <functional>
#include <mutex>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_run.h"
#include "backends/cuda/device_context.h"
#include "core/env.h"
#include "runtime/executable_impl.h"
#include "tgraph/error.h"

namespace tg::detail {

using cuda_run::Captured;
using cuda_run::CudaState;
using cuda_run::DevTensor;
using cuda_run::Run;

namespace {

// Milliseconds of each of `iters` calls of `enqueue` (after `warmup`), from CUDA events around
// the work it puts on `stream`.
std::vector<double> event_times(cudaStream_t stream, int warmup, int iters, const std::function<void()>& enqueue) {
  cudaEvent_t start, stop;
  TG_CUDA(cudaEventCreate(&start));
  TG_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < warmup + iters; ++i) {
    TG_CUDA(cudaEventRecord(start, stream));
    enqueue();
    TG_CUDA(cudaEventRecord(stop, stream));
    TG_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    TG_CUDA(cudaEventElapsedTime(&t, start, stop));
    if (i >= warmup) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

}  // namespace

CudaGraphStats cuda_graph_stats(const ExecutableImpl& exe) {
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  CudaGraphStats s = st.body_stats;
  s.captures = st.captures;
  s.replays = st.replays;
  s.uncaptured = st.uncaptured;
  s.bind_misses = st.bind_misses;
  auto count = [&s](const std::shared_ptr<Captured>& c) {
    if (!c) return;
    ++s.instances;
    s.graph_bytes += c->memory.bytes() + c->var_memory.bytes();
    s.graph_live_peak += c->memory.live_peak() + c->var_memory.live_peak();
    s.graph_planned += c->memory.planned_takes();
    s.graph_in_donated += c->memory.donated_takes();
  };
  count(st.captured);
  count(st.spare);
  for (const CudaState::Parked& p : st.parked) {
    count(p.captured);
    count(p.spare);
  }
  s.error = st.capture_error;
  for (const auto& [step, launch] : st.reduce_stitches) s.stitched_reductions += launch.has_value();
  return s;
}

std::vector<double> cuda_time_runs(const ExecutableImpl& exe, const std::vector<TensorData>& inputs, int warmup,
                                   int iters) {
  const SwitchScope switches(exe.switches);  // its CompileOptions::switches, as Executable::run installs them
  exe.check_inputs(inputs);
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  settle_library_calls(st, false);  // everything: the timed runs are captured replays
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  TG_CUDA(cudaSetDevice(exe.device.index));
  st.know_device(exe.device.index);
  const GraphImpl& g = exe.module.graph;
  Run proto{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  std::vector<DevTensor> dev_in;
  for (const TensorData& t : inputs) dev_in.push_back(proto.upload(t));
  for (const auto& [name, id] : exe.variables) proto.snapshot[name] = proto.upload(exe.store->value(name));
  return event_times(ctx.stream(), warmup, iters, [&] {
    Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), proto.snapshot, {}};
    for (size_t k = 0; k < dev_in.size(); ++k) r.slots[static_cast<size_t>(exe.module.feeds[k])] = dev_in[k];
    r.block(0);
  });
}

std::vector<double> cuda_time_replays(const ExecutableImpl& exe, const std::vector<TensorData>& inputs, int warmup,
                                      int iters) {
  const SwitchScope switches(exe.switches);  // its CompileOptions::switches, as Executable::run installs them
  exe.run_cuda(inputs);  // records, then captures (the next run does, while questions are asked)
  cudnn_attention_settle();  // the plans stand-ins ran for, built: the next run captures with them
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  bool again = false;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    again = !st.captured && !st.capture_failed;
  }
  if (again) exe.run_cuda(inputs);
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.captured) throw Error("[bench] the run was not captured into a CUDA graph: " + st.capture_error);
  cudaStream_t stream = DeviceContext::get(exe.device.index).stream();
  return event_times(stream, warmup, iters, [&] { TG_CUDA(cudaGraphLaunch(st.captured->exec, stream)); });
}

}  // namespace tg::detail
