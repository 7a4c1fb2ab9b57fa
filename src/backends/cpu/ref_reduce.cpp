// Reference reductions, arg-reductions, scans, top_k and sort. Every output element gathers
// the input elements it reduces, in row-major order, and combines them in double (floats)
// or exactly in wrapping int64 (integers).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Input flat indices reduced into each output element (row-major in both).
std::vector<std::vector<int64_t>> groups(const Ctx& c, const Dims& in) {
  const auto& axes = c.attr<ReduceDesc>().axes;
  std::vector<bool> red(in.size(), axes.empty());
  for (int64_t a : axes) red[static_cast<size_t>(norm_axis(c, a, static_cast<int64_t>(in.size())))] = true;
  Dims kept;
  for (size_t k = 0; k < in.size(); ++k)
    if (!red[k]) kept.push_back(in[k]);
  std::vector<std::vector<int64_t>> g(static_cast<size_t>(numel(kept)));
  for (int64_t i = 0; i < numel(in); ++i) {
    Dims idx = unravel(i, in), kidx;
    for (size_t k = 0; k < in.size(); ++k)
      if (!red[k]) kidx.push_back(idx[k]);
    g[static_cast<size_t>(ravel(kidx, kept))].push_back(i);
  }
  return g;
}

// reduce_max / reduce_min propagate NaN.
double extreme(const TensorData& x, const std::vector<int64_t>& m, bool is_max) {
  double acc = is_max ? -kInf : kInf;
  for (int64_t i : m) {
    double v = x.at(i);
    if (std::isnan(v)) return v;
    acc = is_max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

double reduce_float(const Ctx& c, const TensorData& x, const std::vector<int64_t>& m) {
  const double n = static_cast<double>(m.size());
  double s = 0;
  switch (c.kind()) {
    case OpKind::ReduceSum: for (int64_t i : m) s += x.at(i); return s;
    case OpKind::ReduceProd: s = 1; for (int64_t i : m) s *= x.at(i); return s;
    case OpKind::ReduceMax: return extreme(x, m, true);
    case OpKind::ReduceMin: return extreme(x, m, false);
    case OpKind::ReduceMean: for (int64_t i : m) s += x.at(i); return s / n;
    case OpKind::ReduceVariance: {
      double mean = 0;
      for (int64_t i : m) mean += x.at(i);
      mean /= n;
      for (int64_t i : m) s += (x.at(i) - mean) * (x.at(i) - mean);
      return s / n;
    }
    case OpKind::ReduceLogSumExp: {
      double mx = extreme(x, m, true);
      if (std::isnan(mx) || std::isinf(mx)) return mx;  // all -inf (or empty) gives -inf
      for (int64_t i : m) s += std::exp(x.at(i) - mx);
      return mx + std::log(s);
    }
    default: c.fail("is not a float reduction");
  }
}

// Integer reductions; an empty max/min gives the dtype's lowest/highest value.
void reduce_int(const Ctx& c, const TensorData& x, const std::vector<int64_t>& m, TensorData& y,
                int64_t o) {
  int64_t s = 0;
  switch (c.kind()) {
    case OpKind::ReduceSum: for (int64_t i : m) s = wadd(s, load_int(x, i)); break;
    case OpKind::ReduceProd: s = 1; for (int64_t i : m) s = wmul(s, load_int(x, i)); break;
    case OpKind::ReduceAll: s = 1; for (int64_t i : m) s = s && load_int(x, i); break;
    case OpKind::ReduceAny: for (int64_t i : m) s = s || load_int(x, i); break;
    case OpKind::ReduceMax: case OpKind::ReduceMin: {
      bool mx = c.kind() == OpKind::ReduceMax;
      s = mx ? int_min(x.dtype()) : int_max(x.dtype());
      for (int64_t i : m) s = mx ? std::max(s, load_int(x, i)) : std::min(s, load_int(x, i));
      break;
    }
    default: c.fail("does not take integer input");
  }
  store_int(y, o, s);
}

// argmax / argmin: the first extreme; a NaN counts as the extreme (the first NaN wins).
int64_t arg_extreme(const Ctx& c, const TensorData& x, const std::vector<int64_t>& m) {
  if (m.empty()) c.fail("reduces an empty axis");
  bool mx = c.kind() == OpKind::ArgMax;
  size_t best = 0;
  for (size_t k = 0; k < m.size(); ++k) {
    if (int_like(x.dtype())) {
      int64_t v = load_int(x, m[k]), b = load_int(x, m[best]);
      if (mx ? v > b : v < b) best = k;
    } else {
      double v = x.at(m[k]), b = x.at(m[best]);
      if (std::isnan(b)) break;
      if (std::isnan(v) || (mx ? v > b : v < b)) best = k;
    }
  }
  return static_cast<int64_t>(best);
}

template <class T>
T combine(OpKind k, T acc, T v) {
  switch (k) {
    case OpKind::CumSum: return wadd(acc, v);
    case OpKind::CumProd: return wmul(acc, v);
    case OpKind::CumMax:
      if constexpr (std::is_same_v<T, double>) if (std::isnan(acc) || std::isnan(v)) return kNaN;
      return std::max(acc, v);
    default:
      if constexpr (std::is_same_v<T, double>) if (std::isnan(acc) || std::isnan(v)) return kNaN;
      return std::min(acc, v);
  }
}

// What an exclusive scan starts from (the scan's identity).
template <class T>
T identity_of(OpKind k, DType t) {
  T lo = lowest_of<T>(t), hi = highest_of<T>(t);
  switch (k) {
    case OpKind::CumSum: return 0;
    case OpKind::CumProd: return 1;
    case OpKind::CumMax: return lo;
    default: return hi;
  }
}

template <class T>
void cumulative(const Ctx& c, TensorData& y) {
  const auto& d = c.attr<CumulativeDesc>();
  const TensorData& x = c.in[0];
  int64_t axis = norm_axis(c, d.axis, x.shape().rank());
  for_each_line(dims(x), axis, [&](int64_t base, int64_t stride, int64_t len) {
    T acc = identity_of<T>(c.kind(), x.dtype());
    for (int64_t j = 0; j < len; ++j) {
      int64_t i = base + (d.reverse ? len - 1 - j : j) * stride;
      T v = load<T>(x, i);
      if (!d.exclusive) acc = j == 0 ? v : combine(c.kind(), acc, v);
      store(y, i, acc);
      if (d.exclusive) acc = j == 0 ? v : combine(c.kind(), acc, v);
    }
  });
}

// Stable order of a line: ascending puts NaN last, descending puts NaN first (NaN is the
// largest value, as in PyTorch); equal keys keep their input order.
template <class T>
std::vector<int64_t> order(const TensorData& x, int64_t base, int64_t stride, int64_t len, bool desc) {
  std::vector<T> v(static_cast<size_t>(len));
  for (int64_t j = 0; j < len; ++j) v[static_cast<size_t>(j)] = load<T>(x, base + j * stride);
  auto less = [](T a, T b) {
    if constexpr (std::is_same_v<T, double>) {
      if (std::isnan(a)) return false;
      if (std::isnan(b)) return true;
    }
    return a < b;
  };
  std::vector<int64_t> p(static_cast<size_t>(len));
  std::iota(p.begin(), p.end(), 0);
  std::stable_sort(p.begin(), p.end(), [&](int64_t a, int64_t b) {
    return desc ? less(v[static_cast<size_t>(b)], v[static_cast<size_t>(a)])
                : less(v[static_cast<size_t>(a)], v[static_cast<size_t>(b)]);
  });
  return p;
}

std::vector<TensorData> sorted(const Ctx& c) {
  const TensorData& x = c.in[0];
  bool is_topk = c.kind() == OpKind::TopK;
  int64_t axis = norm_axis(c, is_topk ? c.attr<TopKDesc>().axis : c.attr<SortDesc>().axis,
                           x.shape().rank());
  bool desc = is_topk ? c.attr<TopKDesc>().largest : c.attr<SortDesc>().descending;
  std::vector<TensorData> out;
  for (size_t k = 0; k < c.out_types.size(); ++k) out.push_back(c.output(k));
  const Dims& od = dims(out[0]);
  int64_t stride_out = row_strides(od)[static_cast<size_t>(axis)];
  int64_t kk = od[static_cast<size_t>(axis)];
  // Lines of the input and the output correspond one to one, in the same order.
  std::vector<int64_t> out_bases;
  for_each_line(od, axis, [&](int64_t b, int64_t, int64_t) { out_bases.push_back(b); });
  size_t line = 0;
  for_each_line(dims(x), axis, [&](int64_t base, int64_t stride, int64_t len) {
    auto p = int_like(x.dtype()) ? order<int64_t>(x, base, stride, len, desc)
                                 : order<double>(x, base, stride, len, desc);
    int64_t ob = out_bases[line++];
    for (int64_t j = 0; j < kk; ++j) {
      int64_t src = base + p[static_cast<size_t>(j)] * stride, dst = ob + j * stride_out;
      if (c.kind() == OpKind::ArgSort) {
        store_int(out[0], dst, p[static_cast<size_t>(j)]);
        continue;
      }
      copy_elem(out[0], dst, x, src);
      if (is_topk) store_int(out[1], dst, p[static_cast<size_t>(j)]);
    }
  });
  return out;
}

}  // namespace

std::vector<TensorData> eval_reduce(const Ctx& c) {
  const Family f = op_def(c.kind()).family;
  const TensorData& x = c.in[0];
  if (f == Family::top_k || f == Family::sort) return sorted(c);
  TensorData y = c.output(0);
  if (f == Family::cumulative) {
    if (int_like(x.dtype())) cumulative<int64_t>(c, y);
    else cumulative<double>(c, y);
    return {y};
  }
  auto g = groups(c, dims(x));
  for (size_t o = 0; o < g.size(); ++o) {
    int64_t oi = static_cast<int64_t>(o);
    if (f == Family::arg_reduce) store_int(y, oi, arg_extreme(c, x, g[o]));
    else if (int_like(x.dtype())) reduce_int(c, x, g[o], y, oi);
    else y.set(oi, reduce_float(c, x, g[o]));
  }
  return {y};
}

}  // namespace tg::detail::ref
