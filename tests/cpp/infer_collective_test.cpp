// Shape/type inference of the collectives, their gradients' shapes, and a one-rank world's values
// (the multi-rank values run across processes in tests/python/test_distributed.py).
#include "ir/verifier.h"
#include "ops/builder.h"
#include "test_util.h"
#include "tgraph/distributed.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {
// A collective as it is built in rank `rank` of a world of `world` (without joining one).
Tensor in_world(Graph& g, detail::OpKind k, Tensor x, int64_t world, int64_t rank = 0,
                CollectiveReduce r = CollectiveReduce::sum, int64_t root = 0) {
  return detail::make(g, k, {x}, CollectiveDesc{r, root, world, rank});
}
}  // namespace

TEST(InferCollective, ShapesInAWorldOfFour) {
  using K = detail::OpKind;
  Graph g;
  Tensor x = g.placeholder({8, 3}, f32), d = g.placeholder({-1, 5}, bf16);
  EXPECT_EQ(in_world(g, K::AllReduce, x, 4).type(), TensorType({8, 3}, f32));
  EXPECT_EQ(in_world(g, K::AllGather, x, 4).type(), TensorType({32, 3}, f32));
  EXPECT_EQ(in_world(g, K::ReduceScatter, x, 4, 3).type(), TensorType({2, 3}, f32));
  EXPECT_EQ(in_world(g, K::Broadcast, x, 4, 1, CollectiveReduce::sum, 3).type(), TensorType({8, 3}, f32));
  // dynamic dims stay dynamic (checked at run time by the communicator)
  EXPECT_EQ(in_world(g, K::AllGather, d, 4).type(), TensorType({-1, 5}, bf16));
  EXPECT_EQ(in_world(g, K::ReduceScatter, d, 4, 0, CollectiveReduce::mean).type(), TensorType({-1, 5}, bf16));
  EXPECT_EQ(detail::verify(g.impl()), "");
}

TEST(InferCollective, Errors) {
  using K = detail::OpKind;
  Graph g;
  Tensor x = g.placeholder({6, 3}, f32);
  EXPECT_TG_ERROR(in_world(g, K::ReduceScatter, x, 4), "[reduce_scatter] axis 0 of [6,3] f32 must split into 4 equal parts");
  EXPECT_TG_ERROR(in_world(g, K::AllGather, g.placeholder({}, f32), 2), "[all_gather] takes a tensor of rank 1 or more");
  EXPECT_TG_ERROR(in_world(g, K::AllReduce, g.placeholder({3}, i32), 2, 0, CollectiveReduce::mean),
                  "[all_reduce] a mean of integer tensors ([3] i32): use sum");
  EXPECT_TG_ERROR(in_world(g, K::AllReduce, g.placeholder({3}, boolean), 2), "[all_reduce] combines f32, f64");
  EXPECT_TG_ERROR(in_world(g, K::Broadcast, x, 2, 0, CollectiveReduce::sum, 2), "[broadcast] root 2 is not a rank of a world of 2");
  EXPECT_TG_ERROR(in_world(g, K::AllReduce, x, 2, 2), "[all_reduce] rank 2 is not in a world of 2");
}

TEST(InferCollective, GradientsAreCollectivesOfTheSameWorld) {
  using K = detail::OpKind;
  Graph g;
  Tensor x = g.placeholder({8, 3}, f32);
  Tensor y = g.add(g.reduce_sum(in_world(g, K::AllGather, x, 4, 1)), g.reduce_sum(in_world(g, K::ReduceScatter, x, 4, 1)));
  Tensor dx = g.gradients(y, {x}).at(x);
  EXPECT_EQ(dx.type(), TensorType({8, 3}, f32));
  int gathers = 0, scatters = 0;
  for (const auto& n : g.impl().nodes) {
    if (n.kind != K::AllGather && n.kind != K::ReduceScatter) continue;
    const auto& d = std::get<CollectiveDesc>(n.attr);
    EXPECT_EQ(d.world, 4);
    EXPECT_EQ(d.rank, 1);
    (n.kind == K::AllGather ? gathers : scatters) += 1;
  }
  EXPECT_EQ(gathers, 2);   // the forward's and reduce_scatter's gradient
  EXPECT_EQ(scatters, 2);  // the forward's and all_gather's gradient
}

TEST(Collectives, OneRankWorldIsACopyAndAWorldMismatchIsRefused) {
  ASSERT_EQ(distributed::world_size(), 1);
  Graph g;
  Tensor x = g.placeholder({2, 2}, f64);
  TensorData v({2, 2}, f64);
  for (int i = 0; i < 4; ++i) v.set(i, 1.5 * i - 2);
  auto outs = g.compile({{x, {{2, 2}, f64}}}, {g.all_reduce(x, CollectiveReduce::max), g.all_gather(x), g.broadcast(x)}).run({v});
  for (const TensorData& o : outs)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(o.at(i), v.at(i));
  // built for rank 1 of 2, run in a world of 1
  Tensor y = in_world(g, detail::OpKind::AllReduce, x, 2, 1);
  EXPECT_TG_ERROR(g.compile({{x, {{2, 2}, f64}}}, {y}).run({v}), "[all_reduce] built as rank 1 of 2, run as rank 0 of 1");
  // a bad sampler request
  EXPECT_TG_ERROR(distributed::shard(-1), "[distributed] shard: a dataset of -1 samples");
  EXPECT_EQ(distributed::shard(5, 0, 0, false), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}
