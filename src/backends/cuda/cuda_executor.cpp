// The CUDA executor: walks the fusion plan of each block and runs each step on the device —
// generated elementwise groups, stitched stencils, cuBLASLt matmuls (with epilogues), the
// kernel families of device_ops.cpp, control flow — and an op no family covers on the CPU
// (operands copied both ways, which rules out capture), so every graph runs. The first run
// of an input signature goes op by op; it is then captured into one CUDA graph (control flow
// as conditional nodes) and replayed. Variables keep a device copy that is refreshed when the
// host store's version changes.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <array>
#include <cstdlib>
#include <memory>
#include <map>
#include <mutex>
#include <set>

#include "backends/cpu/kernels.h"
#include "backends/cuda/control_kernels.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_stencil.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernels_copy.h"
#include "backends/cuda/matmul_epilogue.h"
#include "backends/cuda/matmul_lt.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/pinned_staging.h"
#include "runtime/cuda_run_device.h"
#include "ops/infer.h"
#include "passes/fusion.h"
#include "runtime/executable_impl.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

struct DevTensor {
  TensorType type;  // concrete
  DeviceBuffer buf;
  bool empty() const { return !buf && type.shape.num_elements() != 0; }
  size_t nbytes() const { return static_cast<size_t>(type.shape.num_elements()) * dtype_size(type.dtype); }
};

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
  size_t size() const { return host ? host->size() : device.size(); }
  TensorType type(size_t i) const { return host ? (*host)[i].type() : device[i].type; }
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
  cudaGraphExec_t exec = nullptr;
  std::vector<TensorType> input_types;
  std::vector<DevTensor> inputs;     // fixed buffers the graph reads
  std::vector<DevTensor> targets;    // fixed buffers the graph writes
  std::vector<DeviceBuffer> buffers;  // every intermediate, kept alive
  DeviceBuffer loop_error;            // set by a for_loop whose step is not positive (null: none can be)
  std::map<std::string, uint64_t> var_versions;
  std::map<std::string, DevTensor> assigned;  // variables the graph writes, and their buffers
  ~Captured() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

struct CudaState {
  std::mutex mu;  // runs of one executable are serialised on the device's stream
  std::map<int32_t, FusionPlan> plans;
  std::map<int32_t, std::vector<EpilogueMatch>> epilogues;  // per plan step (matmul_epilogue.h)
  std::map<int32_t, FusionGroup> singles;
  std::map<const FusionGroup*, GroupInfo> groups;
  std::unique_ptr<Captured> captured;
  bool capture_failed = false;
  std::string capture_error;  // why capture was given up (for tests and TGRAPH_DUMP)
  int captures = 0, replays = 0;  // lone elementwise ops run as groups of one
  std::map<std::pair<const void*, bool>, CompiledKernel> kernels;  // (group, flat) -> kernel
  std::map<const StencilStitch*, StencilStepCache> stencils;       // prepared stencil launches per step
  std::map<int32_t, DevTensor> constants;
  std::map<std::string, CachedVar> vars;
  int sm_count = 0;
  IndexErrors index_errors;  // out-of-range indices clamped on the device (cuda_indexing.cpp)
};

TensorType concrete_type(const GraphImpl& g, const Node& n, const std::vector<TensorType>& in, size_t out) {
  return g.output_types_for(n, in).at(out);
}

struct Run {
  const ExecutableImpl& exe;
  CudaState& st;
  const GraphImpl& g;
  DeviceContext& ctx;
  cudaStream_t stream;
  std::vector<DevTensor> slots;
  std::map<std::string, DevTensor> snapshot, pending;

  // Capture support: while a run is captured, every allocation is a graph_buffer kept in
  // `fixed`, so the graph (conditional bodies included) holds only fixed addresses and no
  // allocation nodes. `depth` counts the conditional bodies being captured around the code.
  std::vector<DeviceBuffer>* fixed = nullptr;
  DeviceBuffer* loop_error = nullptr;  // the capture's for_loop step flag, made on first need
  int depth = 0;
  bool host_synced = false;  // data went to the host (not for control flow): the run cannot be captured

  bool capturing() const { return fixed != nullptr; }
  DeviceBuffer buffer(size_t n) {
    if (!capturing()) return ctx.allocate(n, stream);
    fixed->push_back(graph_buffer(ctx, n));
    return fixed->back();
  }
  DevTensor alloc(TensorType t) {
    size_t n = static_cast<size_t>(t.shape.num_elements()) * dtype_size(t.dtype);
    return DevTensor{std::move(t), buffer(n)};
  }
  // Uploads (inputs, constants, variables) own their memory: cached, or fixed before a capture
  // starts; one made while capturing (a constant first met in a branch) goes around the capture.
  DevTensor upload(const TensorData& h) {
    if (capturing()) {
      DevTensor d{h.type(), graph_buffer(ctx, h.nbytes())};
      graph_upload(ctx, d.buf.get(), h.data(), h.nbytes());
      return d;
    }
    DevTensor d{h.type(), ctx.allocate(h.nbytes(), stream)};
    copy_to_device(d.buf.get(), h.data(), h.nbytes(), stream);
    return d;
  }
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
    DevTensor c{d.type, ctx.allocate(d.nbytes(), stream)};
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

  void block(int32_t b) {
    auto it = st.plans.find(b);
    if (it == st.plans.end())
      it = st.plans.emplace(b, plan_fusion(exe.module, b, FusionOptions{.stitch_stencils = true})).first;
    auto eit = st.epilogues.find(b);
    if (eit == st.epilogues.end()) eit = st.epilogues.emplace(b, match_epilogues(exe.module, it->second)).first;
    const std::vector<Step>& steps = it->second.steps;
    const std::vector<EpilogueMatch>& eps = eit->second;
    std::vector<bool> moved(steps.size(), false);  // steps a bias-gradient epilogue runs instead
    for (const EpilogueMatch& ep : eps)
      for (size_t k : ep.moved) moved[k] = true;
    auto run_step = [&](const Step& s) {
      if (s.stitch) stitched(*s.stitch);
      else if (s.fused()) group(s.group);
      else node(g.nodes[static_cast<size_t>(s.node)]);
    };
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i];
      const EpilogueMatch& ep = eps[i];
      if (moved[i]) continue;
      if (ep.kind == MatmulShape::Epilogue::bias_grad) {
        // The bias gradient comes out of the matmul, or (no algorithm for it) runs right after.
        const bool folded = matmul(g.nodes[static_cast<size_t>(s.node)], &ep);
        if (!folded) node(g.nodes[static_cast<size_t>(s.node)]);
        for (size_t k : ep.moved)
          if (!folded || k != ep.grad_step) run_step(steps[k]);
        continue;
      }
      if (ep.kind != MatmulShape::Epilogue::none && matmul(g.nodes[static_cast<size_t>(s.node)], &ep)) {
        i += ep.steps;  // the bias add (and activation) ran inside cuBLASLt
        continue;
      }
      run_step(s);
    }
  }

  // A stencil with its elementwise prologue / epilogue as one kernel (cuda_stencil.h), or its
  // pieces one by one when that kernel does not cover the run's types.
  void stitched(const StencilStitch& sp) {
    std::vector<TensorType> types;
    std::vector<const void*> ins;
    for (int32_t v : sp.inputs) {
      types.push_back(in(v).type);
      ins.push_back(in(v).buf.get());
    }
    std::optional<StencilLaunch> l = prepare_stencil_stitch(g, sp, types, ctx.index(), &st.stencils[&sp]);
    if (!l) {
      for (const Step& p : sp.pieces) {
        if (p.fused()) group(p.group);
        else node(g.nodes[static_cast<size_t>(p.node)]);
      }
      return;
    }
    std::vector<void*> outs;
    for (size_t i = 0; i < sp.outputs.size(); ++i) {
      DevTensor o = alloc(l->output_types[i]);
      outs.push_back(o.buf.get());
      slots[static_cast<size_t>(sp.outputs[i])] = std::move(o);
    }
    launch_stencil_stitch(*l, ins, outs, stream);
  }

  // ---- fused / single elementwise kernels ----
  // The group's output shape for the current input shapes, inferred member by member once per
  // distinct input signature (a run with static shapes infers it once, then only compares).
  const Shape& group_shape(const FusionGroup& grp) {
    GroupInfo& info = st.groups[&grp];
    std::vector<Shape> sig;
    for (int32_t v : grp.inputs) sig.push_back(in(v).type.shape);
    if (info.inferred && info.input_shapes == sig) return info.shape;
    std::map<int32_t, TensorType> types;
    for (int32_t v : grp.inputs) types[v] = in(v).type;
    for (int32_t id : grp.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      std::vector<TensorType> it;
      for (int32_t v : n.inputs) it.push_back(types.at(v));
      types[n.outputs[0]] = concrete_type(g, n, it, 0);
    }
    info.shape = types.at(g.nodes[static_cast<size_t>(grp.nodes.back())].outputs[0]).shape;
    info.input_shapes = std::move(sig);
    info.inferred = true;
    return info.shape;
  }

  void group(const FusionGroup& grp) {
    GroupInfo& info = st.groups[&grp];
    if (info.supported < 0) info.supported = elementwise_supported(g, grp) ? 1 : 0;
    if (!info.supported) {
      for (int32_t id : grp.nodes) fallback(g.nodes[static_cast<size_t>(id)]);
      return;
    }
    const Shape shape = group_shape(grp);
    ElementwiseArgs a{};
    a.n = shape.num_elements();
    a.rank = static_cast<int>(shape.rank());
    if (a.rank > kMaxRank) {
      for (int32_t id : grp.nodes) fallback(g.nodes[static_cast<size_t>(id)]);
      return;
    }
    for (int d = 0; d < a.rank; ++d) a.dims[d] = shape[d];
    bool flat = true;
    for (size_t k = 0; k < grp.inputs.size(); ++k) {
      const DevTensor& t = in(grp.inputs[k]);
      a.in[k] = t.buf.get();
      const Shape& s = t.type.shape;
      flat &= s == shape;
      long long stride = 1;
      for (int d = a.rank - 1; d >= 0; --d) {
        int64_t sd = d - (a.rank - static_cast<int>(s.rank()));
        int64_t dim = sd >= 0 ? s[sd] : 1;
        a.strides[k][d] = (dim == 1 && shape[d] != 1) || sd < 0 ? 0 : stride;
        stride *= sd >= 0 ? dim : 1;
      }
    }
    for (size_t k = 0; k < grp.outputs.size(); ++k) {
      int32_t v = grp.outputs[k];
      DevTensor o = alloc(TensorType(shape, g.type(v).dtype));
      a.out[k] = o.buf.get();
      slots[static_cast<size_t>(v)] = std::move(o);
    }
    if (a.n == 0) return;
    auto key = std::make_pair(static_cast<const void*>(&grp), flat);
    auto kit = st.kernels.find(key);
    if (kit == st.kernels.end())
      kit = st.kernels.emplace(key, nvrtc_kernel(elementwise_source(g, grp, flat), "tg_ew", ctx.index())).first;
    long long blocks = (a.n + 255) / 256;
    long long max_blocks = static_cast<long long>(st.sm_count) * 8;
    dim3 grid(static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks)), threads(256);
    void* params[] = {&a};
    TG_CUDA(cudaLaunchKernel(kit->second.fn(), grid, threads, params, 0, stream));
  }

  // ---- ops ----
  void node(const Node& n) {
    switch (n.kind) {
      case OpKind::Placeholder:
        if (slots[static_cast<size_t>(n.outputs[0])].buf == nullptr)
          throw Error("[run] placeholder '" + n.name + "' is needed but was not fed");
        return;
      case OpKind::Constant: {
        auto it = st.constants.find(static_cast<int32_t>(&n - g.nodes.data()));
        if (it == st.constants.end())
          it = st.constants.emplace(static_cast<int32_t>(&n - g.nodes.data()), upload(n.data)).first;
        slots[static_cast<size_t>(n.outputs[0])] = it->second;
        return;
      }
      case OpKind::Variable:
        slots[static_cast<size_t>(n.outputs[0])] = snapshot.at(std::get<NameDesc>(n.attr).name);
        return;
      case OpKind::ReadVariable: {
        const std::string& name = var_name(n.inputs[0]);
        auto it = pending.find(name);
        slots[static_cast<size_t>(n.outputs[0])] = it != pending.end() ? it->second : snapshot.at(name);
        return;
      }
      case OpKind::Assign:
        pending[var_name(n.inputs[0])] = in(n.inputs[1]);
        return;
      case OpKind::Reshape: case OpKind::ExpandDims: case OpKind::Squeeze:
      case OpKind::Bitcast: {  // bitcast keeps the element size (ops/infer_elementwise.cpp)
        DevTensor v = in(n.inputs[0]);  // same bytes, new shape or dtype: no copy
        v.type = concrete_type(g, n, in_types(n), 0);
        slots[static_cast<size_t>(n.outputs[0])] = v;
        return;
      }
      case OpKind::NonZeroIndices: {  // the count comes back to the host: such a run is never captured
        host_synced = true;
        DevTensor y;
        cuda_non_zero_indices(DevArg{in(n.inputs[0]).buf.get(), in(n.inputs[0]).type}, [&](const TensorType& t) {
          y = alloc(t);
          return static_cast<void*>(y.buf.get());
        }, stream, ctx.index());
        slots[static_cast<size_t>(n.outputs[0])] = std::move(y);
        return;
      }
      case OpKind::MatMul:
        if (matmul(n)) return;
        break;
      case OpKind::IfElse: case OpKind::ForLoop: case OpKind::WhileLoop:
        control(n);
        return;
      default:
        if (DeviceOp op = device_op_for(n.kind)) {
          if (device_op(n, op)) return;
          break;
        }
        if (elementwise_kernel_op(g, n)) {  // control dependencies only order it: still one kernel
          FusionGroup single{{static_cast<int32_t>(&n - g.nodes.data())}, {}, {n.outputs[0]}};
          for (int32_t v : n.inputs)
            if (std::find(single.inputs.begin(), single.inputs.end(), v) == single.inputs.end()) single.inputs.push_back(v);
          // Kernels are cached by the group's address: keep it in the executable's state.
          auto& kept = st.singles[single.nodes[0]];
          if (kept.nodes.empty()) kept = single;
          group(kept);
          return;
        }
    }
    fallback(n);
  }

  // Runs a device kernel with preallocated outputs; false (nothing kept) if it declines.
  bool device_op(const Node& n, DeviceOp op) {
    std::vector<DevArg> args;
    for (int32_t v : n.inputs) args.push_back(DevArg{in(v).buf.get(), in(v).type});
    std::vector<DevTensor> outs;
    std::vector<DevOut> dev_outs;
    std::vector<TensorType> types = g.output_types_for(n, in_types(n));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      outs.push_back(alloc(types[i]));
      dev_outs.push_back(DevOut{outs.back().buf.get(), outs.back().type});
    }
    OpWorkspaceScope workspace([this](size_t bytes) { return buffer(bytes); });  // capture-safe temporaries
    if (!op(g, n, args, dev_outs, stream, ctx.index())) return false;
    for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = std::move(outs[i]);
    return true;
  }

  // x (a matmul operand, matrices in its last two dims) broadcast to the batch dims of `out`,
  // as one dense tensor (zero input strides repeat the broadcast dims).
  DevTensor expand_batch(const DevTensor& x, const Shape& out) {
    const Shape& s = x.type.shape;
    const int64_t r = out.rank(), off = r - s.rank();
    if (r > kCopyMaxRank) throw Error("[matmul] batch broadcast of " + s.str() + " to " + out.str() + ": rank > 16");
    std::vector<int64_t> dims(out.dims().begin(), out.dims().end() - 2);
    dims.push_back(s.dim(-2));
    dims.push_back(s.dim(-1));
    DevTensor e = alloc(TensorType(Shape(dims), x.type.dtype));
    StridedCopy cp;
    cp.rank = static_cast<int>(r);
    long long in_stride = 1, out_stride = 1;
    for (int64_t i = r - 1; i >= 0; --i) {
      const int64_t j = i - off;  // x's dim aligned with dim i (none: broadcast)
      cp.dims[i] = dims[static_cast<size_t>(i)];
      cp.out_strides[i] = out_stride;
      cp.in_strides[i] = j < 0 || (s[j] == 1 && dims[static_cast<size_t>(i)] != 1) ? 0 : in_stride;
      out_stride *= dims[static_cast<size_t>(i)];
      if (j >= 0) in_stride *= s[j];
    }
    TG_CUDA(launch_strided_copy(x.buf.get(), e.buf.get(), cp, static_cast<int>(dtype_size(x.type.dtype)), stream));
    return e;
  }

  // With `ep`, also the bias add (and activation) after it, or false (nothing kept) when the
  // run's shapes or cuBLASLt do not allow that epilogue.
  bool matmul(const Node& n, const EpilogueMatch* ep = nullptr) {
    const DevTensor &a = in(n.inputs[0]), &b = in(n.inputs[1]);
    DType t = a.type.dtype;
    if (t != DType::f32 && t != DType::f16 && t != DType::bf16 && t != DType::f64) return false;
    const bool bgrad = ep && ep->kind == MatmulShape::Epilogue::bias_grad;
    if (ep && (t == DType::f64 || (!bgrad && in(ep->bias).type.dtype != t))) return false;
    const auto& d = std::get<MatmulDesc>(n.attr);
    const Shape &sa = a.type.shape, &sb = b.type.shape;
    TensorType out = concrete_type(g, n, in_types(n), 0);
    long long m = out.shape.dim(-2), nn = out.shape.dim(-1), k = d.transpose_a ? sa.dim(-2) : sa.dim(-1);
    auto batch_of = [](const Shape& s) {
      long long p = 1;
      for (int64_t i = 0; i + 2 < s.rank(); ++i) p *= s[i];
      return p;
    };
    long long batch = batch_of(out.shape), ba = batch_of(sa), bb = batch_of(sb);
    if (ep && !bgrad &&
        (k == 0 || out.shape.num_elements() == 0 || in(ep->bias).type.shape.num_elements() != nn ||
         in(ep->bias).type.shape.dim(-1) != nn || g.type(ep->output).shape.num_elements() != out.shape.num_elements()))
      return false;
    // The bias gradient: 2-D operands only (matched so), its static result of n elements.
    if (bgrad && (k == 0 || out.shape.num_elements() == 0 || batch != 1 || sa.rank() != 2 || sb.rank() != 2 ||
                  g.type(ep->grad).shape.num_elements() != nn))
      return false;
    DevTensor gb = bgrad ? alloc(g.type(ep->grad)) : DevTensor{};
    DevTensor c = alloc(out);
    if (out.shape.num_elements() > 0) {
      if (k == 0) {
        TG_CUDA(cudaMemsetAsync(c.buf.get(), 0, c.nbytes(), stream));
      } else {
        // cuBLASLt batches with one stride per operand: an operand broadcast over only some
        // batch dims ([2,1,m,k] x [1,3,k,n]) is expanded to the full batch first.
        DevTensor ea = ba == 1 || ba == batch ? a : expand_batch(a, out.shape);
        DevTensor eb = bb == 1 || bb == batch ? b : expand_batch(b, out.shape);
        MatmulShape s{m, nn, k, batch, ba == 1 ? 0 : m * k, bb == 1 ? 0 : k * nn, d.transpose_a, d.transpose_b, t,
                      exe.precision == Precision::tf32};
        if (ep) {
          s.epilogue = ep->kind;
          if (!matmul_lt_epilogue(s, ea.buf.get(), eb.buf.get(), bgrad ? gb.buf.get() : in(ep->bias).buf.get(),
                                  c.buf.get(), stream, ctx.index()))
            return false;
        } else {
          matmul_lt(s, ea.buf.get(), eb.buf.get(), c.buf.get(), stream, ctx.index());
        }
      }
    }
    if (bgrad) slots[static_cast<size_t>(ep->grad)] = std::move(gb);
    if (ep && !bgrad) c.type = g.type(ep->output);  // static: matched only then (a reshape may sit between)
    slots[static_cast<size_t>(ep && !bgrad ? ep->output : n.outputs[0])] = std::move(c);
    return true;
  }

  // ---- control flow ----
  // An uncaptured run (the first run, dynamic shapes) reads predicates and trip counts on the
  // host; a captured run lowers each construct to CUDA graph conditional nodes instead.
  bool truth(const DevTensor& t, const char* op) {
    TensorData h = fetch(t);
    if (h.num_elements() != 1)
      throw Error(std::string("[") + op + "] predicate must have one element, got " + h.shape().str());
    return h.at(0) != 0.0;
  }
  void bind(int32_t b, const std::vector<DevTensor>& args) {
    const Block& blk = g.blocks[static_cast<size_t>(b)];
    for (size_t i = 0; i < blk.params.size(); ++i) slots[static_cast<size_t>(blk.params[i])] = args[i];
  }
  std::vector<DevTensor> results(int32_t b) {
    std::vector<DevTensor> r;
    for (int32_t v : g.blocks[static_cast<size_t>(b)].results) r.push_back(in(v));
    return r;
  }
  void set_outputs(const Node& n, const std::vector<DevTensor>& r) {
    for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = r[i];
  }
  void control(const Node& n) {
    if (capturing()) {
      if (n.kind == OpKind::IfElse) captured_if(n);
      else if (n.kind == OpKind::ForLoop) captured_for(n);
      else captured_while(n);
      return;
    }
    if (n.kind == OpKind::IfElse) {
      int32_t r = truth(in(n.inputs[0]), "if_else") ? n.regions[0] : n.regions[1];
      block(r);
      set_outputs(n, results(r));
    } else if (n.kind == OpKind::ForLoop) {
      auto scalar = [&](int32_t v) { return static_cast<int64_t>(fetch(in(v)).at(0)); };
      int64_t lo = scalar(n.inputs[0]), hi = scalar(n.inputs[1]), step = scalar(n.inputs[2]);
      if (step <= 0) throw Error("[for_loop] step must be positive, got " + std::to_string(step));
      std::vector<DevTensor> args;
      for (size_t i = 3; i < n.inputs.size(); ++i) args.push_back(in(n.inputs[i]));
      for (int64_t i = lo; i < hi; i += step) {
        std::vector<DevTensor> p{upload(TensorData::scalar(static_cast<double>(i), DType::i32))};
        p.insert(p.end(), args.begin(), args.end());
        bind(n.regions[0], p);
        block(n.regions[0]);
        args = results(n.regions[0]);
      }
      set_outputs(n, args);
    } else {
      std::vector<DevTensor> args;
      for (int32_t v : n.inputs) args.push_back(in(v));
      for (;;) {
        bind(n.regions[0], args);
        block(n.regions[0]);
        std::vector<DevTensor> r = results(n.regions[0]);
        bool go = truth(r[0], "while_loop");
        r.erase(r.begin());
        if (!go) {
          set_outputs(n, r);
          return;
        }
        bind(n.regions[1], r);
        block(n.regions[1]);
        args = results(n.regions[1]);
      }
    }
  }

  // ---- control flow captured as conditional nodes ----
  // Values that cross a region boundary live in fixed state buffers. One control kernel at the
  // end of each body copies the region's results into them and sets the node's handle from
  // the predicate on the device. A variable assigned inside a node gets a state buffer too:
  // reads see it, and each body ends by copying the variable's latest value into it.
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  struct VarState {
    std::string name;
    DevTensor buf;
  };

  static DeviceScalar scalar_of(const DevTensor& t, const char* op, const char* what) {
    if (t.type.shape.num_elements() != 1)
      throw Error(std::string("[") + op + "] " + what + " must have one element, got " + t.type.shape.str());
    return DeviceScalar{t.buf.get(), static_cast<int>(dtype_size(t.type.dtype)), is_float(t.type.dtype),
                        is_signed_integer(t.type.dtype)};
  }
  static ControlCond set_truth(const DevTensor& pred, cudaGraphConditionalHandle h, const char* op) {
    ControlCond c;
    c.op = CondOp::truth;
    c.handle = h;
    c.pred = scalar_of(pred, op, "predicate");
    return c;
  }
  // Copies values into state buffers of the same types (a loop may not change them).
  static std::vector<Copy> carry(const std::vector<DevTensor>& state, const std::vector<DevTensor>& values,
                                 const char* op) {
    std::vector<Copy> c;
    for (size_t i = 0; i < state.size(); ++i) {
      if (!(state[i].type == values[i].type))
        throw Error(std::string("[") + op + "] graph capture: value " + std::to_string(i) + " is " +
                    values[i].type.str() + " here but " + state[i].type.str() + " elsewhere");
      c.push_back({state[i].buf.get(), values[i].buf.get(), state[i].nbytes()});
    }
    return c;
  }

  // Enqueues the copies as one parallel assignment (a source that the same launch overwrites is
  // staged through a temporary first), then `cond`.
  void control_kernel(std::vector<Copy> copies, ControlCond cond) {
    std::vector<Copy> todo, stage;
    std::set<const void*> written;
    for (const Copy& c : copies)
      if (c.bytes && c.dst != c.src) todo.push_back(c);
    for (const Copy& c : todo) written.insert(c.dst);
    if (cond.index) written.insert(cond.index);
    if (cond.ctl) written.insert(cond.ctl);
    auto staged = [&](const void* src, size_t bytes) -> const void* {
      if (!written.count(src)) return src;
      void* tmp = buffer(bytes).get();  // kept alive by `fixed`
      stage.push_back({tmp, src, bytes});
      return tmp;
    };
    for (Copy& c : todo) c.src = staged(c.src, c.bytes);
    if (cond.op == CondOp::truth) cond.pred.ptr = staged(cond.pred.ptr, static_cast<size_t>(cond.pred.bytes));
    if (cond.op == CondOp::for_start)
      for (DeviceScalar* s : {&cond.lower, &cond.upper, &cond.step})
        s->ptr = staged(s->ptr, static_cast<size_t>(s->bytes));
    launch_copies(stage, ControlCond{});
    launch_copies(todo, cond);
  }
  void launch_copies(const std::vector<Copy>& copies, const ControlCond& cond) {
    if (copies.empty() && cond.op == CondOp::none) return;
    size_t k = 0;
    for (;;) {
      ControlCopies c;
      for (; k < copies.size() && c.n < kMaxControlCopies; ++k, ++c.n) {
        c.dst[c.n] = copies[k].dst;
        c.src[c.n] = copies[k].src;
        c.bytes[c.n] = copies[k].bytes;
      }
      bool last = k == copies.size();
      TG_CUDA(launch_control(c, last ? cond : ControlCond{}, st.sm_count, stream));
      if (last) return;
    }
  }

  // Captures `fn` into a conditional node's body graph, on the stream of the next depth.
  template <class Fn>
  void body(cudaGraph_t graph, Fn&& fn) {
    struct Restore {
      Run& r;
      cudaStream_t outer;
      ~Restore() {
        r.stream = outer;
        --r.depth;
      }
    } restore{*this, stream};
    stream = body_stream(ctx.index(), ++depth);
    BodyCapture cap(stream, graph);
    fn();
    cap.end();
  }

  std::vector<std::string> assigned_in(const Node& n) const {
    std::set<std::string> names;
    std::vector<int32_t> todo(n.regions.begin(), n.regions.end());
    while (!todo.empty()) {
      int32_t b = todo.back();
      todo.pop_back();
      for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
        const Node& m = g.nodes[static_cast<size_t>(id)];
        if (m.kind == OpKind::Assign) names.insert(var_name(m.inputs[0]));
        todo.insert(todo.end(), m.regions.begin(), m.regions.end());
      }
    }
    return {names.begin(), names.end()};
  }
  // State buffers for the variables `n` assigns, with the copies of their current values.
  std::vector<VarState> var_states(const Node& n, std::vector<Copy>& init) {
    std::vector<VarState> vs;
    for (const std::string& name : assigned_in(n)) {
      auto it = pending.find(name);
      const DevTensor& cur = it != pending.end() ? it->second : snapshot.at(name);
      vs.push_back({name, alloc(cur.type)});
      init.push_back({vs.back().buf.buf.get(), cur.buf.get(), cur.nbytes()});
    }
    reset_vars(vs);
    return vs;
  }
  void reset_vars(const std::vector<VarState>& vs) {
    for (const VarState& v : vs) pending[v.name] = v.buf;
  }
  void save_vars(const std::vector<VarState>& vs, std::vector<Copy>& out) {
    for (const VarState& v : vs) {
      const DevTensor& cur = pending.at(v.name);
      out.push_back({v.buf.buf.get(), cur.buf.get(), v.buf.nbytes()});
    }
  }

  // IF node with an ELSE body; each branch ends by copying its results into the outputs.
  void captured_if(const Node& n) {
    std::vector<Copy> init;
    std::vector<VarState> vars = var_states(n, init);
    cudaGraphConditionalHandle h = new_cond_handle(stream);
    control_kernel(init, set_truth(in(n.inputs[0]), h, "if_else"));
    std::array<cudaGraph_t, 2> bodies = add_cond_node(stream, h, cudaGraphCondTypeIf, 2);
    std::vector<DevTensor> outs;
    for (size_t k = 0; k < 2; ++k) {
      int32_t r = n.regions[k];
      body(bodies[k], [&] {
        block(r);
        std::vector<DevTensor> res = results(r);
        if (k == 0)
          for (const DevTensor& t : res) outs.push_back(alloc(t.type));
        std::vector<Copy> copies = carry(outs, res, "if_else");
        save_vars(vars, copies);
        control_kernel(copies, ControlCond{});
        reset_vars(vars);
      });
    }
    set_outputs(n, outs);
  }

  // A kernel sets index = lower and the handle; the WHILE body runs the region on the state
  // buffers, then one kernel carries the results, steps the index and re-tests it.
  void captured_for(const Node& n) {
    DevTensor index = alloc(TensorType(Shape{}, DType::i32)), ctl = alloc(TensorType(Shape{2}, DType::i64));
    std::vector<DevTensor> args, init_values;
    for (size_t i = 3; i < n.inputs.size(); ++i) {
      init_values.push_back(in(n.inputs[i]));
      args.push_back(alloc(init_values.back().type));
    }
    std::vector<Copy> init = carry(args, init_values, "for_loop");
    std::vector<VarState> vars = var_states(n, init);
    cudaGraphConditionalHandle h = new_cond_handle(stream);
    ControlCond start;
    start.op = CondOp::for_start;
    start.handle = h;
    start.lower = scalar_of(in(n.inputs[0]), "for_loop", "lower");
    start.upper = scalar_of(in(n.inputs[1]), "for_loop", "upper");
    start.step = scalar_of(in(n.inputs[2]), "for_loop", "step");
    start.index = reinterpret_cast<int*>(index.buf.get());
    start.ctl = reinterpret_cast<long long*>(ctl.buf.get());
    start.error = step_flag(n.inputs[2]);
    control_kernel(init, start);
    cudaGraph_t loop = add_cond_node(stream, h, cudaGraphCondTypeWhile, 1)[0];
    body(loop, [&] {
      std::vector<DevTensor> params{index};
      params.insert(params.end(), args.begin(), args.end());
      bind(n.regions[0], params);
      block(n.regions[0]);
      std::vector<Copy> copies = carry(args, results(n.regions[0]), "for_loop");
      save_vars(vars, copies);
      ControlCond next;
      next.op = CondOp::for_next;
      next.handle = h;
      next.index = start.index;
      next.ctl = start.ctl;
      control_kernel(copies, next);
      reset_vars(vars);
    });
    set_outputs(n, args);
  }
  // Where a for_loop reports a step that is not positive (none for a positive constant step).
  int* step_flag(int32_t step) {
    int32_t id = g.values[static_cast<size_t>(step)].node;
    if (id >= 0) {
      const Node& src = g.nodes[static_cast<size_t>(id)];
      if (src.kind == OpKind::Constant && src.data.num_elements() == 1 && src.data.at(0) > 0) return nullptr;
    }
    if (!*loop_error) *loop_error = buffer(sizeof(int));
    return reinterpret_cast<int*>(loop_error->get());
  }

  // MPSGraph's while, rotated: `before` runs once ahead of the WHILE node, whose body is
  // after; before. The state buffers hold before's latest results: the loop's outputs.
  void captured_while(const Node& n) {
    int32_t before = n.regions[0], after = n.regions[1];
    std::vector<DevTensor> args;
    for (int32_t v : n.inputs) args.push_back(in(v));
    bind(before, args);
    block(before);
    std::vector<DevTensor> r = results(before);
    std::vector<DevTensor> res(r.begin() + 1, r.end()), state;
    for (const DevTensor& t : res) state.push_back(alloc(t.type));
    std::vector<Copy> first = carry(state, res, "while_loop");
    std::vector<VarState> vars = var_states(n, first);  // after the first `before`'s assigns
    cudaGraphConditionalHandle h = new_cond_handle(stream);
    control_kernel(first, set_truth(r[0], h, "while_loop"));
    cudaGraph_t loop = add_cond_node(stream, h, cudaGraphCondTypeWhile, 1)[0];
    body(loop, [&] {
      bind(after, state);
      block(after);
      bind(before, results(after));
      block(before);
      std::vector<DevTensor> r2 = results(before);
      std::vector<Copy> copies = carry(state, std::vector<DevTensor>(r2.begin() + 1, r2.end()), "while_loop");
      save_vars(vars, copies);
      control_kernel(copies, set_truth(r2[0], h, "while_loop"));
      reset_vars(vars);
    });
    set_outputs(n, state);
  }

  // An op with no GPU kernel yet: computed on the CPU, operands copied both ways.
  void fallback(const Node& n) {
    std::vector<TensorData> hin;
    for (int32_t v : n.inputs) hin.push_back(download(in(v)));
    std::vector<TensorData> hout = cpu_eval(g, n, hin);
    for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = upload(hout[i]);
  }

  const std::string& var_name(int32_t v) const {
    return std::get<NameDesc>(g.nodes[static_cast<size_t>(g.values[static_cast<size_t>(v)].node)].attr).name;
  }
};

}  // namespace

namespace {

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string(v) == "1";
}

std::map<std::string, uint64_t> var_versions(const ExecutableImpl& exe) {
  std::map<std::string, uint64_t> v;
  std::lock_guard<std::mutex> lock(exe.store->mu);
  for (const auto& [name, id] : exe.variables) v[name] = exe.store->versions[name];
  return v;
}

// Whole-run capture needs static shapes and no host round trips (checked on the recording
// run). Variable writes are captured as copies into the variables' device buffers at the
// end of the run. TGRAPH_NO_CUDA_GRAPH=1 turns capture off.
bool capturable(const ExecutableImpl& exe, const CudaState& st) {
  if (st.capture_failed || env_on("TGRAPH_NO_CUDA_GRAPH")) return false;
  for (const TensorType& t : exe.feed_types)
    if (!t.shape.is_static()) return false;
  return true;
}

// Publishes device-side variable writes: new versions, and a host copy fetched on demand.
void publish(const ExecutableImpl& exe, CudaState& st, const std::map<std::string, DevTensor>& written) {
  std::lock_guard<std::mutex> vlock(exe.store->mu);
  for (const auto& [name, value] : written) {
    exe.store->device_only.erase(name);
    uint64_t v = ++exe.store->versions[name];
    st.vars[name] = CachedVar{v, value};
    int device_index = exe.device.index;
    DevTensor keep = value;
    exe.store->device_only[name] = [keep, device_index] {
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
}

// Captures the whole run into one CUDA graph. Every intermediate (conditional bodies'
// included) gets its own graph_buffer, so the graph holds fixed addresses and no allocation
// nodes; control flow becomes conditional nodes (Run::captured_if / _for / _while).
void capture(const ExecutableImpl& exe, CudaState& st, const RunInputs& inputs) {
  static std::mutex capture_mu;  // executables share the streams that capture conditional bodies
  std::lock_guard<std::mutex> capture_lock(capture_mu);
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  const GraphImpl& g = exe.module.graph;
  auto cap = std::make_unique<Captured>();
  Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  for (auto& [name, cv] : st.vars) r.snapshot[name] = cv.value;
  for (size_t i = 0; i < inputs.size(); ++i) {  // the graph's own input buffers
    cap->inputs.push_back(inputs.host ? r.upload((*inputs.host)[i]) : r.clone(inputs.device[i]));
    cap->input_types.push_back(inputs.type(i));
  }
  for (size_t i = 0; i < inputs.size(); ++i) r.slots[static_cast<size_t>(exe.module.feeds[i])] = cap->inputs[i];
  r.fixed = &cap->buffers;
  r.loop_error = &cap->loop_error;
  TG_CUDA(cudaStreamSynchronize(r.stream));
  cudaGraph_t graph = nullptr;
  // Relaxed: a kernel first met in a branch the recording run did not take is loaded here.
  TG_CUDA(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeRelaxed));
  try {
    r.block(0);
    // Writes land in the variables' own buffers, so every replay reads and writes the same
    // addresses (all reads of the old values precede these copies on the stream).
    for (auto& [name, value] : r.pending) {
      const DevTensor& dst = r.snapshot.at(name);
      st.index_errors.guarded_copy(dst.buf.get(), value.buf.get(), value.nbytes(), r.stream);  // not after a bad index
      cap->assigned[name] = dst;
    }
  } catch (const std::exception& err) {
    cudaStreamEndCapture(r.stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    graph_buffers_ready(ctx);  // before the buffers go back to the pool
    st.capture_failed = true;  // run uncaptured from now on; the run itself already succeeded
    st.capture_error = err.what();
    return;
  }
  TG_CUDA(cudaStreamEndCapture(r.stream, &graph));
  cudaError_t e = cudaGraphInstantiate(&cap->exec, graph, 0);
  cudaGraphDestroy(graph);
  graph_buffers_ready(ctx);
  if (e != cudaSuccess) {
    cudaGetLastError();
    st.capture_failed = true;
    st.capture_error = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
    return;
  }
  for (int32_t v : exe.module.targets) cap->targets.push_back(r.in(v));
  cap->var_versions = var_versions(exe);
  st.captured = std::move(cap);
  ++st.captures;
}

// Replays the captured graph; returns its target buffers, which the caller copies out while it
// still holds the executable's lock.
const std::vector<DevTensor>& replay(const ExecutableImpl& exe, CudaState& st, Captured& cap, const RunInputs& inputs,
                                     Run& r) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs.host)
      copy_to_device(cap.inputs[i].buf.get(), (*inputs.host)[i].data(), (*inputs.host)[i].nbytes(), r.stream);
    else if (inputs.device[i].nbytes())
      TG_CUDA(cudaMemcpyAsync(cap.inputs[i].buf.get(), inputs.device[i].buf.get(), inputs.device[i].nbytes(),
                              cudaMemcpyDeviceToDevice, r.stream));
  }
  if (cap.loop_error) TG_CUDA(cudaMemsetAsync(cap.loop_error.get(), 0, sizeof(int), r.stream));
  TG_CUDA(cudaGraphLaunch(cap.exec, r.stream));
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
  }
  return cap.targets;
}

}  // namespace

namespace {

// One run on the device: replays the captured graph when the input types and variables are
// those it was captured with, otherwise runs op by op (and captures when it can). `take`
// receives the targets while the run still holds the executable's lock, before variable
// writes are published and before a capture reuses the stream.
void run_common(const ExecutableImpl& exe, const RunInputs& inputs,
                const std::function<void(Run&, const std::vector<DevTensor>&)>& take) {
  if (!exe.backend_state) throw Error("[run] executable has no CUDA state");
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  TG_CUDA(cudaSetDevice(exe.device.index));
  if (st.sm_count == 0)
    TG_CUDA(cudaDeviceGetAttribute(&st.sm_count, cudaDevAttrMultiProcessorCount, exe.device.index));
  IndexErrors::Scope index_scope(st.index_errors, exe.device.index, ctx.stream());
  const GraphImpl& g = exe.module.graph;
  Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  {
    std::lock_guard<std::mutex> vlock(exe.store->mu);
    for (const auto& [name, id] : exe.variables) {
      CachedVar& cv = st.vars[name];
      uint64_t version = exe.store->versions[name];
      if (cv.version != version) {
        cv.value = r.upload(exe.store->value(name));
        cv.version = version;
      }
      r.snapshot[name] = cv.value;
    }
  }
  std::vector<TensorType> in_types;
  for (size_t i = 0; i < inputs.size(); ++i) in_types.push_back(inputs.type(i));
  if (st.captured && st.captured->input_types == in_types && st.captured->var_versions == var_versions(exe)) {
    ++st.replays;
    take(r, replay(exe, st, *st.captured, inputs, r));
    return;
  }
  st.captured.reset();
  const bool try_capture = capturable(exe, st);
  for (size_t i = 0; i < inputs.size(); ++i)
    // device inputs are copied too: a variable assigned from a feed must not alias the caller's memory
    r.slots[static_cast<size_t>(exe.module.feeds[i])] = inputs.host ? r.upload((*inputs.host)[i]) : r.clone(inputs.device[i]);
  r.host_synced = false;
  r.block(0);
  const bool synced = r.host_synced;
  std::vector<DevTensor> targets;
  for (int32_t v : exe.module.targets) targets.push_back(r.in(v));
  take(r, targets);
  if (try_capture && synced) st.capture_error = "the run copied data to the host (an op without a GPU kernel)";
  if (std::string e = st.index_errors.take(g, r.stream); !e.empty()) throw Error(e);  // before publishing
  if (!r.pending.empty()) {
    TG_CUDA(cudaStreamSynchronize(r.stream));
    publish(exe, st, r.pending);  // the new values stay on the device until read
  }
  if (try_capture && !synced) capture(exe, st, inputs);
}

}  // namespace

std::vector<TensorData> ExecutableImpl::run_cuda(const std::vector<TensorData>& inputs) const {
  check_inputs(inputs);
  RunInputs io;
  io.host = &inputs;
  std::vector<TensorData> out;
  run_common(*this, io, [&](Run& r, const std::vector<DevTensor>& targets) {
    for (const DevTensor& t : targets) out.push_back(r.fetch(t));
  });
  return out;
}

std::vector<DeviceTensor> run_cuda_device(const ExecutableImpl& exe, const std::vector<DeviceTensor>& inputs) {
  std::vector<TensorType> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) throw Error("[run] input " + std::to_string(i) + " is an empty DeviceTensor");
    types.push_back(inputs[i].type());
  }
  exe.check_input_types(types);
  RunInputs io;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Tensors elsewhere (host memory, another GPU) are copied to this device first.
    io.device.push_back(adopt(inputs[i].device() == exe.device ? inputs[i]
                                                                 : DeviceTensor::from_host(inputs[i].to_host(), exe.device)));
  }
  std::vector<DeviceTensor> out;
  run_common(exe, io, [&](Run& r, const std::vector<DevTensor>& targets) {
    for (const DevTensor& t : targets) {
      DevTensor c = r.clone(t);
      auto s = std::make_shared<DeviceTensor::Storage>();
      s->type = c.type;
      s->device = exe.device;
      s->data = c.buf.get();
      s->owner = c.buf;
      out.emplace_back(std::move(s));
    }
    TG_CUDA(cudaStreamSynchronize(r.stream));  // the outputs are complete when run() returns
  });
  return out;
}

std::shared_ptr<void> make_cuda_state() { return std::make_shared<CudaState>(); }



namespace {

// Milliseconds of each of `iters` calls of `enqueue` (after `warmup`), from CUDA events around
// the work it puts on `stream`.
std::vector<double> event_times(cudaStream_t stream, int warmup, int iters, const std::function<void()>& enqueue) {
  cudaEvent_t start, stop;
  TG_CUDA(cudaEventCreate(&start));
  TG_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < warmup + iters; ++i) {
    TG_CUDA(cudaEventRecord(start, stream));
    enqueue();
    TG_CUDA(cudaEventRecord(stop, stream));
    TG_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    TG_CUDA(cudaEventElapsedTime(&t, start, stop));
    if (i >= warmup) ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

}  // namespace

CudaGraphStats cuda_graph_stats(const ExecutableImpl& exe) {
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  return {st.captures, st.replays, st.capture_error};
}

std::vector<double> cuda_time_runs(const ExecutableImpl& exe, const std::vector<TensorData>& inputs, int warmup,
                                   int iters) {
  exe.check_inputs(inputs);
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  DeviceContext& ctx = DeviceContext::get(exe.device.index);
  TG_CUDA(cudaSetDevice(exe.device.index));
  if (st.sm_count == 0) TG_CUDA(cudaDeviceGetAttribute(&st.sm_count, cudaDevAttrMultiProcessorCount, exe.device.index));
  const GraphImpl& g = exe.module.graph;
  Run proto{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), {}, {}};
  std::vector<DevTensor> dev_in;
  for (const TensorData& t : inputs) dev_in.push_back(proto.upload(t));
  for (const auto& [name, id] : exe.variables) proto.snapshot[name] = proto.upload(exe.store->value(name));
  return event_times(ctx.stream(), warmup, iters, [&] {
    Run r{exe, st, g, ctx, ctx.stream(), std::vector<DevTensor>(g.values.size()), proto.snapshot, {}};
    for (size_t k = 0; k < dev_in.size(); ++k) r.slots[static_cast<size_t>(exe.module.feeds[k])] = dev_in[k];
    r.block(0);
  });
}

std::vector<double> cuda_time_replays(const ExecutableImpl& exe, const std::vector<TensorData>& inputs, int warmup,
                                      int iters) {
  exe.run_cuda(inputs);  // records, then captures
  auto& st = *static_cast<CudaState*>(exe.backend_state.get());
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.captured) throw Error("[bench] the run was not captured into a CUDA graph: " + st.capture_error);
  cudaStream_t stream = DeviceContext::get(exe.device.index).stream();
  return event_times(stream, warmup, iters, [&] { TG_CUDA(cudaGraphLaunch(st.captured->exec, stream)); });
}

}  // namespace tg::detail
