// Shape/type inference of strided_slice, slice_update, pad, tile, reverse, one_hot,
// space_to_depth / depth_to_space and resize.
#include "ir/graph_impl.h"
#include "ir/verifier.h"
#include "ops/infer.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

Tensor ph(Graph& g, Shape s, DType t = f32) { return g.placeholder(std::move(s), t); }

detail::InferResult infer(detail::OpKind k, std::vector<TensorType> in, detail::Attr a) {
  return detail::op_def(k).infer(detail::InferContext{k, in, a});
}

}  // namespace

TEST(InferStridedSlice, TensorFlowSemantics) {
  Graph g;
  Tensor x = ph(g, {10, 20, 30}, i32);
  EXPECT_EQ(g.strided_slice(x, {.begin = {1, -5}, .end = {8, -1}, .strides = {2, 1}}).type(),
            TensorType({4, 4, 30}, i32));
  // Out-of-range bounds clamp; masked bounds mean "from the start / to the end".
  EXPECT_EQ(g.strided_slice(x, {.begin = {-100, 5}, .end = {100, 0}, .end_mask = 2}).shape(),
            (Shape{10, 15, 30}));
  EXPECT_EQ(g.strided_slice(x, {.begin = {5}, .end = {2}}).shape(), (Shape{0, 20, 30}));
  // Negative strides walk backwards; end_mask with a negative stride runs to the first element.
  EXPECT_EQ(g.strided_slice(x, {.begin = {-1}, .end = {0}, .strides = {-1}, .end_mask = 1}).shape(),
            (Shape{10, 20, 30}));
  EXPECT_EQ(g.strided_slice(x, {.begin = {-1}, .end = {0}, .strides = {-1}}).shape(), (Shape{9, 20, 30}));
  EXPECT_EQ(
      g.strided_slice(x, {.begin = {0, 0}, .end = {0, 0}, .strides = {-3, 1}, .begin_mask = 3, .end_mask = 3})
          .shape(),
      (Shape{4, 20, 30}));
  EXPECT_EQ(g.strided_slice(x, {.begin = {3, -1}, .end = {4, 0}, .squeeze_mask = 3}).shape(), (Shape{30}));
  EXPECT_EQ(g.strided_slice(ph(g, {-1, 20}), {.begin = {1, 2}, .end = {3, 12}, .strides = {1, 5}}).shape(),
            (Shape{-1, 2}));
  EXPECT_EQ(g.strided_slice(ph(g, {-1, 20}), {.begin = {0}, .end = {1}, .squeeze_mask = 1}).shape(),
            (Shape{20}));
}

TEST(InferStridedSlice, SliceConvenience) {
  Graph g;
  Tensor x = ph(g, {10, 20, 30});
  EXPECT_EQ(g.slice(x, {1, 0}, {-1, 5}).shape(), (Shape{9, 5, 30}));  // end -1: to the end
  EXPECT_EQ(g.slice(x, {-3, 2, 0}, {-2, 4, -1}).shape(), (Shape{1, 2, 30}));
  EXPECT_TG_ERROR(g.slice(x, {1, 0}, {2}), "[slice] begin [1,0] and end [2]");
}

TEST(InferStridedSlice, Errors) {
  Graph g;
  Tensor x = ph(g, {10, 20});
  EXPECT_TG_ERROR(g.strided_slice(x, {.begin = {0}, .end = {5}, .strides = {0}}),
                  "[strided_slice] stride of dim 0 is 0");
  EXPECT_TG_ERROR(g.strided_slice(x, {.begin = {0, 0}, .end = {5}}), "[strided_slice] begin [0,0], end [5]",
                  "need equal lengths");
  EXPECT_TG_ERROR(g.strided_slice(x, {.begin = {0, 0, 0}, .end = {1, 1, 1}}),
                  "[strided_slice] slices 3 dims of x [10,20]");
  EXPECT_TG_ERROR(g.strided_slice(x, {.begin = {10}, .end = {11}, .squeeze_mask = 1}),
                  "[strided_slice] index 10 of squeezed dim 0 is out of range for x [10,20]");
  EXPECT_TG_ERROR(g.strided_slice(x, {.begin = {0}, .end = {1}, .begin_mask = 2}),
                  "[strided_slice] mask 2 has bits beyond the 1 sliced dims");
}

TEST(InferSliceUpdate, ShapesCastsAndErrors) {
  Graph g;
  Tensor x = ph(g, {10, 20});
  SliceDesc d{.begin = {2}, .end = {6}};
  EXPECT_EQ(g.slice_update(x, ph(g, {4, 20}), d).type(), TensorType({10, 20}, f32));
  Tensor y = g.slice_update(x, g.scalar(0.0, f64), d);  // cast to f32, broadcast to [4,20]
  EXPECT_EQ(y.type(), TensorType({10, 20}, f32));
  const auto& n = g.impl().nodes[static_cast<size_t>(y.op().id())];
  EXPECT_EQ(Tensor(&g.impl(), n.inputs[1]).type(), TensorType({4, 20}, f32));
  EXPECT_EQ(g.slice_update(ph(g, {-1, 20}), ph(g, {-1, 20}), d).shape(), (Shape{-1, 20}));
  EXPECT_EQ(detail::verify(g.impl()), "");  // the verifier re-infers every node
  EXPECT_TG_ERROR(g.slice_update(x, ph(g, {3, 20}), d),
                  "[slice_update] update is [3,20] but the slice of x [10,20] is [4,20]");
  auto r = infer(detail::OpKind::SliceUpdate, {TensorType({10}, f32), TensorType({4}, i32)}, d);
  EXPECT_EQ(r.error, "[slice_update] operand dtypes differ: x is [10] f32, update is [4] i32");
}

TEST(InferPad, ModesAndErrors) {
  Graph g;
  EXPECT_EQ(g.pad(ph(g, {2, 3}, boolean), {1, 0}, {2, 4}).type(), TensorType({5, 7}, boolean));
  EXPECT_EQ(g.pad(ph(g, {-1, 3}), {1, 2}, {3, 2}, PadMode::reflect).shape(), (Shape{-1, 7}));
  EXPECT_EQ(g.pad(ph(g, {2, 3}), {2, 3}, {2, 3}, PadMode::symmetric).shape(), (Shape{6, 9}));
  EXPECT_EQ(g.pad(ph(g, {1, 1}), {0, 5}, {0, 5}, PadMode::edge).shape(), (Shape{1, 11}));
  EXPECT_TG_ERROR(g.pad(ph(g, {2, 3}), {0, 3}, {0, 0}, PadMode::reflect),
                  "[pad] reflect padding 3/0 of dim 1 is too large for x [2,3] (needs pad < dim)");
  EXPECT_TG_ERROR(g.pad(ph(g, {2, 3}), {0, 0}, {3, 0}, PadMode::symmetric),
                  "[pad] symmetric padding 0/3 of dim 0");
  EXPECT_TG_ERROR(g.pad(ph(g, {2, 3}), {0, -1}, {0, 0}), "[pad] negative padding");
  EXPECT_TG_ERROR(g.pad(ph(g, {2, 3}), {1}, {1}),
                  "[pad] before [1] and after [1] need one value per dim of x [2,3]");
}

TEST(InferTileReverse, ShapesAndErrors) {
  Graph g;
  EXPECT_EQ(g.tile(ph(g, {2, 3}), {2, 1}).shape(), (Shape{4, 3}));
  EXPECT_EQ(g.tile(ph(g, {-1, 3}), {2, 0}).shape(), (Shape{-1, 0}));
  EXPECT_TG_ERROR(g.tile(ph(g, {2, 3}), {2}), "[tile] multiples [2] need one value per dim of x [2,3]");
  EXPECT_TG_ERROR(g.tile(ph(g, {2, 3}), {2, -1}), "[tile] multiples [2,-1] has a negative value");
  EXPECT_EQ(g.reverse(ph(g, {2, -1, 4}, i64), {0, -1}).type(), TensorType({2, -1, 4}, i64));
  EXPECT_TG_ERROR(g.reverse(ph(g, {2, 3}), {1, -1}), "[reverse] axis -1 given twice for x [2,3]");
  EXPECT_TG_ERROR(g.reverse(ph(g, {2, 3}), {2}), "[reverse] axis 2 out of range for x [2,3]");
}

TEST(InferOneHot, AxisDtypeAndErrors) {
  Graph g;
  EXPECT_EQ(g.one_hot(ph(g, {4}, i32), 10).type(), TensorType({4, 10}, f32));
  EXPECT_EQ(g.one_hot(ph(g, {4}, i64), 10, 0, i64).type(), TensorType({10, 4}, i64));
  EXPECT_EQ(g.one_hot(ph(g, {2, -1}, i32), 7, 1).shape(), (Shape{2, 7, -1}));
  EXPECT_EQ(g.one_hot(ph(g, {2, -1}, i32), 7, -2).shape(), (Shape{2, 7, -1}));
  Tensor narrow = g.one_hot(ph(g, {3}, u8), 5);  // widened to i32 by the builder
  EXPECT_EQ(narrow.shape(), (Shape{3, 5}));
  EXPECT_TG_ERROR(g.one_hot(ph(g, {4}, f32), 10), "[one_hot] indices must be i32 or i64, indices is [4] f32");
  EXPECT_TG_ERROR(g.one_hot(ph(g, {4}, i32), 0), "[one_hot] depth must be >= 1, got 0");
  EXPECT_TG_ERROR(g.one_hot(ph(g, {4}, i32), 3, 2), "[one_hot] axis 2 out of range for indices [4]");
}

TEST(InferSpaceDepth, LayoutsAndErrors) {
  Graph g;
  EXPECT_EQ(g.space_to_depth(ph(g, {1, 4, 6, 3}), 2).shape(), (Shape{1, 2, 3, 12}));
  EXPECT_EQ(g.space_to_depth(ph(g, {-1, 3, 4, -1}), 2, Layout::nchw).shape(), (Shape{-1, 12, 2, -1}));
  EXPECT_EQ(g.depth_to_space(ph(g, {1, 2, 3, 12}), 2).shape(), (Shape{1, 4, 6, 3}));
  EXPECT_EQ(g.depth_to_space(ph(g, {1, 18, 2, 2}), 3, Layout::nchw).shape(), (Shape{1, 2, 6, 6}));
  EXPECT_TG_ERROR(g.space_to_depth(ph(g, {1, 5, 6, 3}), 2),
                  "[space_to_depth] block 2 does not divide the spatial dims of x [1,5,6,3]");
  EXPECT_TG_ERROR(g.depth_to_space(ph(g, {1, 2, 2, 6}), 2),
                  "[depth_to_space] block^2 = 4 does not divide the channels of x [1,2,2,6]");
  EXPECT_TG_ERROR(g.depth_to_space(ph(g, {2, 2, 6}), 2),
                  "[depth_to_space] needs a rank-4 input, x is [2,2,6]");
  EXPECT_TG_ERROR(g.space_to_depth(ph(g, {1, 4, 4, 3}), 0), "[space_to_depth] block must be >= 1");
}

TEST(InferResize, LayoutsAndErrors) {
  Graph g;
  EXPECT_EQ(g.resize(ph(g, {1, 8, 8, 3}), {.size = {16, 12}}).shape(), (Shape{1, 16, 12, 3}));
  EXPECT_EQ(g.resize(ph(g, {-1, 3, -1, -1}),
                     {.size = {16, 12}, .mode = ResizeMode::bilinear, .data_layout = Layout::nchw})
                .shape(),
            (Shape{-1, 3, 16, 12}));
  EXPECT_EQ(g.resize(ph(g, {1, 8, 8, 3}, u8), {.size = {4, 4}}).type(), TensorType({1, 4, 4, 3}, u8));
  EXPECT_TG_ERROR(g.resize(ph(g, {1, 8, 8, 3}, u8), {.size = {4, 4}, .mode = ResizeMode::bilinear}),
                  "[resize] bilinear resize does not take x [1,8,8,3] u8");
  EXPECT_TG_ERROR(g.resize(ph(g, {1, 8, 8, 3}), {.size = {4}}), "[resize] size [4] needs 2 values");
  EXPECT_TG_ERROR(g.resize(ph(g, {8, 8, 3}), {.size = {4, 4}}),
                  "[resize] needs a rank-4 input, x is [8,8,3]");
}
