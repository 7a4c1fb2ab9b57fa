// Reference elementwise ops. Floats are computed in double; integer and bool operands are
// computed exactly in int64 and wrapped to their width (two's complement), as numpy does.
// Operands are broadcast (numpy rules) at run time, so dynamic shapes need no broadcast_to.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ref_util.h"
#include "ops/elementwise_formulas.h"

namespace tg::detail::ref {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Float ops in double: ops/elementwise_formulas.h, the one definition.
double unary_f(const Ctx& c, double x) {
  const auto* d = std::get_if<ScalarDesc>(&c.n.attr);
  double r;
  if (!unary_formula(c.kind(), x, d ? d->alpha : 0.0, d ? d->beta : 0.0, r)) c.fail("is not a unary float op");
  return r;
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
  double r;
  if (!binary_formula(c.kind(), a, b, r)) c.fail("is not a binary float op");
  return r;
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
