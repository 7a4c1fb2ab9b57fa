#pragma once
// A compiled graph: run it many times, from several threads, and save it.
#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tgraph/device.h"
#include "tgraph/device_tensor.h"
#include "tgraph/shape.h"
#include "tgraph/tensor_data.h"

namespace tg {

namespace detail {
struct ExecutableImpl;
}

/// Limits of one run (Executable::run).
struct RunOptions {
  /// Seconds the run may take; 0: no limit. A CPU run past it stops between steps (loop
  /// iterations included) with tg::Error "[run] timed out"; its assignments are not applied.
  double timeout_s = 0;
  /// When *cancel becomes true (another thread), the run stops the same way ("cancelled").
  const std::atomic<bool>* cancel = nullptr;
};

/// How an executable's runs went on a device that captures them (CUDA graphs): the figures
/// to look at when runs are slower than expected. All zero on the CPU.
struct RunStats {
  int captures = 0;    // CUDA graphs captured (a second instance, or a recapture, counts again)
  int replays = 0;     // runs that replayed a captured graph
  int uncaptured = 0;  // runs that went op by op (the first of each signature, and fallbacks)
  int instances = 0;   // captured graphs held now (two when callers keep outputs across runs; one or two per
                       // input size a graph with dynamic dims was run at, up to 9 sizes)
  int input_moves = 0; // recaptures because an input read in place came at another address
  std::string capture_error;  // why capture was given up, if it was
  int kernels_compiled = 0;   // generated kernels NVRTC compiled for its runs (0: all came from a
                              // file, the disk cache or this process's earlier compiles)
  int kernels_from_file = 0;  // generated kernels whose cubins came from the file it was loaded from
  size_t graph_bytes = 0;      // device memory its captured graphs hold now (their buffers and variables)
  size_t graph_live_peak = 0;  // the most bytes those graphs' buffers held at once while captured: what
                               // graph_bytes would be with no space lost between buffers
  size_t buffers_in_donated = 0;  // of their buffers, those placed in donated inputs' memory (run_device)
};

/// Stops every run of this process that is in progress, as a cancel would ("interrupted"):
/// async-signal-safe, for a SIGINT handler. Runs started later are not affected.
void interrupt_runs();

/// The result of Graph::compile. Copies share the same compiled program and variables.
class Executable {
 public:
  Executable();
  explicit Executable(std::shared_ptr<detail::ExecutableImpl> impl);
  ~Executable();
  /// False for a default-constructed executable.
  bool valid() const { return impl_ != nullptr; }

  /// Runs synchronously; inputs in the order of the feeds given to compile.
  std::vector<TensorData> run(const std::vector<TensorData>& inputs) const;
  /// The same within `options`' limits: the CPU stops between steps; a CUDA run (one captured
  /// graph) is checked before it starts.
  std::vector<TensorData> run(const std::vector<TensorData>& inputs, const RunOptions& options) const;
  /// Runs with inputs and outputs in device memory (DeviceTensor): on a CUDA executable the
  /// inputs are read where they are (CUDA tensors on its device; others are copied there) and
  /// the outputs stay on the device, so chained runs never round-trip through the host. On a
  /// CPU executable every tensor is a host tensor.
  std::vector<DeviceTensor> run_device(const std::vector<DeviceTensor>& inputs) const;
  /// The same in the order of the caller's CUDA stream instead of waiting, as a CUDA library
  /// call is: the run starts after the work already queued on `cuda_stream` (a cudaStream_t;
  /// nullptr is the legacy default stream) and that stream's later work waits for the run, so
  /// this returns once the work is queued. Read the outputs on that stream (or after
  /// synchronising it); the inputs must stay unchanged until the stream reaches the point of
  /// this call, as for any kernel queued there. On a CPU executable: run_device(inputs).
  std::vector<DeviceTensor> run_device(const std::vector<DeviceTensor>& inputs, void* cuda_stream) const;
  /// The same with inputs given up: `donated` lists positions of inputs the caller will not
  /// read again (JAX's donate_argnums), whose memory the run may then reuse for its own
  /// buffers once it has read them; their contents are unspecified after the call. On CUDA a
  /// captured run places its working set there (a training backward in the activations it has
  /// finished with), and replays only where the same inputs are donated again; elsewhere it
  /// is a hint.
  std::vector<DeviceTensor> run_device(const std::vector<DeviceTensor>& inputs, void* cuda_stream,
                                       const std::vector<size_t>& donated) const;
  /// Starts a run on a thread of its own and returns at once; the result is the same as
  /// run(inputs). `stream` is reserved (runs of one executable use its device's stream).
  std::future<std::vector<TensorData>> run_async(std::vector<TensorData> inputs,
                                                 void* stream = nullptr) const;
  /// Output types for the given input types (dynamic dims resolved), without running.
  std::vector<TensorType> output_types(const std::vector<TensorType>& input_types) const;
  /// Per output, the permutation that turns the returned tensor into the value compiled for
  /// (value = transpose(output, perm)); empty where the output is that value. Only
  /// CompileOptions::free_output_layouts makes them.
  std::vector<std::vector<int64_t>> output_permutations() const;
  /// Declared types of the feeds and of the targets.
  std::vector<TensorType> input_types() const;
  std::vector<TensorType> declared_output_types() const;
  /// The feeds' names (their placeholders' names; "" for an unnamed one), in feed order.
  std::vector<std::string> input_names() const;

  /// Current value of a variable (a copy).
  TensorData variable(const std::string& name) const;
  /// Overwrites a variable (type must match).
  void set_variable(const std::string& name, const TensorData& value) const;
  /// Names of the variables this executable uses.
  std::vector<std::string> variable_names() const;

  /// Writes the executable (graph, feeds, targets, device, variables' current values) to a
  /// versioned, checksummed file, atomically.
  void save(const std::string& path) const;
  /// Reads a file written by save(); a corrupt, truncated or incompatible file is refused
  /// with a tg::Error.
  static Executable load(const std::string& path);

  /// The optimized graph in text form.
  std::string str() const;
  /// The optimized graph in Graphviz dot form.
  std::string dot() const;
  Device device() const;
  /// Counts of captures, replays and op-by-op runs so far (see RunStats).
  RunStats run_stats() const;
  /// Bytes of the per-run arena (intermediates), as the CPU backend plans it for the declared
  /// shapes (0 on CUDA, whose captured graphs report theirs in RunStats::graph_bytes).
  int64_t planned_arena_bytes() const;
  /// Sum of the sizes of all intermediates (what running without reuse would need; CPU, as above).
  int64_t naive_intermediate_bytes() const;

  detail::ExecutableImpl& impl() const { return *impl_; }
  const std::shared_ptr<detail::ExecutableImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<detail::ExecutableImpl> impl_;
};

}  // namespace tg
