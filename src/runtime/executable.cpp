// Executable: the public face of a compiled graph.
#include "tgraph/executable.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "backends/cpu/profile.h"
#include "core/atomic_file.h"
#include "core/read_file.h"
#include "ir/printer.h"
#include "runtime/backend.h"
#include "runtime/serialize.h"
#include "core/env.h"
#include "runtime/executable_impl.h"
#include "runtime/run_limits.h"
#include "tgraph/error.h"

namespace tg::detail {

// Dynamic feed dims run the copy compiled for these sizes (specialize.cpp); every run goes to
// its device's backend (backend.h).
std::vector<TensorData> ExecutableImpl::run(const std::vector<TensorData>& inputs) const {
  if (specialize) {
    check_inputs(inputs);
    std::vector<TensorType> types;
    for (const TensorData& t : inputs) types.push_back(t.type());
    bool fresh = false;
    if (auto s = specialized_for(types, &fresh)) {
      std::vector<TensorData> out = s->run(inputs);
      if (fresh) prepare_sizes_near(types);
      return out;
    }
  }
  return backend_for(device.kind).run(*this, inputs);
}

}  // namespace tg::detail

namespace tg {
using namespace detail;

Executable::Executable() = default;
Executable::Executable(std::shared_ptr<ExecutableImpl> impl) : impl_(std::move(impl)) {}
Executable::~Executable() = default;

namespace {
ExecutableImpl& checked(const std::shared_ptr<ExecutableImpl>& p) {
  if (!p) throw Error("[executable] empty executable (default-constructed)");
  return *p;
}
}  // namespace

std::vector<TensorData> Executable::run(const std::vector<TensorData>& inputs) const {
  const ExecutableImpl& e = checked(impl_);
  const SwitchScope switches(e.switches);
  return e.run(inputs);
}

std::vector<TensorData> Executable::run(const std::vector<TensorData>& inputs, const RunOptions& options) const {
  if (options.timeout_s < 0) throw Error("[run] timeout_s must be >= 0, got " + std::to_string(options.timeout_s));
  detail::RunLimits::Scope scope(options);
  const ExecutableImpl& e = checked(impl_);
  const SwitchScope switches(e.switches);
  return e.run(inputs);
}

void ExecutableImpl::check_input_types(const std::vector<TensorType>& types) const {
  if (types.size() != feed_types.size())
    throw Error("[run] " + std::to_string(types.size()) + " inputs given for " +
                std::to_string(feed_types.size()) + " feeds");
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i].dtype != feed_types[i].dtype || !shape_compatible(feed_types[i].shape, types[i].shape))
      throw Error("[run] feed '" + feed_names[i] + "' (input " + std::to_string(i) + ") expects " +
                  feed_types[i].str() + ", got " + types[i].str());
}

RunStats Executable::run_stats() const {
  RunStats s;
  ExecutableImpl& e = checked(impl_);
  backend_for(e.device.kind).add_stats(e, s);
  // Kernels of its copies per size (dynamic feed dims: the runs happen there) count too.
  auto add = [&s](const ExecutableImpl& x) {
    std::lock_guard<std::mutex> lock(x.device_code->mu);
    s.kernels_compiled += x.device_code->compiled;
    s.kernels_from_file += x.device_code->from_file;
  };
  add(e);
  std::lock_guard<std::mutex> lock(e.specialized_mu);
  for (const auto& [types, copy] : e.specialized)
    if (copy) add(*copy);  // null: a size its compile refused
  return s;
}

std::vector<DeviceTensor> Executable::run_device(const std::vector<DeviceTensor>& inputs, void* cuda_stream) const {
  return run_device(inputs, cuda_stream, {});
}

std::vector<DeviceTensor> Executable::run_device(const std::vector<DeviceTensor>& inputs, void* cuda_stream,
                                                 const std::vector<size_t>& donated) const {
  ExecutableImpl& e = checked(impl_);
  const SwitchScope switches(e.switches);
  for (size_t i : donated)
    if (i >= inputs.size())
      throw Error("[run] donated input " + std::to_string(i) + ": the run has " + std::to_string(inputs.size()) +
                  " inputs");
  return backend_for(e.device.kind).run_device(e, inputs, cuda_stream, donated);
}

std::vector<DeviceTensor> Executable::run_device(const std::vector<DeviceTensor>& inputs) const {
  ExecutableImpl& e = checked(impl_);
  const SwitchScope switches(e.switches);
  return backend_for(e.device.kind).run_device(e, inputs, std::nullopt, {});
}

std::future<std::vector<TensorData>> Executable::run_async(std::vector<TensorData> inputs,
                                                           void* /*stream*/) const {
  auto impl = impl_;
  checked(impl).check_inputs(inputs);  // bad inputs fail at the call, not at get()
  return std::async(std::launch::async, [impl, in = std::move(inputs)] {
    const SwitchScope switches(impl->switches);
    return impl->run(in);
  });
}

std::vector<TensorType> Executable::output_types(const std::vector<TensorType>& input_types) const {
  ExecutableImpl& e = checked(impl_);
  if (input_types.size() != e.feed_types.size())
    throw Error("[output_types] " + std::to_string(input_types.size()) + " types given for " +
                std::to_string(e.feed_types.size()) + " feeds");
  GraphImpl g = e.module.graph;
  for (size_t i = 0; i < input_types.size(); ++i) {
    if (input_types[i].dtype != e.feed_types[i].dtype ||
        !shape_compatible(e.feed_types[i].shape, input_types[i].shape))
      throw Error("[output_types] feed '" + e.feed_names[i] + "' is compiled for " +
                  e.feed_types[i].str() + ", got " + input_types[i].str());
    g.values[static_cast<size_t>(e.module.feeds[i])].type = input_types[i];
  }
  reinfer(g);
  std::vector<TensorType> out;
  for (int32_t v : e.module.targets) out.push_back(g.type(v));
  return out;
}

std::vector<TensorType> Executable::input_types() const { return checked(impl_).feed_types; }

std::vector<std::string> Executable::input_names() const {
  const ExecutableImpl& e = checked(impl_);
  std::vector<std::string> names = e.feed_names;
  names.resize(e.feed_types.size());
  return names;
}

std::vector<std::vector<int64_t>> Executable::output_permutations() const {
  const ExecutableImpl& e = checked(impl_);
  if (e.output_perms.empty()) return std::vector<std::vector<int64_t>>(e.module.targets.size());
  return e.output_perms;
}

std::vector<TensorType> Executable::declared_output_types() const {
  std::vector<TensorType> out;
  for (int32_t v : checked(impl_).module.targets) out.push_back(impl_->module.graph.type(v));
  return out;
}

TensorData Executable::variable(const std::string& name) const {
  ExecutableImpl& e = checked(impl_);
  std::lock_guard<std::mutex> lock(e.store->mu);
  if (!e.store->values.count(name)) throw Error("[variable] no variable named '" + name + "'");
  return e.store->value(name).clone();
}

void Executable::set_variable(const std::string& name, const TensorData& value) const {
  ExecutableImpl& e = checked(impl_);
  std::lock_guard<std::mutex> lock(e.store->mu);
  auto it = e.store->values.find(name);
  if (it == e.store->values.end()) throw Error("[variable] no variable named '" + name + "'");
  if (!(it->second.type() == value.type()))
    throw Error("[variable] '" + name + "' is " + it->second.type().str() + ", cannot set it to " +
                value.type().str());
  e.store->write(name, value.clone());
}

std::vector<std::string> Executable::variable_names() const {
  std::vector<std::string> out;
  for (const auto& [name, id] : checked(impl_).variables) out.push_back(name);
  return out;
}

void Executable::save(const std::string& path) const {
  // Streamed to a temp file (no copy of the weights in memory), then renamed: two processes
  // saving to one path, or a crash mid-save, leave one whole file.
  const detail::ExecutableImpl& e = checked(impl_);
  for (const auto& perm : e.output_perms)
    if (!perm.empty())
      throw Error("[save] the executable returns outputs in a free layout (CompileOptions::free_output_layouts): "
                  "compile without it to save");
  detail::AtomicFile f(path, "save");
  detail::write_executable(e, f);
  f.commit();
}

namespace {

// The device a .tgx names (the payload's first two words, after the 32-byte header), read
// before the file is: null when the file is too short or names no known kind (load's own
// checks then say what is wrong).
std::optional<Device> peek_device(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  int64_t words[6] = {};
  if (!f.read(reinterpret_cast<char*>(words), sizeof words)) return std::nullopt;
  if ((words[4] != 0 && words[4] != 1) || words[5] < 0 || words[5] > 1024) return std::nullopt;
  return Device{static_cast<Device::Kind>(words[4]), static_cast<int>(words[5])};
}

// A thread starting the file's device while the file is read, checked and decoded (on the H200
// CUDA's context and the library handles took ~100 ms of a ResNet-50 step's 0.28 s load);
// joined before the device is used, or when the load fails.
class WarmUp {
 public:
  explicit WarmUp(const std::string& path) {
    const std::optional<Device> d = peek_device(path);
    const Backend* b = d ? find_backend(d->kind) : nullptr;
    if (b && d->kind != Device::Kind::cpu)
      thread_ = std::thread([b, index = d->index] {
        try {
          b->warm_up(index);
        } catch (...) {  // the load's own device check reports it
        }
      });
  }
  ~WarmUp() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

}  // namespace

Executable Executable::load(const std::string& path) {
  detail::remove_stale_temps(path);
  WarmUp warm(path);
  // TGRAPH_PROFILE times the phases ("load: ..." rows), as it times compile passes.
  size_t n = 0;
  std::shared_ptr<std::byte> file;
  {
    detail::CpuProfileScope timed("load: read the file");
    file = detail::read_file_aligned(path, "load", n);
  }
  std::shared_ptr<ExecutableImpl> impl = deserialize_executable(reinterpret_cast<const char*>(file.get()), n, file);
  const Backend& backend = backend_for(impl->device.kind, "[load] " + path + " was compiled for " + impl->device.str() + ";");
  const SwitchScope switches(impl->switches);  // the executable's own, for what the load starts too
  {
    // The device checked and the file's device code and library choices handed over while the
    // warm-up thread still starts the device: the libraries' first calls (a loaded BERT's
    // matmuls load their kernels) begin beside it.
    detail::CpuProfileScope timed("load: backend (device start-up waited for, device check, kernels handed over)");
    backend.check_device(impl->device, impl->precision, "[load] " + path + ":");
    backend.loaded(*impl, path);
    warm.join();
  }
  // Dynamic feed dims: each size met runs a copy compiled from the graph the saved executable
  // was compiled from (version 5 files hold it); from an older file's optimised graph, whose
  // fused groups and rewrites its passes cannot take apart again (slower copies).
  if (impl->specialize && env_flag("TGRAPH_NO_SPECIALIZE")) impl->specialize = nullptr;
  if (!impl->specialize) {
    CompileOptions options;
    options.device = impl->device;
    options.precision = impl->precision;
    options.switches = impl->switches;
    detail::CpuProfileScope timed("load: specializer");
    impl->specialize = specialize_source(*impl, impl->module.graph, impl->module.feeds, impl->module.targets,
                                         impl->module.target_ops, options);
  }
  return Executable(impl);
}

std::string Executable::str() const { return print_text(checked(impl_).module.graph); }
std::string Executable::dot() const { return print_dot(checked(impl_).module.graph); }
Device Executable::device() const { return checked(impl_).device; }
int64_t Executable::planned_arena_bytes() const { return checked(impl_).arena_bytes; }
int64_t Executable::naive_intermediate_bytes() const { return checked(impl_).naive_bytes; }

}  // namespace tg
