// Reference interpreter: gather / scatter (plain, _nd, _along_axis) and non_zero_indices.
#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {
TensorData iota(std::vector<int64_t> shape, tg::DType t = tg::f32) {
  tg::Shape s(shape);
  std::vector<double> v(static_cast<size_t>(s.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return TensorData::from_vector(s, t, v);
}
TensorData ints(std::vector<int64_t> shape, std::vector<double> v, tg::DType t = tg::i32) {
  return TensorData::from_vector(tg::Shape(shape), t, v);
}
}  // namespace

TEST(RefIndexing, GatherAxisAndNegativeIndices) {
  tg::Graph g;
  auto x = g.placeholder({3, 2}, tg::f32), i = g.placeholder({2}, tg::i32);
  expect_values(eval(g, g.gather(x, i), {iota({3, 2}), ints({2}, {2, -1})}), {4, 5, 4, 5});
  EXPECT_TG_ERROR(eval(g, g.gather(x, i), {iota({3, 2}), ints({2}, {0, 3})}), "[gather]", "index 3", "dim 0", "size 3");
  EXPECT_TG_ERROR(eval(g, g.gather(x, i), {iota({3, 2}), ints({2}, {-4, 0})}), "[gather]", "index -4");
  auto m = g.placeholder({2, 3}, tg::f32), i2 = g.placeholder({2, 2}, tg::i64);
  TensorData r = eval(g, g.gather(m, i2, 1), {iota({2, 3}), ints({2, 2}, {0, 2, 1, 1}, tg::i64)});
  expect_shape(r, {2, 2, 2});
  expect_values(r, {0, 2, 1, 1, 3, 5, 4, 4});
  TensorData b = eval(g, g.gather(m, i2, 1, 1), {iota({2, 3}), ints({2, 2}, {0, 2, 1, 0}, tg::i64)});
  expect_shape(b, {2, 2});
  expect_values(b, {0, 2, 4, 3});
}

TEST(RefIndexing, GatherNd) {
  tg::Graph g;
  auto x = g.placeholder({2, 3}, tg::f32), i = g.placeholder({-1, 2}, tg::i32), i1 = g.placeholder({-1, 1}, tg::i32);
  expect_values(eval(g, g.gather_nd(x, i), {iota({2, 3}), ints({2, 2}, {1, 2, 0, 0})}), {5, 0});
  TensorData rows = eval(g, g.gather_nd(x, i1), {iota({2, 3}), ints({1, 1}, {-1})});
  expect_shape(rows, {1, 3});
  expect_values(rows, {3, 4, 5});
  expect_values(eval(g, g.gather_nd(x, i1, 1), {iota({2, 3}), ints({2, 1}, {2, 0})}), {2, 3});
  EXPECT_TG_ERROR(eval(g, g.gather_nd(x, i), {iota({2, 3}), ints({1, 2}, {1, 5})}), "[gather_nd]", "index 5", "dim 1");
}

TEST(RefIndexing, GatherAlongAxis) {
  tg::Graph g;
  auto x = g.placeholder({2, 3}, tg::f32), i = g.placeholder({2, 2}, tg::i32);
  expect_values(eval(g, g.gather_along_axis(x, i, 1), {iota({2, 3}), ints({2, 2}, {2, 0, 1, -2})}), {2, 0, 4, 4});
  expect_values(eval(g, g.gather_along_axis(x, i, 0), {iota({2, 3}), ints({2, 2}, {1, 0, 0, 1})}), {3, 1, 0, 4});
  EXPECT_TG_ERROR(eval(g, g.gather_along_axis(x, i, -1), {iota({2, 3}), ints({2, 2}, {0, 0, 0, 3})}),
                  "[gather_along_axis]", "index 3", "dim 1");
}

TEST(RefIndexing, ScatterModes) {
  tg::Graph g;
  auto x = g.placeholder({4}, tg::f32), i = g.placeholder({3}, tg::i32), u = g.placeholder({3}, tg::f32);
  TensorData tx = TensorData::from_vector({4}, tg::f32, {1, 2, 3, 4});
  TensorData ti = ints({3}, {1, 1, -1}), tu = TensorData::from_vector({3}, tg::f32, {5, 6, 7});
  auto run = [&](tg::ScatterMode m) { return eval(g, g.scatter(x, i, u, 0, m), {tx, ti, tu}); };
  expect_values(run(tg::ScatterMode::set), {1, 6, 3, 7});  // the last update in row-major order wins
  expect_values(run(tg::ScatterMode::add), {1, 13, 3, 11});
  expect_values(run(tg::ScatterMode::sub), {1, -9, 3, -3});
  expect_values(run(tg::ScatterMode::mul), {1, 60, 3, 28});
  expect_values(run(tg::ScatterMode::div), {1, 2.0 / 30, 3, 4.0 / 7});
  expect_values(run(tg::ScatterMode::min), {1, 2, 3, 4});
  expect_values(run(tg::ScatterMode::max), {1, 6, 3, 7});
  expect_values(tx, {1, 2, 3, 4});  // the input is not modified
  EXPECT_TG_ERROR(eval(g, g.scatter(x, i, u), {tx, ints({3}, {0, 4, 0}), tu}), "[scatter]", "index 4", "dim 0");
}

TEST(RefIndexing, ScatterAxisBatchAndIntegers) {
  tg::Graph g;
  auto x = g.placeholder({2, 3}, tg::i8), i = g.placeholder({2}, tg::i32), u = g.placeholder({2, 2}, tg::i8);
  TensorData r = eval(g, g.scatter(x, i, u, 1, tg::ScatterMode::add),
                      {ints({2, 3}, {0, 0, 120, 0, 0, 0}, tg::i8), ints({2}, {2, 0}), ints({2, 2}, {10, 1, 2, 3}, tg::i8)});
  expect_values(r, {1, 0, -126, 3, 0, 2});  // 120 + 10 wraps in i8
  auto bi = g.placeholder({2, 1}, tg::i32), bu = g.placeholder({2, 1}, tg::i8);
  TensorData b = eval(g, g.scatter(x, bi, bu, 1, tg::ScatterMode::set, 1),
                      {ints({2, 3}, {0, 0, 0, 0, 0, 0}, tg::i8), ints({2, 1}, {2, 0}), ints({2, 1}, {5, 6}, tg::i8)});
  expect_values(b, {0, 0, 5, 6, 0, 0});
}

TEST(RefIndexing, ScatterNdAndAlongAxis) {
  tg::Graph g;
  auto x = g.placeholder({2, 2}, tg::f32), i = g.placeholder({3, 2}, tg::i32), u = g.placeholder({3}, tg::f32);
  TensorData r = eval(g, g.scatter_nd(x, i, u, tg::ScatterMode::add),
                      {TensorData::zeros({2, 2}), ints({3, 2}, {0, 1, 1, 0, 0, -1}), TensorData::from_vector({3}, tg::f32, {1, 2, 3})});
  expect_values(r, {0, 4, 2, 0});
  auto ri = g.placeholder({1, 1}, tg::i32), ru = g.placeholder({1, 2}, tg::f32);
  TensorData row = eval(g, g.scatter_nd(x, ri, ru), {iota({2, 2}), ints({1, 1}, {1}), TensorData::from_vector({1, 2}, tg::f32, {8, 9})});
  expect_values(row, {0, 1, 8, 9});
  auto ai = g.placeholder({2, 1}, tg::i32), au = g.placeholder({2, 1}, tg::f32);
  TensorData a = eval(g, g.scatter_along_axis(x, ai, au, 1),
                      {TensorData::zeros({2, 2}), ints({2, 1}, {1, 0}), TensorData::from_vector({2, 1}, tg::f32, {5, 6})});
  expect_values(a, {0, 5, 6, 0});
  EXPECT_TG_ERROR(eval(g, g.scatter_nd(x, i, u), {TensorData::zeros({2, 2}), ints({3, 2}, {0, 1, 2, 0, 0, 0}),
                                                 TensorData::zeros({3})}),
                  "[scatter_nd]", "index 2", "dim 0");
}

TEST(RefIndexing, NonZeroIndices) {
  tg::Graph g;
  auto x = g.placeholder({2, 3}, tg::f32);
  TensorData r = eval(g, g.non_zero_indices(x), {TensorData::from_vector({2, 3}, tg::f32, {0, 1, 0, kNaN, 0, -2})});
  EXPECT_EQ(r.dtype(), tg::i64);
  expect_shape(r, {3, 2});
  expect_values(r, {0, 1, 1, 0, 1, 2});
  TensorData e = eval(g, g.non_zero_indices(x), {TensorData::zeros({2, 3})});
  expect_shape(e, {0, 2});
  auto b = g.placeholder({3}, tg::boolean);
  expect_values(eval(g, g.non_zero_indices(b), {TensorData::from_vector({3}, tg::boolean, {1, 0, 1})}), {0, 2});
}
