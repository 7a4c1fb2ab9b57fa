#pragma once
// What the CUDA executor's two halves share (private to src/backends/cuda): the per-executable
// state (fusion plans, compiled kernels, cached constants and variables, the captured graph)
// and Run, one pass over a graph on the device. Run's small buffer helpers live here; its
// per-op dispatch is in cuda_run_ops.cpp, its control flow (host-driven and captured as
// conditional nodes) in cuda_run_control.cpp, and the entry points that drive it (upload,
// capture, replay, publish) in cuda_executor.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/control_kernels.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/library_warmup.h"
#include "backends/cuda/cuda_stencil.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/matmul_epilogue.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/pinned_staging.h"
#include "backends/cuda/reduce_stitch_kernel.h"
#include "passes/fusion.h"
#include "runtime/executable_impl.h"
#include "runtime/lifetime_plan.h"

// A named namespace (not an anonymous one) so the files share these types; nested so that the
// short names (Run, DevTensor) cannot collide with other types of tg::detail.
namespace tg::detail::cuda_run {

struct DevTensor {
  TensorType type;  // concrete
  DeviceBuffer buf;
  bool empty() const { return !buf && type.shape.num_elements() != 0; }
  size_t nbytes() const { return static_cast<size_t>(type.shape.num_elements()) * dtype_size(type.dtype); }
};

struct CachedVar {
  uint64_t version = ~0ull;
  DevTensor value;
};

struct GroupInfo {
  int supported = -1;  // elementwise_supported, computed once
  bool inferred = false;
  std::vector<Shape> input_shapes;
  Shape shape;
};

// A captured CUDA graph of a whole run, replayed while inputs keep their shapes and no
// variable changed.
struct Captured {
  explicit Captured(DeviceContext& ctx) : var_memory(ctx), memory(ctx) {}
  GraphMemory var_memory;  // the variables' copies (st.vars holds them after the capture)
  GraphMemory memory;      // every other buffer the graph holds (members outlive `exec`)
  cudaGraphExec_t exec = nullptr;
  std::vector<TensorType> input_types;
  std::vector<DevTensor> inputs;     // fixed buffers the graph reads
  std::vector<DevTensor> targets;    // fixed buffers the graph writes
  DeviceBuffer loop_error;            // set by a for_loop whose step is not positive (null: none can be)
  std::map<std::string, uint64_t> var_versions;
  mutable uint64_t var_generation = ~uint64_t{0};  // the store's generation var_versions was last found equal at
  std::map<std::string, DevTensor> assigned;  // variables the graph writes, and their buffers
  // Outputs of the last replay handed to a stream-ordered caller without a copy
  // (cuda_executor.cpp, "lent outputs"): alive while the caller holds any, and then the graph
  // must not replay (it would overwrite them).
  std::weak_ptr<void> lent;
  // Per input: the buffer the graph reads in place (another graph's lent output), or null for
  // an input copied into `inputs` at each replay.
  std::vector<const void*> bound;
  // Inputs whose bytes the graph's own buffers reuse once read (donated by the caller): every
  // replay needs them donated again.
  std::vector<size_t> reuses;
  bool busy() const { return !lent.expired(); }
  ~Captured() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

inline constexpr int kMaxBorrowMisses = 4;
inline constexpr size_t kMaxParkedSizes = 8;  // captured sizes kept beside the current one

// The allocations of an uncaptured run's top-level block, in order, with when each was let go
// (a clock counting takes and releases; alive past the block: never). A capture of the same
// inputs allocates in the same order, so GraphMemory::plan lays its buffers out from this.
struct AllocTrace {
  std::mutex mu;
  std::vector<Lifetime> blocks;
  int64_t clock = 0;
  bool open = true;
  size_t take(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    blocks.push_back({static_cast<int64_t>(n), clock++, INT64_MAX});
    return blocks.size() - 1;
  }
  void release(size_t k) {
    std::lock_guard<std::mutex> lock(mu);
    if (open) blocks[k].end = clock++;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mu);
    open = false;
  }
  // Per input the caller donated: when the run let go of its value (INT64_MAX: never, or not
  // donated), for a capture that puts buffers in its bytes from then on.
  std::vector<int64_t> input_free;
  void input_released(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (open && i < input_free.size()) input_free[i] = clock++;
  }
};

// An uncaptured run's buffers in donated inputs' bytes (the caller gave them up), each input's
// from the moment the run lets go of it: the smallest piece that fits, 256-byte aligned. Not the
// pool's memory: an output left there is copied out (Run::is_fresh is false for it), so none
// of the run's results stays in the caller's bytes.
struct DonatedPieces {
  static constexpr size_t kAlign = GraphMemory::kAlign;
  std::mutex mu;
  std::map<std::byte*, size_t> free;  // address -> bytes
  void give(std::byte* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    auto next = free.find(p + n);
    if (next != free.end()) {
      n += next->second;
      free.erase(next);
    }
    auto it = free.lower_bound(p);
    if (it != free.begin() && std::prev(it)->first + std::prev(it)->second == p) {
      std::prev(it)->second += n;
      return;
    }
    free.emplace(p, n);
  }
  std::byte* take(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    auto best = free.end();
    std::byte* at = nullptr;
    for (auto it = free.begin(); it != free.end(); ++it) {
      const auto a = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(it->first) + kAlign - 1) / kAlign * kAlign);
      if (a + n <= it->first + it->second && (best == free.end() || it->second < best->second)) {
        best = it;
        at = a;
      }
    }
    if (best == free.end()) return nullptr;
    const auto [p, size] = *best;
    free.erase(best);
    if (at > p) free.emplace(p, static_cast<size_t>(at - p));
    if (at + n < p + size) free.emplace(at + n, static_cast<size_t>(p + size - (at + n)));
    return at;
  }
};

// The stream an executable's collectives run on beside its runs' stream (cuda_collective.cpp),
// the event that forks it from the run's stream and one per collective of a run that joins it
// back. Per executable: its runs are serialised, so no other run's capture meets this stream.
struct CollectiveStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
  std::vector<cudaEvent_t> done;
  CollectiveStream() = default;
  CollectiveStream(const CollectiveStream&) = delete;
  CollectiveStream& operator=(const CollectiveStream&) = delete;
  ~CollectiveStream();
};

struct CudaState {
  // Waits for the attention plans its runs' stand-ins were for (`building`), if still being
  // built: a program that compiles, runs once and returns from main would otherwise exit in the
  // middle of a build, while what cuDNN made on the build's thread is torn down.
  ~CudaState();
  std::vector<std::shared_ptr<PendingWork>> building;  // InterimKernels::note, unfinished ones
  void note_building(std::vector<std::shared_ptr<PendingWork>> works) {
    building.erase(std::remove_if(building.begin(), building.end(), [](const auto& w) { return w->finished(); }),
                   building.end());
    for (auto& w : works)
      if (std::find(building.begin(), building.end(), w) == building.end()) building.push_back(std::move(w));
  }
  std::mutex mu;  // runs of one executable are serialised on the device's stream
  // Whether the graph has collectives (their steps are watched: watch_device_step), found once.
  int graph_collectives = -1;
  uint64_t comm_generation = 0;  // the job whose communicator its captures call (device_collectives_generation)
  bool has_collectives(const GraphImpl& g) {
    if (graph_collectives < 0) {
      graph_collectives = 0;
      for (const Node& n : g.nodes)
        graph_collectives |= n.kind == OpKind::AllReduce || n.kind == OpKind::AllGather ||
                             n.kind == OpKind::ReduceScatter || n.kind == OpKind::Broadcast;
    }
    return graph_collectives > 0;
  }
  std::map<int32_t, FusionPlan> plans;
  std::map<int32_t, std::vector<EpilogueMatch>> epilogues;  // per plan step (matmul_epilogue.h)
  // Per plan step of the top-level block: the values no later step reads (Run::releases).
  std::vector<std::vector<int32_t>> dead_after;
  bool dead_planned = false;
  std::map<int32_t, FusionGroup> singles;
  // Prepared stitched reductions (nothing: the step runs piece by piece).
  std::map<const ReduceStitch*, std::optional<ReduceStitchLaunch>> reduce_stitches;
  std::map<const FusionGroup*, GroupInfo> groups;
  std::shared_ptr<Captured> captured;
  std::shared_ptr<Captured> spare;  // a second instance, for callers that keep outputs across runs
  // A graph with dynamic dims run at several sizes: the instances captured at the other input
  // types wait here, most recently used first, kMaxParkedSizes at most; a run at one of those
  // types takes its pair back instead of running op by op and capturing again.
  struct Parked {
    std::vector<TensorType> types;
    std::shared_ptr<Captured> captured, spare;
  };
  std::list<Parked> parked;
  // A capture put a buffer that outlives the run (a target) in donated bytes, having allocated
  // otherwise than its recording run: later captures use no donated bytes.
  bool no_donation = false;
  int bind_misses = 0;  // replays lost because an input read in place moved (binding stops at 3)
  // Per input: the caller's memory came at another address than the capture read in place
  // (never read in place again); borrow_misses counts such recaptures (kMaxBorrowMisses).
  std::vector<bool> moved;
  int borrow_misses = 0;
  bool prefetched = false;  // the first run's kernels were announced (Run::prefetch_kernels)
  // Library calls under way on warm-up threads for the next run, which waits for them first:
  // the questions a first run put off (ProvisionalChoices: what the next run captures uses
  // their answers, and the first launches of the matmuls tgraph's kernel stood in for).
  std::unique_ptr<LibraryWarmup> asking;
  // Saved matmuls' first launches (their kernels loading) begun by a load or a first run, which
  // that first run does not wait for where its matmuls may stand in (matmul_stand_in_enabled):
  // the run after it does.
  std::unique_ptr<LibraryWarmup> loading;
  bool library_calls_pending() const { return asking || loading; }
  // An op-by-op run without host round trips has compiled every kernel and made every library
  // plan: a run that finds no instance to replay captures one and replays it at once, instead of
  // another op-by-op run whose memory would sit beside the new graph's (cuda_executor.cpp).
  std::vector<std::vector<TensorType>> warm;  // per input types (one entry for a static graph)
  bool is_warm(const std::vector<TensorType>& t) const { return std::find(warm.begin(), warm.end(), t) != warm.end(); }
  bool capture_failed = false;
  std::string capture_error;  // why capture was given up (for tests and TGRAPH_DUMP)
  int captures = 0, replays = 0, uncaptured = 0;
  CudaGraphStats body_stats;  // the body_* counts of the last capture (cuda_graph_stats)
  std::set<const Step*> profiled;  // steps run once under TGRAPH_PROFILE (cuda_run_ops.cpp)
  std::map<std::pair<const void*, std::string>, CompiledKernel> kernels;  // (group, kernel key above) -> kernel
  std::map<const StencilStitch*, StencilStepCache> stencils;       // prepared stencil launches per step
  std::map<int32_t, DevTensor> constants;  // in own_memory()
  std::map<std::string, CachedVar> vars;
  uint64_t vars_generation = ~uint64_t{0};  // the store's generation at which every entry of vars was current
  // The last traced uncaptured run's allocations, and its input types (capture plans from it).
  std::shared_ptr<AllocTrace> trace;
  std::vector<TensorType> trace_types;
  int sm_count = 0;
  int sm_major = 0;  // compute capability (set with sm_count)
  // Sets sm_count and sm_major for `device` once (reductions' sources depend on them).
  void know_device(int device) {
    if (sm_count != 0) return;
    TG_CUDA(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    TG_CUDA(cudaDeviceGetAttribute(&sm_major, cudaDevAttrComputeCapabilityMajor, device));
  }
  IndexErrors index_errors;  // out-of-range indices clamped on the device (cuda_indexing.cpp)
  CollectiveStream collectives;  // NCCL's work beside the runs (cuda_collective.cpp)
  // The executable's constants and index-error record: memory that captured graphs read, so
  // GraphMemory rather than the pool, as the graphs' own (cuda_control_flow.h).
  std::unique_ptr<GraphMemory> memory;
  GraphMemory& own_memory(DeviceContext& ctx) {
    if (!memory) memory = std::make_unique<GraphMemory>(ctx);
    return *memory;
  }
};

// A group's generated kernel is cached under (group, its Indexing | these flags, then the
// StridePattern key of a strided kernel).
enum GroupKernel : int { kSetsCondition = 8 };

// While a loop body is being captured: the results its elementwise kernels write straight into
// the loop's state buffers, and the predicate whose kernel sets the loop's condition
// (passes/loop_donation.h says when that is safe).
struct InPlace {
  struct Target {
    DevTensor state;
    std::set<int32_t> old;  // values holding the state's contents from the start of the trip
  };
  std::map<int32_t, Target> into;
  int32_t predicate = -1;
  cudaGraphConditionalHandle handle = 0;
  bool predicate_set = false;  // the predicate's kernel set the condition
};

struct Run {
  const ExecutableImpl& exe;
  CudaState& st;
  const GraphImpl& g;
  DeviceContext& ctx;
  cudaStream_t stream;
  std::vector<DevTensor> slots;
  std::map<std::string, DevTensor> snapshot, pending;
  // Bit masks of relu results, by value, written by a forward matmul's relu_aux_bias epilogue
  // for the backward's drelu (matmul_epilogue.h): not graph values, so kept beside the slots.
  std::unordered_map<int32_t, DevTensor> relu_masks;

  // Capture support: while a run is captured, every allocation comes from the graph's own
  // memory (`fixed`), so the graph (conditional bodies included) holds only fixed addresses and
  // no allocation nodes. `depth` counts the conditional bodies being captured around the code.
  GraphMemory* fixed = nullptr;
  DeviceBuffer* loop_error = nullptr;  // the capture's for_loop step flag, made on first need
  int depth = 0;
  bool host_synced = false;  // data went to the host (not for control flow): the run cannot be captured
  std::shared_ptr<AllocTrace> trace;  // records this uncaptured run's allocations when set
  std::shared_ptr<DonatedPieces> donated;  // an uncaptured run's donated inputs it has let go
  InPlace* in_place = nullptr;  // the loop body being captured, if any
  int32_t block_now = -1;        // the block being walked (collectives overlap only in block 0)

  // Collectives issued on CudaState::collectives' stream whose result no step has waited for:
  // the event their work ends with, and their operand and result, held until then (a result
  // no step reads would otherwise go back to the pool while NCCL writes it).
  struct PendingCollective {
    int32_t output;
    cudaEvent_t done;
    DevTensor input, result;
  };
  std::vector<PendingCollective> pending_collectives;
  size_t collectives_issued = 0;  // this run's, numbering CollectiveStream::done

  // Pool buffers this uncaptured run allocated, by address: the run's own memory, which an
  // output may be handed over in without a copy (run_cuda_device) — unlike inputs read in
  // place, variables and constants, which the executable or the caller keeps using.
  std::unordered_map<const void*, std::weak_ptr<std::byte>> fresh;
  // True when t is in such a buffer, still the one allocated (not a later one at its address).
  bool is_fresh(const DevTensor& t) const {
    auto it = fresh.find(t.buf.get());
    return it != fresh.end() && !it->second.expired() && !it->second.owner_before(t.buf) &&
           !t.buf.owner_before(it->second);
  }

  bool capturing() const { return fixed != nullptr; }
  // b as it is, or (while tracing) the same bytes under a deleter that notes when they are let go.
  DeviceBuffer traced(DeviceBuffer b, size_t n) {
    if (!trace) return b;
    const size_t k = trace->take(n);
    return DeviceBuffer(b.get(), [b, t = trace, k](std::byte*) mutable {
      t->release(k);
      b.reset();
    });
  }
  DeviceBuffer buffer(size_t n) {
    if (capturing()) return fixed->take(n);
    if (donated) {
      const size_t m = GraphMemory::rounded(n);
      if (std::byte* p = donated->take(m)) return traced(DeviceBuffer(p, [d = donated, m](std::byte* q) { d->give(q, m); }), n);
    }
    DeviceBuffer b = traced(ctx.allocate(n, stream), n);
    fresh[b.get()] = b;
    return b;
  }
  DevTensor alloc(TensorType t) {
    size_t n = static_cast<size_t>(t.shape.num_elements()) * dtype_size(t.dtype);
    return DevTensor{std::move(t), buffer(n)};
  }
  // h in buffers of `mem`, copied on a side stream and waited for (so around any capture,
  // which must not record it).
  DevTensor upload_to(GraphMemory& mem, const TensorData& h) {
    DevTensor d{h.type(), mem.take(h.nbytes())};
    graph_upload(ctx, d.buf.get(), h.data(), h.nbytes());
    return d;
  }
  // Uploads (inputs, variables) own their memory: from the pool on a plain run, the graph's
  // memory while capturing.
  DevTensor upload(const TensorData& h) {
    if (capturing()) return upload_to(*fixed, h);
    DevTensor d{h.type(), traced(ctx.allocate(h.nbytes(), stream), h.nbytes())};
    copy_to_device(d.buf.get(), h.data(), h.nbytes(), stream);
    return d;
  }
  // Constants live as long as the executable, in its own memory (CudaState::own_memory).
  DevTensor upload_constant(const TensorData& h) { return upload_to(st.own_memory(ctx), h); }
  TensorData download(const DevTensor& d) {
    host_synced = true;
    return fetch(d);
  }
  // A copy to the host that control flow makes (captured runs replace it by conditional nodes).
  TensorData fetch(const DevTensor& d) {
    TensorData h(d.type.shape, d.type.dtype);
    copy_to_host(h.data(), d.buf.get(), d.nbytes(), stream);
    TG_CUDA(cudaStreamSynchronize(stream));
    return h;
  }
  // A fresh device copy (outputs handed to the caller never alias buffers the executable
  // reuses: captured targets, variables, constants).
  DevTensor clone(const DevTensor& d) {
    DevTensor c{d.type, buffer(d.nbytes())};
    if (d.nbytes())
      TG_CUDA(cudaMemcpyAsync(c.buf.get(), d.buf.get(), d.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return c;
  }
  const DevTensor& in(int32_t v) const { return slots[static_cast<size_t>(v)]; }
  std::vector<TensorType> in_types(const Node& n) const {
    std::vector<TensorType> t;
    for (int32_t v : n.inputs) t.push_back(in(v).type);
    return t;
  }
  // ---- per-op dispatch (cuda_run_ops.cpp) ----
  bool nothing_to_compute(const Node& n);
  bool any_empty(const std::vector<int32_t>& values) const;
  const FusionPlan& plan(int32_t b);
  const std::vector<EpilogueMatch>& epilogues(int32_t b);
  /// Per step of the top-level block's plan, the values whose last reader it is (targets
  /// excepted): the run drops them there, so their memory serves later steps.
  const std::vector<std::vector<int32_t>>& releases();
  void block(int32_t b);
  DevTensor group_output(const FusionGroup& grp, int32_t v, const Shape& shape, bool& sets_condition);
  /// Before the first run of block b: starts compiling, in parallel, the generated kernels its
  /// fused groups and stitched reductions will launch (nvrtc_prefetch), from the graph's static
  /// types, so the run itself waits only for the slowest of them.
  void prefetch_kernels(int32_t b);
  /// Before the first run of block b: its cold cuDNN calls (device_op_warm_probe) of static
  /// types, each distinct one once on scratch memory, as calls for a LibraryWarmup
  /// (library_warmup.h). They refer to the graph: made before the run goes on.
  std::vector<WarmCall> library_warm_calls(int32_t b);
  // Makes the device copies of block b's constants (Run::constant) ahead of their steps.
  void upload_constants(int32_t b);
  std::vector<const void*> step_operands(const std::vector<int32_t>& values, std::vector<TensorType>& types) const;
  std::vector<void*> step_results(const std::vector<int32_t>& values, const std::vector<TensorType>& types);
  void pieces(const std::vector<Step>& steps);
  void stitched(const StencilStitch& sp);
  void reduce_stitched(const ReduceStitch& rs);
  const Shape& group_shape(const FusionGroup& grp);
  void group(const FusionGroup& grp);
  void node(const Node& n);
  bool device_op(const Node& n, DeviceOp op);
  DevTensor expand_batch(const DevTensor& x, const Shape& out);
  bool matmul(const Node& n, const EpilogueMatch* ep = nullptr);
  void fallback(const Node& n);
  const std::string& var_name(int32_t v) const;

  // ---- collectives (cuda_collective.cpp) ----
  /// all_reduce / all_gather / reduce_scatter / broadcast on the device (NCCL, or a copy in a
  /// world of one); false (nothing done) when they must run on the host.
  bool collective(const Node& n);
  /// The run's stream waits for the pending collectives whose results are among `reads`.
  void join_collectives(const std::vector<int32_t>& reads);
  /// The run's stream waits for every pending collective.
  void join_all_collectives();

  // ---- control flow (cuda_run_control.cpp) ----
  // The hooks of the shared walk (runtime/graph_walk.h), with truth, bind, block, results
  // and set_outputs: a fed input, a constant (uploaded once into the executable's memory), a
  // scalar read on the host, a loop index on the device.
  // Fed: a tensor of no elements may come without memory (torch's empty CUDA tensors do).
  bool has(int32_t v) const { return !slots[static_cast<size_t>(v)].empty(); }
  DevTensor constant(const Node& n);
  double host_value(const DevTensor& t) { return fetch(t).at(0); }
  DevTensor index_value(int64_t i) { return upload(TensorData::scalar(static_cast<double>(i), DType::i32)); }
  bool truth(const DevTensor& t, const char* op);
  void bind(int32_t b, const std::vector<DevTensor>& args);
  std::vector<DevTensor> results(int32_t b);
  void set_outputs(const Node& n, const std::vector<DevTensor>& r);
  void control(const Node& n);

  // Captured as conditional nodes: the state buffers that carry values across region
  // boundaries, and the copies into them.
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  struct VarState {
    std::string name;
    DevTensor buf;
  };
  static DeviceScalar scalar_of(const DevTensor& t, const char* op, const char* what);
  static ControlCond set_truth(const DevTensor& pred, cudaGraphConditionalHandle h, const char* op);
  static std::vector<Copy> carry(const std::vector<DevTensor>& state, const std::vector<DevTensor>& values,
                                 const char* op);
  void control_kernel(std::vector<Copy> copies, ControlCond cond);
  void launch_copies(const std::vector<Copy>& copies, const ControlCond& cond);
  template <class Fn>
  void body(cudaGraph_t graph, Fn&& fn);
  std::vector<std::string> assigned_in(const Node& n) const;
  std::vector<VarState> var_states(const Node& n, std::vector<Copy>& init);
  void reset_vars(const std::vector<VarState>& vs);
  void save_vars(const std::vector<VarState>& vs, std::vector<Copy>& out);
  InPlace in_place_for(const std::vector<int32_t>& blocks, size_t first_param, size_t first_result,
                       const std::vector<DevTensor>& state, bool assigns, cudaGraphConditionalHandle h);
  void captured_if(const Node& n);
  void captured_for(const Node& n);
  int* step_flag(int32_t step);
  void captured_while(const Node& n);
};

/// Waits (under st.mu, before a run) for the library calls earlier runs or a load began, timed
/// in first-run profiles; a first run whose matmuls may stand in leaves a load's loading.
void settle_library_calls(CudaState& st, bool first_run);

}  // namespace tg::detail::cuda_run
