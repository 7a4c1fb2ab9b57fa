// The stencil on the GPU (cuda_stencil.h): planning and launch. plan_stencil_kernel infers the
// types of the stitched step, resolves window, strides, dilation and padding into StencilArgs,
// classifies the prologue / epilogue operands (flat, scalar, broadcast), compiles constant weights
// in, picks the direct kernel (stencil_direct_kernel.cpp) or the tile kernel
// (stencil_tile_kernel.cpp) and has the Writer (stencil_codegen.h) generate its source;
// prepare_stencil_stitch compiles it with NVRTC (cached per step), launch_stencil_stitch enqueues it.
#include "backends/cuda/cuda_stencil.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/stencil_codegen.h"
#include "tgraph/error.h"

namespace tg::detail {

using namespace stencil_codegen;

namespace {

constexpr int64_t kMaxTaps = 1 << 16;

using Dims = std::vector<int64_t>;

Dims or_fill(const Dims& v, size_t n, int64_t dflt) { return v.empty() ? Dims(n, dflt) : v; }

int index_of(const std::vector<int32_t>& v, int32_t x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// Access kind of operand type t in a group of shape gs, and its strides (broadcast) into a.
bool classify(const TensorType& t, const Shape& gs, int k, int side, StencilArgs& a, Access& acc) {
  const int64_t n = t.shape.num_elements(), gn = gs.num_elements();
  if (n == gn) {
    acc = Access::flat;
    return true;
  }
  if (n == 1) {
    acc = Access::scalar;
    return true;
  }
  const int64_t rank = gs.rank(), tr = t.shape.rank();
  if (rank > 8 || tr > rank) return false;
  acc = Access::broadcast;
  a.grank[side] = static_cast<int>(rank);
  long long stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    a.gdims[side][d] = gs[d];
    const int64_t sd = d - (rank - tr);
    const int64_t dim = sd >= 0 ? t.shape[sd] : 1;
    if (dim != 1 && dim != gs[d]) return false;
    a.gstride[side][k][d] = (dim == 1 && gs[d] != 1) || sd < 0 ? 0 : stride;
    stride *= dim;
  }
  return true;
}

}  // namespace

StencilStitch lone_stencil(const GraphImpl& g, int32_t node) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  StencilStitch s;
  s.stencil = node;
  s.inputs.push_back(n.inputs[0]);
  if (n.inputs[1] != n.inputs[0]) s.inputs.push_back(n.inputs[1]);
  s.outputs = {n.outputs[0]};
  return s;
}

std::optional<StencilKernelPlan> plan_stencil_kernel(const GraphImpl& g, const StencilStitch& s,
                                                     const std::vector<TensorType>& in) {
  if (in.size() != s.inputs.size() || s.inputs.size() > kStencilOperands ||
      s.outputs.size() > kStencilOperands || s.outputs.empty())
    return std::nullopt;
  const Node& sn = g.nodes[static_cast<size_t>(s.stencil)];
  // Concrete types of every value of the step, inferred piece by piece.
  std::unordered_map<int32_t, TensorType> types;
  for (size_t k = 0; k < in.size(); ++k) types[s.inputs[k]] = in[k];
  auto infer = [&](int32_t id) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    std::vector<TensorType> it;
    for (int32_t v : n.inputs) {
      auto f = types.find(v);
      if (f == types.end()) return false;
      it.push_back(f->second);
    }
    InferResult r = g.infer_with(n, it);
    if (!r.ok() || r.types.size() != n.outputs.size()) return false;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!r.types[i].shape.is_static()) return false;
      types[n.outputs[i]] = r.types[i];
    }
    return true;
  };
  for (const auto* ids : {&s.prologue.nodes, &s.source_views})
    for (int32_t id : *ids)
      if (!infer(id)) return std::nullopt;
  if (!infer(s.stencil)) return std::nullopt;
  for (const auto* ids : {&s.result_views, &s.epilogue.nodes})
    for (int32_t id : *ids)
      if (!infer(id)) return std::nullopt;
  for (int32_t v : s.outputs)
    if (!types.count(v)) return std::nullopt;

  const TensorType &src = types.at(sn.inputs[0]), &wt = types.at(sn.inputs[1]), &yt = types.at(sn.outputs[0]);
  Generated gen;
  gen.g = &g;
  gen.s = &s;
  Config& c = gen.c;
  c.dt = src.dtype;
  if (c.dt != DType::f32 && c.dt != DType::f64 && c.dt != DType::f16 && c.dt != DType::bf16)
    return std::nullopt;
  if (!src.shape.is_static() || src.shape.rank() < 4 || wt.shape.rank() != 4) return std::nullopt;
  const auto& d = std::get<StencilDesc>(sn.attr);
  c.red = d.reduction;
  c.bnd = d.boundary;
  c.pad_value = d.padding_constant;
  const Dims stride = or_fill(d.strides, 4, 1), dil = or_fill(d.dilation_rates, 4, 1);
  const Dims offs = or_fill(d.offsets, 4, 0), expl = or_fill(d.explicit_padding, 8, 0);
  const size_t lead = static_cast<size_t>(src.shape.rank()) - 4;
  StencilKernelPlan plan;
  StencilArgs& a = plan.args;
  int64_t batch = 1, taps = 1, o[4];
  for (size_t i = 0; i < lead; ++i) batch *= src.shape[static_cast<int64_t>(i)];
  for (int i = 0; i < 4; ++i) {
    const int64_t n = src.shape[static_cast<int64_t>(lead) + i];
    c.k[i] = wt.shape[i];
    c.s[i] = stride[static_cast<size_t>(i)];
    c.d[i] = dil[static_cast<size_t>(i)];
    o[i] = yt.shape[static_cast<int64_t>(lead) + i];
    if (c.k[i] < 1 || c.s[i] < 1 || c.d[i] < 1) return std::nullopt;
    taps *= c.k[i];
    const int64_t ke = (c.k[i] - 1) * c.d[i] + 1;
    const int64_t total = std::max<int64_t>((o[i] - 1) * c.s[i] + ke - n, 0);
    int64_t pad = 0;
    switch (d.padding_style) {
      case PaddingStyle::explicit_:
      case PaddingStyle::explicit_offset: pad = expl[2 * static_cast<size_t>(i)]; break;
      case PaddingStyle::same: pad = total / 2; break;
      case PaddingStyle::same_lower: pad = (total + 1) / 2; break;
      case PaddingStyle::valid: break;
    }
    a.n[i] = n;
    a.o[i] = o[i];
    a.base[i] = offs[static_cast<size_t>(i)] - pad;
  }
  if (taps > kMaxTaps) return std::nullopt;
  for (int32_t v : s.outputs) plan.output_types.push_back(types.at(v));
  const int64_t outputs = yt.shape.num_elements();
  if (outputs == 0) return plan;  // nothing to launch
  for (int i = 0; i < 4; ++i)
    if (a.n[i] == 0) return std::nullopt;  // every tap reads outside an empty source: the reference's rule
  // Strides: [0] one whole window block (the flattened leading dims), [1..4] dims 0..3.
  a.sstride[4] = a.ostride[4] = 1;
  for (int i = 3; i >= 0; --i) {
    a.sstride[i] = a.sstride[i + 1] * a.n[i];
    a.ostride[i] = a.ostride[i + 1] * a.o[i];
  }

  // Weights: compiled in when they are a finite constant of few taps.
  const int32_t wv = sn.inputs[1];
  const int32_t wnode = g.values[static_cast<size_t>(wv)].node;
  if (wnode >= 0 && g.nodes[static_cast<size_t>(wnode)].kind == OpKind::Constant && taps <= kUnrolledTaps) {
    const TensorData& wd = g.nodes[static_cast<size_t>(wnode)].data;
    if (wd.num_elements() == taps) {
      for (int64_t t = 0; t < taps; ++t) c.weights.push_back(wd.at(t));
      for (double w : c.weights)
        if (!std::isfinite(w)) c.weights.clear();
    }
  }
  c.weights_operand = index_of(s.inputs, wv);

  // Prologue and epilogue operands.
  bool broadcast = false;
  if (!s.prologue.nodes.empty()) {
    if (s.prologue.outputs.size() != 1 || !elementwise_supported(g, s.prologue)) return std::nullopt;
    gen.pro_out = s.prologue.outputs[0];
    const Shape& gs = types.at(gen.pro_out).shape;
    for (int32_t id : s.prologue.nodes)
      if (types.at(g.nodes[static_cast<size_t>(id)].outputs[0]).shape.num_elements() != gs.num_elements())
        return std::nullopt;
    for (int32_t v : s.prologue.inputs) {
      Operand op{index_of(s.inputs, v), Access::flat};
      if (op.index < 0 || !classify(types.at(v), gs, op.index, 0, a, op.access)) return std::nullopt;
      broadcast |= op.access == Access::broadcast;
      gen.pro_ops.emplace_back(v, op);
    }
  } else {
    gen.source_operand = index_of(s.inputs, sn.inputs[0]);
    if (gen.source_operand < 0) return std::nullopt;
  }
  gen.epi_in =
      s.result_views.empty() ? sn.outputs[0] : g.nodes[static_cast<size_t>(s.result_views.back())].outputs[0];
  if (!s.epilogue.nodes.empty()) {
    if (!elementwise_supported(g, s.epilogue)) return std::nullopt;
    const Shape& gs = types.at(g.nodes[static_cast<size_t>(s.epilogue.nodes.back())].outputs[0]).shape;
    if (gs.num_elements() != outputs) return std::nullopt;
    for (int32_t id : s.epilogue.nodes)
      if (types.at(g.nodes[static_cast<size_t>(id)].outputs[0]).shape.num_elements() != outputs)
        return std::nullopt;
    for (int32_t v : s.epilogue.inputs) {
      if (v == gen.epi_in) continue;
      Operand op{index_of(s.inputs, v), Access::flat};
      if (op.index < 0 || !classify(types.at(v), gs, op.index, 1, a, op.access)) return std::nullopt;
      broadcast |= op.access == Access::broadcast;
      gen.epi_ops.emplace_back(v, op);
    }
  } else if (s.outputs != std::vector<int32_t>{gen.epi_in}) {
    return std::nullopt;
  }
  for (int32_t v : s.outputs)
    if (v != gen.epi_in && index_of(s.epilogue.nodes, g.values[static_cast<size_t>(v)].node) < 0)
      return std::nullopt;
  gen.broadcast = broadcast;

  const int64_t elem = c.dt == DType::f64 ? 8 : 4;
  if (choose_direct(c, o, taps)) {
    // Vector loads: f32 rows of a multiple of 4 elements, chunks starting on a 16-byte boundary
    // (the thread's first output is a multiple of V); every operand of the prologue flat f32 or
    // a scalar. a.vec_in / a.vec_out are cleared at launch for operands that are not aligned.
    c.vin = c.dt == DType::f32 && a.n[3] % 4 == 0 && c.V % 4 == 0;
    if (s.prologue.nodes.empty()) {
      plan.vec_in_operands = {gen.source_operand};
    } else {
      for (const auto& [v, op] : gen.pro_ops) {
        if (op.access == Access::broadcast || (op.access == Access::flat && types.at(v).dtype != DType::f32))
          c.vin = false;
        if (op.access == Access::flat) plan.vec_in_operands.push_back(op.index);
      }
    }
    c.lo = c.vin ? ((a.base[3] % 4) + 4) % 4 : 0;
    c.nc = (c.lo + c.F[3] + 3) / 4;
    c.vout = c.V % 4 == 0 && a.o[3] % 4 == 0 && c.red != Reduction::argmin && c.red != Reduction::argmax;
    for (const TensorType& t : plan.output_types) c.vout = c.vout && t.dtype == DType::f32;
    a.vec_in = c.vin;
    a.vec_out = c.vout;
    if (!c.vin) plan.vec_in_operands.clear();
    plan.direct = true;
  } else if (!choose_tile(c, o, batch, elem)) {
    return std::nullopt;
  }
  double blocks = static_cast<double>(batch);
  for (int i = 0; i < 4; ++i) {
    a.nt[i] = (o[i] + c.T[i] - 1) / c.T[i];
    blocks *= static_cast<double>(a.nt[i]);
  }
  if (blocks > 2147483647.0) return std::nullopt;
  plan.blocks = static_cast<long long>(blocks);
  plan.source = Writer(gen).source();
  return plan;
}

namespace {

struct Prepared {
  CompiledKernel kernel;
  StencilKernelPlan plan;
};

}  // namespace

std::optional<StencilLaunch> prepare_stencil_stitch(const GraphImpl& g, const StencilStitch& s,
                                                    const std::vector<TensorType>& in, int device,
                                                    StencilStepCache* cache) {
  if (cache)
    for (const auto& [types, launch] : cache->entries)
      if (types == in) return launch;
  std::optional<StencilLaunch> l;
  if (std::optional<StencilKernelPlan> plan = plan_stencil_kernel(g, s, in)) {
    auto p = std::make_shared<Prepared>();
    if (plan->blocks > 0) p->kernel = nvrtc_kernel(plan->source, "tg_stencil", device);
    l = StencilLaunch{plan->output_types, nullptr};
    p->plan = std::move(*plan);
    l->kernel = p;
  }
  if (cache) {
    if (cache->entries.size() >= 16)
      cache->entries.erase(cache->entries.begin());  // many shapes: keep the latest
    cache->entries.emplace_back(in, l);
  }
  return l;
}

void launch_stencil_stitch(const StencilLaunch& l, const std::vector<const void*>& in,
                           const std::vector<void*>& out, cudaStream_t stream) {
  const auto& p = *static_cast<const Prepared*>(l.kernel.get());
  if (p.plan.blocks == 0) return;
  StencilArgs a = p.plan.args;
  for (size_t k = 0; k < in.size(); ++k) a.in[k] = in[k];
  for (size_t k = 0; k < out.size(); ++k) a.out[k] = out[k];
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  for (int k : p.plan.vec_in_operands) a.vec_in = a.vec_in && aligned(a.in[k]);
  for (size_t k = 0; k < out.size(); ++k) a.vec_out = a.vec_out && aligned(a.out[k]);
  void* params[] = {&a};
  TG_CUDA(cudaLaunchKernel(p.kernel.fn(), dim3(static_cast<unsigned>(p.plan.blocks)), dim3(kThreads), params,
                           0, stream));
}

bool cuda_stencil(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                  const std::vector<DevOut>& out, cudaStream_t stream, int device) {
  const int32_t id = static_cast<int32_t>(&n - g.nodes.data());
  StencilStitch s = lone_stencil(g, id);
  std::vector<TensorType> types;
  std::vector<const void*> ptrs;
  for (int32_t v : s.inputs) {
    const DevArg& d = in[static_cast<size_t>(index_of(n.inputs, v))];
    types.push_back(d.type);
    ptrs.push_back(d.ptr);
  }
  std::optional<StencilLaunch> l = prepare_stencil_stitch(g, s, types, device);
  if (!l || l->output_types.size() != 1 || !(l->output_types[0] == out[0].type)) return false;
  launch_stencil_stitch(*l, ptrs, {out[0].ptr}, stream);
  return true;
}

}  // namespace tg::detail
