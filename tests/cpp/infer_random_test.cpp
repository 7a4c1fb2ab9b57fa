// Shape/type inference of random_state, random and dropout.
#include "ir/graph_impl.h"
#include "ir/verifier.h"
#include "ops/infer.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

TEST(InferRandom, StateValuesAndDropout) {
  Graph g;
  Tensor s = g.random_state(42);
  EXPECT_EQ(s.type(), TensorType({2}, i64));
  const auto& n = g.impl().nodes[static_cast<size_t>(s.op().id())];
  EXPECT_EQ(std::get<SeedDesc>(n.attr).seed, 42);
  auto [v, next] = g.random(s, {.shape = {2, 3}, .distribution = Distribution::normal});
  EXPECT_EQ(v.type(), TensorType({2, 3}, f32));
  EXPECT_EQ(next.type(), TensorType({2}, i64));
  EXPECT_EQ(g.random(next, {.shape = {}, .dtype = i32, .a = 0, .b = 10}).first.type(),
            TensorType(Shape{}, i32));
  EXPECT_EQ(g.random(next, {.shape = {4}, .dtype = bf16, .distribution = Distribution::truncated_normal})
                .first.type(),
            TensorType({4}, bf16));
  auto [y, s2] = g.dropout(g.placeholder({-1, 10}, f16), next, 0.1);
  EXPECT_EQ(y.type(), TensorType({-1, 10}, f16));
  EXPECT_EQ(s2.type(), TensorType({2}, i64));
  EXPECT_EQ(detail::verify(g.impl()), "");  // the verifier re-infers every node
  EXPECT_EQ(g.dropout(y, g.placeholder({-1}, i64), 0.0).first.type(), TensorType({-1, 10}, f16));
}

TEST(InferRandom, Errors) {
  Graph g;
  Tensor s = g.random_state(0);
  Tensor x = g.placeholder({4}, f32);
  EXPECT_TG_ERROR(g.dropout(x, s, 1.0), "[dropout] rate must be in [0, 1), got 1");
  EXPECT_TG_ERROR(g.dropout(x, s, -0.5), "[dropout] rate must be in [0, 1)");
  EXPECT_TG_ERROR(g.dropout(g.placeholder({4}, i32), s, 0.5),
                  "[dropout] needs a floating-point input, x is [4] i32");
  EXPECT_TG_ERROR(g.dropout(x, g.placeholder({2}, f32), 0.5),
                  "[dropout] state must be i64 [2] (from random_state), state is [2] f32");
  EXPECT_TG_ERROR(g.random(g.placeholder({3}, i64), {.shape = {2}}), "[random] state must be i64 [2]",
                  "[3] i64");
  EXPECT_TG_ERROR(g.random(s, {.shape = {-1, 2}}), "[random] shape [-1,2] must be static");
  EXPECT_TG_ERROR(g.random(s, {.shape = {2}, .dtype = i32, .distribution = Distribution::normal}),
                  "[random] normal needs a floating-point dtype, got i32");
  EXPECT_TG_ERROR(g.random(s, {.shape = {2}, .a = 1, .b = 1}), "[random] uniform needs min a < max b");
  EXPECT_TG_ERROR(g.random(s, {.shape = {2}, .dtype = boolean}), "[random] uniform draws numbers, not bool");
  EXPECT_TG_ERROR(g.random(s, {.shape = {2}, .distribution = Distribution::normal, .b = 0}),
                  "[random] normal needs stddev b > 0");
}
