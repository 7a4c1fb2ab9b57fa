#include "passes/decompose.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/builder.h"
#include "ops/infer.h"
#include "passes/rewrite.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// Shape of a per-channel parameter viewed against x: [1,..,C,..,1].
std::vector<int64_t> channel_view(const Shape& x, int64_t axis) {
  std::vector<int64_t> v(static_cast<size_t>(x.rank()), 1);
  v[static_cast<size_t>(axis)] = x[axis] < 0 ? -1 : x[axis];
  return v;
}

std::vector<int64_t> all_but(int64_t rank, int64_t axis) {
  std::vector<int64_t> a;
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis) a.push_back(i);
  return a;
}

// The replacement values of node n's outputs, built with g; empty when n is not decomposed.
std::vector<Tensor> decompose(Graph& g, const Node& n, const std::vector<Tensor>& in) {
  switch (n.kind) {
    case OpKind::BatchNorm: case OpKind::BatchNormTraining: {
      const auto& d = std::get<NormDesc>(n.attr);
      Tensor x = in[0];
      if (!x.shape().ranked()) return {};
      int64_t ax = *normalize_axis(d.axis, x.rank());
      if (x.shape()[ax] < 0) return {};
      std::vector<int64_t> view = channel_view(x.shape(), ax), axes = all_but(x.rank(), ax);
      bool training = n.kind == OpKind::BatchNormTraining;
      Tensor mean = training ? g.reduce_mean(x, axes, true) : g.reshape(in[1], view);
      Tensor var = training ? g.reduce_variance(x, axes, true) : g.reshape(in[2], view);
      Tensor gamma = g.reshape(in[training ? 1 : 3], view), beta = g.reshape(in[training ? 2 : 4], view);
      Tensor inv = g.rsqrt(g.add(var, g.scalar(d.epsilon, x.dtype())));
      Tensor y = g.add(g.mul(g.mul(g.sub(x, mean), inv), gamma), beta);
      if (!training) return {y};
      return {y, g.reshape(mean, {x.shape()[ax]}), g.reshape(var, {x.shape()[ax]})};
    }
    case OpKind::LayerNorm: {
      const auto& d = std::get<NormDesc>(n.attr);
      Tensor x = in[0];
      int64_t ax = *normalize_axis(d.axis, x.rank());
      std::vector<int64_t> axes;
      for (int64_t i = ax; i < x.rank(); ++i) axes.push_back(i);
      Tensor mean = g.reduce_mean(x, axes, true), var = g.reduce_variance(x, axes, true);
      Tensor inv = g.rsqrt(g.add(var, g.scalar(d.epsilon, x.dtype())));
      return {g.add(g.mul(g.mul(g.sub(x, mean), inv), in[1]), in[2])};
    }
    case OpKind::GroupNorm: {
      // x viewed as [.., G, C/G, ..] at the channel axis: statistics per image and group over
      // every dim but the batch (0) and the group.
      const auto& d = std::get<NormDesc>(n.attr);
      Tensor x = in[0];
      if (!x.shape().ranked() || !x.shape().is_static()) return {};
      const int64_t ax = *normalize_axis(d.axis, x.rank()), G = d.groups;
      const std::vector<int64_t> xd = x.shape().dims();  // a copy: shape() returns a value
      if (ax == 0 || G < 1 || xd[static_cast<size_t>(ax)] % G != 0) return {};
      std::vector<int64_t> grouped(xd.begin(), xd.begin() + ax), axes;
      grouped.push_back(G);
      grouped.push_back(xd[static_cast<size_t>(ax)] / G);
      grouped.insert(grouped.end(), xd.begin() + ax + 1, xd.end());
      for (int64_t i = 1; i <= x.rank(); ++i)
        if (i != ax) axes.push_back(i);
      Tensor xg = g.reshape(x, grouped);
      Tensor mean = g.reduce_mean(xg, axes, true), var = g.reduce_variance(xg, axes, true);
      Tensor inv = g.rsqrt(g.add(var, g.scalar(d.epsilon, x.dtype())));
      Tensor xn = g.reshape(g.mul(g.sub(xg, mean), inv), xd);
      std::vector<int64_t> view = channel_view(x.shape(), ax);
      return {g.add(g.mul(xn, g.reshape(in[1], view)), g.reshape(in[2], view))};
    }
    case OpKind::ScaledMatMul: {
      // The 8-bit operands widened exactly to f32: one f32 matmul, then the scales.
      const auto& d = std::get<ScaledMatmulDesc>(n.attr);
      Tensor p = g.matmul(g.cast(in[0], DType::f32), g.cast(in[1], DType::f32), d.transpose_a, d.transpose_b);
      Tensor s = g.reshape(g.mul(in[2], in[3]), std::vector<int64_t>{});
      return {g.cast(g.mul(p, s), d.out)};
    }
    case OpKind::Attention: {
      // softmax(q k^T * scale + mask) v as two matmuls and a softmax; half types compute in
      // f32 (the scores and probabilities are not rounded to 8 or 11 bits). A row whose keys
      // are all masked (its maximum is -inf) gives 0 (docs/ops-semantics.md).
      const auto& d = std::get<AttentionDesc>(n.attr);
      Tensor q = in[0], k = in[1], v = in[2];
      if (!q.shape().ranked() || !k.shape().ranked() || q.rank() < 2 || k.rank() < 2) return {};
      const int64_t D = q.shape().dims().back(), Lq = q.shape().dim(-2), Lk = k.shape().dim(-2);
      if (D <= 0 || (d.causal && (Lq < 0 || Lk < 0))) return {};
      const DType t = q.dtype(), ct = t == DType::f16 || t == DType::bf16 ? DType::f32 : t;
      if (ct != t) q = g.cast(q, ct), k = g.cast(k, ct), v = g.cast(v, ct);
      const double scale = d.scale != 0 ? d.scale : 1.0 / std::sqrt(static_cast<double>(D));
      Tensor s = g.mul(g.matmul(q, k, false, true), g.scalar(scale, ct));
      Tensor ninf = g.scalar(-std::numeric_limits<double>::infinity(), ct);
      if (d.causal) {  // key j is visible to query i when j <= i
        TensorData allowed(Shape{Lq, Lk}, DType::boolean);
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lk; ++j) allowed.set(i * Lk + j, j <= i ? 1.0 : 0.0);
        s = g.select(g.constant(allowed), s, ninf);
      }
      const bool masked = in.size() > 3;
      if (masked) {
        Tensor m = in[3];
        s = m.dtype() == DType::boolean ? g.select(m, s, ninf) : g.add(s, m.dtype() == ct ? m : g.cast(m, ct));
      }
      Tensor p = g.softmax(s, -1);
      if (masked) {  // causal alone always leaves key 0 visible
        Tensor none = g.equal(g.reduce_max(s, {-1}, true), ninf);
        p = g.select(none, g.scalar(0.0, ct), p);
      }
      Tensor y = g.matmul(p, v);
      return {ct != t ? g.cast(y, t) : y};
    }
    case OpKind::SoftmaxCrossEntropy: {
      const auto& d = std::get<LossDesc>(n.attr);
      Tensor logits = in[0], labels = in[1];
      Tensor ls = g.log_softmax(logits, d.axis);
      // A zero label contributes 0 even where log_softmax is -inf (docs/ops-semantics.md).
      Tensor zero = g.mul(labels, g.scalar(0.0, labels.dtype()));
      Tensor prod = g.select(g.equal(labels, zero), zero, g.mul(labels, ls));
      Tensor per = g.neg(g.reduce_sum(prod, {d.axis}));
      if (d.reduction == LossReduction::none) return {per};
      return {d.reduction == LossReduction::sum ? g.reduce_sum(per) : g.reduce_mean(per)};
    }
    case OpKind::Mse: {
      const auto& d = std::get<LossDesc>(n.attr);
      Tensor sq = g.square(g.sub(in[0], in[1]));
      if (d.reduction == LossReduction::none) return {sq};
      return {d.reduction == LossReduction::sum ? g.reduce_sum(sq) : g.reduce_mean(sq)};
    }
    default:
      return {};
  }
}

}  // namespace

bool DecomposeComposites::run(Module& m) {
  if (!keep) return rewrite_nodes(m, decompose);
  const GraphImpl& G = m.graph;
  return rewrite_nodes(m, [this, &G](Graph& g, const Node& n, const std::vector<Tensor>& in) {
    return keep(G, n) ? std::vector<Tensor>{} : decompose(g, n, in);
  });
}

}  // namespace tg::detail
