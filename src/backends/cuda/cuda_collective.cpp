// The collectives of a CUDA executable (Run::collective, cuda_run.h): NCCL on device memory
// when the job runs the nccl backend on this executable's device, enqueued in graph order and
// so captured into the run's CUDA graph; a device copy in a world of one without an engine.
// Otherwise (Gloo, another device) the executor runs them on the host (Run::fallback).
//
// NCCL's work goes on a stream of the executable's own, forked from the run's stream by an
// event and joined back only where a later step reads the result (or at the end of the run):
// the backward's kernels go on while a gradient bucket is reduced. The operand and the result
// stay held until that join, so their memory is not reused under NCCL.
// TGRAPH_DIST_SAME_STREAM=1 keeps them on the run's stream.
#include <algorithm>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_run.h"
#include "backends/cuda/kernels_collective.h"
#include "core/env.h"
#include "distributed/backend.h"
#include "ops/op_def.h"
#include "tgraph/distributed.h"

namespace tg::detail::cuda_run {

CollectiveStream::~CollectiveStream() {
  for (cudaEvent_t e : done) cudaEventDestroy(e);
  if (ready) cudaEventDestroy(ready);
  if (stream) cudaStreamDestroy(stream);
}

namespace {

bool reducible(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16 || t == DType::i32 || t == DType::i64;
}

cudaEvent_t make_event() {
  cudaEvent_t e = nullptr;
  TG_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

}  // namespace

bool Run::collective(const Node& n) {
  const auto& d = std::get<CollectiveDesc>(n.attr);
  // Built for another world: the host path says so (ref_collective.cpp).
  if (d.world != distributed::world_size() || d.rank != distributed::rank()) return false;
  const DevTensor x = in(n.inputs[0]);
  const DType t = x.type.dtype;
  const bool reduces = n.kind == OpKind::AllReduce || n.kind == OpKind::ReduceScatter;
  const bool mean = reduces && d.reduce == CollectiveReduce::mean;
  if (reduces && (!reducible(t) || (mean && !is_float(t)))) return false;  // the host path's error
  DevTensor y = alloc(g.output_types_for(n, in_types(n)).at(0));
  const size_t bytes = x.nbytes();
  if (distributed::world_size() == 1 && distributed::backend() != "nccl") {
    // One rank and no engine: every collective is the identity.
    if (bytes) TG_CUDA(cudaMemcpyAsync(y.buf.get(), x.buf.get(), bytes, cudaMemcpyDeviceToDevice, stream));
    slots[static_cast<size_t>(n.outputs[0])] = std::move(y);
    return true;
  }
  // On the side stream only at the top level of an uncaptured or captured run: a conditional
  // body is a graph of its own, which another stream's work cannot join.
  const bool side = depth == 0 && !in_place && block_now == 0 && !env_flag("TGRAPH_DIST_SAME_STREAM");
  cudaStream_t s = stream;
  if (side) {
    CollectiveStream& cs = st.collectives;
    if (!cs.stream) {
      TG_CUDA(cudaStreamCreateWithFlags(&cs.stream, cudaStreamNonBlocking));
      cs.ready = make_event();
    }
    s = cs.stream;
  }
  const int world = distributed::world_size();
  const bool ran = with_device_collectives(ctx.index(), op_name(n.kind), [&](DeviceCollectives& e) {
    if (bytes == 0) return;
    if (side) {
      TG_CUDA(cudaEventRecord(st.collectives.ready, stream));
      TG_CUDA(cudaStreamWaitEvent(s, st.collectives.ready, 0));
    }
    const size_t count = static_cast<size_t>(x.type.shape.num_elements());
    switch (n.kind) {
      case OpKind::AllReduce: e.all_reduce(x.buf.get(), y.buf.get(), count, t, d.reduce, s); break;
      case OpKind::ReduceScatter:
        e.reduce_scatter(x.buf.get(), y.buf.get(), count / static_cast<size_t>(world), t, d.reduce, s);
        break;
      case OpKind::AllGather: e.all_gather(x.buf.get(), y.buf.get(), bytes, s); break;
      case OpKind::Broadcast: e.broadcast(x.buf.get(), y.buf.get(), bytes, static_cast<int>(d.root), s); break;
      default: break;
    }
    if (mean)  // the sum, divided where it lies (the host's mean: in double, rounded once)
      TG_CUDA(launch_divide(y.buf.get(), y.type.shape.num_elements(), t, static_cast<double>(world), s));
  });
  if (!ran) return false;
  // Watched from now on in a run no graph captures (a replay's whole step is watched at launch):
  // any wait for this stream that follows ends within the job's timeout.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
  if (bytes && cudaStreamIsCapturing(s, &capturing) == cudaSuccess && capturing == cudaStreamCaptureStatusNone)
    watch_device_step(ctx.index(), s);
  if (side && bytes) {
    std::vector<cudaEvent_t>& done = st.collectives.done;
    if (collectives_issued == done.size()) done.push_back(make_event());
    cudaEvent_t ev = done[collectives_issued++];
    TG_CUDA(cudaEventRecord(ev, s));
    pending_collectives.push_back({n.outputs[0], ev, x, y});
  }
  slots[static_cast<size_t>(n.outputs[0])] = std::move(y);
  return true;
}

void Run::join_collectives(const std::vector<int32_t>& reads) {
  auto waited = [&](const PendingCollective& p) {
    if (std::find(reads.begin(), reads.end(), p.output) == reads.end()) return false;
    TG_CUDA(cudaStreamWaitEvent(stream, p.done, 0));
    return true;
  };
  pending_collectives.erase(std::remove_if(pending_collectives.begin(), pending_collectives.end(), waited),
                            pending_collectives.end());
}

void Run::join_all_collectives() {
  for (const PendingCollective& p : pending_collectives) TG_CUDA(cudaStreamWaitEvent(stream, p.done, 0));
  pending_collectives.clear();
}

}  // namespace tg::detail::cuda_run
