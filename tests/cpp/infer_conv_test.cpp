// Shape/type inference of convolution (forward, transposed, gradients) and pooling.
#include "ir/graph_impl.h"
#include "ir/verifier.h"
#include "ops/infer.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

Tensor ph(Graph& g, Shape s, DType t = f32) { return g.placeholder(std::move(s), t); }

ConvDesc nchw(ConvDesc d = {}) {
  d.data_layout = Layout::nchw;
  d.weights_layout = Layout::oihw;
  return d;
}

}  // namespace

TEST(InferConv, Conv2dNhwcHwio) {
  Graph g;
  Tensor x = ph(g, {1, 8, 8, 3});
  Tensor y = g.conv2d(x, ph(g, {3, 3, 3, 16}));
  EXPECT_EQ(y.type(), TensorType({1, 6, 6, 16}, f32));
  ConvDesc same{.stride = {2, 2}, .padding = PaddingStyle::same};
  EXPECT_EQ(g.conv2d(x, ph(g, {3, 3, 3, 16}), same).shape(), (Shape{1, 4, 4, 16}));
  ConvDesc lower{.stride = {2, 2}, .padding = PaddingStyle::same_lower};
  EXPECT_EQ(g.conv2d(ph(g, {-1, 7, 9, 3}), ph(g, {3, 3, 3, 4}), lower).shape(), (Shape{-1, 4, 5, 4}));
  ConvDesc pad{.padding = PaddingStyle::explicit_, .explicit_padding = {1, 2, 0, 0}};
  EXPECT_EQ(g.conv2d(x, ph(g, {3, 3, 3, 4}), pad).shape(), (Shape{1, 9, 6, 4}));
}

TEST(InferConv, Conv2dNchwOihwStrideDilationDynamic) {
  Graph g;
  ConvDesc d = nchw({.stride = {2, 2}, .explicit_padding = {2, 2, 2, 2}});
  EXPECT_EQ(g.conv2d(ph(g, {2, 3, 32, 32}), ph(g, {16, 3, 5, 5}), d).shape(), (Shape{2, 16, 16, 16}));
  ConvDesc dil = nchw({.dilation = {2, 2}, .padding = PaddingStyle::valid});
  EXPECT_EQ(g.conv2d(ph(g, {2, 3, 32, 30}), ph(g, {16, 3, 5, 5}), dil).shape(), (Shape{2, 16, 24, 22}));
  EXPECT_EQ(g.conv2d(ph(g, {-1, 3, -1, 32}), ph(g, {16, 3, 5, 5}), dil).shape(), (Shape{-1, 16, -1, 24}));
  EXPECT_EQ(g.conv2d(ph(g, {1, -1, 8, 8}), ph(g, {4, 3, 3, 3}), nchw()).shape(), (Shape{1, 4, 6, 6}));
}

TEST(InferConv, GroupsAndDepthwise) {
  Graph g;
  ConvDesc dw{.padding = PaddingStyle::same, .groups = 32};
  EXPECT_EQ(g.conv2d(ph(g, {1, 8, 8, 32}), ph(g, {3, 3, 1, 64}), dw).shape(), (Shape{1, 8, 8, 64}));
  EXPECT_EQ(g.conv2d(ph(g, {1, 16, 10, 10}), ph(g, {32, 4, 3, 3}), nchw({.groups = 4})).shape(),
            (Shape{1, 32, 8, 8}));
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 16, 10, 10}), ph(g, {30, 4, 3, 3}), nchw({.groups = 4})),
                  "[conv2d] output channels 30 are not divisible by groups 4", "[30,4,3,3]");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 16, 10, 10}), ph(g, {32, 2, 3, 3}), nchw({.groups = 4})),
                  "[conv2d] input channels 16 do not match weights' 2 x 4 groups");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4}), {.groups = 0}),
                  "[conv2d] groups must be >= 1");
}

TEST(InferConv, Conv3dLayouts) {
  Graph g;
  ConvDesc d{.padding = PaddingStyle::valid, .data_layout = Layout::ndhwc, .weights_layout = Layout::dhwio};
  EXPECT_EQ(g.conv3d(ph(g, {1, 8, 16, 16, 4}), ph(g, {3, 3, 3, 4, 8}), d).shape(), (Shape{1, 6, 14, 14, 8}));
  // The default (2-D named) layouts mean channels-last for conv3d too.
  EXPECT_EQ(g.conv3d(ph(g, {1, 8, 16, 16, 4}), ph(g, {3, 3, 3, 4, 8})).shape(), (Shape{1, 6, 14, 14, 8}));
  ConvDesc cf{.stride = {2, 2, 2},
              .padding = PaddingStyle::same,
              .data_layout = Layout::ncdhw,
              .weights_layout = Layout::oidhw};
  EXPECT_EQ(g.conv3d(ph(g, {1, 4, 8, 16, -1}), ph(g, {8, 4, 3, 3, 3}), cf).shape(), (Shape{1, 8, 4, 8, -1}));
  EXPECT_TG_ERROR(g.conv3d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4})), "[conv3d] needs rank-5 operands",
                  "x is [1,8,8,3]");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4}), {.data_layout = Layout::ndhwc}),
                  "[conv2d] data_layout ndhwc is not an activation layout");
}

TEST(InferConv, ConvTranspose2d) {
  Graph g;
  // hwio weights of the transposed conv: [kh, kw, C_out / groups, C_in].
  ConvDesc d{.stride = {2, 2}, .explicit_padding = {1, 1, 1, 1}, .output_padding = {1, 1}};
  EXPECT_EQ(g.conv_transpose2d(ph(g, {1, 4, 4, 8}), ph(g, {3, 3, 16, 8}), d).shape(), (Shape{1, 8, 8, 16}));
  // oihw: [C_in, C_out / groups, kh, kw], as in PyTorch and ONNX.
  EXPECT_EQ(g.conv_transpose2d(ph(g, {1, 8, 4, 4}), ph(g, {8, 16, 3, 3}),
                               nchw({.stride = {2, 2}, .padding = PaddingStyle::same}))
                .shape(),
            (Shape{1, 16, 8, 8}));
  EXPECT_EQ(g.conv_transpose2d(ph(g, {-1, 8, 5, -1}), ph(g, {8, 2, 3, 3}), nchw({.groups = 4})).shape(),
            (Shape{-1, 8, 7, -1}));
  EXPECT_TG_ERROR(g.conv_transpose2d(ph(g, {1, 4, 4, 6}), ph(g, {3, 3, 16, 8})),
                  "[conv_transpose2d] input channels 6 do not match weights' 8", "w is [3,3,16,8]");
  EXPECT_TG_ERROR(g.conv_transpose2d(ph(g, {1, 4, 4, 8}), ph(g, {3, 3, 16, 8}),
                                     {.stride = {2, 2}, .output_padding = {2, 0}}),
                  "[conv_transpose2d] output_padding [2,0] must be >= 0 and smaller than the stride");
  EXPECT_TG_ERROR(
      g.conv_transpose2d(ph(g, {1, 4, 4, 8}), ph(g, {3, 3, 16, 8}),
                         {.stride = {2, 2}, .padding = PaddingStyle::same, .output_padding = {1, 1}}),
      "cannot be used with same padding");
  EXPECT_TG_ERROR(
      g.conv_transpose2d(ph(g, {1, 1, 1, 8}), ph(g, {1, 1, 16, 8}), {.explicit_padding = {1, 1, 0, 0}}),
      "[conv_transpose2d] padding [1,1,0,0] leaves no output along spatial dim 0", "x is [1,1,1,8]");
}

TEST(InferConv, ConvErrorsNameShapes) {
  Graph g;
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 4, 16})),
                  "[conv2d] input channels 3 do not match weights' 4: x is [1,8,8,3], w is [3,3,4,16]");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {8, 8, 3}), ph(g, {3, 3, 3, 16})), "[conv2d] needs rank-4", "[8,8,3]");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 2, 2, 3}), ph(g, {3, 3, 3, 4}), {.padding = PaddingStyle::valid}),
                  "[conv2d] window of kernel 3", "does not fit", "x is [1,2,2,3]");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4}), {.stride = {1, 1, 1}}),
                  "[conv2d] stride [1,1,1] needs 2 values");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4}), {.dilation = {0, 1}}),
                  "[conv2d] dilation [0,1] has a value below 1");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4}), {.output_padding = {1, 1}}),
                  "[conv2d] output_padding applies only to conv_transpose");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}), ph(g, {3, 3, 3, 4}), {.weights_layout = Layout::nhwc}),
                  "[conv2d] weights_layout nhwc is not a weights layout");
  EXPECT_TG_ERROR(g.conv2d(ph(g, {1, 8, 8, 3}, i32), ph(g, {3, 3, 3, 4}, i32)),
                  "[conv2d] needs floating-point operands", "x is [1,8,8,3] i32");
}

TEST(InferConv, BuilderPromotesOperands) {
  Graph g;
  Tensor y = g.conv2d(ph(g, {1, 8, 8, 3}, f16), ph(g, {3, 3, 3, 4}, f32));
  EXPECT_EQ(y.dtype(), f32);
  const auto& n = g.impl().nodes[static_cast<size_t>(y.op().id())];
  EXPECT_EQ(Tensor(&g.impl(), n.inputs[0]).op().kind_name(), "cast");
}

TEST(InferConv, Gradients) {
  Graph g;
  Tensor w = ph(g, {3, 3, 3, 16});
  EXPECT_EQ(g.conv2d_data_grad(ph(g, {1, 6, 6, 16}), w, {1, 8, 8, 3}).type(), TensorType({1, 8, 8, 3}, f32));
  EXPECT_EQ(g.conv2d_data_grad(ph(g, {-1, 6, 6, 16}), w, {-1, 8, 8, 3}).shape(), (Shape{-1, 8, 8, 3}));
  ConvDesc s2{.stride = {2, 2}, .padding = PaddingStyle::same};
  EXPECT_EQ(g.conv2d_data_grad(ph(g, {1, 4, 4, 16}), w, {1, 7, 7, 3}, s2).shape(), (Shape{1, 7, 7, 3}));
  EXPECT_EQ(g.conv2d_weight_grad(ph(g, {1, 6, 6, 16}), ph(g, {1, 8, 8, 3}), {3, 3, 3, 16}).shape(),
            (Shape{3, 3, 3, 16}));
  ConvDesc d3 = nchw({.padding = PaddingStyle::valid});
  d3.data_layout = Layout::ncdhw;
  d3.weights_layout = Layout::oidhw;
  EXPECT_EQ(g.conv3d_weight_grad(ph(g, {2, 8, 2, 2, 2}), ph(g, {2, 4, 4, 4, 4}), {8, 4, 3, 3, 3}, d3).shape(),
            (Shape{8, 4, 3, 3, 3}));
  EXPECT_EQ(g.conv3d_data_grad(ph(g, {2, 8, 2, 2, 2}), ph(g, {8, 4, 3, 3, 3}), {2, 4, 4, 4, 4}, d3).shape(),
            (Shape{2, 4, 4, 4, 4}));
  EXPECT_EQ(detail::verify(g.impl()), "");  // the verifier re-infers every node
  EXPECT_TG_ERROR(g.conv2d_data_grad(ph(g, {1, 5, 5, 16}), w, {1, 8, 8, 3}),
                  "[conv2d_data_grad] dy is [1,5,5,16] but the forward convolution gives [1,6,6,16]",
                  "input_shape [1,8,8,3]", "w [3,3,3,16]");
  EXPECT_TG_ERROR(g.conv2d_weight_grad(ph(g, {1, 6, 6, 16}), ph(g, {1, 8, 8, 4}), {3, 3, 3, 16}),
                  "[conv2d_weight_grad] input channels 4 do not match weights' 3",
                  "x is [1,8,8,4], weights_shape is [3,3,3,16]");
  EXPECT_TG_ERROR(g.conv2d_data_grad(ph(g, {1, 6, 6, 16}), w, Shape::unranked()),
                  "[conv2d_data_grad] input_shape must be ranked");
}

TEST(InferPool, MaxAvgShapes) {
  Graph g;
  Tensor x = ph(g, {1, 8, 8, 3});
  EXPECT_EQ(g.max_pool2d(x).type(), TensorType({1, 4, 4, 3}, f32));  // stride defaults to kernel
  PoolDesc d{
      .kernel = {3, 3}, .stride = {2, 2}, .explicit_padding = {1, 1, 1, 1}, .data_layout = Layout::nchw};
  EXPECT_EQ(g.avg_pool2d(ph(g, {1, 3, 7, 7}), d).shape(), (Shape{1, 3, 4, 4}));
  PoolDesc ceil{.kernel = {3, 3}, .stride = {2, 2}, .data_layout = Layout::nchw, .ceil_mode = true};
  EXPECT_EQ(g.max_pool2d(ph(g, {1, 3, 6, 6}), ceil).shape(), (Shape{1, 3, 3, 3}));
  // ceil mode drops a last window that would start in the padding (PyTorch's rule).
  PoolDesc drop{.kernel = {2, 2}, .stride = {2, 2}, .explicit_padding = {1, 1, 1, 1}, .ceil_mode = true};
  EXPECT_EQ(g.max_pool2d(ph(g, {1, 5, 5, 2}), drop).shape(), (Shape{1, 3, 3, 2}));
  PoolDesc same{.kernel = {3, 3}, .stride = {2, 2}, .padding = PaddingStyle::same};
  EXPECT_EQ(g.max_pool2d(ph(g, {1, 7, 7, 3}), same).shape(), (Shape{1, 4, 4, 3}));
  EXPECT_EQ(g.max_pool2d(ph(g, {-1, -1, 8, 3})).shape(), (Shape{-1, -1, 4, 3}));
  auto [v, i] = g.max_pool2d_with_indices(ph(g, {2, 6, 6, 5}, f16));
  EXPECT_EQ(v.type(), TensorType({2, 3, 3, 5}, f16));
  EXPECT_EQ(i.type(), TensorType({2, 3, 3, 5}, i32));
}

TEST(InferPool, Errors) {
  Graph g;
  EXPECT_TG_ERROR(g.avg_pool2d(ph(g, {1, 8, 8, 3}, i32)), "[avg_pool2d] needs a floating-point input",
                  "[1,8,8,3] i32");
  EXPECT_TG_ERROR(g.max_pool2d(ph(g, {8, 8, 3})), "[max_pool2d] needs a rank-4 input, x is [8,8,3]");
  EXPECT_TG_ERROR(g.max_pool2d(ph(g, {1, 8, 8, 3}), {.kernel = {2}}),
                  "[max_pool2d] kernel [2] needs 2 values");
  EXPECT_TG_ERROR(g.max_pool2d(ph(g, {1, 8, 8, 3}), {.explicit_padding = {2, 0, 0, 0}}),
                  "[max_pool2d] padding [2,0,0,0] must be smaller than the window 2");
  EXPECT_TG_ERROR(g.max_pool2d(ph(g, {1, 1, 8, 3}), {.kernel = {3, 3}, .padding = PaddingStyle::valid}),
                  "[max_pool2d] window [3,3] does not fit x [1,1,8,3]");
  EXPECT_TG_ERROR(g.max_pool2d(ph(g, {1, 8, 8, 3}), {.data_layout = Layout::hwio}),
                  "[max_pool2d] data_layout hwio is not nhwc or nchw");
}

TEST(InferPool, GradientsAndGlobal) {
  Graph g;
  Tensor x = ph(g, {1, 8, 8, 3});
  EXPECT_EQ(g.max_pool2d_grad(ph(g, {1, 4, 4, 3}), x).type(), TensorType({1, 8, 8, 3}, f32));
  EXPECT_EQ(g.avg_pool2d_grad(ph(g, {-1, 4, 4, 3}), ph(g, {-1, 8, 8, 3})).shape(), (Shape{-1, 8, 8, 3}));
  EXPECT_TG_ERROR(g.max_pool2d_grad(ph(g, {1, 3, 4, 3}), x),
                  "[max_pool2d_grad] dy is [1,3,4,3] but pooling x [1,8,8,3] gives [1,4,4,3]");
  Tensor ga = g.global_avg_pool2d(ph(g, {2, 7, 7, 8}));
  EXPECT_EQ(ga.shape(), (Shape{2, 1, 1, 8}));
  EXPECT_EQ(ga.op().kind_name(), "reduce_mean");
  Tensor gm = g.global_max_pool2d(ph(g, {2, 8, -1, 7}), Layout::nchw);
  EXPECT_EQ(gm.shape(), (Shape{2, 8, 1, 1}));
  EXPECT_EQ(gm.op().kind_name(), "reduce_max");
  EXPECT_TG_ERROR(g.global_avg_pool2d(ph(g, {7, 7, 8})), "[global_avg_pool2d] needs a rank-4 input");
  EXPECT_TG_ERROR(g.global_max_pool2d(x, Layout::oihw), "[global_max_pool2d] layout oihw");
}
