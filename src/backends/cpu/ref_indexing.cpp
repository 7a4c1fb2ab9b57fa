// Reference gather / scatter (plain, _nd, _along_axis) and non_zero_indices. A gather maps each
// output coordinate to one coordinate of x; the matching scatter walks the updates (shaped like
// that gather's output) in row-major order and combines each into the same coordinate.
#include <algorithm>
#include <cmath>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

// Index value k for a dim of size n: negative counts from the end; out of range throws.
int64_t checked(const Ctx& c, int64_t k, int64_t n, size_t dim) {
  int64_t r = k < 0 ? k + n : k;
  if (r < 0 || r >= n)
    c.fail("index " + std::to_string(k) + " is out of range for dim " + std::to_string(dim) +
           " of size " + std::to_string(n));
  return r;
}

Dims slice_of(const Dims& d, size_t from, size_t to) {
  return Dims(d.begin() + static_cast<long>(from), d.begin() + static_cast<long>(to));
}

std::pair<int64_t, int64_t> axis_and_batch(const Ctx& c) {
  if (const auto* s = std::get_if<ScatterDesc>(&c.n.attr)) return {s->axis, s->batch_dims};
  return {c.attr<GatherDesc>().axis, c.attr<GatherDesc>().batch_dims};
}

// The flat index into x that gather coordinates `o` read.
int64_t gather_source(const Ctx& c, const Dims& o) {
  const TensorData &x = c.in[0], &ind = c.in[1];
  const Dims &xd = dims(x), &id = dims(ind);
  const auto [axis_raw, bd_raw] = axis_and_batch(c);
  Dims xi;
  switch (c.kind()) {
    case OpKind::Gather: case OpKind::Scatter: {
      // o = x[:axis] + indices[bd:] + x[axis+1:]; indices are read at o's batch dims + its tail.
      const size_t ax = static_cast<size_t>(norm_axis(c, axis_raw, static_cast<int64_t>(xd.size())));
      const size_t bd = static_cast<size_t>(bd_raw < 0 ? bd_raw + static_cast<int64_t>(id.size()) : bd_raw);
      const size_t nt = id.size() - bd;
      Dims ii = slice_of(o, 0, bd), tail = slice_of(o, ax, ax + nt);
      ii.insert(ii.end(), tail.begin(), tail.end());
      xi = slice_of(o, 0, ax);
      xi.push_back(checked(c, load_int(ind, ravel(ii, id)), xd[ax], ax));
      Dims rest = slice_of(o, ax + nt, o.size());
      xi.insert(xi.end(), rest.begin(), rest.end());
      break;
    }
    case OpKind::GatherNd: case OpKind::ScatterNd: {
      // o = indices[:-1] + x[bd+K:]; x is read at o's batch dims, the K indices, then the rest.
      const size_t bd = static_cast<size_t>(bd_raw), K = static_cast<size_t>(id.back()), lead = id.size() - 1;
      Dims prefix = slice_of(o, 0, lead);
      xi = slice_of(o, 0, bd);
      for (size_t k = 0; k < K; ++k) {
        Dims ii = prefix;
        ii.push_back(static_cast<int64_t>(k));
        xi.push_back(checked(c, load_int(ind, ravel(ii, id)), xd[bd + k], bd + k));
      }
      Dims rest = slice_of(o, lead, o.size());
      xi.insert(xi.end(), rest.begin(), rest.end());
      break;
    }
    default: {  // along axis: o has the shape of indices
      const size_t ax = static_cast<size_t>(norm_axis(c, axis_raw, static_cast<int64_t>(xd.size())));
      xi = o;
      xi[ax] = checked(c, load_int(ind, ravel(o, id)), xd[ax], ax);
    }
  }
  return ravel(xi, xd);
}

template <class T>
T combine(ScatterMode m, T old, T u) {
  switch (m) {
    case ScatterMode::set: return u;
    case ScatterMode::add: return wadd(old, u);
    case ScatterMode::sub: return wsub(old, u);
    case ScatterMode::mul: return wmul(old, u);
    case ScatterMode::div:
      if constexpr (std::is_same_v<T, int64_t>) return u == 0 ? 0 : (u == -1 ? wsub(0, old) : old / u);
      else return old / u;
    case ScatterMode::min:
      if constexpr (std::is_same_v<T, double>) if (std::isnan(old) || std::isnan(u)) return NAN;
      return std::min(old, u);
    case ScatterMode::max:
      if constexpr (std::is_same_v<T, double>) if (std::isnan(old) || std::isnan(u)) return NAN;
      return std::max(old, u);
  }
  return u;
}

TensorData scatter(const Ctx& c) {
  const ScatterMode mode = c.attr<ScatterDesc>().mode;
  const TensorData& u = c.in[2];
  // An input nobody else holds (a loop-carried tape moved in by the executor) is updated in
  // place; otherwise the result is a copy.
  TensorData y = c.in[0].sole_owner() ? c.in[0] : c.in[0].clone();
  for (int64_t i = 0; i < u.num_elements(); ++i) {
    int64_t t = gather_source(c, unravel(i, dims(u)));
    if (mode == ScatterMode::set) copy_elem(y, t, u, i);
    else if (int_like(y.dtype())) store_int(y, t, combine<int64_t>(mode, load_int(y, t), load_int(u, i)));
    else y.set(t, combine<double>(mode, y.at(t), u.at(i)));
  }
  return y;
}

// Row-major coordinates of the non-zero elements (NaN counts as non-zero), i64 [n, rank].
TensorData non_zero(const Ctx& c) {
  const TensorData& x = c.in[0];
  std::vector<Dims> hits;
  for (int64_t i = 0; i < x.num_elements(); ++i)
    if (x.at(i) != 0) hits.push_back(unravel(i, dims(x)));
  const int64_t r = x.shape().rank();
  TensorData y(Shape{static_cast<int64_t>(hits.size()), r}, DType::i64);
  for (size_t h = 0; h < hits.size(); ++h)
    for (int64_t k = 0; k < r; ++k) store_int(y, static_cast<int64_t>(h) * r + k, hits[h][static_cast<size_t>(k)]);
  return y;
}

}  // namespace

std::vector<TensorData> eval_indexing(const Ctx& c) {
  switch (op_def(c.kind()).family) {
    case Family::gather: {
      TensorData y = c.output(0);
      for (int64_t i = 0; i < y.num_elements(); ++i) copy_elem(y, i, c.in[0], gather_source(c, unravel(i, dims(y))));
      return {y};
    }
    case Family::scatter: return {scatter(c)};
    default: return {non_zero(c)};
  }
}

}  // namespace tg::detail::ref
