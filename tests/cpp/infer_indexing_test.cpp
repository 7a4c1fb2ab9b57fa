// Shape/type inference of gather / scatter, non_zero_indices and stencil.
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

TEST(InferGather, AxisAndBatchDims) {
  Graph g;
  Tensor x = ph(g, {5, 7, 9}, f16);
  EXPECT_EQ(g.gather(x, ph(g, {3, 4}, i32), 1).type(), TensorType({5, 3, 4, 9}, f16));
  EXPECT_EQ(g.gather(x, ph(g, {3}, i64), -1).shape(), (Shape{5, 7, 3}));
  EXPECT_EQ(g.gather(x, ph(g, {-1}, i32)).shape(), (Shape{-1, 7, 9}));
  EXPECT_EQ(g.gather(x, ph(g, {}, i32), 1).shape(), (Shape{5, 9}));
  EXPECT_EQ(g.gather(ph(g, {2, 7, 9}), ph(g, {2, 4}, i32), 1, 1).shape(), (Shape{2, 4, 9}));
  EXPECT_EQ(g.gather(ph(g, {2, 7, 9}), ph(g, {2, 4}, i32), 2, -1).shape(), (Shape{2, 7, 4}));
  EXPECT_EQ(g.gather(x, ph(g, {3}, u8), 0).shape(), (Shape{3, 7, 9}));  // widened to i32
}

TEST(InferGather, Errors) {
  Graph g;
  Tensor x = ph(g, {5, 7, 9});
  EXPECT_TG_ERROR(g.gather(x, ph(g, {3}, f32)), "[gather] indices must be i32 or i64, indices is [3] f32");
  EXPECT_TG_ERROR(g.gather(x, ph(g, {3}, boolean)), "[gather] indices must be i32 or i64");
  EXPECT_TG_ERROR(g.gather(x, ph(g, {3}, i32), 3), "[gather] axis 3 out of range for x [5,7,9]");
  EXPECT_TG_ERROR(g.gather(ph(g, {2, 7, 9}), ph(g, {3, 4}, i32), 1, 1),
                  "[gather] batch dims differ: x is [2,7,9], indices is [3,4] (batch_dims 1)");
  EXPECT_TG_ERROR(g.gather(x, ph(g, {5, 4}, i32), 0, 1),
                  "[gather] batch_dims 1 must be in [0, min(rank of indices");
  auto r = infer(detail::OpKind::Gather, {TensorType({4}, f32), TensorType({2}, u8)}, GatherDesc{});
  EXPECT_EQ(r.error, "[gather] indices must be i32 or i64, indices is [2] u8");
}

TEST(InferGather, GatherNdAndAlongAxis) {
  Graph g;
  Tensor x = ph(g, {4, 5, 6});
  EXPECT_EQ(g.gather_nd(x, ph(g, {3, 2}, i32)).shape(), (Shape{3, 6}));
  EXPECT_EQ(g.gather_nd(x, ph(g, {-1, 3}, i64)).shape(), (Shape{-1}));
  EXPECT_EQ(g.gather_nd(x, ph(g, {2, 7, 0}, i32)).shape(), (Shape{2, 7, 4, 5, 6}));
  EXPECT_EQ(g.gather_nd(x, ph(g, {4, 2, 1}, i32), 1).shape(), (Shape{4, 2, 6}));
  EXPECT_EQ(g.gather_nd(ph(g, {-1, 5, 6}), ph(g, {8, 2, 2}, i32), 1).shape(), (Shape{8, 2}));
  EXPECT_TG_ERROR(g.gather_nd(x, ph(g, {3, 4}, i32)),
                  "[gather_nd] indices [3,4] address 4 dims after 0 batch dims, but x [4,5,6] has rank 3");
  EXPECT_TG_ERROR(g.gather_nd(x, ph(g, {3, -1}, i32)),
                  "[gather_nd] the last dim of indices [3,-1] must be static");
  EXPECT_TG_ERROR(g.gather_nd(x, ph(g, {3, 2, 1}, i32), 1),
                  "[gather_nd] batch dims differ: x is [4,5,6], indices is [3,2,1]");
  EXPECT_TG_ERROR(g.gather_nd(x, ph(g, {}, i32)), "[gather_nd] indices need rank >= 1");
  EXPECT_EQ(g.gather_along_axis(ph(g, {3, 4}, i64), ph(g, {3, 7}, i32), 1).type(), TensorType({3, 7}, i64));
  EXPECT_EQ(g.gather_along_axis(ph(g, {3, 4}), ph(g, {2, -1}, i32), -1).shape(), (Shape{2, -1}));
  EXPECT_TG_ERROR(g.gather_along_axis(ph(g, {3, 4}), ph(g, {3}, i32), 0),
                  "[gather_along_axis] indices need the rank of x: x is [3,4], indices is [3]");
  EXPECT_TG_ERROR(g.gather_along_axis(ph(g, {3, 4}), ph(g, {3, 5}, i32), 0),
                  "[gather_along_axis] indices [3,5] exceed x [3,4] in dim 1");
}

TEST(InferScatter, UpdatesMatchTheGather) {
  Graph g;
  Tensor x = ph(g, {5, 7});
  EXPECT_EQ(g.scatter(x, ph(g, {3}, i32), ph(g, {3, 7})).type(), TensorType({5, 7}, f32));
  EXPECT_EQ(g.scatter(x, ph(g, {2}, i32), ph(g, {5, 2}, i32), 1, ScatterMode::add).type(),
            TensorType({5, 7}, f32));  // cast
  EXPECT_EQ(g.scatter_nd(ph(g, {4, 5}), ph(g, {2, 1}, i64), ph(g, {2, 5})).shape(), (Shape{4, 5}));
  EXPECT_EQ(g.scatter_nd(ph(g, {4, 5}), ph(g, {-1, 2}, i32), ph(g, {-1}), ScatterMode::max).shape(),
            (Shape{4, 5}));
  EXPECT_EQ(g.scatter_along_axis(x, ph(g, {5, 2}, i32), ph(g, {5, 2}), 1).shape(), (Shape{5, 7}));
  EXPECT_EQ(g.scatter(ph(g, {3}, boolean), ph(g, {1}, i32), ph(g, {1}, boolean)).dtype(), boolean);
  EXPECT_TG_ERROR(g.scatter(x, ph(g, {3}, i32), ph(g, {3, 6})),
                  "[scatter] updates must be [3,7] (what the gather of x by indices returns)",
                  "x is [5,7] f32, indices is [3] i32, updates is [3,6] f32");
  EXPECT_TG_ERROR(g.scatter_nd(ph(g, {4, 5}), ph(g, {2, 1}, i32), ph(g, {2})),
                  "[scatter_nd] updates must be [2,5]");
  EXPECT_TG_ERROR(g.scatter_along_axis(x, ph(g, {5, 2}, i32), ph(g, {5, 3}), 1),
                  "[scatter_along_axis] updates must be [5,2]");
  EXPECT_TG_ERROR(g.scatter(x, ph(g, {3}, f16), ph(g, {3, 7})), "[scatter] indices must be i32 or i64");
  EXPECT_TG_ERROR(g.scatter(ph(g, {3}, boolean), ph(g, {1}, i32), ph(g, {1}, boolean), 0, ScatterMode::add),
                  "[scatter] mode add does not take bool x");
  auto r = infer(detail::OpKind::Scatter, {TensorType({4}, f32), TensorType({2}, i32), TensorType({2}, f16)},
                 ScatterDesc{});
  EXPECT_EQ(r.error.rfind("[scatter] updates dtype differs from x's", 0), 0u) << r.error;
}

TEST(InferNonZero, DynamicCount) {
  Graph g;
  EXPECT_EQ(g.non_zero_indices(ph(g, {3, 4}, boolean)).type(), TensorType({-1, 2}, i64));
  EXPECT_EQ(g.non_zero_indices(ph(g, {-1, 4, 2})).type(), TensorType({-1, 3}, i64));
  EXPECT_TG_ERROR(g.non_zero_indices(ph(g, Shape::unranked())), "[non_zero_indices] needs a ranked input");
}

TEST(InferStencil, PaddingStyles) {
  Graph g;
  Tensor src = ph(g, {1, 8, 8, 1});
  Tensor w = ph(g, {1, 3, 3, 1});
  EXPECT_EQ(g.stencil(src, w).type(), TensorType({1, 8, 8, 1}, f32));  // same by default
  EXPECT_EQ(g.stencil(src, w, {.padding_style = PaddingStyle::valid}).shape(), (Shape{1, 6, 6, 1}));
  EXPECT_EQ(g.stencil(src, w, {.strides = {1, 2, 2, 1}}).shape(), (Shape{1, 4, 4, 1}));
  EXPECT_EQ(
      g.stencil(ph(g, {1, 7, 7, 1}), w, {.strides = {1, 2, 2, 1}, .padding_style = PaddingStyle::same_lower})
          .shape(),
      (Shape{1, 4, 4, 1}));
  StencilDesc ex{.explicit_padding = {0, 0, 1, 1, 2, 0, 0, 0}, .padding_style = PaddingStyle::explicit_};
  EXPECT_EQ(g.stencil(src, w, ex).shape(), (Shape{1, 8, 8, 1}));
  StencilDesc off{.offsets = {0, -1, 1, 0},
                  .dilation_rates = {1, 2, 2, 1},
                  .explicit_padding = {0, 0, 2, 2, 2, 2, 0, 0},
                  .padding_style = PaddingStyle::explicit_offset};
  EXPECT_EQ(g.stencil(src, w, off).shape(), (Shape{1, 8, 8, 1}));
  // Leading dims pass through; the window covers the last 4.
  EXPECT_EQ(g.stencil(ph(g, {3, -1, 2, 10, 10, 4}, f16), ph(g, {1, 1, 3, 3}, f16),
                      {.padding_style = PaddingStyle::valid})
                .type(),
            TensorType({3, -1, 2, 10, 8, 2}, f16));
  EXPECT_EQ(g.stencil(src, w, {.reduction = Reduction::argmax}).type(), TensorType({1, 8, 8, 1}, i32));
  EXPECT_EQ(g.stencil(ph(g, {1, -1, 8, 1}), w, {.padding_style = PaddingStyle::valid}).shape(),
            (Shape{1, -1, 6, 1}));
  EXPECT_EQ(detail::verify(g.impl()), "");  // the verifier re-infers every node
}

TEST(InferStencil, Errors) {
  Graph g;
  Tensor src = ph(g, {1, 8, 8, 1});
  Tensor w = ph(g, {1, 3, 3, 1});
  EXPECT_TG_ERROR(
      g.stencil(src, ph(g, {1, 3, 3, 1}, f16)),
      "[stencil] weights dtype must equal source's: source is [1,8,8,1] f32, weights is [1,3,3,1] f16");
  EXPECT_TG_ERROR(g.stencil(ph(g, {8, 8, 1}), w), "[stencil] needs source of rank >= 4 and weights of rank 4",
                  "source is [8,8,1]");
  EXPECT_TG_ERROR(g.stencil(src, ph(g, {3, 3, 1})), "weights is [3,3,1]");
  EXPECT_TG_ERROR(g.stencil(src, w, {.offsets = {0, 1, 0, 0}}),
                  "[stencil] offsets [0,1,0,0] apply only with explicit_offset padding");
  EXPECT_TG_ERROR(g.stencil(src, w, {.strides = {1, 1}}), "[stencil] strides [1,1] needs 4 values");
  EXPECT_TG_ERROR(
      g.stencil(src, w,
                {.explicit_padding = {0, 0, -1, 0, 0, 0, 0, 0}, .padding_style = PaddingStyle::explicit_}),
      "[stencil] explicit_padding", "has a value below 0");
  EXPECT_TG_ERROR(
      g.stencil(ph(g, {1, 2, 8, 1}), w, {.padding_style = PaddingStyle::valid}),
      "[stencil] window 3 (kernel 3, dilation 1) does not fit window dim 1 of the valid-padded source");
  EXPECT_TG_ERROR(g.stencil(ph(g, {1, 8, 8, 1}, boolean), ph(g, {1, 3, 3, 1}, boolean)),
                  "[stencil] does not take bool operands");
}

TEST(InferScatter, DeterministicFlagReachesTheOp) {
  Graph g;
  Tensor x = ph(g, {5, 7}), u = ph(g, {3, 7});
  auto desc = [&](Tensor y) {
    const detail::GraphImpl& gi = g.impl();
    return std::get<ScatterDesc>(gi.nodes[static_cast<size_t>(gi.values[static_cast<size_t>(y.id())].node)].attr);
  };
  EXPECT_FALSE(desc(g.scatter(x, ph(g, {3}, i32), u, 0, ScatterMode::add)).deterministic);
  EXPECT_TRUE(desc(g.scatter(x, ph(g, {3}, i32), u, 0, ScatterMode::add, 0, true)).deterministic);
  EXPECT_TRUE(desc(g.scatter_nd(x, ph(g, {3, 1}, i32), u, ScatterMode::add, 0, true)).deterministic);
  EXPECT_TRUE(desc(g.scatter_along_axis(x, ph(g, {5, 2}, i32), ph(g, {5, 2}), 1, ScatterMode::add, true)).deterministic);
}
