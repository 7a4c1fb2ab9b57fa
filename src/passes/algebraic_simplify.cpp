#include "passes/algebraic_simplify.h"

#include "passes/fusion.h"

#include <cmath>
#include <optional>
#include <vector>

namespace tg::detail {

std::optional<double> splat(const GraphImpl& g, int32_t v, bool through_layout) {
  // A broadcast of a constant; with through_layout, any chain of layout ops over one (their
  // value is their first input's, rearranged: other inputs only give shapes).
  const Node* n = g.producer(v);
  for (bool first = true; n && !n->inputs.empty(); first = false) {
    const bool layout = n->kind == OpKind::Transpose || is_value_view(n->kind);
    if (!(n->kind == OpKind::BroadcastTo && (first || through_layout)) && !(layout && through_layout)) break;
    n = g.producer(n->inputs[0]);
  }
  if (!n || n->kind != OpKind::Constant || n->data.empty() || n->data.num_elements() == 0) return std::nullopt;
  double first = n->data.at(0);
  for (int64_t i = 1; i < n->data.num_elements(); ++i)
    if (n->data.at(i) != first) return std::nullopt;
  return first;
}

bool swaps_last_two_dims(const std::vector<int64_t>& perm) {
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t want = i == r - 2 ? r - 1 : i == r - 1 ? r - 2 : i;
    const int64_t got = perm[static_cast<size_t>(i)] < 0 ? perm[static_cast<size_t>(i)] + r : perm[static_cast<size_t>(i)];
    if (got != want) return false;
  }
  return true;
}

namespace {

// x * 0.5 * (1 + erf(x / sqrt 2)) in any order of its factors and terms (x / sqrt 2 also as
// x * (1 / sqrt 2)): the exact GELU as exporters spell it (torch.onnx's opset-17 BERT, Hugging
// Face's own gelu). Returns x, or -1. As one op it is computed exactly, not in five roundings,
// and backends fuse it (oneDNN's gelu_erf post-op, CUDA's fused kernels).
int32_t gelu_operand(const GraphImpl& g, const Node& n) {
  if (n.kind != OpKind::Mul || n.inputs.size() != 2) return -1;
  std::vector<int32_t> f;  // the product's factors, one level of nested mul expanded
  for (int32_t v : n.inputs) {
    const Node* p = g.producer(v);
    if (p && p->kind == OpKind::Mul && p->inputs.size() == 2 && p->control_deps.empty())
      f.insert(f.end(), p->inputs.begin(), p->inputs.end());
    else
      f.push_back(v);
  }
  if (f.size() != 3) return -1;
  auto near = [](std::optional<double> s, double c) { return s && std::fabs(*s - c) <= 1e-6 * c; };
  int half = -1;
  for (int i = 0; i < 3; ++i)
    if (near(splat(g, f[static_cast<size_t>(i)]), 0.5)) half = i;
  if (half < 0) return -1;
  for (int i = 0; i < 3; ++i) {
    if (i == half) continue;
    const int32_t x = f[static_cast<size_t>(i)], a = f[static_cast<size_t>(3 - half - i)];
    const Node* add = g.producer(a);
    if (!add || add->kind != OpKind::Add || add->inputs.size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      if (!near(splat(g, add->inputs[static_cast<size_t>(1 - k)]), 1.0)) continue;
      const Node* erf = g.producer(add->inputs[static_cast<size_t>(k)]);
      if (!erf || erf->kind != OpKind::Erf) continue;
      const Node* d = g.producer(erf->inputs[0]);
      if (!d || d->inputs.size() != 2) continue;
      const bool div = d->kind == OpKind::Div && d->inputs[0] == x && near(splat(g, d->inputs[1]), std::sqrt(2.0));
      const bool mul = d->kind == OpKind::Mul && (d->inputs[0] == x || d->inputs[1] == x) &&
                       near(splat(g, d->inputs[d->inputs[0] == x ? 1 : 0]), std::sqrt(0.5));
      if (div || mul) return x;
    }
  }
  return -1;
}

// The value that node n can be replaced by, or -1.
int32_t simplify(Module& m, Node& n) {
  GraphImpl& g = m.graph;
  if (n.outputs.size() != 1 || !n.control_deps.empty()) return -1;
  const TensorType& out = g.type(n.outputs[0]);
  auto same_type = [&](int32_t v) { return g.type(v) == out ? v : -1; };
  auto is = [&](int32_t v, double c) { auto s = splat(g, v); return s && *s == c; };
  switch (n.kind) {
    case OpKind::Identity:
      return same_type(n.inputs[0]);
    case OpKind::Mul: {
      if (is(n.inputs[1], 1.0)) return same_type(n.inputs[0]);
      if (is(n.inputs[0], 1.0)) return same_type(n.inputs[1]);
      const int32_t x = gelu_operand(g, n);
      if (x < 0 || !(g.type(x) == out) || !is_float(out.dtype)) return -1;
      n.kind = OpKind::Gelu;  // in place: the erf arithmetic is left to dead-code elimination
      n.inputs = {x};
      n.attr = NoDesc{};
      return -2;
    }
    case OpKind::Div:
      return is(n.inputs[1], 1.0) ? same_type(n.inputs[0]) : -1;
    case OpKind::Add:
      if (is(n.inputs[1], 0.0)) return same_type(n.inputs[0]);
      if (is(n.inputs[0], 0.0)) return same_type(n.inputs[1]);
      return -1;
    case OpKind::Sub:
      return is(n.inputs[1], 0.0) ? same_type(n.inputs[0]) : -1;
    case OpKind::Cast: {
      if (out.shape.is_static() && same_type(n.inputs[0]) >= 0) return n.inputs[0];
      // cast(cast(x, wider), x's dtype) is x: f16 / bf16 -> f32 -> back is exact (autocast's
      // cast back after a half op, then its cast to half for the next one).
      const Node* p = g.producer(n.inputs[0]);
      if (p && p->kind == OpKind::Cast && p->control_deps.empty() && g.type(p->inputs[0]) == out) {
        const DType x = out.dtype, mid = g.type(n.inputs[0]).dtype;
        if ((x == DType::f16 || x == DType::bf16) && (mid == DType::f32 || mid == DType::f64)) return p->inputs[0];
      }
      return -1;
    }
    case OpKind::BroadcastTo:
      return out.shape.is_static() ? same_type(n.inputs[0]) : -1;
    case OpKind::StridedSlice: {
      // A slice that keeps every element is its input: torch.export spells x[:, 0] as
      // slice(x, 0, 0, INT64_MAX) then select, and BERT's pooler copied its whole [B, S, H]
      // input for it on every run.
      const auto& d = std::get<SliceDesc>(n.attr);
      const Shape& in = g.type(n.inputs[0]).shape;
      if (d.squeeze_mask != 0 || !in.ranked() || d.begin.size() > 62 || d.end.size() != d.begin.size() ||
          (!d.strides.empty() && d.strides.size() != d.begin.size()))
        return -1;
      for (size_t i = 0; i < d.begin.size(); ++i) {
        const int64_t dim = in[static_cast<int64_t>(i)];
        const bool from_start = ((d.begin_mask >> i) & 1) || d.begin[i] == 0;
        const bool to_end = ((d.end_mask >> i) & 1) || d.end[i] >= (int64_t{1} << 62) || (dim >= 0 && d.end[i] >= dim);
        if ((d.strides.empty() ? 1 : d.strides[i]) != 1 || !from_start || !to_end) return -1;
      }
      return same_type(n.inputs[0]);
    }
    case OpKind::Select: {  // a condition known throughout picks its branch
      const auto c = n.inputs.size() == 3 ? splat(g, n.inputs[0]) : std::nullopt;
      return c ? same_type(n.inputs[*c != 0.0 ? 1 : 2]) : -1;
    }
    case OpKind::Reshape: {
      if (out.shape.is_static() && same_type(n.inputs[0]) >= 0) return n.inputs[0];
      const Node* p = g.producer(n.inputs[0]);
      if (p && p->kind == OpKind::Reshape && out.shape.is_static()) {
        n.inputs[0] = p->inputs[0];  // reshape(reshape(x)) -> reshape(x)
        return -2;
      }
      return -1;
    }
    case OpKind::Transpose: {
      const Node* p = g.producer(n.inputs[0]);
      if (!p || p->kind != OpKind::Transpose) {
        const auto& perm = std::get<AxesDesc>(n.attr).axes;
        bool identity = true;
        for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
        if (identity) return same_type(n.inputs[0]);
        // Moving only dims of size 1 keeps the element order: a reshape, which copies nothing
        // (the layout pass's transposes of per-channel [1,C,1,1] values are these).
        const Shape& in = g.type(n.inputs[0]).shape;
        if (!in.is_static() || !out.shape.is_static()) return -1;
        int64_t last = -1;
        const int64_t r = static_cast<int64_t>(perm.size());
        for (int64_t a : perm) {
          const int64_t k = a < 0 ? a + r : a;
          if (in[k] == 1) continue;
          if (k < last) return -1;
          last = k;
        }
        n.kind = OpKind::Reshape;
        n.attr = ShapeDesc{out.shape.dims()};
        return -2;
      }
      const auto& inner = std::get<AxesDesc>(p->attr).axes;
      auto outer = std::get<AxesDesc>(n.attr).axes;
      int64_t r = static_cast<int64_t>(outer.size());
      std::vector<int64_t> composed(outer.size());
      for (size_t i = 0; i < outer.size(); ++i) {
        int64_t o = outer[i] < 0 ? outer[i] + r : outer[i];
        int64_t in = inner[static_cast<size_t>(o)];
        composed[i] = in < 0 ? in + r : in;
      }
      n.inputs[0] = p->inputs[0];
      n.attr = AxesDesc{composed};
      return -2;
    }
    case OpKind::MatMul: {
      // matmul(transpose(x), ...) with the transpose swapping the last two dims: the matmul
      // reads x transposed itself (its transpose flags: cuBLASLt and oneDNN take transposed
      // operands), so no copy of x is made per run; a PyTorch Linear's weight.t() is one.
      auto& d = std::get<MatmulDesc>(n.attr);
      for (int k = 0; k < 2; ++k) {
        const Node* p = g.producer(n.inputs[static_cast<size_t>(k)]);
        if (!p || p->kind != OpKind::Transpose || !p->control_deps.empty()) continue;
        if (!swaps_last_two_dims(std::get<AxesDesc>(p->attr).axes)) continue;
        n.inputs[static_cast<size_t>(k)] = p->inputs[0];
        (k == 0 ? d.transpose_a : d.transpose_b) ^= true;
        return -2;
      }
      return -1;
    }
    default:
      return -1;
  }
}

}  // namespace

// A narrowing cast of a transpose or reshape that nothing else reads moves before it:
// cast(L(x), t) -> L(cast(x, t)), the two nodes trading places (L's value, read only by the
// cast, takes x's shape and t). Layout ops keep values, so the result is the same, and the
// layout op then moves the narrow bytes: autocast's f32 q, k and v heads transposed and then
// cast to half for attention are cast in the kernel that computes them (the bias add) and
// transposed in half. Repeated, the cast climbs a chain of such ops.
bool sink_layout_below_cast(Module& m, Node& n, const std::vector<int32_t>& uses) {
  GraphImpl& g = m.graph;
  if (n.kind != OpKind::Cast || !n.control_deps.empty() || n.inputs.size() != 1) return false;
  const int32_t y = n.inputs[0];
  const int32_t lid = g.values[static_cast<size_t>(y)].node;
  if (lid < 0 || uses[static_cast<size_t>(y)] != 1) return false;
  Node& l = g.nodes[static_cast<size_t>(lid)];
  if ((l.kind != OpKind::Transpose && !is_value_view(l.kind)) || l.inputs.size() != 1 || l.outputs.size() != 1 ||
      !l.control_deps.empty() || l.block != n.block)
    return false;
  const TensorType& x = g.type(l.inputs[0]);
  const DType to = g.type(n.outputs[0]).dtype;
  if (!x.shape.is_static() || dtype_size(to) >= dtype_size(x.dtype) || !is_float(to) || !is_float(x.dtype))
    return false;
  // Trade: l computes cast(x) into y (now x's shape, dtype `to`); n applies l's layout to y.
  std::swap(l.kind, n.kind);
  std::swap(l.attr, n.attr);
  g.values[static_cast<size_t>(y)].type = TensorType(x.shape, to);
  return true;
}

bool AlgebraicSimplify::run(Module& m) {
  bool changed = false;
  std::vector<int32_t> uses;
  bool stale = true;  // use counts are taken again after any replacement
  for (size_t b = 0; b < m.graph.blocks.size(); ++b) {
    for (int32_t id : m.graph.blocks[b].nodes) {
      Node& n = m.graph.nodes[static_cast<size_t>(id)];
      if (n.kind == OpKind::Cast) {
        if (stale) uses = use_counts(m), stale = false;
        if (sink_layout_below_cast(m, n, uses)) {
          changed = true;
          continue;
        }
      }
      int32_t r = simplify(m, n);
      if (r == -2) {
        changed = true;  // rewritten in place; may simplify further (identity perm)
        r = simplify(m, n);
      }
      if (r >= 0 && r != n.outputs[0]) {
        replace_uses(m, n.outputs[0], r);
        changed = stale = true;
      }
    }
  }
  return changed;
}

}  // namespace tg::detail
