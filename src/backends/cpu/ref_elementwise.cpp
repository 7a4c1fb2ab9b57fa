// Reference elementwise ops. Floats are computed in double; integer and bool operands are
// computed exactly in int64 and wrapped to their width (two's complement), as numpy does.
// Operands are broadcast (numpy rules) at run time, so dynamic shapes need no broadcast_to.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ref_util.h"
#include "backends/cpu/scalar_math.h"

namespace tg::detail::ref {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double unary_f(const Ctx& c, double x) {
  switch (c.kind()) {
    case OpKind::Identity: case OpKind::StopGradient: return x;
    case OpKind::Neg: return -x;
    case OpKind::Abs: return std::fabs(x);
    case OpKind::Sign: return std::isnan(x) ? x : (x > 0) - (x < 0);
    case OpKind::Square: return x * x;
    case OpKind::Relu: return x < 0 ? 0.0 : x;  // NaN stays NaN
    case OpKind::Exp: return std::exp(x);
    case OpKind::Exp2: return std::exp2(x);
    case OpKind::Log: return std::log(x);
    case OpKind::Log2: return std::log2(x);
    case OpKind::Log1p: return std::log1p(x);
    case OpKind::Expm1: return std::expm1(x);
    case OpKind::Sqrt: return std::sqrt(x);
    case OpKind::Rsqrt: return 1.0 / std::sqrt(x);
    case OpKind::Reciprocal: return 1.0 / x;
    case OpKind::Sin: return std::sin(x);
    case OpKind::Cos: return std::cos(x);
    case OpKind::Tan: return std::tan(x);
    case OpKind::Sinh: return std::sinh(x);
    case OpKind::Cosh: return std::cosh(x);
    case OpKind::Tanh: return std::tanh(x);
    case OpKind::Asin: return std::asin(x);
    case OpKind::Acos: return std::acos(x);
    case OpKind::Atan: return std::atan(x);
    case OpKind::Asinh: return std::asinh(x);
    case OpKind::Acosh: return std::acosh(x);
    case OpKind::Atanh: return std::atanh(x);
    case OpKind::Erf: return std::erf(x);
    case OpKind::Floor: return std::floor(x);
    case OpKind::Ceil: return std::ceil(x);
    case OpKind::Round: return std::round(x);      // half away from zero
    case OpKind::Rint: return std::nearbyint(x);   // default mode: half to even
    case OpKind::Trunc: return std::trunc(x);
    case OpKind::Sigmoid: return sigmoid(x);
    case OpKind::LeakyRelu: return x < 0 ? c.attr<ScalarDesc>().alpha * x : x;
    case OpKind::Elu: return x < 0 ? c.attr<ScalarDesc>().alpha * std::expm1(x) : x;
    case OpKind::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case OpKind::GeluTanh: return gelu_tanh(x);
    case OpKind::Silu: return x * sigmoid(x);
    case OpKind::Softplus: return std::isnan(x) ? x : std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
    case OpKind::HardSigmoid: {
      const auto& d = c.attr<ScalarDesc>();
      double v = d.alpha * x + d.beta;
      return std::isnan(v) ? v : std::max(0.0, std::min(1.0, v));
    }
    default: c.fail("is not a unary float op");
  }
}

int64_t unary_i(const Ctx& c, int64_t x, DType t) {
  switch (c.kind()) {
    case OpKind::Identity: case OpKind::StopGradient: return x;
    case OpKind::Neg: return wsub(0, x);
    case OpKind::Abs: return x < 0 ? wsub(0, x) : x;
    case OpKind::Sign: return (x > 0) - (x < 0);
    case OpKind::Square: return wmul(x, x);
    case OpKind::Relu: return x < 0 ? 0 : x;
    case OpKind::BitwiseNot: return t == DType::boolean ? !x : ~x;
    case OpKind::LogicalNot: return !x;
    default: c.fail("does not take integer input");
  }
}

// Integer a**b: exact with wrap-around; a negative exponent truncates 1/a**|b| toward zero.
int64_t ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
  int64_t r = 1;
  while (b) {
    if (b & 1) r = wmul(r, a);
    a = wmul(a, a);
    b >>= 1;
  }
  return r;
}

int64_t idiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return wsub(0, a);  // INT_MIN / -1 wraps instead of trapping
  return a / b;
}

int64_t imod(int64_t a, int64_t b) { return (b == 0 || b == -1) ? 0 : a % b; }

int64_t shift(bool left, int64_t a, int64_t b, DType t) {
  int w = bit_width(t);
  if (b < 0 || b >= w) return left ? 0 : (a < 0 ? -1 : 0);
  if (left) return static_cast<int64_t>(static_cast<uint64_t>(a) << b);
  return a >> b;  // arithmetic for signed types; unsigned values load as non-negative
}

double binary_f(const Ctx& c, double a, double b) {
  switch (c.kind()) {
    case OpKind::Add: return a + b;
    case OpKind::Sub: return a - b;
    case OpKind::Mul: return a * b;
    case OpKind::Div: return a / b;
    case OpKind::DivNoNan: return b == 0 ? 0.0 : a / b;
    case OpKind::Mod: return std::fmod(a, b);
    case OpKind::FloorMod: {
      double r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r == 0 ? std::copysign(0.0, b) : r;
    }
    case OpKind::Pow: return std::pow(a, b);
    case OpKind::Minimum: return std::fmin(a, b);
    case OpKind::Maximum: return std::fmax(a, b);
    case OpKind::MinimumNan: return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b);
    case OpKind::MaximumNan: return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b);
    case OpKind::Atan2: return std::atan2(a, b);
    case OpKind::GeluTanhGrad: return a * gelu_tanh_derivative(b);
    case OpKind::ReluGrad: return b > 0 ? a : 0.0;
    default: c.fail("is not a binary float op");
  }
}

int64_t binary_i(const Ctx& c, int64_t a, int64_t b, DType t) {
  switch (c.kind()) {
    case OpKind::Add: return wadd(a, b);
    case OpKind::Sub: return wsub(a, b);
    case OpKind::Mul: return wmul(a, b);
    case OpKind::Div: case OpKind::DivNoNan: return idiv(a, b);
    case OpKind::Mod: return imod(a, b);
    case OpKind::FloorMod: {
      int64_t r = imod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case OpKind::Pow: return ipow(a, b);
    case OpKind::Minimum: case OpKind::MinimumNan: return std::min(a, b);
    case OpKind::Maximum: case OpKind::MaximumNan: return std::max(a, b);
    case OpKind::LogicalAnd: return a && b;
    case OpKind::LogicalOr: return a || b;
    case OpKind::LogicalXor: return (a != 0) != (b != 0);
    case OpKind::BitwiseAnd: return a & b;
    case OpKind::BitwiseOr: return a | b;
    case OpKind::BitwiseXor: return a ^ b;
    case OpKind::ShiftLeft: return shift(true, a, b, t);
    case OpKind::ShiftRight: return shift(false, a, b, t);
    default: c.fail("does not take integer operands");
  }
}

template <class T>
bool compare(OpKind k, T a, T b) {
  switch (k) {
    case OpKind::Equal: return a == b;
    case OpKind::NotEqual: return a != b;
    case OpKind::Less: return a < b;
    case OpKind::LessEqual: return a <= b;
    case OpKind::Greater: return a > b;
    default: return a >= b;
  }
}

// Flat index of input `k` for output element i (numpy broadcasting).
int64_t src(const Ctx& c, size_t k, int64_t i, const Dims& out) {
  const Dims& d = dims(c.in[k]);
  if (d == out) return i;
  return broadcast_index(unravel(i, out), d);
}

TensorData cast(const Ctx& c) {
  const TensorData& x = c.in[0];
  TensorData y = c.output(0);
  bool exact = int_like(x.dtype()) && int_like(y.dtype());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    if (exact) store_int(y, i, load_int(x, i));
    else y.set(i, x.at(i));  // float -> int truncates and saturates, NaN -> 0
  }
  return y;
}

}  // namespace

std::vector<TensorData> eval_elementwise(const Ctx& c) {
  const Family f = op_def(c.kind()).family;
  TensorData y = c.output(0);
  const Dims& od = dims(y);
  const int64_t n = y.num_elements();
  const DType t = c.in[0].dtype();
  if (f == Family::cast) return {cast(c)};
  if (f == Family::bitcast) {
    std::memcpy(y.data(), c.in[0].data(), c.in[0].nbytes());
    return {y};
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (f) {
      case Family::unary: case Family::unary_float: case Family::unary_bitwise:
      case Family::unary_logical:
        if (int_like(t)) store_int(y, i, unary_i(c, load_int(c.in[0], i), t));
        else y.set(i, unary_f(c, c.in[0].at(i)));
        break;
      case Family::unary_predicate: {
        double x = c.in[0].at(i);
        bool r = c.kind() == OpKind::IsNan ? std::isnan(x)
                 : c.kind() == OpKind::IsInf ? std::isinf(x) : std::isfinite(x);
        y.set(i, r);
        break;
      }
      case Family::binary: case Family::binary_float: case Family::binary_logical:
      case Family::binary_bitwise: {
        int64_t ia = src(c, 0, i, od), ib = src(c, 1, i, od);
        if (int_like(t)) store_int(y, i, binary_i(c, load_int(c.in[0], ia), load_int(c.in[1], ib), t));
        else y.set(i, binary_f(c, c.in[0].at(ia), c.in[1].at(ib)));
        break;
      }
      case Family::compare: {
        int64_t ia = src(c, 0, i, od), ib = src(c, 1, i, od);
        bool r = int_like(t) ? compare(c.kind(), load_int(c.in[0], ia), load_int(c.in[1], ib))
                             : compare(c.kind(), c.in[0].at(ia), c.in[1].at(ib));
        y.set(i, r);
        break;
      }
      case Family::select: {
        bool cond = c.in[0].at(src(c, 0, i, od)) != 0;
        size_t k = cond ? 1 : 2;
        copy_elem(y, i, c.in[k], src(c, k, i, od));
        break;
      }
      case Family::clamp: {
        int64_t ix = src(c, 0, i, od), il = src(c, 1, i, od), ih = src(c, 2, i, od);
        if (int_like(t)) {
          store_int(y, i, std::min(std::max(load_int(c.in[0], ix), load_int(c.in[1], il)),
                                   load_int(c.in[2], ih)));
        } else {
          // std::max/min return their first argument when a comparison is false, so a NaN x
          // propagates and NaN bounds are ignored.
          double v = std::max(c.in[0].at(ix), c.in[1].at(il));
          y.set(i, std::min(v, c.in[2].at(ih)));
        }
        break;
      }
      default: c.fail("is not elementwise");
    }
  }
  return {y};
}

}  // namespace tg::detail::ref
