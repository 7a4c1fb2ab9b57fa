// The CUDA executor's entry points (run_cuda, run_cuda_device, the bench timers): inputs are
// uploaded (or adopted where they already are on the device), each block's plan runs op by
// op through Run (cuda_run.h; dispatch in cuda_run_ops.cpp and cuda_run_control.cpp), and the
// outputs are fetched or handed back as device tensors. The first run of an input signature
// goes op by op; it is then captured into one CUDA graph (control flow as conditional nodes)
// and replayed. Variables keep a device copy that is refreshed when the host store's version
// changes; device-side writes are published back to the store.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "backends/cpu/profile.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_run.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_copy.h"
#include "backends/cuda/lent_outputs.h"
#include "backends/cuda/library_plans.h"
#include "backends/cuda/library_warmup.h"
#include "backends/cuda/matmul_lt.h"
#include "backends/cuda/pinned_staging.h"
#include "core/env.h"
#include "distributed/backend.h"
#include "runtime/cuda_run_device.h"
#include "runtime/executable_impl.h"
#include "tgraph/error.h"

namespace tg::detail {

using cuda_run::CachedVar;
using cuda_run::Captured;
using cuda_run::CudaState;
using cuda_run::DevTensor;
using cuda_run::Run;
using cuda_run::find_lent;
using cuda_run::kLendMinBytes;
using cuda_run::kMaxBorrowMisses;
using cuda_run::lend;
using cuda_run::settle_library_calls;

namespace {

// A caller's DeviceTensor as a DevTensor: the same memory, kept alive while the run uses it.
DevTensor adopt(const DeviceTensor& t) {
  const auto& s = t.storage();
  return DevTensor{s->type, DeviceBuffer(s->owner, static_cast<std::byte*>(s->data))};
}

// The inputs of a run: host tensors (copied in through pinned staging) or device tensors
// (read where they are).
struct RunInputs {
  const std::vector<TensorData>* host = nullptr;
  std::vector<DevTensor> device;
  // Per device input: the same memory when it is another graph's lent output (kept alive by
  // that graph's instance, not by its lease), which a capture may read in place; else empty.
  std::vector<DevTensor> lent;
  // The caller's own memory may be read in place too (a stream-ordered caller that keeps its
  // tensors where they are from run to run: a model's parameters), where it stays put.
  bool borrow = false;
  // Capture at the next run, not right after the first op-by-op one: a stream-ordered caller
  // (PyTorch) holds that run's outputs (a training forward's saved activations) while the new
  // graph's memory is allocated, and the backward the same: ResNet-50's first step had peaked
  // at twice the memory of the later ones (bench/train_memory.py, bench/RESULTS.md).
  bool defer_capture = false;
  // Per input: the caller gave it up (Executable::run_device's `donated`): once the run has
  // read it for the last time, a capture may put its own buffers in its bytes.
  std::vector<bool> donated;
  bool is_donated(size_t i) const { return i < donated.size() && donated[i]; }
  size_t size() const { return host ? host->size() : device.size(); }
  TensorType type(size_t i) const { return host ? (*host)[i].type() : device[i].type; }
};

std::map<std::string, uint64_t> var_versions(const ExecutableImpl& exe) {
  std::map<std::string, uint64_t> v;
  std::lock_guard<std::mutex> lock(exe.store->mu);
  for (const auto& [name, id] : exe.variables) v[name] = exe.store->versions[name];
  return v;
}

// Whole-run capture needs static shapes and no host round trips (checked on the recording
// run). Variable writes are captured as copies into the variables' device buffers at the
// end of the run. TGRAPH_NO_CUDA_GRAPH=1 turns capture off.
// A graph with dynamic dims is captured per concrete input types (its op-by-op run at those
// types fixed every shape), and up to kMaxParkedSizes such instances are kept (swap_in).
bool capturable(const ExecutableImpl& exe, const CudaState& st) {
  return !st.capture_failed && !env_flag("TGRAPH_NO_CUDA_GRAPH");
}

// Makes the instances captured at `types` (if any were) the current ones, parking the current
// ones under their own types; the least recently used beyond kMaxParkedSizes are dropped (their
// graph memory with them, once no caller holds their outputs).
void swap_in(CudaState& st, const std::vector<TensorType>& types) {
  if (st.captured && st.captured->input_types == types) return;
  std::shared_ptr<Captured> cur = std::move(st.captured), spare = std::move(st.spare);
  for (auto it = st.parked.begin(); it != st.parked.end(); ++it)
    if (it->types == types) {
      st.captured = std::move(it->captured);
      st.spare = std::move(it->spare);
      st.parked.erase(it);
      break;
    }
  if (cur) st.parked.push_front({cur->input_types, std::move(cur), std::move(spare)});
  while (st.parked.size() > cuda_run::kMaxParkedSizes) st.parked.pop_back();
}

// The store's host copy of a variable whose value lives only on the device: fetched on demand.
std::function<TensorData()> fetch_later(DevTensor keep, int device_index) {
  return [keep, device_index] {
    // On the runs' stream, after the work that wrote the value: the stream is non-blocking,
    // so a plain cudaMemcpy (legacy default stream) could read it before a replay finished.
    TensorData h(keep.type.shape, keep.type.dtype);
    TG_CUDA(cudaSetDevice(device_index));
    cudaStream_t s = DeviceContext::get(device_index).stream();
    copy_to_host(h.data(), keep.buf.get(), keep.nbytes(), s);
    TG_CUDA(cudaStreamSynchronize(s));
    return h;
  };
}

// Publishes device-side variable writes: new versions, and a host copy fetched on demand.
void publish(const ExecutableImpl& exe, CudaState& st, const std::map<std::string, DevTensor>& written) {
  std::lock_guard<std::mutex> vlock(exe.store->mu);
  const bool current = st.vars_generation == exe.store->generation;
  for (const auto& [name, value] : written) {
    exe.store->device_only.erase(name);
    uint64_t v = ++exe.store->versions[name];
    ++exe.store->generation;
    st.vars[name] = CachedVar{v, value};
    exe.store->device_only[name] = fetch_later(value, exe.device.index);
  }
  if (current) st.vars_generation = exe.store->generation;  // our own writes: still all current
}

// The store's generation now.
uint64_t store_generation(const ExecutableImpl& exe) {
  std::lock_guard<std::mutex> lock(exe.store->mu);
  return exe.store->generation;
}

// The capture's memory laid out from the last uncaptured run of its input types (AllocTrace):
// every buffer of the block at an offset chosen with all lifetimes known, in one chunk of about
// the most bytes the run held at once.
// Not for a graph with control flow: its capture (conditional nodes, state buffers of their
// own) allocates otherwise than the host-driven run before it, and a plan that misses keeps its
// chunk beside the chunks the capture takes instead.
void plan_memory(const CudaState& st, const GraphImpl& g, Captured& cap, const RunInputs& inputs) {
  if (!st.trace || st.trace_types != cap.input_types || g.blocks.size() > 1 || env_flag("TGRAPH_NO_MEMORY_PLAN"))
    return;
  std::vector<Lifetime> blocks;
  std::vector<int64_t> input_free;
  {
    std::lock_guard<std::mutex> lock(st.trace->mu);
    blocks = st.trace->blocks;
    input_free = st.trace->input_free;
  }
  // The placement is quadratic in the blocks: 5,000 take 0.07 s, 20,000 1.5 s (on this
  // project's 2-core machine); past 8,192 the capture takes its buffers as they come.
  if (blocks.empty() || blocks.size() > 8192) return;
  // Donated inputs read in place, let go during the recorded run: their bytes serve the
  // buffers that start after that and die within the run (a training backward's working set
  // in the activations it has finished with, as eager PyTorch's allocator reuses them). Not
  // one that shares a byte with an input that was not donated.
  std::vector<DonatedBytes> donated;
  std::vector<GraphMemory::Donated> regions;
  std::vector<size_t> reuses;
  auto eligible = [&](size_t i) {
    return !st.no_donation && cap.bound[i] && inputs.is_donated(i) && i < input_free.size() &&
           input_free[i] != INT64_MAX && cap.inputs[i].nbytes() != 0;
  };
  for (size_t i = 0; i < cap.bound.size(); ++i) {
    if (!eligible(i)) continue;
    const size_t n = cap.inputs[i].nbytes();
    bool shared = false;  // with an input whose bytes are not reused (donated or not)
    for (size_t j = 0; j < cap.bound.size(); ++j)
      if (j != i && cap.bound[j] && !eligible(j) && shares_bytes(cap.bound[i], n, cap.bound[j], cap.inputs[j].nbytes()))
        shared = true;
    if (shared) continue;
    const auto lo = reinterpret_cast<int64_t>(cap.bound[i]);
    donated.push_back({lo, lo + static_cast<int64_t>(n), input_free[i]});
    regions.push_back({static_cast<std::byte*>(const_cast<void*>(cap.bound[i])), cap.inputs[i].nbytes()});
    reuses.push_back(i);
  }
  const auto align = static_cast<int64_t>(GraphMemory::kAlign);
  const std::vector<int64_t> at = place_in_donated(blocks, donated, align);
  // The rest in the graph's own chunk.
  std::vector<Lifetime> own;
  std::vector<size_t> own_index;
  for (size_t k = 0; k < blocks.size(); ++k)
    if (at[k] < 0) {
      own.push_back(blocks[k]);
      own_index.push_back(k);
    }
  int64_t total = 0;
  const std::vector<int64_t> off = place_by_lifetime(own, align, total);
  std::vector<size_t> sizes, offsets(blocks.size(), 0);
  std::vector<std::byte*> where(blocks.size(), nullptr);
  for (size_t k = 0; k < blocks.size(); ++k) {
    sizes.push_back(static_cast<size_t>(blocks[k].size));
    if (at[k] >= 0) where[k] = reinterpret_cast<std::byte*>(at[k]);
  }
  for (size_t j = 0; j < own.size(); ++j) offsets[own_index[j]] = static_cast<size_t>(off[j]);
  const bool used = std::any_of(at.begin(), at.end(), [](int64_t a) { return a >= 0; });
  cap.memory.plan(std::move(sizes), std::move(offsets), static_cast<size_t>(total), std::move(where),
                  used ? std::move(regions) : std::vector<GraphMemory::Donated>{});
  if (used) cap.reuses = std::move(reuses);
}

// Captures the whole run into one CUDA graph. Its inputs and every intermediate (conditional
// bodies' included) get buffers of the graph's own memory (GraphMemory), so the graph holds
// fixed addresses and no allocation nodes; control flow becomes conditional nodes
// (Run::captured_if / _for / _while).
void capture(const ExecutableImpl& exe, CudaState& st, const RunInputs& inputs) {
  static std::mutex capture_mu;  // executables share the streams that capture conditional bodies
  std::lock_guard<std::mutex> capture_lock(capture_mu);
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  const GraphImpl& g = exe.module.graph;
  auto cap = std::make_shared<Captured>(ctx);
  Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  // A capture that cannot be made (out of memory included) is recorded, not thrown: the run
  // that asked for it already succeeded, and later runs go uncaptured.
  auto give_up = [&](const std::string& why) {
    st.capture_failed = true;
    st.capture_error = why;
  };
  std::map<std::string, DevTensor> vars;  // the variables, copied into memory the graph reads
  cudaGraph_t graph = nullptr;
  bool capturing = false, misplaced = false;
  try {
    // The copies get chunks of their own (a variable outlives the graph's intermediates, which
    // a shared chunk would keep alive). They take the variables' place at once (same values,
    // same versions; valid whether or not the capture succeeds), so the pool's copies go
    // before the graph's chunk is allocated: ResNet-50's C++ step peaked during its capture
    // (10.98 GiB in TF32 at batch 128, 10.60 in use after it), with the variables' old and new
    // values of the run before it still held beside the copies (run_common clears those).
    r.fixed = &cap->var_memory;
    for (const auto& [name, cv] : st.vars) vars[name] = r.snapshot[name] = r.clone(cv.value);
    r.fixed = &cap->memory;
    {
      std::lock_guard<std::mutex> vlock(exe.store->mu);
      for (auto& [name, value] : vars) {
        CachedVar& cv = st.vars[name];
        // Not with control flow: a loop's bad step fails a replay after the graph wrote these
        // copies, and the store must then still fetch the values from before it (replay()).
        auto fetch = exe.store->device_only.find(name);
        if (g.blocks.size() == 1 && fetch != exe.store->device_only.end() && exe.store->versions[name] == cv.version)
          fetch->second = fetch_later(value, exe.device.index);  // the same value, in the copy
        cv.value = value;
      }
    }
    const bool bind = !inputs.lent.empty() && st.bind_misses < 3;
    st.moved.resize(inputs.size(), false);
    for (size_t i = 0; i < inputs.size(); ++i) {  // the graph's own input buffers
      if (bind && inputs.lent[i].buf) {  // read in place: no copy at each replay
        cap->inputs.push_back(inputs.lent[i]);
        cap->bound.push_back(inputs.lent[i].buf.get());
      } else if (inputs.borrow && !st.moved[i] && st.borrow_misses < kMaxBorrowMisses && inputs.device[i].nbytes()) {
        // The caller's memory, not owned: each replay checks the input is at this address
        // again (fits), and the graph never writes its inputs' buffers (nor lends them as
        // outputs: run_cuda_device copies a target that is a bound input).
        const DevTensor& d = inputs.device[i];
        cap->inputs.push_back(DevTensor{d.type, DeviceBuffer(DeviceBuffer(), d.buf.get())});
        cap->bound.push_back(d.buf.get());
      } else {
        cap->inputs.push_back(inputs.host ? r.upload((*inputs.host)[i]) : r.clone(inputs.device[i]));
        cap->bound.push_back(nullptr);
      }
      cap->input_types.push_back(inputs.type(i));
    }
    for (size_t i = 0; i < inputs.size(); ++i) r.slots[static_cast<size_t>(exe.module.feeds[i])] = cap->inputs[i];
    r.loop_error = &cap->loop_error;
    plan_memory(st, g, *cap, inputs);
    // The run's references to the donated inputs it reuses: when the last goes (after the
    // last step reading the value), planned buffers may take their bytes.
    for (size_t k = 0; k < cap->reuses.size(); ++k) {
      const size_t i = cap->reuses[k];
      DevTensor& slot = r.slots[static_cast<size_t>(exe.module.feeds[i])];
      slot.buf = DeviceBuffer(slot.buf.get(), [let_go = cap->memory.donated_release(k)](std::byte*) { let_go(); });
    }
    st.body_stats = CudaGraphStats{};
    TG_CUDA(cudaStreamSynchronize(r.stream));
    // Relaxed: a kernel first met in a branch the recording run did not take is loaded here.
    TG_CUDA(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeRelaxed));
    capturing = true;
    r.block(0);
    // Writes land in the variables' own buffers, so every replay reads and writes the same
    // addresses (all reads of the old values precede these copies on the stream).
    for (auto& [name, value] : r.pending) {
      const DevTensor& dst = r.snapshot.at(name);
      st.index_errors.guarded_copy(dst.buf.get(), value.buf.get(), value.nbytes(), r.stream);  // not after a bad index
      cap->assigned[name] = dst;
    }
    // A target in donated bytes would be lent to the caller inside memory the caller gave up:
    // possible only where the capture allocated otherwise than its recording run.
    for (int32_t v : exe.module.targets)
      if (!cap->reuses.empty() && cap->memory.in_donated(r.in(v).buf.get(), r.in(v).nbytes())) misplaced = true;
    capturing = false;
    TG_CUDA(cudaStreamEndCapture(r.stream, &graph));
    if (misplaced) {
      cudaGraphDestroy(graph);
      st.no_donation = true;  // the next run captures again, without donated bytes
      return;
    }
  } catch (const std::exception& err) {
    if (capturing) cudaStreamEndCapture(r.stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    give_up(err.what());
    return;
  }
  cudaError_t e = cudaGraphInstantiate(&cap->exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    give_up(std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e));
    return;
  }
  for (auto& [name, value] : vars) st.vars[name].value = value;  // same values, same versions
  for (int32_t v : exe.module.targets) cap->targets.push_back(r.in(v));
  cap->var_versions = var_versions(exe);
  cap->var_generation = store_generation(exe);
  st.captured = std::move(cap);
  ++st.captures;
}

// Replays the captured graph; returns its target buffers, which the caller copies out while it
// still holds the executable's lock.
const std::vector<DevTensor>& replay(const ExecutableImpl& exe, CudaState& st, Captured& cap, const RunInputs& inputs,
                                     Run& r) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (cap.bound[i]) continue;  // read in place (fits() checked it is the same buffer)
    if (inputs.host)
      copy_to_device(cap.inputs[i].buf.get(), (*inputs.host)[i].data(), (*inputs.host)[i].nbytes(), r.stream);
    else if (inputs.device[i].nbytes())
      TG_CUDA(cudaMemcpyAsync(cap.inputs[i].buf.get(), inputs.device[i].buf.get(), inputs.device[i].nbytes(),
                              cudaMemcpyDeviceToDevice, r.stream));
  }
  if (cap.loop_error) TG_CUDA(cudaMemsetAsync(cap.loop_error.get(), 0, sizeof(int), r.stream));
  TG_CUDA(cudaGraphLaunch(cap.exec, r.stream));
  if (st.has_collectives(exe.module.graph)) watch_device_step(exe.device.index, r.stream);  // before any wait below
  int bad_step = 0;
  if (cap.loop_error) {
    TG_CUDA(cudaMemcpyAsync(&bad_step, cap.loop_error.get(), sizeof(int), cudaMemcpyDeviceToHost, r.stream));
    TG_CUDA(cudaStreamSynchronize(r.stream));
  }
  if (bad_step) {
    // The graph already wrote the variables' device copies: drop them (the host store still
    // holds the values from before this run) and the graph that refers to them.
    for (const auto& [name, value] : cap.assigned) st.vars.erase(name);
    st.captured.reset();
    throw Error("[for_loop] step must be positive");
  }
  // The graph skipped its variable writes when an index was out of range (guarded_copy).
  if (std::string e = st.index_errors.take(exe.module.graph, r.stream); !e.empty()) throw Error(e);
  if (!cap.assigned.empty()) {
    publish(exe, st, cap.assigned);
    cap.var_versions = var_versions(exe);  // our own writes keep the graph valid
    cap.var_generation = store_generation(exe);
  }
  return cap.targets;
}

}  // namespace

namespace {

// The targets of a run for `take`, and the captured instance that holds them (null: an
// uncaptured run's, in pool memory of their own).
using Take = std::function<void(Run&, const std::vector<DevTensor>&, const std::shared_ptr<Captured>&)>;

// One run on the device: replays the captured graph when the input types and variables are
// those it was captured with, otherwise runs op by op (and captures when it can). `take`
// receives the targets while the run still holds the executable's lock, before variable
// writes are published and before a capture reuses the stream.
//
// An instance whose outputs are still lent (run_cuda_device) cannot replay: a second instance
// is captured for such callers (a loop that keeps the last step's outputs while it runs the
// next); with both lent, the run goes op by op into fresh memory.
void run_common(const ExecutableImpl& exe, const RunInputs& inputs, const Take& take) {
  const DeviceCodeScope recording(exe.device_code.get());  // the kernels it uses, for save()
  if (!exe.backend_state) throw Error("[run] executable has no CUDA state");
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  settle_library_calls(st, !st.prefetched);  // (a first run may leave a load's matmuls loading: cuda_run.h)
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  TG_CUDA(cudaSetDevice(exe.device.index));
  st.know_device(exe.device.index);
  IndexErrors::Scope index_scope(st.index_errors, st.own_memory(ctx), ctx.stream());
  const GraphImpl& g = exe.module.graph;
  Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  uint64_t generation = 0;
  {
    // The device copies of variables written since this executable last looked (by the host,
    // or by another executable's run); none when the store's generation is where it was.
    std::lock_guard<std::mutex> vlock(exe.store->mu);
    generation = exe.store->generation;
    if (st.vars_generation != generation) {
      for (const auto& [name, id] : exe.variables) {
        CachedVar& cv = st.vars[name];
        uint64_t version = exe.store->versions[name];
        if (cv.version != version) {
          cv.value = r.upload(exe.store->value(name));
          cv.version = version;
        }
      }
      st.vars_generation = generation;
    }
  }
  // What an uncaptured run reads (a replay reads its graph's own copies).
  auto take_snapshot = [&] {
    for (const auto& [name, id] : exe.variables) r.snapshot[name] = st.vars[name].value;
  };
  std::vector<TensorType> in_types;
  for (size_t i = 0; i < inputs.size(); ++i) in_types.push_back(inputs.type(i));
  if (!st.parked.empty() || (st.captured && st.captured->input_types != in_types)) swap_in(st, in_types);
  std::optional<std::map<std::string, uint64_t>> versions;  // looked up only when the generation moved
  auto same_variables = [&](const Captured& c) {
    if (c.var_generation == generation) return true;
    if (!versions) versions = var_versions(exe);
    if (c.var_versions != *versions) return false;
    c.var_generation = generation;
    return true;
  };
  // The types fit, but an input read in place is elsewhere now, or one the graph copies could
  // be read in place (the forward's first, uncaptured, run lent nothing to the backward's
  // capture): capture again, a few times at most (bind_misses, borrow_misses).
  bool moved_caller = false;
  bool moved = false;
  auto fits = [&](const Captured& c) {
    if (c.input_types != in_types || !same_variables(c)) return false;
    // Its buffers overwrite these inputs' bytes: only where the caller gives them up again.
    for (size_t i : c.reuses)
      if (!inputs.is_donated(i)) return false;
    bool ok = true;
    for (size_t i = 0; i < c.bound.size(); ++i) {
      const bool lent_now = !inputs.lent.empty() && inputs.lent[i].buf;
      if (c.bound[i] ? inputs.host || c.bound[i] != inputs.device[i].buf.get() : lent_now && st.bind_misses < 3) {
        // Every input that moved is marked (not only the first): the next capture copies
        // them, so a batch that comes at a new address each step costs one capture, not one each.
        if (c.bound[i] && !lent_now) {
          if (i < st.moved.size()) st.moved[i] = true;
          moved_caller = true;
        }
        moved = true;
        ok = false;
      }
    }
    return ok;
  };
  // A step whose collectives run through NCCL is watched for the job's timeout once enqueued,
  // before anything waits for it (a dead peer would leave its kernels waiting forever: the
  // watchdog aborts the communicator): a replay right after its launch (replay()), an op-by-op
  // run after each collective (Run::collective). A broken communicator fails the run.
  const bool collectives = st.has_collectives(g);
  if (collectives) {
    check_device_collectives(exe.device.index, "run");
    // Captured with another job's communicator (shut down and joined again since): captured anew.
    if (const uint64_t job = device_collectives_generation(); job != st.comm_generation) {
      st.captured.reset();
      st.spare.reset();
      st.parked.clear();
      st.comm_generation = job;
    }
  }
  auto replay_current = [&] {
    ++st.replays;
    std::shared_ptr<Captured> cap = st.captured;
    std::vector<DevTensor> targets = replay(exe, st, *cap, inputs, r);
    take(r, targets, cap);
    if (collectives) check_device_collectives(exe.device.index, "run");
  };
  bool all_lent = false;
  if (st.captured && fits(*st.captured)) {
    if (st.captured->busy() && st.spare && !st.spare->busy() && fits(*st.spare)) std::swap(st.captured, st.spare);
    if (!st.captured->busy()) return replay_current();
    // no second instance yet, or a free one that no longer fits (an input read in place moved)
    if ((!st.spare || !st.spare->busy()) && capturable(exe, st)) {
      std::shared_ptr<Captured> first = st.captured;
      capture(exe, st, inputs);
      if (st.captured != first) {
        st.spare = std::move(first);
        return replay_current();
      }
      st.captured = std::move(first);  // the capture failed (out of memory): op by op below
    }
    all_lent = true;
  }
  if (moved) ++(moved_caller ? st.borrow_misses : st.bind_misses);
  if (!all_lent) {
    st.captured.reset();
    st.spare.reset();
  }
  const bool try_capture = capturable(exe, st) && !cpu_profiling();  // profiles time steps (cuda_run_ops.cpp)
  if (try_capture && st.is_warm(in_types) && !all_lent) {  // kernels and plans made: capture, then replay
    capture(exe, st, inputs);
    if (st.captured) return replay_current();
  }
  take_snapshot();
  for (size_t i = 0; i < inputs.size(); ++i)
    // Device inputs are copied (a variable assigned from a feed must not alias the caller's
    // memory) unless the caller lets the run read them in place, as its captures do: a
    // training backward's first run had cloned every saved activation, and the forward's
    // outputs were copies too, so ResNet-50's first step through tgraph_train peaked at
    // 21 GiB against 14.4 for the captured steps.
    r.slots[static_cast<size_t>(exe.module.feeds[i])] = inputs.host     ? r.upload((*inputs.host)[i])
                                                        : inputs.borrow ? inputs.device[i]
                                                                        : r.clone(inputs.device[i]);
  r.host_synced = false;
  ++st.uncaptured;
  // The first run takes other sizes' library choices whose kernels are loaded where it has none
  // for its own, and asks the libraries after it (library_warmup.h).
  std::optional<ProvisionalChoices> provisional;
  provisional.emplace(!st.prefetched);
  if (!st.prefetched) {
    st.prefetched = true;
    // Only head starts: a library call the warm-up did not make, or a kernel the prefetch did
    // not prepare, is made at its turn in the run, as without them. The library calls go on
    // other threads while this one generates the kernels' sources.
    std::optional<LibraryWarmup> warm;
    size_t warm_calls = 0;
    if (library_warmup_enabled()) try {
        std::vector<WarmCall> calls = r.library_warm_calls(0);
        // Saved matmuls (a dynamic executable's first copy's, handed over by its load) load
        // their kernels beside the run, which computes them with tgraph's kernel meanwhile.
        std::vector<WarmCall> matmuls = matmul_lt_saved_warm_calls(r.ctx.index());
        if (matmul_stand_in_enabled() && !matmuls.empty() && !st.loading) {
          library_warmup_wait_at_exit();
          st.loading = std::make_unique<LibraryWarmup>(std::move(matmuls), r.ctx.index());
        } else {
          for (WarmCall& c : matmuls) calls.push_back(std::move(c));
        }
        warm_calls = calls.size();
        warm.emplace(std::move(calls), r.ctx.index());
      } catch (const std::exception&) {
        cudaGetLastError();
      }
    if (!env_flag("TGRAPH_NO_KERNEL_PREFETCH")) try {
        std::optional<CpuProfileScope> timed;
        if (profiling_first_runs()) timed.emplace("cuda first run: kernel sources generated and queued");
        r.prefetch_kernels(0);
      } catch (const std::exception&) {
        cudaGetLastError();
      }
    if (warm) {
      // The constants' uploads while the library calls run on their threads (the copy engine
      // is idle then): a loaded BERT-base f16's 77 took 42 ms of its first run in turn.
      try {
        std::optional<CpuProfileScope> timed;
        if (profiling_first_runs()) timed.emplace("cuda first run: constants uploaded during the library calls");
        r.upload_constants(0);
      } catch (const std::exception&) {
        cudaGetLastError();  // uploaded in turn then, where an error is reported as the op's
      }
      std::optional<CpuProfileScope> timed;
      if (profiling_first_runs())
        timed.emplace("cuda first run: library calls made ahead (" + std::to_string(warm_calls) + ", waited for)");
      warm->wait();
    }
  }
  // Traced for the capture that may follow (now, or at the next run of these types).
  if (try_capture && !all_lent && g.blocks.size() == 1) {
    r.trace = std::make_shared<cuda_run::AllocTrace>();
    r.trace->input_free.assign(inputs.size(), INT64_MAX);
  }
  // Donated inputs read in place: once the run lets go of one (its last reader queued), its
  // bytes serve the run's next buffers, and the trace notes when (for the capture's plan).
  // Not one that shares bytes with another input.
  for (size_t i = 0; i < inputs.size() && inputs.borrow; ++i) {
    DevTensor& slot = r.slots[static_cast<size_t>(exe.module.feeds[i])];
    if (!inputs.is_donated(i) || !slot.buf || slot.nbytes() == 0) continue;
    std::byte* lo = slot.buf.get();
    const size_t n = slot.nbytes();
    bool shared = false;
    for (size_t j = 0; j < inputs.size(); ++j)
      if (j != i && inputs.device[j].buf && shares_bytes(lo, n, inputs.device[j].buf.get(), inputs.device[j].nbytes()))
        shared = true;
    if (shared) continue;
    if (!r.donated) r.donated = std::make_shared<cuda_run::DonatedPieces>();
    slot.buf = DeviceBuffer(lo, [t = r.trace, d = r.donated, i, n](std::byte* p) {
      if (t) t->input_released(i);
      d->give(p, n);
    });
  }
  // Attention at a shape whose cuDNN plan is still being built runs tgraph's own kernel
  // meanwhile (InterimKernels): such a run is neither captured nor counted warm.
  bool interim = false;
  {
    InterimKernels stand_ins;
    r.block(0);
    interim = stand_ins.used();
    st.note_building(stand_ins.take());
  }
  try {
    st.asking = provisional->ask_later(r.ctx.index());
  } catch (const std::exception&) {  // no thread to ask on: the next run asks at its turn
    st.asking.reset();
  }
  provisional.reset();  // the capture below (if any) must never take a provisional choice
  r.donated.reset();  // what follows (the outputs' copies) the caller keeps: pool memory
  if (r.trace) {
    r.trace->close();
    st.trace = r.trace;
    st.trace_types = in_types;
  }
  const bool synced = r.host_synced;
  std::vector<DevTensor> targets;
  for (int32_t v : exe.module.targets) targets.push_back(r.in(v));
  take(r, targets, nullptr);
  if (try_capture && synced) st.capture_error = "the run copied data to the host (an op without a GPU kernel)";
  if (std::string e = st.index_errors.take(g, r.stream); !e.empty()) throw Error(e);  // before publishing
  if (!r.pending.empty()) TG_CUDA(cudaStreamSynchronize(r.stream));
  if (collectives) check_device_collectives(exe.device.index, "run");  // an aborted step publishes nothing
  if (!r.pending.empty()) publish(exe, st, r.pending);  // the new values stay on the device until read
  if (!synced && !interim && !st.is_warm(in_types)) st.warm.push_back(in_types);
  // Not while library questions are being asked (ProvisionalChoices): the next run waits for
  // their answers and captures with them. Nor after stand-ins: a later run finds the plans.
  if (try_capture && !synced && !all_lent && !inputs.defer_capture && !st.library_calls_pending() && !interim) {
    // This run's values go first (the variables' old values it kept for a failed run, its new
    // ones, now published, and whatever its slots still hold): the capture's memory would
    // otherwise be allocated beside them.
    r.slots.clear();
    r.snapshot.clear();
    r.pending.clear();
    r.relu_masks.clear();
    targets.clear();  // handed over or copied already
    capture(exe, st, inputs);
  }
}

}  // namespace

CudaState::~CudaState() {
  for (auto& work : building) work->settle();
}

std::vector<TensorData> ExecutableImpl::run_cuda(const std::vector<TensorData>& inputs) const {
  check_inputs(inputs);
  RunInputs io;
  io.host = &inputs;
  std::vector<TensorData> out;
  run_common(*this, io, [&](Run& r, const std::vector<DevTensor>& targets, const std::shared_ptr<Captured>&) {
    for (const DevTensor& t : targets) out.push_back(r.fetch(t));
  });
  return out;
}

namespace {

// An event recorded on `on` now, for another stream to wait on (destroyed at once: CUDA keeps
// it until the waits are done).
void order_after(cudaStream_t waiter, cudaStream_t on) {
  cudaEvent_t e;
  TG_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t rec = cudaEventRecord(e, on);
  cudaError_t wait = rec == cudaSuccess ? cudaStreamWaitEvent(waiter, e, 0) : rec;
  cudaEventDestroy(e);
  TG_CUDA(wait);
}

}  // namespace

std::vector<DeviceTensor> run_cuda_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs,
                                          std::optional<void*> caller, const std::vector<size_t>& donated) {
  std::vector<TensorType> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) throw Error("[run] input " + std::to_string(i) + " is an empty DeviceTensor");
    types.push_back(inputs[i].type());
  }
  exe.check_input_types(types);
  bool fresh = false;
  if (auto s = exe.specialized_for(types, &fresh)) {  // specialize.cpp
    std::vector<DeviceTensor> out = run_cuda_device(*s, inputs, caller, donated);
    if (fresh) exe.prepare_sizes_near(types);
    return out;
  }
  RunInputs io;
  io.donated.assign(inputs.size(), false);
  for (size_t i : donated)
    if (i < inputs.size()) io.donated[i] = true;  // checked by Executable::run_device
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Tensors elsewhere (host memory, another GPU) are copied to this device first.
    io.device.push_back(adopt(inputs[i].device() == exe.device ? inputs[i]
                                                                 : DeviceTensor::from_host(inputs[i].to_host(), exe.device)));
    if (caller) io.lent.push_back(find_lent(io.device.back().buf.get(), io.device.back().type));
  }
  // Lending needs the graph's memory to change only when it replays: not so with variables
  // (their device copies are shared with other runs). Likewise for reading the caller's
  // memory in place (a variable assigned from a feed must not alias it).
  const bool may_lend = caller.has_value() && exe.variables.empty();
  const bool no_borrow = env_flag("TGRAPH_NO_BORROW");  // to compare, or to rule it out
  io.borrow = may_lend && !no_borrow;
  io.defer_capture = caller.has_value();
  // A stream-ordered run: the runs' stream first waits for what the caller queued (the
  // inputs' producers, and readers of pool memory the caller has since let go).
  cudaStream_t theirs = caller ? static_cast<cudaStream_t>(*caller) : nullptr;
  if (caller) {
    TG_CUDA(cudaSetDevice(exe.device.index));
    order_after(DeviceContext::get(exe.device.index).stream(), theirs);
  }
  std::vector<DeviceTensor> out;
  run_common(exe, io, [&](Run& r, const std::vector<DevTensor>& targets, const std::shared_ptr<Captured>& from) {
    // A target that is an input read in place is the caller's (or another graph's) memory:
    // copied, never lent as this graph's.
    auto lendable = [&](const DevTensor& t) {
      return may_lend && from && t.nbytes() >= kLendMinBytes &&
             std::find(from->bound.begin(), from->bound.end(), t.buf.get()) == from->bound.end();
    };
    // An uncaptured run's outputs in pool memory it allocated itself are handed over as they
    // are (no copy: the run lets go of them now), each buffer once; the rest are copied below.
    std::vector<bool> handed(targets.size(), false);
    if (!from && may_lend) {
      std::unordered_set<const void*> seen;
      for (size_t i = 0; i < targets.size(); ++i)
        handed[i] = targets[i].nbytes() >= kLendMinBytes && r.is_fresh(targets[i]) &&
                    seen.insert(targets[i].buf.get()).second;
    }
    // A replay's outputs are lent as they are, each buffer once: two targets the graph made one
    // value (a clone folded away) are two tensors to the caller, and a donated one among them
    // must not be the other's memory.
    std::vector<bool> lends(targets.size(), false);
    std::vector<const void*> lent;
    {
      std::unordered_set<const void*> seen;
      for (size_t i = 0; i < targets.size(); ++i)
        if (lendable(targets[i]) && seen.insert(targets[i].buf.get()).second) {
          lends[i] = true;
          lent.push_back(targets[i].buf.get());
        }
    }
    std::shared_ptr<void> lease = lent.empty() ? nullptr : lend(from, lent);
    // The outputs that are copied share one allocation and one copy kernel (launch_copy_many):
    // a training step's hundreds of small gradients and statistics had been an allocation and
    // a cudaMemcpyAsync each (842 copies a ResNet-50 step through tgraph_train).
    std::vector<size_t> offset(targets.size(), 0);
    std::vector<const void*> srcs;
    std::vector<size_t> offs, sizes;
    size_t total = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
      if (lends[i] || handed[i]) continue;
      offset[i] = total;
      total += (targets[i].nbytes() + 255) / 256 * 256;
      if (targets[i].nbytes()) {
        srcs.push_back(targets[i].buf.get());
        offs.push_back(offset[i]);
        sizes.push_back(targets[i].nbytes());
      }
    }
    DeviceBuffer pack;
    if (srcs.size() >= 2) {
      pack = r.buffer(total);
      TG_CUDA(launch_copy_many(pack.get(), srcs.data(), offs.data(), sizes.data(), static_cast<int>(srcs.size()), r.stream));
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      const DevTensor& t = targets[i];
      auto s = std::make_shared<DeviceTensor::Storage>();
      s->type = t.type;
      s->device = exe.device;
      if (lends[i]) {
        s->data = t.buf.get();
        s->owner = std::shared_ptr<void>(lease, t.buf.get());
      } else if (handed[i]) {
        s->data = t.buf.get();
        s->owner = t.buf;
      } else if (pack) {
        DeviceBuffer part(pack, pack.get() + offset[i]);  // owns the whole pack
        s->data = part.get();
        s->owner = part;
      } else {
        DevTensor c = r.clone(t);
        s->data = c.buf.get();
        s->owner = c.buf;
      }
      out.emplace_back(std::move(s));
    }
    if (caller)
      order_after(theirs, r.stream);  // the caller's later work sees the outputs
    else
      TG_CUDA(cudaStreamSynchronize(r.stream));  // the outputs are complete when run() returns
  });
  return out;
}

std::shared_ptr<void> make_cuda_state() { return std::make_shared<CudaState>(); }

void cuda_prefetch_kernels(const ExecutableImpl& exe) {
  if (!exe.backend_state || env_flag("TGRAPH_NO_KERNEL_PREFETCH")) return;
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  st.know_device(exe.device.index);
  const GraphImpl& g = exe.module.graph;
  Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  r.prefetch_kernels(0);
}

void cuda_run::settle_library_calls(CudaState& st, bool first_run) {
  const bool keep_loading = first_run && matmul_stand_in_enabled();
  if (!st.asking && (!st.loading || keep_loading)) return;
  std::optional<CpuProfileScope> timed;
  if (profiling_first_runs()) timed.emplace("cuda run: library calls begun earlier (a load's, a first run's), waited for");
  st.asking.reset();  // (a LibraryWarmup's destruction waits for its calls)
  if (!keep_loading) st.loading.reset();
}

void cuda_begin_library_calls(const ExecutableImpl& exe, std::vector<WarmCall> calls) {
  if (calls.empty() || !exe.backend_state) return;
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.loading) return;  // (never at a load: its state is fresh)
  library_warmup_wait_at_exit();  // the program may end before the calls do
  try {
    st.loading = std::make_unique<LibraryWarmup>(std::move(calls), exe.device.index);
  } catch (const std::exception&) {  // out of memory: the first run makes them at their turn
  }
}

}  // namespace tg::detail
