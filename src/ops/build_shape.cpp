// Builders of the core shape ops.
#include "ops/builder.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

Tensor Graph::reshape(Tensor x, std::vector<int64_t> shape) {
  return make(*this, OpKind::Reshape, {x}, ShapeDesc{std::move(shape)});
}
Tensor Graph::reshape(Tensor x, std::vector<int64_t> shape, const std::vector<Tensor>& sources) {
  std::vector<Tensor> in{x};
  in.insert(in.end(), sources.begin(), sources.end());
  return make(*this, OpKind::Reshape, in, ShapeDesc{std::move(shape)});
}
Tensor Graph::transpose(Tensor x, std::vector<int64_t> perm) {
  return make(*this, OpKind::Transpose, {x}, AxesDesc{std::move(perm)});
}
Tensor Graph::broadcast_to(Tensor x, std::vector<int64_t> shape) {
  return make(*this, OpKind::BroadcastTo, {x}, ShapeDesc{std::move(shape)});
}
Tensor Graph::broadcast_to(Tensor x, std::vector<int64_t> shape, const std::vector<Tensor>& sources) {
  std::vector<Tensor> in{x};
  in.insert(in.end(), sources.begin(), sources.end());
  return make(*this, OpKind::BroadcastTo, in, ShapeDesc{std::move(shape)});
}
Tensor Graph::broadcast_like(Tensor x, Tensor like) { return make(*this, OpKind::BroadcastLike, {x, like}); }
Tensor Graph::sum_to_like(Tensor x, Tensor like) { return make(*this, OpKind::SumToLike, {x, like}); }
Tensor Graph::expand_dims(Tensor x, std::vector<int64_t> axes) {
  return make(*this, OpKind::ExpandDims, {x}, AxesDesc{std::move(axes)});
}
Tensor Graph::squeeze(Tensor x, std::vector<int64_t> axes) {
  return make(*this, OpKind::Squeeze, {x}, AxesDesc{std::move(axes)});
}
Tensor Graph::flatten(Tensor x, int64_t axis) {
  use(*this, x, OpKind::Reshape, "x");
  const Shape& s = x.shape();
  auto a = normalize_axis(axis, s.rank() + 1);
  if (!a) throw Error("[flatten] axis " + std::to_string(axis) + " out of range for input " + s.str());
  std::vector<int64_t> dims(s.dims().begin(), s.dims().begin() + *a);
  int64_t tail = 1;
  for (int64_t i = *a; i < s.rank(); ++i) tail = (tail < 0 || s[i] < 0) ? -1 : tail * s[i];
  bool head_dynamic = false;
  for (int64_t d : dims) head_dynamic |= d < 0;
  if (tail < 0 && head_dynamic)
    throw Error("[flatten] input " + s.str() + " has dynamic dims on both sides of axis " +
                std::to_string(axis));
  for (auto& d : dims)
    if (d < 0) d = -1;
  dims.push_back(tail);
  return reshape(x, dims);
}
Tensor Graph::concat(const std::vector<Tensor>& xs, int64_t axis) {
  return make(*this, OpKind::Concat, xs, AxisDesc{axis});
}
Tensor Graph::stack(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw Error("[stack] needs at least one input");
  std::vector<Tensor> ex;
  int64_t r = xs[0].rank() + 1;
  auto a = normalize_axis(axis, r);
  if (!a) throw Error("[stack] axis " + std::to_string(axis) + " out of range for rank " + std::to_string(r));
  for (const Tensor& x : xs) ex.push_back(expand_dims(x, {*a}));
  return concat(ex, *a);
}
std::vector<Tensor> Graph::split(Tensor x, std::vector<int64_t> sizes, int64_t axis) {
  return make_multi(*this, OpKind::Split, {x}, SplitDesc{std::move(sizes), axis});
}
Tensor Graph::shape_of(Tensor x) { return make(*this, OpKind::ShapeOf, {x}); }
Tensor Graph::arange(double start, double limit, double delta, DType dtype) {
  return make(*this, OpKind::Arange, {}, ArangeDesc{start, limit, delta, dtype});
}

}  // namespace tg
