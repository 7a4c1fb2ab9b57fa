#pragma once
// The compiled form of a graph and its CPU executor.
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "passes/module.h"
#include "runtime/device_code.h"
#include "runtime/variable_store.h"
#include "tgraph/device.h"
#include "tgraph/graph.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

struct ExecutableImpl;

/// What an executable with dynamic feed dims keeps to be compiled again for one concrete size
/// (specialize.cpp): its source graph (a copy), feeds, targets, target ops and options.
struct SpecializeSource {
  GraphImpl graph;
  std::vector<int32_t> feeds, targets, ops;  // value / node ids in `graph`
  CompileOptions options;
  // The costly weight folds one compile made (passes/fold_memo.h: FoldKeep), held so each copy
  // finds them: set by the compile that made this source, or by the first copy (under the
  // executable's specialized_mu).
  mutable std::vector<std::shared_ptr<std::byte>> folds;
  std::vector<TensorType> declared;  // the feeds' types, -1 for a dynamic dim
  // Held while a copy compiles (a size's, or one prepared ahead on the background thread:
  // size_classes.h).
  mutable std::mutex compile_mu;
  // The size classes met or prepared (size_classes.h); a lock of its own, so a run never
  // waits for a compile ahead to look.
  mutable std::mutex classes_mu;
  mutable std::vector<uint32_t> classes;
  // Copies compiled ahead, newest first (up to kMaxAhead), taken by the first run at exactly
  // their sizes (a batch of 1 of an image model is one); guarded by classes_mu.
  mutable std::list<std::pair<std::vector<TensorType>, std::shared_ptr<ExecutableImpl>>> ahead;
  /// The copy compiled ahead for exactly these types, taken out (null: none).
  std::shared_ptr<ExecutableImpl> take_ahead(const std::vector<TensorType>& types) const;
};

struct ExecutableImpl {
  Module module;
  Device device;
  Precision precision = Precision::f32;
  std::map<std::string, std::string> switches;  // CompileOptions::switches, seen by every run (SwitchScope)
  std::vector<std::string> feed_names;
  std::vector<TensorType> feed_types;
  std::vector<std::vector<int64_t>> output_perms;  // per target (CompileOptions::free_output_layouts)
  std::shared_ptr<VariableStore> store;
  std::map<std::string, int32_t> variables;  // name -> Variable node id (live ones)
  // The CPU backend's plan (cpu_backend.cpp: prepare): arena of the unfused path and reads.
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;
  std::vector<int64_t> arena_offset;  // per value id: byte offset in the run's arena, or -1
  std::vector<int32_t> uses;          // per value id: reads (node inputs, block results, targets)

  /// Checks inputs against the feeds; throws "[run] ..." naming the feed and both types.
  void check_inputs(const std::vector<TensorData>& inputs) const;
  /// The same check on input types alone.
  void check_input_types(const std::vector<TensorType>& types) const;
  /// Runs on the executable's device.
  std::vector<TensorData> run(const std::vector<TensorData>& inputs) const;
  /// Runs on the CPU; variables change only if the whole run succeeds.
  std::vector<TensorData> run_cpu(const std::vector<TensorData>& inputs) const;
  /// Runs on CUDA (src/backends/cuda/cuda_executor.cpp); same contract as run_cpu.
  std::vector<TensorData> run_cuda(const std::vector<TensorData>& inputs) const;
  /// Backend state made by Backend::prepare (CUDA: fusion plan, kernels, device copies).
  std::shared_ptr<void> backend_state;
  /// The generated kernels its runs used (and, once saved or loaded, their cubins): written
  /// with the executable so a load runs without compiling (device_code.h).
  std::shared_ptr<DeviceCode> device_code = std::make_shared<DeviceCode>();
  /// The CPU executor's fused schedule and its arena plan, made on the first run
  /// (src/backends/cpu/executor.cpp).
  mutable std::shared_ptr<const void> cpu_plan;
  mutable std::once_flag cpu_plan_once;

  /// Set when feed dims are dynamic: each concrete size the executable meets is compiled again
  /// with those sizes (every static-shape pass and plan applies: stitched reductions, layouts,
  /// fused loops), kept up to kMaxSpecialized, least recently used out, and runs in its place.
  std::shared_ptr<const SpecializeSource> specialize;
  mutable std::mutex specialized_mu;
  mutable std::list<std::pair<std::vector<TensorType>, std::shared_ptr<ExecutableImpl>>> specialized;
  /// The executable made for inputs of these types (null: run this one, dynamic). `fresh`, if
  /// given, is set when it was made by this call (its caller then runs it and calls
  /// prepare_sizes_near).
  std::shared_ptr<ExecutableImpl> specialized_for(const std::vector<TensorType>& types, bool* fresh = nullptr) const;
  /// After the first run at a new size: where the backend generates kernels, compiles the
  /// copies of the neighbouring size classes not met yet on the background thread and has the
  /// backend prepare their kernels (size_classes.h). TGRAPH_NO_SIZE_PREFETCH=1: nothing.
  void prepare_sizes_near(const std::vector<TensorType>& types) const;
};

inline constexpr size_t kMaxSpecialized = 8;
inline constexpr size_t kMaxAhead = 4;

/// Compiles the copy of `src` for feeds of these types (null: a size the graph refuses).
std::shared_ptr<ExecutableImpl> compile_copy(const SpecializeSource& src, const std::vector<TensorType>& types);

/// What exe (compiled from `graph` with these feeds, targets, target ops and options) keeps to
/// compile copies per size: null when its feed types are static or TGRAPH_NO_SPECIALIZE is set.
std::shared_ptr<const SpecializeSource> specialize_source(const ExecutableImpl& exe, const GraphImpl& graph,
                                                          std::vector<int32_t> feeds, std::vector<int32_t> targets,
                                                          std::vector<int32_t> ops, const CompileOptions& options);

/// Graph::compile on a GraphImpl (the executable's specialisations compile their source again).
Executable compile_graph(GraphImpl& source, const std::vector<std::pair<Tensor, TensorType>>& feeds,
                         const std::vector<Tensor>& targets, const std::vector<Operation>& target_ops,
                         const CompileOptions& options);

/// Fresh CUDA executor state for an executable (defined in the CUDA backend).
std::shared_ptr<void> make_cuda_state();
/// Starts compiling the generated kernels exe's first run would need (CUDA backend; nothing run).
void cuda_prefetch_kernels(const ExecutableImpl& exe);

/// Whole-run CUDA graph captures and replays of an executable, and why capture was given up.
struct CudaGraphStats {
  int captures = 0, replays = 0, uncaptured = 0, bind_misses = 0, instances = 0;
  std::string error;
  // Of the last capture, inside conditional bodies: control kernels launched, loop results
  // computed straight into their state buffers, loop conditions set by the predicate's kernel.
  int body_control_kernels = 0, body_results_in_place = 0, body_conditions_in_kernels = 0;
  // Stitched reduction steps (passes/reduce_stitch.h) that ran as one kernel (all blocks; a step
  // whose geometry the kernel does not take runs piece by piece and is not counted).
  int stitched_reductions = 0;
  // Device memory of the captured instances held now (variables' copies included), and the most
  // bytes their buffers held at once while each was captured (summed over the instances).
  size_t graph_bytes = 0, graph_live_peak = 0;
  size_t graph_planned = 0;  // buffers the captures laid out by plan (GraphMemory::plan)
  size_t graph_in_donated = 0;  // ... of them in donated inputs' bytes (run_device's `donated`)
};
CudaGraphStats cuda_graph_stats(const ExecutableImpl& exe);

/// Times `iters` runs on CUDA (after `warmup`) with inputs and variables already on the
/// device and outputs left there: milliseconds per run from CUDA events (benchmarks only).
std::vector<double> cuda_time_runs(const ExecutableImpl& exe, const std::vector<TensorData>& inputs, int warmup,
                                   int iters);
/// Runs once (recording and capturing the run), then times `iters` launches of the captured
/// CUDA graph (after `warmup`): milliseconds per launch from CUDA events (benchmarks only).
std::vector<double> cuda_time_replays(const ExecutableImpl& exe, const std::vector<TensorData>& inputs, int warmup,
                                      int iters);

/// The store of a graph's variables, made on first use with their initial values.
std::shared_ptr<VariableStore> variable_store_of(GraphImpl& g);

/// What Graph::compile makes of a graph before any backend sees it, and without a device: the
/// module for the feeds (their compiled types), targets and target ops after the pass pipeline
/// of options.device's kind. Returns CompileOptions::free_output_layouts' permutations; fills
/// the feeds' names and types where asked. Throws tg::Error on a foreign or misdeclared feed.
std::vector<std::vector<int64_t>> prepare_module(Module& m, const GraphImpl& g,
                                                 const std::vector<std::pair<Tensor, TensorType>>& feeds,
                                                 const std::vector<Tensor>& targets,
                                                 const std::vector<Operation>& target_ops, const CompileOptions& options,
                                                 std::vector<std::string>* feed_names = nullptr,
                                                 std::vector<TensorType>* feed_types = nullptr);

}  // namespace tg::detail
