// Converters of ONNX's elementwise ops: unary math, activations, binary arithmetic and
// comparisons, variadic Max/Min/Sum/Mean, Where, Clip, Cast.
#include <cmath>
#include <limits>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

#define UNARY(NAME, EXPR) \
  {NAME, 1, kNewestOpset, +[](Ctx& c) { Graph& g = c.g; Tensor x = c.in(0); (void)g; c.out(0, EXPR); }}
#define BINARY(NAME, METHOD) \
  {NAME, 7, kNewestOpset, +[](Ctx& c) { c.out(0, c.g.METHOD(c.in(0), c.in(1))); }}

Tensor where_zero(Graph& g, Tensor cond, Tensor x) { return g.select(cond, x, scalar_like(g, 0, x)); }

// Opsets 1-6 of the binary arithmetic ops broadcast only with broadcast=1, B's dims aligned
// with A's from `axis` on (the trailing ones without it): B gets the 1s that align it for
// numpy broadcasting. Without broadcast the shapes must be equal.
Tensor legacy_operand(Ctx& c, Tensor a, Tensor b) {
  if (c.attr_i("broadcast", 0) == 0) {
    if (a.shape() != b.shape() && a.shape().is_static() && b.shape().is_static())
      c.fail("without broadcast=1 (opset < 7) A " + a.shape().str() + " and B " + b.shape().str() + " must be equal");
    return b;
  }
  if (b.rank() > a.rank()) c.fail("B " + b.shape().str() + " has more dims than A " + a.shape().str());
  const int64_t axis = c.has_attr("axis") ? norm_axis(c, c.attr_i("axis", 0), a.rank()) : a.rank() - b.rank();
  if (axis + b.rank() > a.rank()) c.fail("B " + b.shape().str() + " at axis " + std::to_string(axis) + " runs past A " + a.shape().str());
  const int64_t trailing = a.rank() - axis - b.rank();
  if (trailing == 0) return b;
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < trailing; ++i) axes.push_back(b.rank() + i);
  return c.g.expand_dims(b, axes);
}

template <Tensor (Graph::*method)(Tensor, Tensor)>
void legacy_binary(Ctx& c) {
  Tensor a = c.in(0);
  c.out(0, (c.g.*method)(a, legacy_operand(c, a, c.in(1))));
}

void is_inf(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  bool neg = c.attr_i("detect_negative", 1) != 0, pos = c.attr_i("detect_positive", 1) != 0;
  Tensor inf = g.is_inf(x);
  if (neg && pos) return c.out(0, inf);
  Tensor side = pos ? g.greater(x, scalar_like(g, 0, x)) : g.less(x, scalar_like(g, 0, x));
  if (!neg && !pos) return c.out(0, g.logical_and(inf, g.logical_not(inf)));
  c.out(0, g.logical_and(inf, side));
}

void shrink(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  double b = c.attr_f("bias", 0.f), l = c.attr_f("lambd", 0.5f);
  Tensor lo = g.less(x, scalar_like(g, -l, x)), hi = g.greater(x, scalar_like(g, l, x));
  Tensor zero = scalar_like(g, 0, x);
  c.out(0, g.select(lo, g.add(x, scalar_like(g, b, x)), g.select(hi, g.sub(x, scalar_like(g, b, x)), zero)));
}

void prelu(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), s = c.in(1);
  // Opsets before 7: a slope of one value per channel (dim 1), or one value for all.
  if (c.opset < 7 && s.rank() == 1 && x.rank() > 2 && s.shape()[0] != 1) {
    std::vector<int64_t> shp(static_cast<size_t>(x.rank() - 1), 1);
    shp[0] = -1;
    s = g.reshape(s, shp);
  }
  c.out(0, g.select(g.less(x, scalar_like(g, 0, x)), g.mul(x, s), x));
}

void clip(Ctx& c) {
  Graph& g = c.g;
  Tensor y = c.in(0);
  if (c.opset < 11) {
    float lo = c.attr_f("min", -std::numeric_limits<float>::infinity());
    float hi = c.attr_f("max", std::numeric_limits<float>::infinity());
    if (!std::isinf(lo)) y = g.maximum(y, scalar_like(g, lo, y));
    if (!std::isinf(hi)) y = g.minimum(y, scalar_like(g, hi, y));
    return c.out(0, y);
  }
  if (c.has_input(1)) y = g.maximum(y, c.in(1));
  if (c.has_input(2)) y = g.minimum(y, c.in(2));
  c.out(0, y);
}

void pow_(Ctx& c) {
  Graph& g = c.g;
  Tensor a = c.in(0), b = c.in(1);
  if (a.dtype() == b.dtype()) return c.out(0, g.pow(a, b));
  if (is_float(a.dtype()) || !is_float(b.dtype())) return c.out(0, g.pow(a, g.cast(b, a.dtype())));
  c.out(0, g.cast(g.pow(g.cast(a, b.dtype()), b), a.dtype()));
}

void mod(Ctx& c) {
  Tensor a = c.in(0), b = c.in(1);
  bool fmod = c.attr_i("fmod", 0) != 0;
  if (!fmod && is_float(a.dtype())) c.fail("fmod=0 is not allowed for floating-point inputs");
  c.out(0, fmod ? c.g.mod(a, b) : c.g.floor_mod(a, b));
}

void bitshift(Ctx& c) {
  std::string dir = c.attr_s("direction", "");
  if (dir == "LEFT") return c.out(0, c.g.shift_left(c.in(0), c.in(1)));
  if (dir == "RIGHT") return c.out(0, c.g.shift_right(c.in(0), c.in(1)));
  c.fail("direction must be LEFT or RIGHT, not '" + dir + "'");
}

template <int kind>  // 0 max, 1 min, 2 sum, 3 mean
void variadic(Ctx& c) {
  Graph& g = c.g;
  Tensor acc = c.in(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    Tensor x = c.in(i);
    acc = kind == 0 ? g.maximum_nan(acc, x) : kind == 1 ? g.minimum_nan(acc, x) : g.add(acc, x);
  }
  if (kind == 3 && c.num_inputs() > 1) acc = g.div(acc, scalar_like(g, c.num_inputs(), acc));
  c.out(0, acc);
}

// x rounded to the narrow float format n (to nearest, ties to even), as the value f32 holds:
// the spacing at x's binade is 2^(e - mantissa bits), e at least the smallest normal exponent
// (subnormals share its spacing). Beyond the largest finite value: that value when saturating,
// else infinity (E5M2) or NaN (the formats without infinities). FNUZ formats have no -0.
// Computed in f64, where log2 of a power of two is exact.
Tensor round_float_format(Ctx& c, Tensor x, int32_t n, bool saturate) {
  Graph& g = c.g;
  int mant, emin;
  double maxv;
  bool has_inf = false, fnuz = false;
  switch (n) {
    case kFloat8E4M3FN: mant = 3, emin = -6, maxv = 448; break;
    case kFloat8E4M3FNUZ: mant = 3, emin = -7, maxv = 240, fnuz = true; break;
    case kFloat8E5M2: mant = 2, emin = -14, maxv = 57344, has_inf = true; break;
    case kFloat8E5M2FNUZ: mant = 2, emin = -15, maxv = 57344, fnuz = true; break;
    case kFloat4E2M1: mant = 1, emin = 0, maxv = 6, saturate = true; break;  // FP4 always saturates
    default: c.fail("casting to FLOAT8E8M0 is not supported");
  }
  const DType d = DType::f64;
  auto k = [&](double v) { return g.scalar(v, d); };
  Tensor xd = g.cast(x, d), a = g.abs(xd);
  Tensor e = g.maximum(g.floor(g.log2(a)), k(emin));
  e = g.select(g.greater_equal(a, g.exp2(g.add(e, k(1)))), g.add(e, k(1)), e);
  Tensor q = g.exp2(g.sub(e, k(mant)));
  Tensor r = g.mul(g.rint(g.div(a, q)), q);
  r = g.select(g.is_inf(a), k(INFINITY), r);
  Tensor over = g.greater(r, k(maxv));
  r = g.select(over, k(saturate ? maxv : has_inf ? INFINITY : NAN), r);
  Tensor y = g.select(g.less(xd, k(0)), g.neg(r), r);
  if (fnuz) y = g.select(g.equal(r, k(0)), k(0), y);
  if (n == kFloat4E2M1) y = g.select(g.is_nan(xd), k(-0.0), y);  // no NaN in FP4: ml_dtypes gives -0
  return g.cast(y, DType::f32);
}

// x as FLOAT8E8M0 (a power of two 2^(e - 127), e = 255 for NaN), held as that f32 value: the
// exponent of x's f32 bits (the sign ignored), rounded up when any fraction bit is set (round_mode
// "up"), by the guard bits ("nearest", as onnx.numpy_helper), or not ("down"); saturating keeps
// 254 from rounding into 255. 2^-127 (e = 0) is an f32 subnormal; every result is exact.
Tensor to_e8m0(Ctx& c, Tensor x, bool saturate) {
  Graph& g = c.g;
  const std::string mode = c.attr_s("round_mode", "up");
  if (mode != "up" && mode != "down" && mode != "nearest")
    c.fail("round_mode must be up, down or nearest, not '" + mode + "'");
  const DType i = DType::i32;
  auto k = [&](double v) { return g.scalar(v, i); };
  Tensor bits = g.bitcast(g.cast(x, DType::f32), i);
  Tensor e = g.bitwise_and(g.shift_right(bits, k(23)), k(0xFF));
  auto set = [&](int64_t mask) {
    return g.not_equal(g.bitwise_and(bits, k(static_cast<double>(mask))), k(0));
  };
  Tensor special = g.equal(e, k(255));
  if (mode != "down") {
    Tensor up = mode == "up"
                    ? set(0x7FFFFF)
                    : g.logical_and(set(0x400000), g.logical_or(g.logical_or(set(0x200000), set(0x1FFFFF)),
                                                                g.greater(e, k(0))));
    up = g.logical_and(up, g.logical_not(special));
    if (saturate) up = g.logical_and(up, g.not_equal(e, k(254)));
    e = g.add(e, g.cast(up, i));
  }
  Tensor out = g.select(g.equal(e, k(0)), k(0x400000),
                        g.select(g.equal(e, k(255)), k(0x7FC00000), g.shift_left(e, k(23))));
  return g.bitcast(out, DType::f32);
}

// x as the narrow integer format n, held in i8 / u8, as ONNX's test data has it: floats
// truncate toward zero, then every value wraps around the format's range (NaN and infinities
// give 0).
Tensor to_narrow_int(Ctx& c, Tensor x, int32_t n) {
  Graph& g = c.g;
  const bool is_signed = n == kInt4 || n == kInt2;
  const double bits = n == kInt4 || n == kUint4 ? 4 : 2, span = std::exp2(bits);
  const double lo = is_signed ? -span / 2 : 0;
  const DType out = is_signed ? DType::i8 : DType::u8;
  if (x.dtype() == DType::boolean) return g.cast(x, out);
  Tensor v;
  if (is_float(x.dtype())) {
    Tensor t = g.trunc(g.cast(x, DType::f64));
    Tensor finite = g.logical_not(g.logical_or(g.is_nan(t), g.is_inf(t)));
    v = g.cast(g.select(finite, t, g.scalar(0, DType::f64)), DType::i64);
  } else {
    v = g.cast(x, DType::i64);
  }
  Tensor w = g.add(g.floor_mod(g.sub(v, g.scalar(lo, DType::i64)), g.scalar(span, DType::i64)), g.scalar(lo, DType::i64));
  return g.cast(w, out);
}

// The signed dtype of an unsigned ONNX type's width (u16 -> i16, u32 -> i32, u64 -> i64).
DType unsigned_storage(int32_t u) {
  return u == kUint16 ? DType::i16 : u == kUint32 ? DType::i32 : DType::i64;
}

// A widened unsigned value's bits as its own width's signed dtype (wrapping).
Tensor unsigned_bits(Graph& g, Tensor x, int32_t u) { return g.cast(x, unsigned_storage(u)); }

// Signed bits of u's width -> the widened unsigned value (the sign bit becomes 2^(width - 1)).
Tensor widen_unsigned(Graph& g, Tensor bits, int32_t u) {
  if (u == kUint64) return bits;  // held in i64 bit for bit
  const DType wide = dtype_from_onnx(u);
  return g.bitwise_and(g.cast(bits, wide), g.scalar(u == kUint16 ? 0xFFFF : 0xFFFFFFFFLL, wide));
}

// ~x within the ONNX type's width: a widened u16 / u32 flips its own bits only.
void bitwise_not(Ctx& c) {
  Graph& g = c.g;
  const int32_t u = c.unsigned_in(0);
  c.out(0, u ? widen_unsigned(g, g.bitwise_not(unsigned_bits(g, c.in(0), u)), u) : g.bitwise_not(c.in(0)));
  c.set_unsigned(0, u);
}

// Reinterprets the bits; widened unsigned types go through their own width's signed dtype.
void bitcast(Ctx& c) {
  Graph& g = c.g;
  const auto to_onnx = static_cast<int32_t>(c.attr_i("to", 0));
  const int32_t from_u = c.unsigned_in(0), to_u = unsigned_type(to_onnx);
  Tensor x = from_u ? unsigned_bits(g, c.in(0), from_u) : c.in(0);
  const DType to = to_u ? unsigned_storage(to_u) : dtype_from_onnx(to_onnx);
  if (dtype_size(to) != dtype_size(x.dtype()))
    c.fail(std::string("bitcast from ") + dtype_name(x.dtype()) + " to " + dtype_name(to) +
           " changes the element size");
  Tensor y = x.dtype() == to ? x : g.bitcast(x, to);
  c.out(0, to_u ? widen_unsigned(g, y, to_u) : y);
  c.set_unsigned(0, to_u);
}

// Cast / CastLike to ONNX type `to` (a narrow format is rounded to it and held widened).
void cast_to(Ctx& c, int32_t to) {
  const int32_t n = narrow_type(to);
  if (!n) {
    c.out(0, c.g.cast(c.in(0), dtype_from_onnx(to)));
    return c.set_unsigned(0, unsigned_type(to));
  }
  const bool saturate = c.attr_i("saturate", 1) != 0;
  const bool integer = n == kInt4 || n == kUint4 || n == kInt2 || n == kUint2;
  c.out(0, integer            ? to_narrow_int(c, c.in(0), n)
           : n == kFloat8E8M0 ? to_e8m0(c, c.in(0), saturate)
                              : round_float_format(c, c.in(0), n, saturate));
  c.set_onnx_type(0, n);
}

void cast(Ctx& c) { cast_to(c, static_cast<int32_t>(c.attr_i("to", 1))); }

// The target is input 1's type: its ONNX type when it holds a narrow format.
void cast_like(Ctx& c) {
  if (const int32_t n = c.onnx_type_in(1)) return cast_to(c, n);
  c.out(0, c.g.cast(c.in(0), c.in(1).dtype()));
}

void selu(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  double a = c.attr_f("alpha", 1.67326319217681884765625f), gm = c.attr_f("gamma", 1.05070102214813232421875f);
  c.out(0, g.mul(g.elu(x, a), scalar_like(g, gm, x)));
}

void celu(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  double a = c.attr_f("alpha", 1.f);
  c.out(0, g.mul(g.elu(g.div(x, scalar_like(g, a, x)), 1.0), scalar_like(g, a, x)));
}

void thresholded_relu(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  c.out(0, where_zero(g, g.greater(x, scalar_like(g, c.attr_f("alpha", 1.f), x)), x));
}

void softsign(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  c.out(0, g.div(x, g.add(scalar_like(g, 1, x), g.abs(x))));
}

void gelu(Ctx& c) {
  std::string a = c.attr_s("approximate", "none");
  if (a == "none") return c.out(0, c.g.gelu(c.in(0)));
  if (a == "tanh") return c.out(0, c.g.gelu_tanh(c.in(0)));
  c.fail("approximate must be 'none' or 'tanh', not '" + a + "'");
}

void mish(Ctx& c) {  // x * tanh(softplus(x))
  Tensor x = c.in(0);
  c.out(0, c.g.mul(x, c.g.tanh(c.g.softplus(x))));
}

}  // namespace

const std::vector<Converter>& elementwise_converters() {
  static const std::vector<Converter> t = {
      UNARY("Abs", g.abs(x)),
      UNARY("Acos", g.acos(x)),
      UNARY("Acosh", g.acosh(x)),
      UNARY("Asin", g.asin(x)),
      UNARY("Asinh", g.asinh(x)),
      UNARY("Atan", g.atan(x)),
      UNARY("Atanh", g.atanh(x)),
      UNARY("Ceil", g.ceil(x)),
      UNARY("Cos", g.cos(x)),
      UNARY("Cosh", g.cosh(x)),
      UNARY("Erf", g.erf(x)),
      UNARY("Exp", g.exp(x)),
      UNARY("Floor", g.floor(x)),
      UNARY("Log", g.log(x)),
      UNARY("Neg", g.neg(x)),
      UNARY("Reciprocal", g.reciprocal(x)),
      UNARY("Relu", g.relu(x)),
      UNARY("Round", g.rint(x)),
      UNARY("Sigmoid", g.sigmoid(x)),
      UNARY("Sign", g.sign(x)),
      UNARY("Sin", g.sin(x)),
      UNARY("Sinh", g.sinh(x)),
      UNARY("Sqrt", g.sqrt(x)),
      UNARY("Tan", g.tan(x)),
      UNARY("Tanh", g.tanh(x)),
      UNARY("Not", g.logical_not(x)),
      {"BitwiseNot", 1, kNewestOpset, bitwise_not},
      UNARY("IsNaN", g.is_nan(x)),
      {"Identity", 1, kNewestOpset, +[](Ctx& c) { c.alias(0, 0); }},
      UNARY("Softplus", g.softplus(x)),
      UNARY("Elu", g.elu(x, c.attr_f("alpha", 1.f))),
      UNARY("LeakyRelu", g.leaky_relu(x, c.attr_f("alpha", 0.01f))),
      UNARY("HardSigmoid", g.hard_sigmoid(x, c.attr_f("alpha", 0.2f), c.attr_f("beta", 0.5f))),
      UNARY("HardSwish", g.mul(x, g.hard_sigmoid(x, 1.0 / 6.0, 0.5))),
      {"Softsign", 1, kNewestOpset, softsign},
      {"Gelu", 20, kNewestOpset, gelu},
      {"Mish", 18, kNewestOpset, mish},
      {"Selu", 1, kNewestOpset, selu},
      {"Celu", 12, kNewestOpset, celu},
      {"ThresholdedRelu", 10, kNewestOpset, thresholded_relu},
      {"Shrink", 9, kNewestOpset, shrink},
      {"PRelu", 1, kNewestOpset, prelu},
      {"IsInf", 10, kNewestOpset, is_inf},
      {"Clip", 1, kNewestOpset, clip},
      BINARY("Add", add),
      BINARY("Sub", sub),
      BINARY("Mul", mul),
      BINARY("Div", div),
      {"Add", 1, 6, legacy_binary<&Graph::add>},
      {"Sub", 1, 6, legacy_binary<&Graph::sub>},
      {"Mul", 1, 6, legacy_binary<&Graph::mul>},
      {"Div", 1, 6, legacy_binary<&Graph::div>},
      BINARY("Equal", equal),
      BINARY("Less", less),
      BINARY("Greater", greater),
      BINARY("LessOrEqual", less_equal),
      BINARY("GreaterOrEqual", greater_equal),
      BINARY("And", logical_and),
      BINARY("Or", logical_or),
      BINARY("Xor", logical_xor),
      BINARY("BitwiseAnd", bitwise_and),
      BINARY("BitwiseOr", bitwise_or),
      BINARY("BitwiseXor", bitwise_xor),
      {"Pow", 7, kNewestOpset, pow_},
      {"Pow", 1, 6, legacy_binary<&Graph::pow>},
      {"Mod", 10, kNewestOpset, mod},
      {"BitShift", 11, kNewestOpset, bitshift},
      {"Max", 1, kNewestOpset, variadic<0>},
      {"Min", 1, kNewestOpset, variadic<1>},
      {"Sum", 1, kNewestOpset, variadic<2>},
      {"Mean", 1, kNewestOpset, variadic<3>},
      {"Where", 9, kNewestOpset, +[](Ctx& c) { c.out(0, c.g.select(c.in(0), c.in(1), c.in(2))); }},
      {"Cast", 6, kNewestOpset, cast},
      {"BitCast", 26, kNewestOpset, bitcast},
      {"CastLike", 15, kNewestOpset, cast_like},
  };
  return t;
}

Tensor round_to_float_format(Ctx& c, Tensor x, int32_t n, bool saturate) { return round_float_format(c, x, n, saturate); }

}  // namespace tg::onnx_import
