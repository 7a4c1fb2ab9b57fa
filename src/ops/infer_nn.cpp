// Inference for normalisations, softmax, losses and attention. Convolution and pooling are in
// infer_conv.cpp.
#include "ops/infer.h"

namespace tg::detail {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

// The shape both a and b can be (same rank, equal where both are known); nullopt otherwise.
std::optional<Shape> merge(const Shape& a, const Shape& b) {
  if (!a.ranked()) return b;
  if (!b.ranked()) return a;
  if (a.rank() != b.rank()) return std::nullopt;
  std::vector<int64_t> d = a.dims();
  for (int64_t i = 0; i < a.rank(); ++i) {
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return std::nullopt;
    if (a[i] < 0) d[static_cast<size_t>(i)] = b[i];
  }
  return Shape(d);
}

InferResult need_float_x(const InferContext& c) {
  if (!is_float(c.inputs[0].dtype))
    return op_error(c, "needs a floating-point input, x is " + c.inputs[0].str());
  return {};
}

// Checks that parameter `i` (named) has dtype of x and shape `want`.
InferResult check_param(const InferContext& c, size_t i, const char* name, const Shape& want) {
  const TensorType& p = c.inputs[i];
  if (p.dtype != c.inputs[0].dtype)
    return op_error(
        c, std::string(name) + " is " + p.str() + " but x is " + c.inputs[0].str() + " (dtypes must match)");
  if (!shape_compatible(want, p.shape))
    return op_error(c, std::string(name) + " is " + p.shape.str() + " but must be " + want.str() + " for x " +
                           c.inputs[0].shape.str());
  return {};
}

// The channel axis of a normalisation, normalised; error when out of range.
InferResult channel_axis(const InferContext& c, int64_t& ax) {
  const Shape& x = c.inputs[0].shape;
  int64_t axis = std::get<NormDesc>(c.attr).axis;
  auto n = normalize_axis(axis, x.rank());
  if (!n) return op_error(c, "axis " + num(axis) + " out of range for x " + x.str());
  ax = *n;
  return {};
}

InferResult batch_norm(const InferContext& c, bool training) {
  InferResult r;
  if (!arity_ok(c, training ? 3 : 5, r)) return r;
  if (r = need_float_x(c); !r.ok()) return r;
  int64_t ax;
  if (r = channel_axis(c, ax); !r.ok()) return r;
  Shape ch{c.inputs[0].shape[ax]};
  const char* inference_names[] = {"mean", "var", "gamma", "beta"};
  const char* training_names[] = {"gamma", "beta"};
  for (size_t i = 1; i < c.inputs.size(); ++i)
    if (r = check_param(c, i, training ? training_names[i - 1] : inference_names[i - 1], ch); !r.ok())
      return r;
  if (!training) return {{c.inputs[0]}, {}};
  TensorType stat(ch, c.inputs[0].dtype);
  return {{c.inputs[0], stat, stat}, {}};
}

InferResult layer_norm(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 3, r)) return r;
  if (r = need_float_x(c); !r.ok()) return r;
  int64_t ax;
  if (r = channel_axis(c, ax); !r.ok()) return r;
  const auto& d = c.inputs[0].shape.dims();
  Shape tail(std::vector<int64_t>(d.begin() + ax, d.end()));
  if (r = check_param(c, 1, "gamma", tail); !r.ok()) return r;
  if (r = check_param(c, 2, "beta", tail); !r.ok()) return r;
  return {{c.inputs[0]}, {}};
}

InferResult group_norm(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 3, r)) return r;
  if (r = need_float_x(c); !r.ok()) return r;
  int64_t ax;
  if (r = channel_axis(c, ax); !r.ok()) return r;
  const Shape& x = c.inputs[0].shape;
  int64_t g = std::get<NormDesc>(c.attr).groups;
  if (x.rank() < 2) return op_error(c, "needs x of rank >= 2, x is " + x.str());
  if (g < 1) return op_error(c, "groups must be >= 1, got " + num(g));
  if (x[ax] >= 0 && x[ax] % g != 0)
    return op_error(c, "groups " + num(g) + " do not divide the " + num(x[ax]) + " channels of x " + x.str() +
                           " (axis " + num(ax) + ")");
  if (r = check_param(c, 1, "gamma", Shape{x[ax]}); !r.ok()) return r;
  if (r = check_param(c, 2, "beta", Shape{x[ax]}); !r.ok()) return r;
  return {{c.inputs[0]}, {}};
}

// Checks that `mask` broadcasts to `target` without enlarging it.
bool mask_fits(const Shape& mask, const Shape& target) {
  if (mask.rank() > target.rank()) return false;
  for (int64_t i = 1; i <= mask.rank(); ++i) {
    int64_t m = mask[mask.rank() - i], t = target[target.rank() - i];
    if (m != 1 && m >= 0 && t >= 0 && m != t) return false;
  }
  return true;
}

}  // namespace

InferResult infer_norm(const InferContext& c) {
  if (std::get<NormDesc>(c.attr).epsilon < 0)
    return op_error(c, "epsilon must be >= 0, got " + std::to_string(std::get<NormDesc>(c.attr).epsilon));
  switch (c.kind) {
    case OpKind::BatchNorm: return batch_norm(c, false);
    case OpKind::BatchNormTraining: return batch_norm(c, true);
    case OpKind::LayerNorm: return layer_norm(c);
    default: return group_norm(c);
  }
}

InferResult infer_softmax(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (r = need_float_x(c); !r.ok()) return r;
  const Shape& x = c.inputs[0].shape;
  int64_t axis = std::get<AxisDesc>(c.attr).axis;
  if (x.ranked() && !normalize_axis(axis, x.rank()))
    return op_error(c, "axis " + num(axis) + " out of range for x " + x.str());
  return {{c.inputs[0]}, {}};
}

// softmax_cross_entropy: per-row loss over `axis`; mse: elementwise. Then none keeps that
// shape, sum and mean reduce to a scalar.
InferResult infer_loss(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  bool sce = c.kind == OpKind::SoftmaxCrossEntropy;
  const char* a = sce ? "logits" : "a";
  const char* b = sce ? "labels" : "b";
  if (c.inputs[0].dtype != c.inputs[1].dtype || !is_float(c.inputs[0].dtype))
    return op_error(c, "needs floating-point operands of one dtype: " + describe_inputs(c, {a, b}));
  auto s = merge(c.inputs[0].shape, c.inputs[1].shape);
  if (!s) return op_error(c, "operand shapes differ: " + describe_inputs(c, {a, b}));
  const auto& d = std::get<LossDesc>(c.attr);
  if (sce) {
    auto ax = normalize_axis(d.axis, s->rank());
    if (!ax) return op_error(c, "axis " + num(d.axis) + " out of range for logits " + s->str());
    std::vector<int64_t> rows = s->dims();
    rows.erase(rows.begin() + *ax);
    s = Shape(rows);
  }
  Shape out = d.reduction == LossReduction::none ? *s : Shape{};
  return {{TensorType(out, c.inputs[0].dtype)}, {}};
}

// q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv], mask broadcastable to [..., Lq, Lk]
// -> [..., Lq, Dv]; the batch dims of q, k and v broadcast.
InferResult infer_attention(const InferContext& c) {
  if (c.inputs.size() != 3 && c.inputs.size() != 4)
    return op_error(c, "expects 3 or 4 inputs (q, k, v, mask), got " + num(int64_t(c.inputs.size())));
  const TensorType &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
  auto qkv = [&] { return describe_inputs(c, {"q", "k", "v"}); };
  if (q.dtype != k.dtype || q.dtype != v.dtype || !is_float(q.dtype))
    return op_error(c, "q, k and v need one floating-point dtype: " + qkv());
  if (q.shape.rank() < 2 || k.shape.rank() < 2 || v.shape.rank() < 2)
    return op_error(c, "q, k and v need rank >= 2: " + qkv());
  int64_t lq = q.shape.dim(-2), dq = q.shape.dim(-1), dk = k.shape.dim(-1);
  int64_t lk = k.shape.dim(-2), lv = v.shape.dim(-2), dv = v.shape.dim(-1);
  if (dq >= 0 && dk >= 0 && dq != dk) return op_error(c, "head dims of q and k differ: " + qkv());
  if (lk >= 0 && lv >= 0 && lk != lv) return op_error(c, "key and value lengths differ: " + qkv());
  auto batch_of = [](const Shape& s) {
    return Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2));
  };
  auto batch = broadcast_shapes(batch_of(q.shape), batch_of(k.shape));
  if (batch) batch = broadcast_shapes(*batch, batch_of(v.shape));
  if (!batch) return op_error(c, "batch dims of q, k and v do not broadcast: " + qkv());
  std::vector<int64_t> out = batch->dims(), scores = batch->dims();
  out.insert(out.end(), {lq, dv});
  scores.insert(scores.end(), {lq, lk >= 0 ? lk : lv});
  if (c.inputs.size() == 4) {
    const TensorType& m = c.inputs[3];
    if (m.dtype != DType::boolean && m.dtype != q.dtype)
      return op_error(
          c, std::string("mask must be bool or q's dtype ") + dtype_name(q.dtype) + ", mask is " + m.str());
    if (!mask_fits(m.shape, Shape(scores)))
      return op_error(c, "mask " + m.shape.str() + " does not broadcast to the scores " +
                             Shape(scores).str() + ": " + qkv());
  }
  return {{TensorType(Shape(out), q.dtype)}, {}};
}

}  // namespace tg::detail
