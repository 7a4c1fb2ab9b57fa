// Executable: the public face of a compiled graph.
#include "tgraph/executable.h"

#include <cstdio>
#include <fstream>
#include <map>

#include "core/atomic_file.h"
#include "core/read_file.h"
#include "ir/printer.h"
#include "runtime/serialize.h"
#ifdef TGRAPH_HAVE_CUDA
#include "runtime/cuda_run_device.h"
#include "backends/cuda/nvrtc_compiler.h"
#endif
#include "core/env.h"
#include "runtime/executable_impl.h"
#include "runtime/run_limits.h"
#include "tgraph/error.h"

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
#ifdef TGRAPH_HAVE_CUDA
  if (e.device.kind == Device::Kind::cuda && e.backend_state) {
    const CudaGraphStats c = cuda_graph_stats(e);
    s.captures = c.captures;
    s.replays = c.replays;
    s.uncaptured = c.uncaptured;
    s.instances = c.instances;
    s.input_moves = c.bind_misses;
    s.graph_bytes = c.graph_bytes;
    s.graph_live_peak = c.graph_live_peak;
    s.capture_error = c.error;
  }
#endif
  // Kernels of its copies per size (dynamic feed dims: the runs happen there) count too.
  auto add = [&s](const ExecutableImpl& x) {
    std::lock_guard<std::mutex> lock(x.device_code->mu);
    s.kernels_compiled += x.device_code->compiled;
    s.kernels_from_file += x.device_code->from_file;
  };
  add(e);
  std::lock_guard<std::mutex> lock(e.specialized_mu);
  for (const auto& [types, copy] : e.specialized) add(*copy);
  return s;
}

std::vector<DeviceTensor> Executable::run_device(const std::vector<DeviceTensor>& inputs, void* cuda_stream) const {
#ifdef TGRAPH_HAVE_CUDA
  ExecutableImpl& e = checked(impl_);
  const SwitchScope switches(e.switches);
  if (e.device.kind == Device::Kind::cuda) return run_cuda_device(e, inputs, cuda_stream);
#endif
  (void)cuda_stream;
  return run_device(inputs);
}

std::vector<DeviceTensor> Executable::run_device(const std::vector<DeviceTensor>& inputs) const {
  ExecutableImpl& e = checked(impl_);
  const SwitchScope switches(e.switches);
#ifdef TGRAPH_HAVE_CUDA
  if (e.device.kind == Device::Kind::cuda) return run_cuda_device(e, inputs);
#endif
  std::vector<TensorData> host;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) throw Error("[run] input " + std::to_string(i) + " is an empty DeviceTensor");
    host.push_back(inputs[i].to_host());
  }
  std::vector<DeviceTensor> out;
  for (const TensorData& t : e.run(host)) out.push_back(DeviceTensor::from_host(t, Device::cpu()));
  return out;
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

#ifdef TGRAPH_HAVE_CUDA
namespace {
// Hands the file's cubins to NVRTC's cache, so the runs compile none of them; those built for
// another architecture are left out with one notice (their kernels compile on first use).
void provide_device_code(const ExecutableImpl& exe, const std::string& path) {
  const auto [major, minor] = nvrtc_arch(exe.device.index);
  int other = 0, other_major = 0, other_minor = 0;
  std::map<std::string, DeviceCode::Kernel> kernels;  // copied out: NVRTC's lock is never taken under ours
  {
    std::lock_guard<std::mutex> lock(exe.device_code->mu);
    kernels = exe.device_code->kernels;
  }
  for (const auto& [key, k] : kernels) {
    if (k.major == major && k.minor == minor) {
      nvrtc_provide(k.major, k.minor, k.source, k.cubin);
    } else {
      ++other;
      other_major = k.major;
      other_minor = k.minor;
    }
  }
  if (other > 0)
    std::fprintf(stderr,
                 "[tgraph] %s: %d generated kernels were compiled for sm_%d%d, this GPU is sm_%d%d: they compile "
                 "again on first use\n",
                 path.c_str(), other, other_major, other_minor, major, minor);
}
}  // namespace
#endif

Executable Executable::load(const std::string& path) {
  detail::remove_stale_temps(path);
  size_t n = 0;
  std::shared_ptr<std::byte> file = detail::read_file_aligned(path, "load", n);
  std::shared_ptr<ExecutableImpl> impl = deserialize_executable(reinterpret_cast<const char*>(file.get()), n, file);
  if (impl->device.kind == Device::Kind::cuda) {
#ifdef TGRAPH_HAVE_CUDA
    if (impl->device.index >= Device::cuda_device_count())
      throw Error("[load] " + path + " was compiled for " + impl->device.str() + ", which is not available here");
    impl->backend_state = make_cuda_state();
    provide_device_code(*impl, path);
#else
    throw Error("[load] " + path + " was compiled for " + impl->device.str() + "; this build has no CUDA backend");
#endif
  }
  // Dynamic feed dims: each size met runs a copy compiled from the loaded graph (the passes
  // take their own output again).
  CompileOptions options;
  options.device = impl->device;
  options.precision = impl->precision;
  impl->specialize = specialize_source(*impl, impl->module.graph, impl->module.feeds, impl->module.targets,
                                       impl->module.target_ops, options);
  return Executable(impl);
}

std::string Executable::str() const { return print_text(checked(impl_).module.graph); }
std::string Executable::dot() const { return print_dot(checked(impl_).module.graph); }
Device Executable::device() const { return checked(impl_).device; }
int64_t Executable::planned_arena_bytes() const { return checked(impl_).arena_bytes; }
int64_t Executable::naive_intermediate_bytes() const { return checked(impl_).naive_bytes; }

}  // namespace tg
