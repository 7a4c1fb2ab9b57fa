// Reference interpreter: shape ops.
#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {
// [0, 1, 2, ...] of the given shape.
TensorData iota(std::vector<int64_t> shape, tg::DType t = tg::f32) {
  tg::Shape s(shape);
  std::vector<double> v(static_cast<size_t>(s.num_elements()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return TensorData::from_vector(s, t, v);
}
}  // namespace

TEST(RefShape, ReshapeWithInferredDim) {
  tg::Graph g;
  auto x = g.placeholder({-1, 6}, tg::f32);
  TensorData y = eval(g, g.reshape(x, {-1, 4}), {iota({2, 6})});
  expect_shape(y, {3, 4});
  expect_values(y, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  TensorData e = eval(g, g.expand_dims(x, {0, -1}), {iota({1, 6})});
  expect_shape(e, {1, 1, 6, 1});
}

TEST(RefShape, TransposeMatchesIndexFormula) {
  tg::Graph g;
  auto x = g.placeholder({2, 3, 4}, tg::i64);
  TensorData in = iota({2, 3, 4}, tg::i64);
  TensorData y = eval(g, g.transpose(x, {2, 0, 1}), {in});
  expect_shape(y, {4, 2, 3});
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(y.at(a * 6 + b * 3 + c), b * 12 + c * 4 + a);
}

TEST(RefShape, BroadcastToAndSqueeze) {
  tg::Graph g;
  auto x = g.placeholder({3, 1}, tg::f32);
  TensorData y = eval(g, g.broadcast_to(x, {2, 3, 2}), {iota({3, 1})});
  expect_shape(y, {2, 3, 2});
  expect_values(y, {0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2});
  TensorData s = eval(g, g.squeeze(x), {iota({3, 1})});
  expect_shape(s, {3});
}

TEST(RefShape, ConcatStackSplit) {
  tg::Graph g;
  auto a = g.placeholder({2, 2}, tg::f32), b = g.placeholder({2, 1}, tg::f32);
  TensorData ta = iota({2, 2}), tb = TensorData::from_vector({2, 1}, tg::f32, {10, 11});
  TensorData c = eval(g, g.concat({a, b, a}, -1), {ta, tb, ta});
  expect_shape(c, {2, 5});
  expect_values(c, {0, 1, 10, 0, 1, 2, 3, 11, 2, 3});
  TensorData c0 = eval(g, g.concat({a, a}, 0), {ta, ta});
  expect_values(c0, {0, 1, 2, 3, 0, 1, 2, 3});
  auto x = g.placeholder({2, 5}, tg::f32);
  auto parts = g.split(x, {2, 0, 3}, 1);
  auto out = eval_all(g, parts[0], {iota({2, 5})});
  ASSERT_EQ(out.size(), 3u);
  expect_values(out[0], {0, 1, 5, 6});
  expect_shape(out[1], {2, 0});
  expect_values(out[2], {2, 3, 4, 7, 8, 9});
}

TEST(RefShape, ShapeOfAndArange) {
  tg::Graph g;
  auto x = g.placeholder({-1, 3}, tg::f32);
  TensorData s = eval(g, g.shape_of(x), {TensorData::zeros({7, 3})});
  EXPECT_EQ(s.dtype(), tg::i64);
  expect_values(s, {7, 3});
  expect_values(eval(g, g.arange(1, 2, 0.25), {}), {1, 1.25, 1.5, 1.75});
  expect_values(eval(g, g.arange(5, 0, -2, tg::i32), {}), {5, 3, 1});
}

TEST(RefShape, SumToLikeWrapsIntegersLikeReduceSum) {
  // 20 elements of 19 add to 380, which wraps to 124 in i8 (documented integer semantics);
  // the first version summed in double and saturated to 127.
  tg::Graph g;
  tg::Tensor x = g.placeholder({4, 6, 5}, tg::i8), like = g.placeholder({6, 1}, tg::i8);
  TensorData y = eval(g, g.sum_to_like(x, like), {TensorData::full({4, 6, 5}, 19, tg::i8), TensorData::zeros({6, 1}, tg::i8)});
  ASSERT_EQ(y.shape(), tg::Shape({6, 1}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.at(i), 124.0);
}
