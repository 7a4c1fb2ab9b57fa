// Loop-carried state on the CPU: region values move between iterations, and a scatter whose
// input nobody else holds updates it in place (the for_loop gradient's tape). The caller's
// tensors, outer values and values still read elsewhere must never be written.
#include <gtest/gtest.h>

#include "tgraph/tgraph.h"

using namespace tg;

TEST(TensorData, SoleOwner) {
  TensorData a = TensorData::uniform({4}, -1, 1, DType::f32, 1);
  EXPECT_TRUE(a.sole_owner());
  TensorData b = a;  // shares the bytes
  EXPECT_FALSE(a.sole_owner());
  EXPECT_FALSE(b.sole_owner());
  TensorData v = b.reshaped({2, 2});
  b = TensorData();
  EXPECT_FALSE(a.sole_owner());  // the view still shares them
  v = TensorData();
  EXPECT_TRUE(a.sole_owner());
  TensorData moved = std::move(a);
  EXPECT_TRUE(moved.sole_owner());
  EXPECT_FALSE(TensorData().sole_owner());
}

// A for_loop writing row i of a carried [n, 3] table each iteration (the tape's pattern): the
// table passed in (a feed) stays as it was, and the result has every row written.
TEST(LoopState, ScatterIntoCarriedTableLeavesTheFeedAlone) {
  const int64_t n = 300;
  Graph g;
  Tensor table = g.placeholder({n, 3}, DType::f32), x = g.placeholder({3}, DType::f32);
  auto r = g.for_loop(g.scalar(static_cast<double>(n), DType::i32), {table, x},
                      [&](Graph& b, Tensor i, std::vector<Tensor> s) {
                        Tensor row = b.add(s[1], b.cast(i, DType::f32));
                        return std::vector{b.scatter(s[0], b.reshape(i, {1}), b.reshape(row, {1, 3})), s[1]};
                      });
  Executable e = g.compile({{table, table.type()}, {x, x.type()}}, {r[0]});
  TensorData t0 = TensorData::uniform({n, 3}, -1, 1, DType::f32, 2),
             x0 = TensorData::from_vector({3}, DType::f32, {0.5, -1, 2});
  TensorData before = t0.clone();
  for (int run = 0; run < 2; ++run) {
    TensorData out = e.run({t0, x0})[0];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < 3; ++k)
        ASSERT_FLOAT_EQ(out.at(i * 3 + k), x0.at(k) + static_cast<double>(i)) << i;
    for (int64_t i = 0; i < n * 3; ++i) ASSERT_EQ(t0.at(i), before.at(i)) << "the feed was written at " << i;
  }
}

// The carried table is also read after the scatter (its old row 0 is returned): that read
// must see the values from before the write, so the scatter copies.
TEST(LoopState, ScatterInputReadAgainIsNotOverwritten) {
  Graph g;
  Tensor table = g.placeholder({5, 2}, DType::f32);
  auto r = g.for_loop(
      g.scalar(5.0, DType::i32), {table, g.scalar(0.0)}, [&](Graph& b, Tensor i, std::vector<Tensor> s) {
        Tensor upd =
            b.scatter(s[0], b.reshape(i, {1}), b.constant(TensorData::full({1, 2}, 10.0, DType::f32)));
        // reads the old table after the scatter in program order
        Tensor old = b.reduce_sum(b.slice(s[0], {0, 0}, {1, 2}));
        return std::vector{upd, b.add(s[1], old)};
      });
  Executable e = g.compile({{table, table.type()}}, {r[0], r[1]});
  TensorData t0 = TensorData::from_vector({5, 2}, DType::f32, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  std::vector<TensorData> out = e.run({t0});
  // Iteration 0 reads the original row 0 (3); iterations 1-4 read the row written at 0 (20).
  EXPECT_DOUBLE_EQ(out[1].at(0), 3.0 + 4 * 20.0);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(out[0].at(i), 10.0);
}
