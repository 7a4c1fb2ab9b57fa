// The CUDA backend's face to the runtime (runtime/backend.h): runs go to cuda_executor.cpp
// (op by op, then captured CUDA graphs); loads hand the file's cubins to NVRTC's cache.
#include <cstdio>
#include <map>
#include <optional>
#include <thread>

#include "backends/cuda/attention_lowering.h"
#include "backends/cuda/cuda_info.h"
#include "backends/cuda/device_tensor_cuda.h"
#include "backends/cuda/matmul_fp8.h"
#include "backends/cuda/matmul_lt.h"
#include "backends/cuda/cudnn_util.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/library_plans.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "core/env.h"
#include "runtime/backend.h"
#include "runtime/cuda_run_device.h"
#include "runtime/executable_impl.h"
#include "runtime/run_limits.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

class CudaBackend final : public Backend {
 public:
  int device_count() const override { return cuda_usable_devices(); }
  std::string describe(int index) const override { return cuda_device_description(index); }
  void check_device(const Device& device, Precision precision, const std::string& what) const override {
    const int count = device_count();
    if (device.index < 0 || device.index >= count)
      throw Error(what + " device " + device.str() + " is not available (" + std::to_string(count) +
                  " CUDA devices usable)");
    check_cuda_precision(precision, device.index);
  }
  // No kernels for composite norms and losses: they become primitives. Convolutions run
  // channels-last (layout.h); strided few-channel ones over a space-to-depth view serve
  // cuDNN's tensor-core kernels.
  // Attention stays whole where cuDNN's fused kernel takes it (attention_lowering.h), and
  // scaled_matmul where cuBLASLt's FP8 kernels do (matmul_fp8.h).
  PipelineOptions pipeline(const CompileOptions& o) const override {
    PipelineOptions p{o.optimize, true, o.precision, !layout_pass_disabled(), true, {}, {}, {}};
    const int device = o.device.index;
    p.keep_composite = [device](const GraphImpl& g, const Node& n) {
      return cuda_keeps_attention(g, n) || cuda_keeps_scaled_matmul(g, n, device);
    };
    p.lower_kept = [device](Module& m) {
      const bool fp8 = lower_cuda_scaled_matmul(m);
      return lower_cuda_attention(m, device) || fp8;
    };
    // Attention written out (matmul, softmax, matmul) runs fused too where it computes in half.
    if (o.optimize && (o.precision == Precision::bf16 || o.precision == Precision::f16))
      p.before_decompose = match_cuda_attention;
    return p;
  }
  void prepare(ExecutableImpl& exe) const override { exe.backend_state = make_cuda_state(); }
  bool generates_kernels() const override { return true; }
  void prefetch_kernels(const ExecutableImpl& exe) const override { cuda_prefetch_kernels(exe); }
  void background_thread() const override {
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&relaxed);
  }
  // Hands the file's cubins to NVRTC's cache, so the runs compile none of them; those built for
  // another architecture are left out with one notice (their kernels compile on first use).
  void loaded(const ExecutableImpl& exe, const std::string& path) const override {
    const auto [major, minor] = nvrtc_arch(exe.device.index);
    int other = 0, other_major = 0, other_minor = 0;
    std::map<std::string, DeviceCode::Kernel> kernels;  // copied out: NVRTC's lock is never taken under ours
    std::map<std::string, std::string> plans;
    {
      std::lock_guard<std::mutex> lock(exe.device_code->mu);
      kernels = exe.device_code->kernels;
      plans = exe.device_code->plans;
    }
    provide_library_plans(plans, exe.device.index);
    // Their kernels loaded while the load finishes (the device's handles still being made) —
    // not for an executable with dynamic feed dims: its runs are its per-size copies', whose
    // first run takes these calls (cuda_executor.cpp).
    bool dynamic = false;
    for (const TensorType& t : exe.feed_types) dynamic |= !t.shape.is_static();
    if (library_warmup_enabled() && !(dynamic && !env_flag("TGRAPH_NO_SPECIALIZE")))
      cuda_begin_library_calls(exe, matmul_lt_saved_warm_calls(exe.device.index));
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
  // cuDNN's handle on a thread of its own beside the device's context, stream, pool and
  // cuBLASLt handle: each library loads its own code at its first handle (tens of ms), and only
  // the context is shared (the second to ask waits for it).
  void warm_up(int index) const override {
    if (index < 0 || index >= device_count()) return;  // load's device check says why
    std::optional<std::thread> cudnn;
    try {
      cudnn.emplace([index] {
        try {
          (void)cudnn_device(index);
        } catch (...) {  // made (or its error reported) where it is first used
          cudaGetLastError();
        }
      });
    } catch (const std::exception&) {  // no thread: made below, in turn
    }
    try {
      DeviceContext::get(index);
    } catch (...) {
      if (cudnn) cudnn->join();
      throw;
    }
    if (cudnn) cudnn->join();
    else (void)cudnn_device(index);
  }
  bool device_code_ready(DeviceCode::Kernel& k) const override {
    if (!k.cubin.empty()) return true;
    try {
      k.cubin = nvrtc_cubin(k.source, k.major, k.minor);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  std::vector<TensorData> run(const ExecutableImpl& exe, const std::vector<TensorData>& inputs) const override {
    RunLimits().check();  // one captured graph: its limits are checked before it starts
    return exe.run_cuda(inputs);
  }
  std::vector<DeviceTensor> run_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs,
                                       std::optional<void*> stream, const std::vector<size_t>& donated) const override {
    return run_cuda_device(exe, inputs, stream, donated);
  }
  void add_stats(const ExecutableImpl& exe, RunStats& s) const override {
    if (!exe.backend_state) return;
    const CudaGraphStats c = cuda_graph_stats(exe);
    s.captures = c.captures;
    s.replays = c.replays;
    s.uncaptured = c.uncaptured;
    s.instances = c.instances;
    s.input_moves = c.bind_misses;
    s.capture_error = c.error;
    s.graph_bytes = c.graph_bytes;
    s.graph_live_peak = c.graph_live_peak;
    s.buffers_in_donated = c.graph_in_donated;
  }
  DeviceTensor allocate(TensorType type, const Device& device) const override {
    return cuda_allocate(std::move(type), device.index);
  }
  DeviceTensor from_host(const TensorData& host, const Device& device) const override {
    DeviceTensor d = cuda_allocate(host.type(), device.index);
    cuda_upload(d, host);
    return d;
  }
  TensorData to_host(const DeviceTensor& t) const override { return cuda_download(t); }
  void before_export(const DeviceTensor& t, std::optional<void*> stream) const override {
    if (!stream) cuda_sync(t.device().index);  // consumers see finished data
    else if (*stream) cuda_order_after(t.device().index, *stream);
  }
  std::pair<size_t, size_t> memory(int index) const override { return cuda_memory_usage(index); }
  void reset_peak_memory(int index) const override { cuda_reset_peak_memory(index); }
};

}  // namespace

const Backend* cuda_backend() {
  static const CudaBackend b;
  return &b;
}

}  // namespace tg::detail
