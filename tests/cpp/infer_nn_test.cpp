// Shape/type inference of normalisations, softmax, losses and attention.
#include "ir/graph_impl.h"
#include "ir/verifier.h"
#include "ops/infer.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

Tensor ph(Graph& g, Shape s, DType t = f32) { return g.placeholder(std::move(s), t); }

// Runs an op's inference rule directly (for inputs the builders would convert first).
detail::InferResult infer(detail::OpKind k, std::vector<TensorType> in, detail::Attr a) {
  return detail::op_def(k).infer(detail::InferContext{k, in, a});
}

std::string input_kind(const Tensor& t, int i) {
  const auto& n = t.graph_impl()->nodes[static_cast<size_t>(t.op().id())];
  return Tensor(t.graph_impl(), n.inputs[static_cast<size_t>(i)]).op().kind_name();
}

}  // namespace

TEST(InferNorm, BatchNormLayouts) {
  Graph g;
  Tensor c8 = ph(g, {8});
  Tensor y = g.batch_norm(ph(g, {2, 4, 4, 8}), c8, c8, c8, c8);
  EXPECT_EQ(y.type(), TensorType({2, 4, 4, 8}, f32));
  EXPECT_EQ(g.batch_norm(ph(g, {-1, 8, 4, 4}), c8, c8, c8, c8, 1).shape(), (Shape{-1, 8, 4, 4}));
  EXPECT_EQ(g.batch_norm(ph(g, {2, -1, 4, 4}), c8, c8, c8, c8, -3).shape(), (Shape{2, -1, 4, 4}));
  // Parameters are cast to x's dtype explicitly.
  Tensor h = g.batch_norm(ph(g, {2, 8}, f16), c8, c8, ph(g, {8}, f16), c8);
  EXPECT_EQ(h.dtype(), f16);
  EXPECT_EQ(input_kind(h, 1), "cast");
  EXPECT_EQ(input_kind(h, 3), "placeholder");
  auto t = g.batch_norm_training(ph(g, {-1, 8, 5, 5}), c8, c8, 1);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].shape(), (Shape{-1, 8, 5, 5}));
  EXPECT_EQ(t[1].type(), TensorType({8}, f32));
  EXPECT_EQ(t[2].type(), TensorType({8}, f32));
}

TEST(InferNorm, BatchNormErrors) {
  Graph g;
  Tensor c8 = ph(g, {8});
  EXPECT_TG_ERROR(g.batch_norm(ph(g, {2, 4, 4, 8}), ph(g, {4}), c8, c8, c8),
                  "[batch_norm] mean is [4] but must be [8] for x [2,4,4,8]");
  EXPECT_TG_ERROR(g.batch_norm(ph(g, {2, 4, 4, 8}), c8, c8, c8, c8, 4), "[batch_norm] axis 4 out of range",
                  "[2,4,4,8]");
  EXPECT_TG_ERROR(g.batch_norm_training(ph(g, {2, 8}, i32), c8, c8),
                  "[batch_norm_training] needs a floating-point input");
  EXPECT_TG_ERROR(g.batch_norm(ph(g, {2, 8}), c8, c8, c8, c8, -1, -1.0), "[batch_norm] epsilon must be >= 0");
  auto r = infer(detail::OpKind::BatchNorm,
                 {TensorType({2, 8}, f32), TensorType({8}, f32), TensorType({8}, f16), TensorType({8}, f32),
                  TensorType({8}, f32)},
                 NormDesc{});
  EXPECT_NE(r.error.find("[batch_norm] var is [8] f16 but x is [2,8] f32"), std::string::npos) << r.error;
}

TEST(InferNorm, LayerAndGroupNorm) {
  Graph g;
  EXPECT_EQ(g.layer_norm(ph(g, {2, 5, 16}), ph(g, {16}), ph(g, {16})).shape(), (Shape{2, 5, 16}));
  EXPECT_EQ(g.layer_norm(ph(g, {-1, 5, 16}), ph(g, {5, 16}), ph(g, {5, 16}), 1).shape(), (Shape{-1, 5, 16}));
  EXPECT_EQ(g.layer_norm(ph(g, {2, 5, 16}), ph(g, {2, 5, 16}), ph(g, {2, 5, 16}), -3).shape(),
            (Shape{2, 5, 16}));
  EXPECT_TG_ERROR(g.layer_norm(ph(g, {2, 5, 16}), ph(g, {16}), ph(g, {16}), 1),
                  "[layer_norm] gamma is [16] but must be [5,16] for x [2,5,16]");
  EXPECT_EQ(g.group_norm(ph(g, {2, 32, 8, 8}), ph(g, {32}), ph(g, {32}), 8, 1).shape(), (Shape{2, 32, 8, 8}));
  EXPECT_EQ(g.group_norm(ph(g, {2, 8, 8, 32}), ph(g, {32}), ph(g, {32}), 4).shape(), (Shape{2, 8, 8, 32}));
  EXPECT_TG_ERROR(g.group_norm(ph(g, {2, 32, 8, 8}), ph(g, {32}), ph(g, {32}), 5, 1),
                  "[group_norm] groups 5 do not divide the 32 channels of x [2,32,8,8]");
  EXPECT_TG_ERROR(g.group_norm(ph(g, {2, 32, 8, 8}), ph(g, {16}), ph(g, {32}), 4, 1),
                  "[group_norm] gamma is [16] but must be [32]");
  EXPECT_TG_ERROR(g.group_norm(ph(g, {2, 32}), ph(g, {32}), ph(g, {32}), 0),
                  "[group_norm] groups must be >= 1");
}

TEST(InferSoftmax, AxisAndDtype) {
  Graph g;
  EXPECT_EQ(g.softmax(ph(g, {2, -1})).type(), TensorType({2, -1}, f32));
  EXPECT_EQ(g.log_softmax(ph(g, {2, 10}, bf16), 0).type(), TensorType({2, 10}, bf16));
  EXPECT_TG_ERROR(g.softmax(ph(g, {2, 10}), 2), "[softmax] axis 2 out of range for x [2,10]");
  EXPECT_TG_ERROR(g.log_softmax(ph(g, {2, 10}, i64)), "[log_softmax] needs a floating-point input",
                  "[2,10] i64");
}

TEST(InferLoss, ReductionShapes) {
  Graph g;
  Tensor logits = ph(g, {4, 10}), labels = ph(g, {4, 10});
  EXPECT_EQ(g.softmax_cross_entropy(logits, labels).type(), TensorType(Shape{}, f32));
  EXPECT_EQ(g.softmax_cross_entropy(logits, labels, -1, LossReduction::none).shape(), (Shape{4}));
  EXPECT_EQ(g.softmax_cross_entropy(logits, labels, 0, LossReduction::none).shape(), (Shape{10}));
  EXPECT_EQ(g.softmax_cross_entropy(ph(g, {-1, 10}), ph(g, {-1, 10}), 1, LossReduction::none).shape(),
            (Shape{-1}));
  EXPECT_EQ(g.softmax_cross_entropy(logits, labels, -1, LossReduction::sum).shape(), (Shape{}));
  EXPECT_EQ(g.mse(ph(g, {3, 4}), ph(g, {3, 4}), LossReduction::none).shape(), (Shape{3, 4}));
  EXPECT_EQ(g.mse(ph(g, {3, 4}, f16), ph(g, {3, 4}, f16)).type(), TensorType(Shape{}, f16));
  // The builder promotes and broadcasts explicitly.
  EXPECT_EQ(g.mse(ph(g, {3, 4}), ph(g, {4}, f16), LossReduction::none).type(), TensorType({3, 4}, f32));
}

TEST(InferLoss, Errors) {
  Graph g;
  EXPECT_TG_ERROR(g.softmax_cross_entropy(ph(g, {4, 10}), ph(g, {4, 9})), "[softmax_cross_entropy]", "[4,10]",
                  "[4,9]");
  EXPECT_TG_ERROR(g.softmax_cross_entropy(ph(g, {4, 10}), ph(g, {4, 10}), 2),
                  "[softmax_cross_entropy] axis 2 out of range for logits [4,10]");
  EXPECT_TG_ERROR(g.mse(ph(g, {3}, i32), ph(g, {3}, i32)), "[mse] needs floating-point operands",
                  "a is [3] i32");
  auto r = infer(detail::OpKind::Mse, {TensorType({3, 4}, f32), TensorType({3, 5}, f32)}, LossDesc{});
  EXPECT_EQ(r.error, "[mse] operand shapes differ: a is [3,4] f32, b is [3,5] f32");
}

TEST(InferAttention, Shapes) {
  Graph g;
  Tensor q = ph(g, {2, 8, 16, 64}), k = ph(g, {2, 8, 20, 64}), v = ph(g, {2, 8, 20, 32});
  EXPECT_EQ(g.scaled_dot_product_attention(q, k, v).type(), TensorType({2, 8, 16, 32}, f32));
  EXPECT_EQ(g.scaled_dot_product_attention(q, k, v, ph(g, {16, 20}, boolean)).shape(), (Shape{2, 8, 16, 32}));
  EXPECT_EQ(g.scaled_dot_product_attention(q, k, v, ph(g, {2, 1, 1, 20})).shape(), (Shape{2, 8, 16, 32}));
  EXPECT_EQ(g.scaled_dot_product_attention(ph(g, {-1, 4, -1, 64}), ph(g, {-1, 4, -1, 64}),
                                           ph(g, {-1, 4, -1, 64}), std::nullopt, {.causal = true})
                .shape(),
            (Shape{-1, 4, -1, 64}));
  // A float mask of another dtype is cast to q's; k and v batch dims are broadcast explicitly.
  Tensor kb = ph(g, {2, 1, 20, 64});
  Tensor y = g.scaled_dot_product_attention(q, kb, kb, ph(g, {16, 20}, f16));
  EXPECT_EQ(y.shape(), (Shape{2, 8, 16, 64}));
  EXPECT_EQ(input_kind(y, 1), "broadcast_to");
  EXPECT_EQ(input_kind(y, 3), "cast");
  EXPECT_EQ(g.scaled_dot_product_attention(ph(g, {5, 8}, f16), ph(g, {6, 8}), ph(g, {6, 3})).type(),
            TensorType({5, 3}, f32));
  EXPECT_EQ(detail::verify(g.impl()), "");  // the verifier re-infers every node
}

TEST(InferAttention, Errors) {
  Graph g;
  Tensor q = ph(g, {2, 16, 64}), k = ph(g, {2, 20, 64}), v = ph(g, {2, 20, 32});
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(q, ph(g, {2, 20, 32}), v),
                  "[scaled_dot_product_attention] head dims of q and k differ", "q is [2,16,64]",
                  "k is [2,20,32]");
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(q, k, ph(g, {2, 19, 32})), "key and value lengths differ",
                  "v is [2,19,32]");
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(q, k, v, ph(g, {16, 21}, boolean)),
                  "[scaled_dot_product_attention] mask [16,21] does not broadcast to the scores [2,16,20]");
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(q, k, v, ph(g, {16, 20}, i32)),
                  "[scaled_dot_product_attention] mask must be bool or q's dtype f32, mask is [16,20] i32");
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(ph(g, {64}), k, v), "need rank >= 2", "q is [64]");
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(q, ph(g, {3, 20, 64}), ph(g, {3, 20, 32})),
                  "batch dims of q, k and v do not broadcast");
  EXPECT_TG_ERROR(g.scaled_dot_product_attention(ph(g, {4, 8}, i32), ph(g, {4, 8}, i32), ph(g, {4, 8}, i32)),
                  "need one floating-point dtype");
}
