// Builders of gather / scatter, non_zero_indices and stencil. Narrow integer indices (i8, i16,
// u8) are widened to i32 and updates are cast to x's dtype; the rest is checked by the op.
#include "ops/builder.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace {

Tensor index_operand(Graph& g, OpKind k, Tensor indices) {
  use(g, indices, k, "indices");
  DType t = indices.dtype();
  if (is_integer(t) && t != DType::i32 && t != DType::i64) return g.cast(indices, DType::i32);
  return indices;
}

Tensor gather_like(Graph& g, OpKind k, Tensor x, Tensor indices, GatherDesc d) {
  use(g, x, k, "x");
  return make(g, k, {x, index_operand(g, k, indices)}, d);
}

Tensor scatter_like(Graph& g, OpKind k, Tensor x, Tensor indices, Tensor updates, ScatterDesc d) {
  use(g, x, k, "x");
  use(g, updates, k, "updates");
  return make(g, k, {x, index_operand(g, k, indices), cast_if(g, updates, x.dtype())}, d);
}

}  // namespace

Tensor Graph::gather(Tensor x, Tensor indices, int64_t axis, int64_t batch_dims) {
  return gather_like(*this, OpKind::Gather, x, indices, GatherDesc{axis, batch_dims});
}
Tensor Graph::gather_nd(Tensor x, Tensor indices, int64_t batch_dims) {
  return gather_like(*this, OpKind::GatherNd, x, indices, GatherDesc{0, batch_dims});
}
Tensor Graph::gather_along_axis(Tensor x, Tensor indices, int64_t axis) {
  return gather_like(*this, OpKind::GatherAlongAxis, x, indices, GatherDesc{axis, 0});
}

Tensor Graph::scatter(Tensor x, Tensor indices, Tensor updates, int64_t axis, ScatterMode mode,
                      int64_t batch_dims, bool deterministic) {
  return scatter_like(*this, OpKind::Scatter, x, indices, updates,
                      ScatterDesc{axis, batch_dims, mode, deterministic});
}
Tensor Graph::scatter_nd(Tensor x, Tensor indices, Tensor updates, ScatterMode mode, int64_t batch_dims,
                         bool deterministic) {
  return scatter_like(*this, OpKind::ScatterNd, x, indices, updates,
                      ScatterDesc{0, batch_dims, mode, deterministic});
}
Tensor Graph::scatter_along_axis(Tensor x, Tensor indices, Tensor updates, int64_t axis, ScatterMode mode,
                                 bool deterministic) {
  return scatter_like(*this, OpKind::ScatterAlongAxis, x, indices, updates,
                      ScatterDesc{axis, 0, mode, deterministic});
}

Tensor Graph::non_zero_indices(Tensor x) { return make(*this, OpKind::NonZeroIndices, {x}); }

Tensor Graph::stencil(Tensor source, Tensor weights, const StencilDesc& d) {
  return make(*this, OpKind::Stencil, {source, weights}, d);
}

namespace {

// The 2-D / 3-D forms: the 4-D op over [..., 1, (1,) spatial dims] with weights of unit
// leading window dims, the descriptor widened with those dims' defaults, the unit dims
// squeezed off the result. Argmin / argmax indices are the same either way (row-major within
// the window, whose leading dims have extent 1).
Tensor stencil_nd(Graph& g, int dims, const char* op, Tensor source, Tensor weights, StencilDesc d) {
  const int lead = 4 - dims;
  const std::string name = std::string("[") + op + "] ";
  const int64_t r = source.shape().rank();
  if (r < dims)
    throw Error(name + "source must have rank >= " + std::to_string(dims) + ", got " + source.type().str());
  if (weights.shape().rank() != dims)
    throw Error(name + "weights must have rank " + std::to_string(dims) + ", got " + weights.type().str());
  auto widen = [&](std::vector<int64_t>& v, int64_t fill, int per, const char* field) {
    if (v.empty()) return;  // the defaults
    if (v.size() != static_cast<size_t>(dims * per))
      throw Error(name + field + " needs " + std::to_string(dims * per) + " values for the " +
                  std::to_string(dims) + "-D form, got " + std::to_string(v.size()));
    v.insert(v.begin(), static_cast<size_t>(lead * per), fill);
  };
  widen(d.offsets, 0, 1, "offsets");
  widen(d.strides, 1, 1, "strides");
  widen(d.dilation_rates, 1, 1, "dilation_rates");
  widen(d.explicit_padding, 0, 2, "explicit_padding");
  std::vector<int64_t> unit_axes, weight_axes;
  for (int i = 0; i < lead; ++i) {
    unit_axes.push_back(r - dims + i);  // positions in the expanded source and in the result
    weight_axes.push_back(i);
  }
  Tensor y = g.stencil(g.expand_dims(source, unit_axes), g.expand_dims(weights, weight_axes), d);
  return g.squeeze(y, unit_axes);
}

}  // namespace

Tensor Graph::stencil_2d(Tensor source, Tensor weights, const StencilDesc& d) {
  return stencil_nd(*this, 2, "stencil_2d", source, weights, d);
}
Tensor Graph::stencil_3d(Tensor source, Tensor weights, const StencilDesc& d) {
  return stencil_nd(*this, 3, "stencil_3d", source, weights, d);
}

}  // namespace tg
