#include "passes/constant_folding.h"

#include <cstring>
#include <vector>

#include "backends/cpu/reference.h"
#include "core/half.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// Folds of weight-sized constants, typed (the reference interpreter converts each element
// through double: seconds for a model's weights). Empty when not covered.
TensorData fast_transpose(const TensorData& x, const std::vector<int64_t>& perm, const Shape& out_shape) {
  const int64_t r = x.shape().rank();
  if (static_cast<int64_t>(perm.size()) != r || r == 0) return {};
  const size_t es = dtype_size(x.dtype());
  std::vector<int64_t> in_stride(static_cast<size_t>(r), 1), step(static_cast<size_t>(r)), idx(static_cast<size_t>(r), 0);
  for (int64_t i = r - 2; i >= 0; --i) in_stride[static_cast<size_t>(i)] = in_stride[static_cast<size_t>(i + 1)] * x.shape()[i + 1];
  for (int64_t i = 0; i < r; ++i) step[static_cast<size_t>(i)] = in_stride[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  TensorData y(out_shape, x.dtype());
  const auto* src = static_cast<const std::byte*>(x.data());
  auto* dst = static_cast<std::byte*>(y.data());
  const int64_t n = y.num_elements(), inner = out_shape[r - 1], inner_step = step[static_cast<size_t>(r - 1)];
  int64_t off = 0;
  for (int64_t done = 0; done < n; done += inner) {
    for (int64_t j = 0; j < inner; ++j) std::memcpy(dst + (done + j) * es, src + (off + j * inner_step) * es, es);
    for (int64_t d = r - 2; d >= 0; --d) {  // the odometer over the outer output dims
      const size_t u = static_cast<size_t>(d);
      off += step[u];
      if (++idx[u] < out_shape[d]) break;
      off -= step[u] * out_shape[d];
      idx[u] = 0;
    }
  }
  return y;
}

TensorData fast_cast(const TensorData& x, DType to) {
  if (x.dtype() != DType::f32 || (to != DType::f16 && to != DType::bf16)) return {};
  TensorData y(x.shape(), to);
  const float* a = x.ptr<float>();
  uint16_t* b = y.ptr<uint16_t>();
  const int64_t n = x.num_elements();
  for (int64_t i = 0; i < n; ++i) b[i] = to == DType::f16 ? float_to_half(a[i]) : float_to_bf16(a[i]);
  return y;
}

}  // namespace

bool ConstantFolding::run(Module& m) {
  GraphImpl& g = m.graph;
  bool changed = false;
  const std::vector<int32_t> uses = use_counts(m);
  for (Block& b : g.blocks) {
    for (int32_t id : b.nodes) {
      Node& n = g.nodes[static_cast<size_t>(id)];
      const OpDef& d = op_def(n.kind);
      if (d.has(kSource) || d.has(kStateful) || d.has(kSideEffects) || d.has(kHasRegions) ||
          n.inputs.empty() || n.kind == OpKind::NonZeroIndices || n.kind == OpKind::StopGradient)
        continue;
      bool all_const = true;
      std::vector<TensorData> in;
      for (int32_t v : n.inputs) {
        int32_t p = g.values[static_cast<size_t>(v)].node;
        if (p < 0 || g.nodes[static_cast<size_t>(p)].kind != OpKind::Constant) {
          all_const = false;
          break;
        }
        in.push_back(g.nodes[static_cast<size_t>(p)].data);
      }
      if (!all_const) continue;
      bool small = true;
      for (int32_t v : n.outputs) {
        int64_t e = g.type(v).shape.num_elements();
        small &= e >= 0 && e <= kMaxElements;
      }
      // Expanding a small constant (broadcast_to, tile, ...) would only bloat the graph.
      int64_t in_elems = 0;
      for (const TensorData& t : in) in_elems += t.num_elements();
      int64_t out_elems = g.type(n.outputs[0]).shape.num_elements();
      // A weight's cast or transpose replaces the one constant it reads, no larger: folded
      // whatever its size (the constant goes once nothing reads it).
      const bool relayout = (n.kind == OpKind::Cast || n.kind == OpKind::Transpose) && n.inputs.size() == 1 &&
                            uses[static_cast<size_t>(n.inputs[0])] == 1 && out_elems <= kMaxRelayout &&
                            dtype_size(g.type(n.outputs[0]).dtype) <= dtype_size(g.type(n.inputs[0]).dtype);
      if ((!small && !relayout) || (d.has(kShapeOnly) && out_elems > in_elems) || n.kind == OpKind::BroadcastTo)
        continue;
      std::vector<TensorData> out;
      if (relayout) {
        TensorData f = n.kind == OpKind::Cast ? fast_cast(in[0], std::get<CastDesc>(n.attr).to)
                                              : fast_transpose(in[0], std::get<AxesDesc>(n.attr).axes,
                                                               g.type(n.outputs[0]).shape);
        if (!f.empty()) out.push_back(std::move(f));
      }
      try {
        if (out.empty()) out = reference_eval(g, n, in);
      } catch (const Error&) {
        continue;  // an op that fails on these constants reports its error at run time
      }
      if (n.outputs.size() != 1) continue;  // multi-output folding would need one constant per output
      // The node becomes a constant in place: same output value id, so uses stay valid.
      n.kind = OpKind::Constant;
      n.inputs.clear();
      n.attr = NoDesc{};
      n.data = out[0];
      changed = true;
    }
  }
  return changed;
}

}  // namespace tg::detail
