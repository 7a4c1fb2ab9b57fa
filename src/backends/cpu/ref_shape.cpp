// Reference shape ops: data movement by coordinates, elements copied bit-exactly.
#include <cstring>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

// Output element i takes input element src(out_idx) for every i.
template <class F>
TensorData gather_coords(const Ctx& c, const TensorData& x, F&& src) {
  TensorData y = c.output(0);
  const Dims& od = dims(y);
  for (int64_t i = 0; i < y.num_elements(); ++i) copy_elem(y, i, x, src(unravel(i, od)));
  return y;
}

TensorData same_order(const Ctx& c) {
  TensorData y = c.output(0);
  if (y.num_elements() != c.in[0].num_elements())
    c.fail("cannot give " + c.in[0].shape().str() + " the shape " + y.shape().str());
  std::memcpy(y.data(), c.in[0].data(), c.in[0].nbytes());
  return y;
}

TensorData transpose(const Ctx& c) {
  const TensorData& x = c.in[0];
  const auto& perm = c.attr<AxesDesc>().axes;
  const int64_t r = x.shape().rank();
  return gather_coords(c, x, [&](const Dims& o) {
    Dims xi(o.size());
    for (size_t k = 0; k < o.size(); ++k) xi[static_cast<size_t>(norm_axis(c, perm[k], r))] = o[k];
    return ravel(xi, dims(x));
  });
}

TensorData concat(const Ctx& c) {
  const int64_t axis = norm_axis(c, c.attr<AxisDesc>().axis, c.in[0].shape().rank());
  const size_t a = static_cast<size_t>(axis);
  TensorData y = c.output(0);
  const Dims& od = dims(y);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    Dims idx = unravel(i, od);
    size_t k = 0;
    while (idx[a] >= dims(c.in[k])[a]) idx[a] -= dims(c.in[k++])[a];
    copy_elem(y, i, c.in[k], ravel(idx, dims(c.in[k])));
  }
  return y;
}

std::vector<TensorData> split(const Ctx& c) {
  const TensorData& x = c.in[0];
  const size_t a = static_cast<size_t>(norm_axis(c, c.attr<SplitDesc>().axis, x.shape().rank()));
  std::vector<TensorData> out;
  int64_t offset = 0;
  for (size_t k = 0; k < c.out_types.size(); ++k) {
    TensorData y = c.output(k);
    const Dims& od = dims(y);
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      Dims idx = unravel(i, od);
      idx[a] += offset;
      copy_elem(y, i, x, ravel(idx, dims(x)));
    }
    offset += od[a];
    out.push_back(y);
  }
  return out;
}

}  // namespace

std::vector<TensorData> eval_shape(const Ctx& c) {
  switch (c.kind()) {
    case OpKind::Reshape: case OpKind::ExpandDims: case OpKind::Squeeze: return {same_order(c)};
    case OpKind::Transpose: return {transpose(c)};
    case OpKind::SumToLike: {
      // Every element of x adds into the element of the (smaller) result it broadcasts from.
      // Integers add exactly in int64 and wrap to the output width, like reduce_sum.
      TensorData y = c.output(0);
      if (!is_float(y.dtype())) {
        std::vector<int64_t> acc(static_cast<size_t>(y.num_elements()), 0);
        for (int64_t i = 0; i < c.in[0].num_elements(); ++i) {
          int64_t& a = acc[static_cast<size_t>(broadcast_index(unravel(i, dims(c.in[0])), dims(y)))];
          a = wadd(a, load_int(c.in[0], i));
        }
        for (size_t i = 0; i < acc.size(); ++i) store_int(y, static_cast<int64_t>(i), acc[i]);
        return {y};
      }
      std::vector<double> acc(static_cast<size_t>(y.num_elements()), 0.0);
      for (int64_t i = 0; i < c.in[0].num_elements(); ++i)
        acc[static_cast<size_t>(broadcast_index(unravel(i, dims(c.in[0])), dims(y)))] += c.in[0].at(i);
      for (size_t i = 0; i < acc.size(); ++i) y.set(static_cast<int64_t>(i), acc[i]);
      return {y};
    }
    case OpKind::BroadcastTo: case OpKind::BroadcastLike:
      return {gather_coords(c, c.in[0], [&](const Dims& o) { return broadcast_index(o, dims(c.in[0])); })};
    case OpKind::Concat: return {concat(c)};
    case OpKind::Split: return split(c);
    case OpKind::ShapeOf: {
      TensorData y = c.output(0);
      for (size_t k = 0; k < dims(c.in[0]).size(); ++k)
        store_int(y, static_cast<int64_t>(k), dims(c.in[0])[k]);
      return {y};
    }
    case OpKind::Arange: {
      const auto& d = c.attr<ArangeDesc>();
      TensorData y = c.output(0);
      for (int64_t i = 0; i < y.num_elements(); ++i) y.set(i, d.start + static_cast<double>(i) * d.delta);
      return {y};
    }
    default: return eval_shape_more(c);
  }
}

}  // namespace tg::detail::ref
