// Reference interpreter: reductions, arg-reductions, scans, top_k and sort.
#include <cmath>

#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {
TensorData vec(const std::vector<double>& v, tg::DType t = tg::f32) {
  return TensorData::from_vector({static_cast<int64_t>(v.size())}, t, v);
}
}  // namespace

TEST(RefReduce, SumOverAxesMatchesLoops) {
  tg::Graph g;
  auto x = g.placeholder({2, 3, 4}, tg::f32);
  TensorData in = TensorData::randn({2, 3, 4}, tg::f32, 5);
  TensorData y = eval(g, g.reduce_sum(x, {0, -1}, true), {in});
  expect_shape(y, {1, 3, 1});
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) s += in.at(i * 12 + j * 4 + k);
    EXPECT_NEAR(y.at(j), s, 1e-5);
  }
  TensorData all = eval(g, g.reduce_sum(x), {in});
  expect_shape(all, {});
  double s = 0;
  for (double v : in.to_vector()) s += v;
  EXPECT_NEAR(all.at(0), s, 1e-5);
}

TEST(RefReduce, MeanVarianceProd) {
  tg::Graph g;
  auto x = g.placeholder({2, 4}, tg::f64);
  TensorData in = TensorData::from_vector({2, 4}, tg::f64, {1, 2, 3, 4, 2, 2, 2, 10});
  expect_values(eval(g, g.reduce_mean(x, {1}), {in}), {2.5, 4});
  expect_values(eval(g, g.reduce_variance(x, {-1}), {in}), {1.25, 12});  // population: / N
  expect_values(eval(g, g.reduce_prod(x, {1}), {in}), {24, 80});
  expect_values(eval(g, g.reduce_variance(x, {0}), {in}), {0.25, 0, 0.25, 9});
}

TEST(RefReduce, LogSumExpIsStable) {
  tg::Graph g;
  auto x = g.placeholder({2}, tg::f64);
  auto y = g.reduce_logsumexp(x);
  expect_values(eval(g, y, {vec({1000, 1000}, tg::f64)}), {1000 + std::log(2.0)}, 1e-12);
  expect_values(eval(g, y, {vec({-kInf, -kInf}, tg::f64)}), {-kInf});
  expect_values(eval(g, y, {vec({kInf, 1}, tg::f64)}), {kInf});
  expect_values(eval(g, y, {vec({kNaN, 1}, tg::f64)}), {kNaN});
  expect_values(eval(g, y, {vec({0, std::log(3.0)}, tg::f64)}), {std::log(4.0)}, 1e-12);
}

TEST(RefReduce, MaxMinPropagateNaNAndEmpty) {
  tg::Graph g;
  auto x = g.placeholder({-1}, tg::f32);
  expect_values(eval(g, g.reduce_max(x), {vec({1, kNaN, 3})}), {kNaN});
  expect_values(eval(g, g.reduce_min(x), {vec({1, -2, 3})}), {-2});
  expect_values(eval(g, g.reduce_max(x), {vec({})}), {-kInf});
  expect_values(eval(g, g.reduce_sum(x), {vec({})}), {0});
  expect_values(eval(g, g.reduce_prod(x), {vec({})}), {1});
  expect_values(eval(g, g.reduce_mean(x), {vec({})}), {kNaN});
  auto xi = g.placeholder({-1}, tg::i32);
  expect_values(eval(g, g.reduce_min(xi), {vec({}, tg::i32)}), {INT32_MAX});
  auto m = g.placeholder({-1, 3}, tg::f32);
  TensorData e = eval(g, g.reduce_sum(m, {0}), {TensorData::zeros({0, 3})});
  expect_shape(e, {3});
  expect_values(e, {0, 0, 0});
}

TEST(RefReduce, IntegerSumWrapsAndIsExact) {
  tg::Graph g;
  auto x = g.placeholder({3}, tg::i32);
  expect_values(eval(g, g.reduce_sum(x), {vec({INT32_MAX, 1, 1}, tg::i32)}), {INT32_MIN + 1});
  expect_values(eval(g, g.reduce_max(x), {vec({-5, 7, 3}, tg::i32)}), {7});
  auto b = g.placeholder({2, 2}, tg::boolean);
  TensorData tb = TensorData::from_vector({2, 2}, tg::boolean, {1, 0, 1, 1});
  expect_values(eval(g, g.reduce_all(b, {1}), {tb}), {0, 1});
  expect_values(eval(g, g.reduce_any(b, {0}), {tb}), {1, 1});
}

TEST(RefReduce, ArgMaxArgMinFirstOccurrenceAndNaN) {
  tg::Graph g;
  auto x = g.placeholder({-1}, tg::f32);
  TensorData r = eval(g, g.argmax(x, 0), {vec({1, 3, 3, 2})});
  EXPECT_EQ(r.dtype(), tg::i32);
  expect_values(r, {1});
  expect_values(eval(g, g.argmin(x, -1), {vec({2, 1, 1, 5})}), {1});
  expect_values(eval(g, g.argmax(x, 0), {vec({1, kNaN, 5, kNaN})}), {1});
  expect_values(eval(g, g.argmin(x, 0), {vec({1, 0, kNaN})}), {2});
  EXPECT_TG_ERROR(eval(g, g.argmax(x, 0), {vec({})}), "[argmax]", "empty");
  auto m = g.placeholder({2, 3}, tg::i32);
  TensorData tm = TensorData::from_vector({2, 3}, tg::i32, {1, 9, 3, 4, 9, 0});
  TensorData a0 = eval(g, g.argmax(m, 0, true), {tm});
  expect_shape(a0, {1, 3});
  expect_values(a0, {1, 0, 0});
  expect_values(eval(g, g.argmin(m, 1), {tm}), {0, 2});
}

TEST(RefReduce, CumulativeModes) {
  tg::Graph g;
  auto x = g.placeholder({4}, tg::f32);
  TensorData in = vec({1, 2, 3, 4});
  expect_values(eval(g, g.cumsum(x, 0), {in}), {1, 3, 6, 10});
  expect_values(eval(g, g.cumsum(x, 0, true), {in}), {0, 1, 3, 6});
  expect_values(eval(g, g.cumsum(x, 0, false, true), {in}), {10, 9, 7, 4});
  expect_values(eval(g, g.cumsum(x, -1, true, true), {in}), {9, 7, 4, 0});
  expect_values(eval(g, g.cumprod(x, 0, true), {in}), {1, 1, 2, 6});
  expect_values(eval(g, g.cummax(x, 0), {vec({1, 3, 2, 5})}), {1, 3, 3, 5});
  expect_values(eval(g, g.cummin(x, 0, false, true), {vec({4, 1, 2, 3})}), {1, 1, 2, 3});
  expect_values(eval(g, g.cummax(x, 0), {vec({1, kNaN, 2, 5})}), {1, kNaN, kNaN, kNaN});
  expect_values(eval(g, g.cummax(x, 0, true), {vec({1, 3, 2, 5})}), {-kInf, 1, 3, 3});
  auto xi = g.placeholder({3}, tg::i32);
  expect_values(eval(g, g.cummax(xi, 0, true), {vec({4, 1, 7}, tg::i32)}), {INT32_MIN, 4, 4});
}

TEST(RefReduce, CumsumAlongAxis0Of2D) {
  tg::Graph g;
  auto x = g.placeholder({3, 2}, tg::f32);
  TensorData in = TensorData::randn({3, 2}, tg::f32, 11);
  TensorData y = eval(g, g.cumsum(x, 0), {in});
  for (int j = 0; j < 2; ++j) {
    double s = 0;
    for (int i = 0; i < 3; ++i) {
      s += in.at(i * 2 + j);
      EXPECT_NEAR(y.at(i * 2 + j), s, 1e-6);
    }
  }
}

TEST(RefReduce, TopKStableWithNaNLargest) {
  tg::Graph g;
  auto x = g.placeholder({5}, tg::f32);
  TensorData in = vec({1, 3, 3, 2, kNaN});
  auto [v, i] = g.top_k(x, 3);
  auto out = eval_all(g, v, {in});
  expect_values(out[0], {kNaN, 3, 3});
  EXPECT_EQ(out[1].dtype(), tg::i32);
  expect_values(out[1], {4, 1, 2});
  auto [vs, is] = g.top_k(x, 2, 0, false);
  out = eval_all(g, vs, {in});
  expect_values(out[0], {1, 2});
  expect_values(out[1], {0, 3});
}

TEST(RefReduce, TopKAlongAxis0) {
  tg::Graph g;
  auto x = g.placeholder({3, 2}, tg::i32);
  auto [v, i] = g.top_k(x, 2, 0);
  auto out = eval_all(g, v, {TensorData::from_vector({3, 2}, tg::i32, {5, 1, 7, 1, 6, 9})});
  expect_shape(out[0], {2, 2});
  expect_values(out[0], {7, 9, 6, 1});
  expect_values(out[1], {1, 2, 2, 0});
}

TEST(RefReduce, SortAndArgSortAreStable) {
  tg::Graph g;
  auto x = g.placeholder({5}, tg::f32);
  TensorData in = vec({2, 1, 2, kNaN, 0});
  expect_values(eval(g, g.sort(x), {in}), {0, 1, 2, 2, kNaN});
  expect_values(eval(g, g.sort(x, 0, true), {in}), {kNaN, 2, 2, 1, 0});
  expect_values(eval(g, g.argsort(x, -1, true), {in}), {3, 0, 2, 1, 4});
  expect_values(eval(g, g.argsort(x), {in}), {4, 1, 0, 2, 3});
  auto m = g.placeholder({2, 3}, tg::f32);
  TensorData tm = TensorData::from_vector({2, 3}, tg::f32, {3, 1, 2, 0, 5, 4});
  expect_values(eval(g, g.sort(m, 1), {tm}), {1, 2, 3, 0, 4, 5});
  expect_values(eval(g, g.argsort(m, 0), {tm}), {1, 0, 0, 0, 1, 1});
}
