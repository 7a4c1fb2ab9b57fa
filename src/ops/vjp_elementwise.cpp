// Gradient rules of elementwise ops. Operands have equal shapes except where dynamic dims
// left broadcasting to run time; unbroadcast() sums such gradients back.
#include <cmath>

#include "ops/vjp.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;
Tensor k(VjpContext& c, double v) { return c.g.scalar(v, c.in[0].dtype()); }
Tensor x0(VjpContext& c) { return c.in[0]; }
Tensor y0(VjpContext& c) { return c.out[0]; }
Tensor dy(VjpContext& c) { return c.dout[0]; }
Tensor mul(VjpContext& c, Tensor a, Tensor b) { return c.g.mul(a, b); }

// Unary rules: d/dx as a function of the context, times dy.
#define UNARY_RULE(name, ...)               \
  V name(VjpContext& c) {                   \
    Graph& g = c.g;                         \
    Tensor x = x0(c), y = y0(c), d = dy(c); \
    (void)g; (void)x; (void)y;              \
    return {__VA_ARGS__};                   \
  }

UNARY_RULE(identity_vjp, d)
UNARY_RULE(neg_vjp, g.neg(d))
UNARY_RULE(abs_vjp, mul(c, d, g.sign(x)))
UNARY_RULE(zero_vjp, g.mul(d, k(c, 0.0)))
UNARY_RULE(exp_vjp, mul(c, d, y))
UNARY_RULE(exp2_vjp, mul(c, d, g.mul(y, k(c, std::log(2.0)))))
UNARY_RULE(log_vjp, g.div(d, x))
UNARY_RULE(log2_vjp, g.div(d, g.mul(x, k(c, std::log(2.0)))))
UNARY_RULE(log1p_vjp, g.div(d, g.add(x, k(c, 1.0))))
UNARY_RULE(expm1_vjp, mul(c, d, g.add(y, k(c, 1.0))))
UNARY_RULE(sqrt_vjp, g.div(d, g.mul(y, k(c, 2.0))))
UNARY_RULE(rsqrt_vjp, mul(c, d, g.mul(g.mul(y, g.square(y)), k(c, -0.5))))
UNARY_RULE(reciprocal_vjp, g.neg(mul(c, d, g.square(y))))
UNARY_RULE(square_vjp, mul(c, d, g.mul(x, k(c, 2.0))))
UNARY_RULE(sin_vjp, mul(c, d, g.cos(x)))
UNARY_RULE(cos_vjp, g.neg(mul(c, d, g.sin(x))))
UNARY_RULE(tan_vjp, mul(c, d, g.add(k(c, 1.0), g.square(y))))
UNARY_RULE(sinh_vjp, mul(c, d, g.cosh(x)))
UNARY_RULE(cosh_vjp, mul(c, d, g.sinh(x)))
UNARY_RULE(tanh_vjp, mul(c, d, g.sub(k(c, 1.0), g.square(y))))
UNARY_RULE(asin_vjp, g.mul(d, g.rsqrt(g.sub(k(c, 1.0), g.square(x)))))
UNARY_RULE(acos_vjp, g.neg(g.mul(d, g.rsqrt(g.sub(k(c, 1.0), g.square(x))))))
UNARY_RULE(atan_vjp, g.div(d, g.add(k(c, 1.0), g.square(x))))
UNARY_RULE(asinh_vjp, g.mul(d, g.rsqrt(g.add(g.square(x), k(c, 1.0)))))
UNARY_RULE(acosh_vjp, g.mul(d, g.rsqrt(g.sub(g.square(x), k(c, 1.0)))))
UNARY_RULE(atanh_vjp, g.div(d, g.sub(k(c, 1.0), g.square(x))))
UNARY_RULE(erf_vjp, mul(c, d, g.mul(g.exp(g.neg(g.square(x))), k(c, 2.0 / std::sqrt(M_PI)))))
UNARY_RULE(sigmoid_vjp, mul(c, d, g.mul(y, g.sub(k(c, 1.0), y))))
// One op reading the result (x > 0 exactly where relu(x) > 0): the pre-activation need not be
// kept for the backward, so a forward matmul + bias + relu folds into one cuBLASLt epilogue, and
// a backend may fold relu_grad into the matmul producing d (cuBLASLt's DRELU).
UNARY_RULE(relu_vjp, g.relu_grad(d, y))
UNARY_RULE(silu_vjp, [&] {
  Tensor s = g.sigmoid(x);
  return mul(c, d, g.mul(s, g.add(k(c, 1.0), g.mul(x, g.sub(k(c, 1.0), s)))));
}())
UNARY_RULE(softplus_vjp, mul(c, d, g.sigmoid(x)))
// gelu(x) = x Φ(x): d/dx = Φ(x) + x φ(x).
UNARY_RULE(gelu_vjp, [&] {
  Tensor cdf = g.mul(g.add(k(c, 1.0), g.erf(g.mul(x, k(c, M_SQRT1_2)))), k(c, 0.5));
  Tensor pdf = g.mul(g.exp(g.mul(g.square(x), k(c, -0.5))), k(c, 0.5 * M_2_SQRTPI * M_SQRT1_2));
  return mul(c, d, g.add(cdf, g.mul(x, pdf)));
}())
// One op (a backend folds it into the matmul producing d: cuBLASLt's DGELU epilogue).
UNARY_RULE(gelu_tanh_vjp, g.gelu_tanh_grad(d, x))

V leaky_relu_vjp(VjpContext& c) {
  Graph& g = c.g;
  double alpha = c.attr<ScalarDesc>().alpha;
  return {g.select(g.greater(x0(c), k(c, 0.0)), dy(c), g.mul(dy(c), k(c, alpha)))};
}
V elu_vjp(VjpContext& c) {
  Graph& g = c.g;
  double alpha = c.attr<ScalarDesc>().alpha;
  return {g.select(g.greater(x0(c), k(c, 0.0)), dy(c), g.mul(dy(c), g.add(y0(c), k(c, alpha))))};
}
V hard_sigmoid_vjp(VjpContext& c) {
  Graph& g = c.g;
  const auto& d = c.attr<ScalarDesc>();
  Tensor z = g.add(g.mul(x0(c), k(c, d.alpha)), k(c, d.beta));
  Tensor inside = g.logical_and(g.greater(z, k(c, 0.0)), g.less(z, k(c, 1.0)));
  return {g.select(inside, g.mul(dy(c), k(c, d.alpha)), g.mul(dy(c), k(c, 0.0)))};
}
V cast_vjp(VjpContext& c) {
  if (!is_float(c.in[0].dtype())) return {Tensor()};
  return {c.g.cast(dy(c), c.in[0].dtype())};
}

// Binary rules return gradients for (a, b), summed back over broadcast dims.
V binary(VjpContext& c, Tensor da, Tensor db) {
  return {da.valid() ? unbroadcast(c.g, da, c.in[0]) : da, db.valid() ? unbroadcast(c.g, db, c.in[1]) : db};
}
// gelu_tanh_grad(dy, x) = dy g'(x), g = gelu_tanh: d/d dy = g'(x), d/dx = dy g''(x), where with
// u = a (x + b x^3), t = tanh(u): g'' = (1 - t^2) (u' - x t u'^2 + 3 a b x^2), u' = a (1 + 3 b x^2).
V gelu_tanh_grad_vjp(VjpContext& c) {
  Graph& g = c.g;
  const double a = std::sqrt(2.0 / M_PI), b = 0.044715;
  Tensor up = c.in[0], x = c.in[1];
  Tensor x2 = g.square(x);
  Tensor t = g.tanh(g.mul(g.add(x, g.mul(g.mul(x, x2), k(c, b))), k(c, a)));
  Tensor du = g.mul(g.add(k(c, 1.0), g.mul(x2, k(c, 3 * b))), k(c, a));
  Tensor inner = g.add(g.sub(du, g.mul(g.mul(x, t), g.square(du))), g.mul(x2, k(c, 3 * a * b)));
  Tensor second = g.mul(g.sub(k(c, 1.0), g.square(t)), inner);
  return binary(c, g.gelu_tanh_grad(dy(c), x), g.mul(g.mul(dy(c), up), second));
}
// relu_grad(dy, y) is dy or 0 by the sign of y: linear in dy, flat in y.
V relu_grad_vjp(VjpContext& c) {
  return binary(c, c.g.relu_grad(dy(c), c.in[1]), c.g.mul(dy(c), k(c, 0.0)));
}
V add_vjp(VjpContext& c) { return binary(c, dy(c), dy(c)); }
V sub_vjp(VjpContext& c) { return binary(c, dy(c), c.g.neg(dy(c))); }
V mul_vjp(VjpContext& c) { return binary(c, c.g.mul(dy(c), c.in[1]), c.g.mul(dy(c), c.in[0])); }
V div_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor da = g.div(dy(c), c.in[1]);
  return binary(c, da, g.neg(g.mul(da, c.out[0])));
}
V div_no_nan_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor da = g.div_no_nan(dy(c), c.in[1]);
  return binary(c, da, g.neg(g.mul(da, c.out[0])));
}
V pow_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor a = c.in[0], b = c.in[1];
  Tensor da = g.mul(dy(c), g.mul(b, g.pow(a, g.sub(b, k(c, 1.0)))));
  // d/db = y log a, taken as 0 where a == 0 (where the limit y log a is 0 for b > 0).
  Tensor safe_log = g.log(g.select(g.equal(a, k(c, 0.0)), g.add(g.mul(a, k(c, 0.0)), k(c, 1.0)), a));
  return binary(c, da, g.mul(dy(c), g.mul(c.out[0], safe_log)));
}
// Ties send the gradient to a (like PyTorch's maximum on the first operand).
V min_max_vjp(VjpContext& c, bool is_max) {
  Graph& g = c.g;
  Tensor a_wins = is_max ? g.greater_equal(c.in[0], c.in[1]) : g.less_equal(c.in[0], c.in[1]);
  Tensor zero = g.mul(dy(c), k(c, 0.0));
  return binary(c, g.select(a_wins, dy(c), zero), g.select(a_wins, zero, dy(c)));
}
V maximum_vjp(VjpContext& c) { return min_max_vjp(c, true); }
V minimum_vjp(VjpContext& c) { return min_max_vjp(c, false); }
V atan2_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor yv = c.in[0], xv = c.in[1];
  Tensor r2 = g.add(g.square(xv), g.square(yv));
  return binary(c, g.div(g.mul(dy(c), xv), r2), g.neg(g.div(g.mul(dy(c), yv), r2)));
}
V mod_vjp(VjpContext& c) {
  Graph& g = c.g;
  return binary(c, dy(c), g.neg(g.mul(dy(c), g.trunc(g.div(c.in[0], c.in[1])))));
}
V floor_mod_vjp(VjpContext& c) {
  Graph& g = c.g;
  return binary(c, dy(c), g.neg(g.mul(dy(c), g.floor(g.div(c.in[0], c.in[1])))));
}
V select_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor zero = g.mul(dy(c), k(c, 0.0));
  Tensor da = g.select(c.in[0], dy(c), zero), db = g.select(c.in[0], zero, dy(c));
  return {Tensor(), unbroadcast(g, da, c.in[1]), unbroadcast(g, db, c.in[2])};
}
V clamp_vjp(VjpContext& c) {
  Graph& g = c.g;
  Tensor x = c.in[0], lo = c.in[1], hi = c.in[2];
  Tensor zero = g.mul(dy(c), k(c, 0.0));
  Tensor below = g.less(x, lo), above = g.greater(x, hi);
  Tensor dx = g.select(g.logical_or(below, above), zero, dy(c));
  return {dx, unbroadcast(g, g.select(below, dy(c), zero), lo), unbroadcast(g, g.select(above, dy(c), zero), hi)};
}

}  // namespace

void register_elementwise_vjps(VjpTable& t) {
  auto set = [&](OpKind kind, VjpFn f) { t[static_cast<size_t>(kind)] = f; };
  set(OpKind::Identity, identity_vjp);
  set(OpKind::Neg, neg_vjp);
  set(OpKind::Abs, abs_vjp);
  for (OpKind z : {OpKind::Sign, OpKind::Floor, OpKind::Ceil, OpKind::Round, OpKind::Rint, OpKind::Trunc})
    set(z, zero_vjp);
  set(OpKind::Exp, exp_vjp);
  set(OpKind::Exp2, exp2_vjp);
  set(OpKind::Log, log_vjp);
  set(OpKind::Log2, log2_vjp);
  set(OpKind::Log1p, log1p_vjp);
  set(OpKind::Expm1, expm1_vjp);
  set(OpKind::Sqrt, sqrt_vjp);
  set(OpKind::Rsqrt, rsqrt_vjp);
  set(OpKind::Reciprocal, reciprocal_vjp);
  set(OpKind::Square, square_vjp);
  set(OpKind::Sin, sin_vjp);
  set(OpKind::Cos, cos_vjp);
  set(OpKind::Tan, tan_vjp);
  set(OpKind::Sinh, sinh_vjp);
  set(OpKind::Cosh, cosh_vjp);
  set(OpKind::Tanh, tanh_vjp);
  set(OpKind::Asin, asin_vjp);
  set(OpKind::Acos, acos_vjp);
  set(OpKind::Atan, atan_vjp);
  set(OpKind::Asinh, asinh_vjp);
  set(OpKind::Acosh, acosh_vjp);
  set(OpKind::Atanh, atanh_vjp);
  set(OpKind::Erf, erf_vjp);
  set(OpKind::Sigmoid, sigmoid_vjp);
  set(OpKind::Relu, relu_vjp);
  set(OpKind::LeakyRelu, leaky_relu_vjp);
  set(OpKind::Elu, elu_vjp);
  set(OpKind::Gelu, gelu_vjp);
  set(OpKind::GeluTanh, gelu_tanh_vjp);
  set(OpKind::Silu, silu_vjp);
  set(OpKind::Softplus, softplus_vjp);
  set(OpKind::HardSigmoid, hard_sigmoid_vjp);
  set(OpKind::Cast, cast_vjp);
  set(OpKind::Add, add_vjp);
  set(OpKind::Sub, sub_vjp);
  set(OpKind::Mul, mul_vjp);
  set(OpKind::Div, div_vjp);
  set(OpKind::DivNoNan, div_no_nan_vjp);
  set(OpKind::Pow, pow_vjp);
  set(OpKind::Maximum, maximum_vjp);
  set(OpKind::Minimum, minimum_vjp);
  set(OpKind::MaximumNan, maximum_vjp);
  set(OpKind::MinimumNan, minimum_vjp);
  set(OpKind::Atan2, atan2_vjp);
  set(OpKind::GeluTanhGrad, gelu_tanh_grad_vjp);
  set(OpKind::ReluGrad, relu_grad_vjp);
  set(OpKind::Mod, mod_vjp);
  set(OpKind::FloorMod, floor_mod_vjp);
  set(OpKind::Select, select_vjp);
  set(OpKind::Clamp, clamp_vjp);
}

}  // namespace tg::detail
