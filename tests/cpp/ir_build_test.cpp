// Graph building: types at the call, explicit broadcasting/promotion, errors that name the op.
#include <chrono>

#include "ir/graph_impl.h"
#include "ir/verifier.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

TEST(IrBuild, PlaceholderAndBinaryBroadcastInsertsExplicitOps) {
  Graph g;
  Tensor a = g.placeholder({2, 3}, f32, "a");
  Tensor b = g.placeholder({3}, f32, "b");
  Tensor c = g.add(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.dtype(), f32);
  // b was broadcast by an explicit broadcast_to node.
  const auto& n = g.impl().nodes[static_cast<size_t>(c.op().id())];
  Tensor bb(&g.impl(), n.inputs[1]);
  EXPECT_EQ(bb.op().kind_name(), "broadcast_to");
  EXPECT_EQ(bb.shape(), (Shape{2, 3}));
}

TEST(IrBuild, PromotionCastsExplicitly) {
  Graph g;
  Tensor a = g.placeholder({4}, i32, "a");
  Tensor b = g.placeholder({4}, f32, "b");
  Tensor c = g.mul(a, b);
  EXPECT_EQ(c.dtype(), f32);
  const auto& n = g.impl().nodes[static_cast<size_t>(c.op().id())];
  EXPECT_EQ(Tensor(&g.impl(), n.inputs[0]).op().kind_name(), "cast");
  EXPECT_EQ(promote_types(bf16, f16), f32);
  EXPECT_EQ(promote_types(u8, i8), i16);
  EXPECT_EQ(promote_types(boolean, i64), i64);
}

TEST(IrBuild, DynamicDimsPropagate) {
  Graph g;
  Tensor x = g.placeholder({-1, 28, 28, 1}, f32, "x");
  Tensor y = g.relu(g.mul(x, g.scalar(2.0)));
  EXPECT_EQ(y.shape(), (Shape{-1, 28, 28, 1}));
  Tensor s = g.reduce_sum(y, {1, 2}, true);
  EXPECT_EQ(s.shape(), (Shape{-1, 1, 1, 1}));
  Tensor r = g.reshape(y, {-1, 784});
  EXPECT_EQ(r.shape(), (Shape{-1, 784}));
  Tensor d = g.add(g.placeholder({-1, 3}, f32, "p"), g.placeholder({5, 1}, f32, "q"));
  EXPECT_EQ(d.shape(), (Shape{5, 3}));
}

TEST(IrBuild, BroadcastEdgeCases) {
  Graph g;
  EXPECT_EQ(g.add(g.placeholder({1}, f32), g.placeholder({}, f32)).shape(), (Shape{1}));
  EXPECT_EQ(g.add(g.placeholder({0, 1}, f32), g.placeholder({1, 4}, f32)).shape(), (Shape{0, 4}));
  EXPECT_EQ(g.add(g.placeholder({2, 1, 3}, f32), g.placeholder({4, 1}, f32)).shape(), (Shape{2, 4, 3}));
  EXPECT_TG_ERROR(g.add(g.placeholder({2, 3}, f32), g.placeholder({4}, f32)), "[add]", "[2,3]", "[4]");
}

// A -1 in broadcast_to's target keeps x's (possibly dynamic) size there; where x has 1 or no
// dim, no run could give it one: refused when built, naming the op, target and input (it used to
// compile and fail at run time with "shape [-1,1] is not static").
TEST(IrBuild, BroadcastToMinusOneKeepsXsSizeOrIsRefused) {
  Graph g;
  EXPECT_EQ(g.broadcast_to(g.placeholder({-1, 3}, f32), {-1, 3}).shape(), (Shape{-1, 3}));
  EXPECT_EQ(g.broadcast_to(g.placeholder({5, 1}, f32), {-1, 4}).shape(), (Shape{5, 4}));
  EXPECT_TG_ERROR(g.broadcast_to(g.placeholder({1, 1}, f32), {-1, 1}), "[broadcast_to]", "[-1,1]", "[1,1]", "dim 0");
  EXPECT_TG_ERROR(g.broadcast_to(g.placeholder({3}, f32), {-1, 3}), "[broadcast_to]", "no dim");
  // Taken from a shape source instead: its size at run time.
  Tensor like = g.placeholder({-1, 7}, f32);
  EXPECT_EQ(g.broadcast_to(g.placeholder({1, 1}, f32), {dim_from_source(0), 1}, {like}).shape(), (Shape{-1, 1}));
}

TEST(IrBuild, MatmulErrorNamesShapes) {
  Graph g;
  Tensor a = g.placeholder({2, 3}, f32, "a");
  Tensor b = g.placeholder({4, 5}, f32, "b");
  EXPECT_TG_ERROR(g.matmul(a, b), "[matmul] inner dimensions differ: a is [2,3], b is [4,5]");
  EXPECT_EQ(g.matmul(a, g.placeholder({5, 3}, f32), false, true).shape(), (Shape{2, 5}));
  EXPECT_EQ(g.matmul(g.placeholder({7, 1, 2, 3}, f32), g.placeholder({4, 3, 6}, f32)).shape(),
            (Shape{7, 4, 2, 6}));
  EXPECT_TG_ERROR(g.matmul(g.placeholder({3}, f32), b), "[matmul]", "rank >= 2");
}

TEST(IrBuild, ErrorClasses) {
  Graph g, other;
  Tensor x = g.placeholder({2, 3}, f32, "x");
  // wrong rank / bad attribute
  EXPECT_TG_ERROR(g.reduce_sum(x, {2}), "[reduce_sum]", "axis 2", "[2,3]");
  EXPECT_TG_ERROR(g.transpose(x, {0}), "[transpose]", "[2,3]");
  EXPECT_TG_ERROR(g.reshape(x, {4, 2}), "[reshape]", "[2,3]", "[4,2]");
  // mismatched dims
  EXPECT_TG_ERROR(g.concat({x, g.placeholder({3, 3}, i32)}, 1), "[concat]");
  // wrong dtype
  EXPECT_TG_ERROR(g.exp(g.placeholder({2}, i32)), "[exp]", "floating-point", "i32");
  EXPECT_TG_ERROR(g.logical_and(x, x), "[logical_and]", "bool");
  // tensor from another graph
  EXPECT_TG_ERROR(g.add(x, other.placeholder({2, 3}, f32)), "[add]", "another graph");
  // empty handle
  EXPECT_TG_ERROR(g.neg(Tensor()), "[neg]", "empty");
  // region returning the wrong types
  Tensor p = g.placeholder({}, boolean, "p");
  EXPECT_TG_ERROR(g.if_else(
                      p, [&](Graph& b) { return std::vector{b.neg(x)}; },
                      [&](Graph& b) { return std::vector{b.cast(x, i32)}; }),
                  "[if_else]", "then gives [2,3] f32", "else gives [2,3] i32");
  EXPECT_TG_ERROR(g.if_else(g.placeholder({2}, f32), [&](Graph&) { return std::vector<Tensor>{}; }),
                  "[if_else]", "predicate");
  // duplicate variable
  g.variable(TensorData::randn({2}), "w");
  EXPECT_TG_ERROR(g.variable(TensorData::randn({2}), "w"), "[variable]", "already exists");
  EXPECT_TG_ERROR(g.assign(x, x), "[assign]", "not a variable");
}

TEST(IrBuild, RegionValuesAreScoped) {
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x");
  Tensor inner;
  auto r = g.if_else(
      g.placeholder({}, boolean, "p"),
      [&](Graph& b) {
        inner = b.exp(x);  // reads an outer value: fine
        return std::vector{inner};
      },
      [&](Graph& b) { return std::vector{b.neg(x)}; });
  EXPECT_EQ(r[0].shape(), (Shape{3}));
  EXPECT_TG_ERROR(g.add(inner, x), "[add]", "not visible");
  EXPECT_EQ(detail::verify(g.impl()), "");
}

TEST(IrBuild, LoopsCarryTypes) {
  Graph g;
  Tensor x = g.placeholder({4}, f32, "x");
  auto f = g.for_loop(g.scalar(3, i32), {x}, [](Graph& b, Tensor i, std::vector<Tensor> a) {
    return std::vector{b.add(a[0], b.cast(i, f32))};
  });
  EXPECT_EQ(f[0].shape(), (Shape{4}));
  EXPECT_TG_ERROR(g.for_loop(g.scalar(3, i32), {x},
                             [](Graph& b, Tensor, std::vector<Tensor> a) {
                               return std::vector{b.cast(a[0], i32)};
                             }),
                  "[for_loop]", "body result 0 is [4] i32");
  auto w = g.while_loop(
      {x},
      [](Graph& b, std::vector<Tensor> a) {
        return std::pair{b.less(b.reduce_sum(a[0]), b.scalar(100.0)), std::vector{a[0], b.reduce_max(a[0])}};
      },
      [](Graph& b, std::vector<Tensor> r) { return std::vector{b.mul(r[0], b.scalar(2.0))}; });
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].shape(), Shape{});
  EXPECT_EQ(detail::verify(g.impl()), "");
}

TEST(IrBuild, ControlDependencyAddsEdges) {
  Graph g;
  Tensor v = g.variable(TensorData::randn({2}), "v");
  Operation up = g.assign(v, g.mul(v, g.scalar(2.0)));
  Tensor y = g.control_dependency({up}, [&] { return std::vector{g.exp(v)}; })[0];
  const auto& n = g.impl().nodes[static_cast<size_t>(y.op().id())];
  ASSERT_EQ(n.control_deps.size(), 1u);
  EXPECT_EQ(n.control_deps[0], up.id());
  // A tensor made outside the scope gets an identity carrying the dependency.
  Tensor e = g.exp(v);
  Tensor z = g.control_dependency({up}, [&] { return std::vector{e}; })[0];
  EXPECT_EQ(z.op().kind_name(), "identity");
  EXPECT_EQ(g.impl().nodes[static_cast<size_t>(z.op().id())].control_deps[0], up.id());
}

TEST(IrBuild, HundredThousandNodesBuildFast) {
  Graph g;
  Tensor x = g.placeholder({16}, f32, "x");
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = (i % 2) ? g.add(y, x) : g.relu(y);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(g.num_nodes(), 100001);
  // Generous bound (sanitizers, debug builds): the figure itself is reported by bench/.
  EXPECT_LT(s, 5.0);
}
