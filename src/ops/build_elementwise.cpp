// Builders of elementwise ops: unary ops apply directly; binary and ternary ops promote
// dtypes and broadcast shapes explicitly first.
#include "ops/builder.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

#define UNARY(fn, K) \
  Tensor Graph::fn(Tensor x) { return make(*this, OpKind::K, {x}); }
UNARY(identity, Identity) UNARY(neg, Neg) UNARY(abs, Abs) UNARY(sign, Sign) UNARY(exp, Exp)
UNARY(exp2, Exp2) UNARY(log, Log) UNARY(log2, Log2) UNARY(log1p, Log1p) UNARY(expm1, Expm1)
UNARY(sqrt, Sqrt) UNARY(rsqrt, Rsqrt) UNARY(reciprocal, Reciprocal) UNARY(square, Square)
UNARY(sin, Sin) UNARY(cos, Cos) UNARY(tan, Tan) UNARY(sinh, Sinh) UNARY(cosh, Cosh)
UNARY(tanh, Tanh) UNARY(asin, Asin) UNARY(acos, Acos) UNARY(atan, Atan) UNARY(asinh, Asinh)
UNARY(acosh, Acosh) UNARY(atanh, Atanh) UNARY(erf, Erf) UNARY(floor, Floor) UNARY(ceil, Ceil)
UNARY(round, Round) UNARY(rint, Rint) UNARY(trunc, Trunc) UNARY(logical_not, LogicalNot)
UNARY(bitwise_not, BitwiseNot) UNARY(is_nan, IsNan) UNARY(is_inf, IsInf)
UNARY(is_finite, IsFinite) UNARY(sigmoid, Sigmoid) UNARY(relu, Relu) UNARY(gelu, Gelu)
UNARY(gelu_tanh, GeluTanh) UNARY(silu, Silu) UNARY(softplus, Softplus)
#undef UNARY

Tensor Graph::leaky_relu(Tensor x, double alpha) { return make(*this, OpKind::LeakyRelu, {x}, ScalarDesc{alpha, 0}); }
Tensor Graph::elu(Tensor x, double alpha) { return make(*this, OpKind::Elu, {x}, ScalarDesc{alpha, 0}); }
Tensor Graph::hard_sigmoid(Tensor x, double alpha, double beta) {
  return make(*this, OpKind::HardSigmoid, {x}, ScalarDesc{alpha, beta});
}
Tensor Graph::cast(Tensor x, DType to) { return make(*this, OpKind::Cast, {x}, CastDesc{to}); }
Tensor Graph::bitcast(Tensor x, DType to) { return make(*this, OpKind::Bitcast, {x}, CastDesc{to}); }

#define BINARY(fn, K)                                    \
  Tensor Graph::fn(Tensor a, Tensor b) {                 \
    auto [x, y] = promote_broadcast(*this, OpKind::K, a, b); \
    return make(*this, OpKind::K, {x, y});               \
  }
BINARY(add, Add) BINARY(sub, Sub) BINARY(mul, Mul) BINARY(div, Div) BINARY(div_no_nan, DivNoNan)
BINARY(mod, Mod) BINARY(floor_mod, FloorMod) BINARY(pow, Pow) BINARY(minimum, Minimum)
BINARY(maximum, Maximum) BINARY(minimum_nan, MinimumNan) BINARY(maximum_nan, MaximumNan)
BINARY(atan2, Atan2) BINARY(gelu_tanh_grad, GeluTanhGrad) BINARY(relu_grad, ReluGrad) BINARY(equal, Equal) BINARY(not_equal, NotEqual) BINARY(less, Less)
BINARY(less_equal, LessEqual) BINARY(greater, Greater) BINARY(greater_equal, GreaterEqual)
BINARY(logical_and, LogicalAnd) BINARY(logical_or, LogicalOr) BINARY(logical_xor, LogicalXor)
BINARY(bitwise_and, BitwiseAnd) BINARY(bitwise_or, BitwiseOr) BINARY(bitwise_xor, BitwiseXor)
BINARY(shift_left, ShiftLeft) BINARY(shift_right, ShiftRight)
#undef BINARY

Tensor Graph::select(Tensor cond, Tensor a, Tensor b) {
  auto [x, y] = promote_broadcast(*this, OpKind::Select, a, b);
  use(*this, cond, OpKind::Select, "cond");
  auto s = broadcast_shapes(cond.shape(), x.shape());
  if (!s)
    throw Error("[select] shapes do not broadcast: cond is " + cond.shape().str() + ", a is " +
                x.shape().str());
  return make(*this, OpKind::Select,
              {broadcast_if(*this, OpKind::Select, cond, *s), broadcast_if(*this, OpKind::Select, x, *s),
               broadcast_if(*this, OpKind::Select, y, *s)});
}

Tensor Graph::clamp(Tensor x, Tensor lo, Tensor hi) {
  use(*this, x, OpKind::Clamp, "x");
  lo = broadcast_if(*this, OpKind::Clamp, cast_if(*this, lo, x.dtype()), x.shape());
  hi = broadcast_if(*this, OpKind::Clamp, cast_if(*this, hi, x.dtype()), x.shape());
  return make(*this, OpKind::Clamp, {x, lo, hi});
}

}  // namespace tg
