#pragma once
// What a device kind's backend gives the runtime: one interface, one registration per kind
// (runtime/backend.cpp), so compile, load, run and the executable's queries never branch on
// the device kind or on which backends were built. A new backend is a folder under
// src/backends/ with a class implementing this and one line in backend.cpp.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "passes/pipeline.h"
#include "runtime/device_code.h"
#include "tgraph/device.h"
#include "tgraph/device_tensor.h"
#include "tgraph/executable.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

struct ExecutableImpl;

class Backend {
 public:
  virtual ~Backend() = default;
  /// Throws tg::Error, starting with `what` ("[compile]", "[load] <path>"), when `device`
  /// cannot run here with `precision`.
  virtual void check_device(const Device& device, Precision precision, const std::string& what) const = 0;
  /// The pass pipeline's settings for a module this backend will run.
  virtual PipelineOptions pipeline(const CompileOptions& options) const = 0;
  /// Once its module is final (compiled, or read from a file): what the runs need made before
  /// the first (the CPU's buffer arena plan; CUDA's run state, ExecutableImpl::backend_state).
  virtual void prepare(ExecutableImpl& exe) const = 0;
  /// After a load: takes what the file carries for this backend (generated kernels' cubins).
  virtual void loaded(const ExecutableImpl& exe, const std::string& path) const {}
  /// Starts the device and its libraries (CUDA's context, cuDNN's and cuBLASLt's handles) ahead
  /// of use: Executable::load calls it on a thread of its own while it reads the file.
  virtual void warm_up(int index) const {}
  /// Before a save: gives `kernel` its compiled form (a cubin from a cache, or compiled now);
  /// false leaves it out of the file (it failed to compile when run too; a load compiles and
  /// reports it again). Backends without generated kernels keep none.
  virtual bool device_code_ready(DeviceCode::Kernel& kernel) const { return false; }
  /// Whether its runs use kernels generated per size (worth preparing sizes ahead:
  /// prefetch_kernels).
  virtual bool generates_kernels() const { return false; }
  /// Starts making the generated kernels a first run of exe would need, running nothing and
  /// allocating no device memory (a size prepared ahead: size_classes.h).
  virtual void prefetch_kernels(const ExecutableImpl& exe) const {}
  /// Called on the background thread before each job that compiles ahead (CUDA: relaxed
  /// capture mode, so its calls never break a caller's capture on another thread).
  virtual void background_thread() const {}
  /// A run with host inputs and outputs; variables change only when the whole run succeeds.
  virtual std::vector<TensorData> run(const ExecutableImpl& exe, const std::vector<TensorData>& inputs) const = 0;
  /// A run on tensors in device memory, outputs left there; `stream`: a caller's CUDA stream the
  /// run is ordered on (nullptr: the legacy default stream), or none (complete when it returns).
  /// `donated`: positions (checked) of inputs the caller gives up; a backend may reuse their
  /// memory once it has read them, or ignore it.
  virtual std::vector<DeviceTensor> run_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs,
                                               std::optional<void*> stream,
                                               const std::vector<size_t>& donated) const = 0;
  /// Device tensors of this kind (DeviceTensor::allocate, from_host and to_host): memory on
  /// device `device`, a copy there of `host` (complete when it returns), a host copy of `t`.
  virtual DeviceTensor allocate(TensorType type, const Device& device) const = 0;
  virtual DeviceTensor from_host(const TensorData& host, const Device& device) const = 0;
  virtual TensorData to_host(const DeviceTensor& t) const = 0;
  /// Before `t` is handed to another framework (DLPack): with no `stream`, the work this
  /// backend queued that may write it is finished; with one, that stream's later work is
  /// ordered after it (no host wait); nullptr: nothing (the consumer ordered itself). Host
  /// memory needs nothing.
  virtual void before_export(const DeviceTensor& t, std::optional<void*> stream) const {}
  /// Adds what this backend counts to `stats` (captures, graph memory).
  virtual void add_stats(const ExecutableImpl& exe, RunStats& stats) const {}
  /// How many devices of this kind can run here.
  virtual int device_count() const = 0;
  /// A line naming device `index` (model, memory), or "" when it cannot be queried.
  virtual std::string describe(int index) const { return ""; }
  /// (in use, peak) bytes of this backend's memory on device `index`; zeros where it keeps none.
  virtual std::pair<size_t, size_t> memory(int index) const { return {0, 0}; }
  virtual void reset_peak_memory(int index) const {}
};

/// The backend of `kind`; throws tg::Error, starting with `what`, when this build has none.
const Backend& backend_for(Device::Kind kind, const std::string& what = "[run]");
/// The same, or null when this build has none.
const Backend* find_backend(Device::Kind kind);

/// TGRAPH_NO_LAYOUT=1: convolution networks keep their own layout (compile.cpp).
bool layout_pass_disabled();

/// The backends (defined in src/backends/<kind>/); null where the build has none.
const Backend* cpu_backend();
const Backend* cuda_backend();

}  // namespace tg::detail
