// Run's per-op dispatch (Run is declared in cuda_run.h): walks the fusion plan of each block
// and runs each step on the device — generated elementwise groups, stitched stencils,
// cuBLASLt matmuls (with epilogues, the bias gradient included), the kernel families of
// device_ops.cpp, control flow (cuda_run_control.cpp) — and an op no family covers on the CPU
// (operands copied both ways, which rules out capture), so every graph runs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/profile.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_run.h"
#include "runtime/graph_walk.h"
#include "backends/cuda/cuda_stencil.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernels_copy.h"
#include "backends/cuda/library_plans.h"
#include "backends/cuda/matmul_epilogue.h"
#include "backends/cuda/matmul_lt.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/shared_constants.h"
#include "ops/infer.h"
#include "passes/fusion.h"
#include "tgraph/error.h"

namespace tg::detail::cuda_run {
namespace {

TensorType concrete_type(const GraphImpl& g, const Node& n, const std::vector<TensorType>& in, size_t out) {
  return g.output_types_for(n, in).at(out);
}

// TGRAPH_PROFILE=1 (backends/cpu/profile.h) on an uncaptured run: each step's time on the
// device, from stream synchronisations around it, under its kind and output shape. (Runs are
// not captured while profiling, so every run is timed step by step.) A step's first run is left
// out: it includes compiling its kernels. A matmul that absorbs the steps after it is counted
// as the matmul's step. TGRAPH_PROFILE=first times only the first runs, by kind: host time
// included (kernel generation and compiles waited for, cuDNN / cuBLASLt heuristics).
class CudaStepTimer {
 public:
  CudaStepTimer(Run& r, const Step& s)
      : r_(r), on_(cpu_profiling() && !r.capturing() && r.st.profiled.insert(&s).second == profiling_first_runs()) {
    if (!on_) return;
    const std::vector<int32_t> ids = step_nodes(s);
    const Node& last = r.g.nodes[static_cast<size_t>(ids.back())];
    if (profiling_first_runs()) {
      what_ = std::string("first run: ") + (s.stitch    ? "stitched stencils"
                                            : s.reduce  ? "stitched reductions"
                                            : s.fused() ? "generated elementwise kernels"
                                                        : op_name(last.kind));
      TG_CUDA(cudaStreamSynchronize(r.stream));
      t0_ = std::chrono::steady_clock::now();
      return;
    }
    if (s.stitch) what_ = "stencil (stitched, " + std::to_string(ids.size()) + " ops)";
    else if (s.reduce) what_ = "reductions (stitched, " + std::to_string(ids.size()) + " ops)";
    else if (s.fused()) what_ = "fused(" + std::to_string(ids.size()) + " ops, last " + op_name(last.kind) + ")";
    else what_ = op_name(last.kind);
    if (!last.outputs.empty()) what_ += " " + r.g.type(last.outputs[0]).shape.str();
    if (profiling_shapes() && !s.fused())  // TGRAPH_PROFILE=2: a lone op's operand shapes too
      for (int32_t v : last.inputs) what_ += " <- " + r.g.type(v).shape.str();
    TG_CUDA(cudaStreamSynchronize(r.stream));
    t0_ = std::chrono::steady_clock::now();
  }
  ~CudaStepTimer() {
    if (!on_ || cudaStreamSynchronize(r_.stream) != cudaSuccess) return;
    cpu_profile_add("cuda " + what_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  CudaStepTimer(const CudaStepTimer&) = delete;
  CudaStepTimer& operator=(const CudaStepTimer&) = delete;

 private:
  Run& r_;
  bool on_;
  std::string what_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

const FusionPlan& Run::plan(int32_t b) {
  auto it = st.plans.find(b);
  if (it == st.plans.end())
    it = st.plans.emplace(b, plan_fusion(exe.module, b, cuda_fusion_options())).first;
  return it->second;
}

const std::vector<EpilogueMatch>& Run::epilogues(int32_t b) {
  auto it = st.epilogues.find(b);
  if (it == st.epilogues.end()) it = st.epilogues.emplace(b, match_epilogues(exe.module, plan(b))).first;
  return it->second;
}

const std::vector<std::vector<int32_t>>& Run::releases() {
  if (st.dead_planned) return st.dead_after;
  const std::vector<Step>& steps = plan(0).steps;
  std::vector<int64_t> last(g.values.size(), -1);
  auto touch = [&](int32_t v, size_t i) {
    if (v >= 0 && static_cast<size_t>(v) < last.size()) last[static_cast<size_t>(v)] = static_cast<int64_t>(i);
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    for (int32_t v : step_inputs(g, steps[i])) touch(v, i);
    for (int32_t id : step_nodes(steps[i]))
      for (int32_t v : g.nodes[static_cast<size_t>(id)].outputs) touch(v, i);
  }
  for (int32_t v : exe.module.targets) last[static_cast<size_t>(v)] = -1;  // returned after the block
  st.dead_after.assign(steps.size(), {});
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0) st.dead_after[static_cast<size_t>(last[v])].push_back(static_cast<int32_t>(v));
  st.dead_planned = true;
  return st.dead_after;
}

void Run::block(int32_t b) {
  const std::vector<Step>& steps = plan(b).steps;
  const std::vector<EpilogueMatch>& eps = epilogues(b);
  const int32_t outer = block_now;
  block_now = b;
  // The top-level block drops each value after its last reader (a captured run's memory is
  // then reused within the graph, an uncaptured run's by the pool in stream order): a
  // training step holds what the backward still needs, not every intermediate at once.
  const std::vector<std::vector<int32_t>>* dead = b == 0 ? &releases() : nullptr;
  size_t released = 0;
  auto release_through = [&](size_t i) {
    for (; dead && released <= i && released < dead->size(); ++released)
      for (int32_t v : (*dead)[released]) slots[static_cast<size_t>(v)] = DevTensor{};
  };
  auto run_step = [&](const Step& s) {
    CudaStepTimer timer(*this, s);
    if (s.stitch) stitched(*s.stitch);
    else if (s.reduce) reduce_stitched(*s.reduce);
    else if (s.fused()) group(s.group);
    else node(g.nodes[static_cast<size_t>(s.node)]);
  };
  // Before a step reads a collective's result (this step, the ones a matmul's epilogue takes
  // in, or control flow, whose bodies may read anything), the run's stream waits for it.
  auto join_for = [&](size_t i) {
    if (pending_collectives.empty()) return;
    const Step& s = steps[i];
    if (!s.fused() && !s.stitch && !s.reduce && s.node >= 0 && !g.nodes[static_cast<size_t>(s.node)].regions.empty())
      return join_all_collectives();
    std::vector<int32_t> reads = step_inputs(g, s);
    for (size_t k = 1; k <= eps[i].steps && i + k < steps.size(); ++k)
      for (int32_t v : step_inputs(g, steps[i + k])) reads.push_back(v);
    for (size_t m : eps[i].moved)
      for (int32_t v : step_inputs(g, steps[m])) reads.push_back(v);
    join_collectives(reads);
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const EpilogueMatch& ep = eps[i];
    if (ep.runs_at_matmul) continue;
    join_for(i);
    if (!ep.moved.empty()) {
      // Later steps moved to the matmul (a bias gradient, a gelu gradient): computed by its
      // epilogue, or (no algorithm for it) run right after it; the rest of them run after it.
      const bool folded = matmul(g.nodes[static_cast<size_t>(s.node)], &ep);
      if (!folded) node(g.nodes[static_cast<size_t>(s.node)]);
      for (size_t k = 0; k < ep.moved.size(); ++k)
        if (!folded || k >= ep.computed) run_step(steps[ep.moved[k]]);
      release_through(i);
      continue;
    }
    if (ep.kind != MatmulShape::Epilogue::none && matmul(g.nodes[static_cast<size_t>(s.node)], &ep)) {
      i += ep.steps;  // the bias add (and activation) ran inside cuBLASLt
      release_through(i);
      continue;
    }
    run_step(s);
    release_through(i);
  }
  if (b == 0) join_all_collectives();  // what leaves the block (targets, variable writes) is complete
  block_now = outer;
}

// A stitched step's inputs: their run types and device pointers.
std::vector<const void*> Run::step_operands(const std::vector<int32_t>& values, std::vector<TensorType>& types) const {
  std::vector<const void*> ptrs;
  for (int32_t v : values) {
    types.push_back(in(v).type);
    ptrs.push_back(in(v).buf.get());
  }
  return ptrs;
}

// A stitched step's outputs, allocated with the kernel's types; their device pointers.
std::vector<void*> Run::step_results(const std::vector<int32_t>& values, const std::vector<TensorType>& types) {
  std::vector<void*> ptrs;
  for (size_t i = 0; i < values.size(); ++i) {
    DevTensor o = alloc(types[i]);
    ptrs.push_back(o.buf.get());
    slots[static_cast<size_t>(values[i])] = std::move(o);
  }
  return ptrs;
}

// The steps a stitched one replaces, one by one (its kernel does not cover the run).
void Run::pieces(const std::vector<Step>& steps) {
  for (const Step& p : steps) {
    if (p.fused()) group(p.group);
    else node(g.nodes[static_cast<size_t>(p.node)]);
  }
}

// A stencil with its elementwise prologue / epilogue as one kernel (cuda_stencil.h), or its
// pieces one by one when that kernel does not cover the run's types.
void Run::stitched(const StencilStitch& sp) {
  if (any_empty(sp.inputs)) return pieces(sp.pieces);
  std::vector<TensorType> types;
  const std::vector<const void*> ins = step_operands(sp.inputs, types);
  std::optional<StencilLaunch> l = prepare_stencil_stitch(g, sp, types, ctx.index(), &st.stencils[&sp]);
  if (!l) return pieces(sp.pieces);
  launch_stencil_stitch(*l, ins, step_results(sp.outputs, l->output_types), stream);
}

// Reductions with their prologue and epilogue as one kernel (reduce_stitch_kernel.h), or the
// pieces on their own (prologue group, reductions, views, epilogue group) when the kernel does
// not cover the step.
void Run::reduce_stitched(const ReduceStitch& rs) {
  if (any_empty(rs.inputs)) return pieces(rs.pieces);
  std::vector<TensorType> types;
  const std::vector<const void*> ins = step_operands(rs.inputs, types);
  auto it = st.reduce_stitches.find(&rs);
  if (it == st.reduce_stitches.end())
    it = st.reduce_stitches.emplace(&rs, prepare_reduce_stitch(g, rs, types, st.sm_count, st.sm_major)).first;
  bool planned_types = true;  // the launch was prepared for the graph's (static) types
  for (size_t k = 0; k < rs.inputs.size(); ++k) planned_types &= types[k] == g.type(rs.inputs[k]);
  if (!it->second || !planned_types) return pieces(rs.pieces);
  ReduceStitchLaunch& l = *it->second;
  const std::vector<void*> outs = step_results(rs.outputs, l.output_types);
  ready_reduce_stitch(l, ctx.index());
  DeviceBuffer ws = l.workspace_bytes() ? buffer(l.workspace_bytes()) : DeviceBuffer{};
  launch_reduce_stitch(l, ins, outs, ws.get(), stream, ctx.index());
  for (int32_t v : rs.views) node(g.nodes[static_cast<size_t>(v)]);  // aliases of the results
}

// ---- fused / single elementwise kernels ----
// The group's output shape for the current input shapes, inferred member by member once per
// distinct input signature (a run with static shapes infers it once, then only compares).
const Shape& Run::group_shape(const FusionGroup& grp) {
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

namespace {

// How a fused elementwise group of `shape` launches for inputs of `in_shapes` at `ins` /
// outputs at `outs`: its arguments, indexing, stride pattern and vector width (shared by the
// launch and by the first run's kernel prefetch, which passes aligned placeholder addresses).
struct GroupLaunch {
  ElementwiseArgs a{};
  Indexing ix = Indexing::flat;
  std::optional<StridePattern> pattern;
  int vec = 1;
};

// Whether Run::node runs n as a lone group (no view, matmul, control flow, collective or device
// kernel takes it first): what prefetch_kernels prefetches for a step that is no group.
bool runs_as_lone_group(const GraphImpl& g, const Node& n) {
  switch (n.kind) {
    case OpKind::Reshape: case OpKind::ExpandDims: case OpKind::Squeeze: case OpKind::Bitcast:
    case OpKind::NonZeroIndices: case OpKind::MatMul: case OpKind::IfElse: case OpKind::ForLoop:
    case OpKind::WhileLoop: case OpKind::AllReduce: case OpKind::AllGather: case OpKind::ReduceScatter:
    case OpKind::Broadcast:
      return false;
    default:
      return !device_op_for(n.kind) && !n.outputs.empty() && elementwise_kernel_op(g, n);
  }
}

// Node `id` as a group of one (its output, its distinct inputs): how a lone elementwise op runs.
FusionGroup lone_group(const GraphImpl& g, int32_t id) {
  const Node& n = g.nodes[static_cast<size_t>(id)];
  FusionGroup single{{id}, {}, {n.outputs[0]}};
  for (int32_t v : n.inputs)
    if (std::find(single.inputs.begin(), single.inputs.end(), v) == single.inputs.end()) single.inputs.push_back(v);
  return single;
}

GroupLaunch group_launch(const GraphImpl& g, const FusionGroup& grp, const Shape& shape,
                         const std::vector<Shape>& in_shapes, const std::vector<const void*>& ins,
                         const std::vector<void*>& outs, bool sets_condition) {
  GroupLaunch l;
  ElementwiseArgs& a = l.a;
  a.n = shape.num_elements();
  a.rank = static_cast<int>(shape.rank());
  for (int d = 0; d < a.rank; ++d) a.dims[d] = shape[d];
  bool flat = true;
  for (size_t k = 0; k < grp.inputs.size(); ++k) {
    a.in[k] = ins[k];
    const Shape& s = in_shapes[k];
    flat &= s == shape;
    long long stride = 1;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t sd = d - (a.rank - static_cast<int>(s.rank()));
      int64_t dim = sd >= 0 ? s[sd] : 1;
      a.strides[k][d] = (dim == 1 && shape[d] != 1) || sd < 0 ? 0 : stride;
      stride *= sd >= 0 ? dim : 1;
    }
  }
  for (size_t k = 0; k < outs.size(); ++k) a.out[k] = outs[k];
  if (!flat) {
    coalesce_dims(a, static_cast<int>(grp.inputs.size()));
    l.ix = a.n < (1LL << 31) ? Indexing::strided32 : Indexing::strided;
    if (l.ix == Indexing::strided32)
      for (int d = 0; d < a.rank; ++d) {
        const FastDivisor f = fast_divisor(static_cast<uint32_t>(a.dims[d]));
        a.div_mul[d] = f.mul;
        a.div_shift[d] = f.shift;
      }
  }
  // Strided kernels are compiled for their inputs' broadcasting (elementwise_source), and for
  // the outputs each thread computes (elementwise_vector_width).
  if (l.ix != Indexing::flat) l.pattern = StridePattern::of(a, static_cast<int>(grp.inputs.size()));
  if (!sets_condition) {
    std::vector<DType> in_types, out_types;
    for (int32_t v : grp.inputs) in_types.push_back(g.type(v).dtype);
    for (int32_t v : grp.outputs) out_types.push_back(g.type(v).dtype);
    l.vec = elementwise_vector_width(a, l.ix == Indexing::flat, in_types, out_types);
    if (l.pattern) l.pattern->hoist_inner = hoistable_inner(a, l.vec);
  }
  return l;
}

}  // namespace

void Run::prefetch_kernels(int32_t b) {
  // Placeholder addresses, aligned as the pool's and graph memory's are: a view at an odd
  // offset may launch a narrower kernel than prefetched (compiled then, as before).
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
  for (const Step& s : plan(b).steps) {
    if (s.reduce) {
      std::vector<TensorType> types;
      bool known = true;
      for (int32_t v : s.reduce->inputs) {
        known &= g.type(v).shape.is_static();
        types.push_back(g.type(v));
      }
      if (!known) continue;
      auto it = st.reduce_stitches.find(s.reduce.get());
      if (it == st.reduce_stitches.end())
        it = st.reduce_stitches.emplace(s.reduce.get(), prepare_reduce_stitch(g, *s.reduce, types, st.sm_count, st.sm_major)).first;
      if (it->second) nvrtc_prefetch(it->second->source, ctx.index());
      continue;
    }
    // A lone elementwise op runs as a group of one (node()): BERT's attention-mask
    // broadcast_tos, ~34 ms each when compiled in turn at a cold batch size (session 36).
    std::optional<FusionGroup> single;
    if (s.is_group()) {
      GroupInfo& info = st.groups[&s.group];
      if (info.supported < 0) info.supported = elementwise_supported(g, s.group) ? 1 : 0;
      if (!info.supported) continue;
    } else {
      if (s.stitch || s.node < 0 || s.pinned) continue;  // (a pinned op runs inside a library call)
      if (!runs_as_lone_group(g, g.nodes[static_cast<size_t>(s.node)])) continue;
      single = lone_group(g, s.node);
      if (!elementwise_supported(g, *single)) continue;
    }
    const FusionGroup& grp = single ? *single : s.group;
    if (grp.nodes.empty()) continue;
    const Shape& shape = g.type(g.nodes[static_cast<size_t>(grp.nodes.back())].outputs[0]).shape;  // as group_shape
    if (!shape.is_static() || shape.rank() > kMaxRank || shape.num_elements() == 0) continue;
    std::vector<Shape> in_shapes;
    bool known = true;
    for (int32_t v : grp.inputs) {
      known &= g.type(v).shape.is_static();
      in_shapes.push_back(g.type(v).shape);
    }
    if (!known) continue;
    const GroupLaunch l = group_launch(g, grp, shape, in_shapes, std::vector<const void*>(grp.inputs.size(), aligned),
                                       std::vector<void*>(grp.outputs.size(), const_cast<void*>(aligned)), false);
    nvrtc_prefetch(elementwise_source(g, grp, l.ix, -1, l.pattern ? &*l.pattern : nullptr, l.vec), ctx.index());
  }
}

std::vector<WarmCall> Run::library_warm_calls(int32_t b) {
  const int device = ctx.index();
  std::vector<WarmCall> calls;  // (the saved matmuls' are the executor's: cuda_executor.cpp)
  std::vector<std::pair<const Node*, std::vector<TensorType>>> seen;  // ResNet-50's 158 convolutions are 69 problems
  // Each call's operands take scratch memory (the pool keeps it for the run after): a call
  // whose operands exceed a sixteenth of the free memory (four run at once) is made in turn.
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();  // none then: no call ahead
  auto bytes = [](const TensorType& t) {
    return std::max<size_t>(1, static_cast<size_t>(t.shape.num_elements()) * dtype_size(t.dtype));
  };
  for (const Step& s : plan(b).steps) {
    if (s.fused()) continue;
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    const WarmProbe cold = device_op_warm_probe(n.kind);
    if (!cold) continue;
    std::vector<TensorType> types;
    bool known = true;
    for (int32_t v : n.inputs) {
      known &= g.type(v).shape.is_static();
      types.push_back(g.type(v));
    }
    if (!known || std::any_of(seen.begin(), seen.end(), [&](const auto& p) {
          return p.first->kind == n.kind && p.first->attr == n.attr && p.second == types;
        }))
      continue;
    seen.emplace_back(&n, types);
    std::vector<TensorType> outs = g.output_types_for(n, types);
    if (!cold(g, n, types, outs, device)) continue;  // its kernels are loaded: made in turn, cheaply
    size_t operands = 0;
    for (const auto* ts : {&types, &outs})
      for (const TensorType& t : *ts) operands += bytes(t);
    if (operands > free_bytes / 16) continue;
    calls.push_back([&g = g, &n, types, outs, op = device_op_for(n.kind), device](cudaStream_t stream) {
      call_on_scratch(op, g, n, types, outs, stream, device);
    });
  }
  return calls;
}

void Run::group(const FusionGroup& grp) {
  GroupInfo& info = st.groups[&grp];
  if (info.supported < 0) info.supported = elementwise_supported(g, grp) ? 1 : 0;
  if (!info.supported) {
    for (int32_t id : grp.nodes) fallback(g.nodes[static_cast<size_t>(id)]);
    return;
  }
  const Shape shape = group_shape(grp);
  if (static_cast<int>(shape.rank()) > kMaxRank) {
    for (int32_t id : grp.nodes) fallback(g.nodes[static_cast<size_t>(id)]);
    return;
  }
  std::vector<Shape> in_shapes;
  std::vector<const void*> ins;
  for (int32_t v : grp.inputs) {
    const DevTensor& t = in(v);
    in_shapes.push_back(t.type.shape);
    ins.push_back(t.buf.get());
  }
  int32_t condition = -1;
  std::vector<void*> outs;
  for (size_t k = 0; k < grp.outputs.size(); ++k) {
    int32_t v = grp.outputs[k];
    bool sets = false;
    DevTensor o = group_output(grp, v, shape, sets);
    if (sets) condition = v;
    outs.push_back(o.buf.get());
    slots[static_cast<size_t>(v)] = std::move(o);
  }
  if (shape.num_elements() == 0) return;
  GroupLaunch l = group_launch(g, grp, shape, in_shapes, ins, outs, condition >= 0);
  ElementwiseArgs& a = l.a;
  if (condition >= 0) a.handle = in_place->handle;
  const Indexing ix = l.ix;
  const int vec = l.vec;
  const std::optional<StridePattern>& pattern = l.pattern;
  auto key = std::make_pair(static_cast<const void*>(&grp),
                            std::to_string(static_cast<int>(ix) | (condition >= 0 ? kSetsCondition : 0)) + "x" +
                                std::to_string(vec) + (pattern ? "/" + pattern->key() : std::string()));
  auto kit = st.kernels.find(key);
  if (kit == st.kernels.end())
    kit = st.kernels
              .emplace(key, nvrtc_kernel(elementwise_source(g, grp, ix, condition, pattern ? &*pattern : nullptr, vec),
                                         elementwise_kernel_name(g, grp), ctx.index()))
              .first;
  // The grid-stride loop runs one wave: as many blocks as stay resident at once (a fixed count
  // that does not fit leaves a partial second wave on a kernel that needs many registers).
  CompiledKernel& kern = kit->second;
  if (kern.blocks_per_sm == 0) {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern.fn(), 256, 0) != cudaSuccess || b < 1) {
      (void)cudaGetLastError();
      b = 4;
    }
    kern.blocks_per_sm = b;
  }
  long long blocks = (a.n / vec + 255) / 256;
  long long max_blocks = static_cast<long long>(st.sm_count) * kern.blocks_per_sm;
  dim3 grid(static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks)), threads(256);
  void* params[] = {&a};
  TG_CUDA(cudaLaunchKernel(kern.fn(), grid, threads, params, 0, stream));
}

// The buffer output v of a group is written to: a loop's state buffer when the loop body being
// captured donates it and the group reads that state's old contents only element for element
// (each thread loads its element before storing it), else a fresh one. `sets_condition`: v is
// the loop's one-element predicate, so the kernel sets the loop's condition itself.
DevTensor Run::group_output(const FusionGroup& grp, int32_t v, const Shape& shape, bool& sets_condition) {
  TensorType type(shape, g.type(v).dtype);
  sets_condition = false;
  if (!in_place) return alloc(std::move(type));
  if (v == in_place->predicate && shape.num_elements() == 1) {
    sets_condition = true;
    in_place->predicate_set = true;
    ++st.body_stats.body_conditions_in_kernels;
  }
  auto it = in_place->into.find(v);
  if (it == in_place->into.end() || !(it->second.state.type == type)) return alloc(std::move(type));
  for (int32_t u : grp.inputs)
    if (it->second.old.count(u) && !(in(u).type.shape == shape)) return alloc(std::move(type));
  DevTensor state = it->second.state;
  in_place->into.erase(it);
  ++st.body_stats.body_results_in_place;
  return state;
}

// ---- ops ----
// A constant's device copy is made once per process for the host bytes it holds: executables
// that share those bytes (a dynamic executable's per-size copies) share it (shared_constants.h).
DevTensor Run::constant(const Node& n) {
  auto it = st.constants.find(static_cast<int32_t>(&n - g.nodes.data()));
  if (it == st.constants.end()) {
    DeviceBuffer d = shared_device_constant(ctx.index(), n.data, [&] { return upload_constant(n.data).buf; });
    it = st.constants.emplace(static_cast<int32_t>(&n - g.nodes.data()), DevTensor{n.data.type(), std::move(d)}).first;
  }
  return it->second;
}

void Run::upload_constants(int32_t b) {
  for (const Step& s : plan(b).steps)
    if (!s.fused() && g.nodes[static_cast<size_t>(s.node)].kind == OpKind::Constant)
      (void)constant(g.nodes[static_cast<size_t>(s.node)]);
}

// A node with an input of no elements whose outputs all have none (a detector's zero boxes
// through its box head) has nothing to compute: its outputs are allocated and no kernel or
// library call runs (cuDNN and cuBLASLt refuse zero sizes, and a zero-block grid is an error).
bool Run::nothing_to_compute(const Node& n) {
  if (!n.regions.empty() || n.outputs.empty() || n.kind == OpKind::NonZeroIndices) return false;
  bool empty_input = false;
  for (int32_t v : n.inputs) empty_input |= in(v).type.shape.num_elements() == 0;
  if (!empty_input) return false;
  std::vector<TensorType> types = g.output_types_for(n, in_types(n));
  for (const TensorType& t : types)
    if (!t.shape.is_static() || t.shape.num_elements() != 0) return false;
  for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = alloc(types[i]);
  return true;
}

// Whether any of these values has no elements (a stitched kernel then runs as its pieces).
bool Run::any_empty(const std::vector<int32_t>& values) const {
  for (int32_t v : values)
    if (in(v).type.shape.num_elements() == 0) return true;
  return false;
}

void Run::node(const Node& n) {
  if (walk_state_node(*this, n)) return;  // placeholders, constants, variables, assigns
  if (nothing_to_compute(n)) return;
  switch (n.kind) {
    case OpKind::Reshape: case OpKind::ExpandDims: case OpKind::Squeeze:
    case OpKind::Bitcast: {  // the kView ops; bitcast keeps the element size (ops/infer_elementwise.cpp)
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
    case OpKind::AllReduce: case OpKind::AllGather: case OpKind::ReduceScatter: case OpKind::Broadcast:
      if (collective(n)) return;
      break;
    default:
      if (DeviceOp op = device_op_for(n.kind)) {
        if (device_op(n, op)) return;
        break;
      }
      if (runs_as_lone_group(g, n)) {  // control dependencies only order it: still one kernel
        // Kernels are cached by the group's address: keep it in the executable's state.
        const auto id = static_cast<int32_t>(&n - g.nodes.data());
        auto& kept = st.singles[id];
        if (kept.nodes.empty()) kept = lone_group(g, id);
        group(kept);
        return;
      }
  }
  fallback(n);
}

// Runs a device kernel with preallocated outputs; false (nothing kept) if it declines.
bool Run::device_op(const Node& n, DeviceOp op) {
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
DevTensor Run::expand_batch(const DevTensor& x, const Shape& out) {
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
bool Run::matmul(const Node& n, const EpilogueMatch* ep) {
  // A mask is read only in the run (the loop trip) that wrote it: a forward that falls back
  // leaves none, so the backward falls back too.
  if (ep && ep->kind == MatmulShape::Epilogue::relu_aux_bias) relu_masks.erase(ep->aux);
  const DevTensor &a = in(n.inputs[0]), &b = in(n.inputs[1]);
  DType t = a.type.dtype;
  if (t != DType::f32 && t != DType::f16 && t != DType::bf16 && t != DType::f64) return false;
  const bool bgrad = ep && ep->kind == MatmulShape::Epilogue::bias_grad;
  const bool reads_aux = ep && MatmulShape::reads_aux(ep->kind), mask = ep && MatmulShape::mask_aux(ep->kind);
  if (ep && (t == DType::f64 || (ep->bias >= 0 && in(ep->bias).type.dtype != t))) return false;
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
      (k == 0 || out.shape.num_elements() == 0 ||
       (ep->bias >= 0 && (in(ep->bias).type.shape.num_elements() != nn || in(ep->bias).type.shape.dim(-1) != nn)) ||
       g.type(ep->output).shape.num_elements() != out.shape.num_elements()))
    return false;
  // The aux matrix: as the result, one batch, a leading dimension (n) that is a multiple of 8
  // (of 128 for relu's bit mask); drelu's mask must have been stored by this run's forward.
  if (ep && ep->aux >= 0) {
    if (batch != 1 || nn % (mask ? 128 : 8) != 0 || g.type(ep->aux).shape.num_elements() != out.shape.num_elements())
      return false;
    if (ep->kind == MatmulShape::Epilogue::dgelu_tanh &&
        (in(ep->aux).type.dtype != t || in(ep->aux).type.shape.num_elements() != out.shape.num_elements()))
      return false;
    if (ep->kind == MatmulShape::Epilogue::drelu &&
        (!relu_masks.count(ep->aux) || relu_masks.at(ep->aux).type.shape.num_elements() != m * nn / 8))
      return false;
  }
  // The bias gradient: 2-D operands only (matched so), its static result of n elements.
  if (bgrad && (k == 0 || out.shape.num_elements() == 0 || batch != 1 || sa.rank() != 2 || sb.rank() != 2 ||
                g.type(ep->grad).shape.num_elements() != nn))
    return false;
  DevTensor gb = bgrad ? alloc(g.type(ep->grad)) : DevTensor{};
  // gelu_tanh_aux_bias writes the pre-activation, relu_aux_bias relu's mask (a bit per element);
  // dgelu_tanh and drelu read them.
  DevTensor aux;
  if (ep && ep->aux >= 0) {
    if (reads_aux) aux = mask ? relu_masks.at(ep->aux) : in(ep->aux);
    else aux = alloc(mask ? TensorType(Shape{m * nn / 8}, DType::u8) : g.type(ep->aux));
  }
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
        const void* bias = bgrad ? gb.buf.get() : ep->bias >= 0 ? in(ep->bias).buf.get() : nullptr;
        if (!matmul_lt_epilogue(s, ea.buf.get(), eb.buf.get(), bias, aux.buf.get(), c.buf.get(), stream, ctx.index()))
          return false;
      } else {
        matmul_lt(s, ea.buf.get(), eb.buf.get(), c.buf.get(), stream, ctx.index());
      }
    }
  }
  if (bgrad) slots[static_cast<size_t>(ep->grad)] = std::move(gb);
  if (ep && ep->aux >= 0 && !reads_aux) (mask ? relu_masks[ep->aux] : slots[static_cast<size_t>(ep->aux)]) = std::move(aux);
  if (ep && !bgrad) c.type = g.type(ep->output);  // static: matched only then (a reshape may sit between)
  slots[static_cast<size_t>(ep && !bgrad ? ep->output : n.outputs[0])] = std::move(c);
  return true;
}

// An op with no GPU kernel yet: computed on the CPU, operands copied both ways.
void Run::fallback(const Node& n) {
  std::vector<TensorData> hin;
  for (int32_t v : n.inputs) hin.push_back(download(in(v)));
  std::vector<TensorData> hout = cpu_eval(g, n, hin);
  for (size_t i = 0; i < n.outputs.size(); ++i) slots[static_cast<size_t>(n.outputs[i])] = upload(hout[i]);
}

const std::string& Run::var_name(int32_t v) const { return walked_variable(g, v); }

}  // namespace tg::detail::cuda_run
