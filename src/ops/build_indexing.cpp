// Builders of gather / scatter, non_zero_indices and stencil. Narrow integer indices (i8, i16,
// u8) are widened to i32 and updates are cast to x's dtype; the rest is checked by the op.
#include "ops/builder.h"

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

}  // namespace tg
