// The CPU backend's face to the runtime (runtime/backend.h): oneDNN and the fused loops run
// through ExecutableImpl::run_cpu (executor.cpp); device tensors are host memory.
#include <omp.h>

#include "runtime/backend.h"
#include "backends/cpu/buffer_plan.h"
#include "runtime/executable_impl.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

class CpuBackend final : public Backend {
 public:
  void check_device(const Device&, Precision, const std::string&) const override {}
  int device_count() const override { return 1; }
  std::string describe(int) const override { return std::to_string(omp_get_max_threads()) + " threads"; }
  // Composite norms and losses stay whole (the CPU has kernels for them); convolutions run
  // channels-last (layout.h); oneDNN runs few-channel strided convolutions as they are.
  // Attention is the exception: its matmuls and softmax run on oneDNN and the fused loops, where
  // the CPU's own attention kernel is the reference interpreter's. So is scaled_matmul: its
  // operands widened to f32 run on oneDNN (the CPU has no FP8 units).
  PipelineOptions pipeline(const CompileOptions& o) const override {
    PipelineOptions p{o.optimize, true, o.precision, !layout_pass_disabled(), false, {}, {}, {}};
    p.keep_composite = [](const GraphImpl&, const Node& n) {
      return n.kind != OpKind::Attention && n.kind != OpKind::ScaledMatMul;
    };
    return p;
  }
  // The arena of the unfused path (buffer_plan.h) and the reads of each value (in-place ops).
  void prepare(ExecutableImpl& exe) const override {
    BufferPlan plan = plan_buffers(exe.module);
    exe.arena_bytes = plan.arena_bytes;
    exe.naive_bytes = plan.naive_bytes;
    exe.arena_offset = std::move(plan.offset);
    exe.uses = use_counts(exe.module);
  }
  std::vector<TensorData> run(const ExecutableImpl& exe, const std::vector<TensorData>& inputs) const override {
    return exe.run_cpu(inputs);
  }
  DeviceTensor allocate(TensorType type, const Device& device) const override {
    return from_host(TensorData(type.shape, type.dtype), device);
  }
  // Host tensors share the TensorData's buffer (no copy either way).
  DeviceTensor from_host(const TensorData& host, const Device& device) const override {
    auto s = std::make_shared<DeviceTensor::Storage>();
    s->type = host.type();
    s->device = device;
    s->data = const_cast<void*>(host.data());
    s->owner = std::make_shared<TensorData>(host);
    return DeviceTensor(std::move(s));
  }
  TensorData to_host(const DeviceTensor& t) const override {
    // No elements: a producer may hand over a null pointer (torch's empty tensors do), which a
    // wrapped TensorData would take for no tensor at all.
    if (t.shape().num_elements() == 0) return TensorData(t.shape(), t.dtype());
    return TensorData::wrap(t.shape(), t.dtype(), std::shared_ptr<std::byte>(t.storage(), static_cast<std::byte*>(t.data())));
  }
  // Donated inputs are not reused: a CPU run's buffers come from its own arena plan.
  std::vector<DeviceTensor> run_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs,
                                       std::optional<void*>, const std::vector<size_t>&) const override {
    std::vector<TensorData> host;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].empty()) throw Error("[run] input " + std::to_string(i) + " is an empty DeviceTensor");
      host.push_back(inputs[i].to_host());
    }
    std::vector<DeviceTensor> out;
    for (const TensorData& t : exe.run(host)) out.push_back(DeviceTensor::from_host(t, Device::cpu()));
    return out;
  }
};

}  // namespace

const Backend* cpu_backend() {
  static const CpuBackend b;
  return &b;
}

}  // namespace tg::detail
