// Builders of strided_slice / slice / slice_update, pad, tile, reverse, one_hot,
// space_to_depth / depth_to_space and resize.
#include "ops/builder.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

Tensor Graph::strided_slice(Tensor x, const SliceDesc& d) {
  return make(*this, OpKind::StridedSlice, {x}, d);
}

Tensor Graph::slice(Tensor x, std::vector<int64_t> begin, std::vector<int64_t> end) {
  if (begin.size() != end.size() || begin.size() > 63)
    throw Error("[slice] begin " + Shape(begin).str() + " and end " + Shape(end).str() +
                " need one value per sliced dim");
  size_t n = begin.size();
  SliceDesc d{std::move(begin), std::move(end), std::vector<int64_t>(n, 1), 0, 0, 0};
  for (size_t i = 0; i < n; ++i)
    if (d.end[i] == -1) d.end_mask |= int64_t(1) << i;  // -1 means "to the end" here
  return strided_slice(x, d);
}

// The update is cast to x's dtype and broadcast to the slice's shape (so x[1:3] = 0 works).
Tensor Graph::slice_update(Tensor x, Tensor update, const SliceDesc& d) {
  const OpKind K = OpKind::SliceUpdate;
  use(*this, x, K, "x");
  use(*this, update, K, "update");
  update = cast_if(*this, update, x.dtype());
  std::vector<TensorType> in{x.type()};
  Attr attr = d;
  InferResult sliced = op_def(OpKind::StridedSlice).infer(InferContext{OpKind::StridedSlice, in, attr});
  if (sliced.ok()) {
    const Shape& target = sliced.types[0].shape;
    auto b = broadcast_shapes(update.shape(), target);
    if (b && *b == target) update = broadcast_if(*this, K, update, target);
  }
  return make(*this, K, {x, update}, d);
}

Tensor Graph::pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after, PadMode mode,
                  double constant) {
  return make(*this, OpKind::Pad, {x}, PadDesc{std::move(before), std::move(after), mode, constant});
}

Tensor Graph::tile(Tensor x, std::vector<int64_t> multiples) {
  return make(*this, OpKind::Tile, {x}, TileDesc{std::move(multiples)});
}

Tensor Graph::reverse(Tensor x, std::vector<int64_t> axes) {
  return make(*this, OpKind::Reverse, {x}, AxesDesc{std::move(axes)});
}

// Narrow integer indices (i8, i16, u8) are widened to i32; other dtypes are checked by the op.
Tensor Graph::one_hot(Tensor indices, int64_t depth, int64_t axis, DType dtype, double on_value,
                      double off_value) {
  use(*this, indices, OpKind::OneHot, "indices");
  DType t = indices.dtype();
  if (is_integer(t) && t != DType::i32 && t != DType::i64) indices = cast(indices, DType::i32);
  return make(*this, OpKind::OneHot, {indices}, OneHotDesc{depth, axis, on_value, off_value, dtype});
}

Tensor Graph::space_to_depth(Tensor x, int64_t block, Layout layout) {
  return make(*this, OpKind::SpaceToDepth, {x}, BlockDesc{block, layout});
}

Tensor Graph::depth_to_space(Tensor x, int64_t block, Layout layout) {
  return make(*this, OpKind::DepthToSpace, {x}, BlockDesc{block, layout});
}

Tensor Graph::resize(Tensor x, const ResizeDesc& d) { return make(*this, OpKind::Resize, {x}, d); }

}  // namespace tg
