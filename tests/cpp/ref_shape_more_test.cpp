// Reference interpreter: strided_slice, slice_update, pad, tile, reverse, one_hot,
// space_to_depth / depth_to_space, resize.
#include <functional>

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
TensorData run1(const std::function<tg::Tensor(tg::Graph&, tg::Tensor)>& op, const TensorData& in) {
  tg::Graph g;
  auto x = g.placeholder(in.shape(), in.dtype());
  return eval(g, op(g, x), {in});
}
tg::SliceDesc sd(std::vector<int64_t> b, std::vector<int64_t> e, std::vector<int64_t> s,
                 int64_t bm = 0, int64_t em = 0, int64_t sq = 0) {
  return tg::SliceDesc{b, e, s, bm, em, sq};
}
}  // namespace

TEST(RefShapeMore, StridedSliceRules) {
  TensorData x = iota({5});
  auto ss = [&](tg::SliceDesc d) { return run1([&](tg::Graph& g, tg::Tensor t) { return g.strided_slice(t, d); }, x); };
  expect_values(ss(sd({1}, {4}, {1})), {1, 2, 3});
  expect_values(ss(sd({-1}, {0}, {-2})), {4, 2});
  expect_values(ss(sd({0}, {0}, {-1}, 1, 1)), {4, 3, 2, 1, 0});
  expect_values(ss(sd({-10}, {100}, {2})), {0, 2, 4});
  expect_values(ss(sd({3}, {1}, {1})), {});
  expect_values(ss(sd({2}, {-10}, {-1})), {2, 1, 0});
  TensorData m = iota({3, 4});
  TensorData r = run1([](tg::Graph& g, tg::Tensor t) { return g.strided_slice(t, sd({1, 0}, {2, 4}, {1, 2}, 0, 0, 1)); }, m);
  expect_shape(r, {2});
  expect_values(r, {4, 6});
  TensorData k = run1([](tg::Graph& g, tg::Tensor t) { return g.strided_slice(t, sd({-1}, {0}, {-1}, 0, 1)); }, m);
  expect_shape(k, {3, 4});  // dim 1 untouched, dim 0 reversed
  expect_values(k, {8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3});
  TensorData s = run1([](tg::Graph& g, tg::Tensor t) { return g.slice(t, {1, 1}, {-1, 3}); }, m);
  expect_values(s, {5, 6, 9, 10});
  EXPECT_TG_ERROR(run1([](tg::Graph& g, tg::Tensor t) { return g.strided_slice(t, sd({5}, {6}, {1}, 0, 0, 1)); }, m),
                  "[strided_slice]", "5");
}

TEST(RefShapeMore, SliceUpdate) {
  tg::Graph g;
  auto x = g.placeholder({5}, tg::f32), u = g.placeholder({2}, tg::f32);
  TensorData tx = TensorData::zeros({5}), tu = TensorData::from_vector({2}, tg::f32, {7, 8});
  expect_values(eval(g, g.slice_update(x, u, sd({1}, {3}, {1})), {tx, tu}), {0, 7, 8, 0, 0});
  expect_values(eval(g, g.slice_update(x, u, sd({3}, {0}, {-2})), {tx, tu}), {0, 8, 0, 7, 0});
  auto m = g.placeholder({2, 3}, tg::i64), mu = g.placeholder({2}, tg::i64);
  TensorData r = eval(g, g.slice_update(m, mu, sd({0, 1}, {2, 2}, {1, 1}, 0, 0, 2)),
                      {iota({2, 3}, tg::i64), TensorData::from_vector({2}, tg::i64, {-1, -2})});
  expect_values(r, {0, -1, 2, 3, -2, 5});
}

TEST(RefShapeMore, PadModes) {
  TensorData x = TensorData::from_vector({3}, tg::f32, {1, 2, 3});
  auto p = [&](tg::PadMode m) {
    return run1([&](tg::Graph& g, tg::Tensor t) { return g.pad(t, {2}, {2}, m, 9); }, x);
  };
  expect_values(p(tg::PadMode::constant), {9, 9, 1, 2, 3, 9, 9});
  expect_values(p(tg::PadMode::reflect), {3, 2, 1, 2, 3, 2, 1});
  expect_values(p(tg::PadMode::symmetric), {2, 1, 1, 2, 3, 3, 2});
  expect_values(p(tg::PadMode::edge), {1, 1, 1, 2, 3, 3, 3});
  TensorData m = run1([](tg::Graph& g, tg::Tensor t) { return g.pad(t, {1, 0}, {0, 1}, tg::PadMode::symmetric); }, iota({2, 2}));
  expect_shape(m, {3, 3});
  expect_values(m, {0, 1, 1, 0, 1, 1, 2, 3, 3});
}

TEST(RefShapeMore, TileAndReverse) {
  TensorData t = run1([](tg::Graph& g, tg::Tensor x) { return g.tile(x, {2, 2}); }, iota({1, 2}));
  expect_shape(t, {2, 4});
  expect_values(t, {0, 1, 0, 1, 0, 1, 0, 1});
  expect_values(run1([](tg::Graph& g, tg::Tensor x) { return g.reverse(x, {-1}); }, iota({2, 3})), {2, 1, 0, 5, 4, 3});
  expect_values(run1([](tg::Graph& g, tg::Tensor x) { return g.reverse(x, {0, 1}); }, iota({2, 3})), {5, 4, 3, 2, 1, 0});
  expect_shape(run1([](tg::Graph& g, tg::Tensor x) { return g.tile(x, {0, 3}); }, iota({2, 2})), {0, 6});
}

TEST(RefShapeMore, OneHot) {
  TensorData ind = TensorData::from_vector({5}, tg::i32, {0, 2, -1, 3, -4});
  TensorData r = run1([](tg::Graph& g, tg::Tensor x) { return g.one_hot(x, 3); }, ind);
  expect_shape(r, {5, 3});
  expect_values(r, {1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0});
  TensorData a = run1([](tg::Graph& g, tg::Tensor x) { return g.one_hot(x, 3, 0, tg::i32, 5, -1); }, ind);
  expect_shape(a, {3, 5});
  expect_values(a, {5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 5, 5, -1, -1});
}

TEST(RefShapeMore, SpaceToDepthDCR) {
  // TensorFlow's documented example: [1,2,2,1] {1,2,3,4} -> [1,1,1,4] {1,2,3,4}.
  TensorData tf = TensorData::from_vector({1, 2, 2, 1}, tg::f32, {1, 2, 3, 4});
  TensorData s = run1([](tg::Graph& g, tg::Tensor x) { return g.space_to_depth(x, 2); }, tf);
  expect_shape(s, {1, 1, 1, 4});
  expect_values(s, {1, 2, 3, 4});
  TensorData x = iota({1, 4, 4, 2});
  TensorData y = run1([](tg::Graph& g, tg::Tensor t) { return g.space_to_depth(t, 2); }, x);
  expect_shape(y, {1, 2, 2, 8});
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 2; ++w)
      for (int bh = 0; bh < 2; ++bh)
        for (int bw = 0; bw < 2; ++bw)
          for (int c = 0; c < 2; ++c)
            EXPECT_EQ(y.at(((h * 2 + w) * 8) + (bh * 2 + bw) * 2 + c), x.at(((2 * h + bh) * 4 + 2 * w + bw) * 2 + c));
  TensorData back = run1([](tg::Graph& g, tg::Tensor t) { return g.depth_to_space(t, 2); }, y);
  expect_shape(back, {1, 4, 4, 2});
  expect_values(back, x.to_vector());
  TensorData xc = iota({1, 1, 4, 4});
  TensorData yc = run1([](tg::Graph& g, tg::Tensor t) { return g.space_to_depth(t, 2, tg::Layout::nchw); }, xc);
  expect_shape(yc, {1, 4, 2, 2});
  expect_values(yc, {0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15});
}

TEST(RefShapeMore, ResizeNearest) {
  auto rs = [](const TensorData& in, std::vector<int64_t> size, tg::CoordinateMode cm, tg::NearestRounding r) {
    tg::ResizeDesc d{size, tg::ResizeMode::nearest, cm, r, tg::Layout::nchw};
    return run1([&](tg::Graph& g, tg::Tensor x) { return g.resize(x, d); }, in);
  };
  TensorData two = TensorData::from_vector({1, 1, 1, 2}, tg::f32, {10, 20});
  expect_values(rs(two, {1, 4}, tg::CoordinateMode::asymmetric, tg::NearestRounding::floor), {10, 10, 20, 20});
  expect_values(rs(two, {1, 4}, tg::CoordinateMode::half_pixel, tg::NearestRounding::round_prefer_floor), {10, 10, 20, 20});
  TensorData four = TensorData::from_vector({1, 1, 1, 4}, tg::i32, {1, 2, 3, 4});
  expect_values(rs(four, {1, 2}, tg::CoordinateMode::half_pixel, tg::NearestRounding::round_prefer_floor), {1, 3});
  expect_values(rs(four, {1, 2}, tg::CoordinateMode::half_pixel, tg::NearestRounding::round_prefer_ceil), {2, 4});
  expect_values(rs(four, {1, 3}, tg::CoordinateMode::align_corners, tg::NearestRounding::ceil), {1, 3, 4});
}

TEST(RefShapeMore, ResizeBilinear) {
  auto rs = [](const TensorData& in, std::vector<int64_t> size, tg::CoordinateMode cm, tg::Layout l) {
    tg::ResizeDesc d{size, tg::ResizeMode::bilinear, cm, tg::NearestRounding::floor, l};
    return run1([&](tg::Graph& g, tg::Tensor x) { return g.resize(x, d); }, in);
  };
  TensorData two = TensorData::from_vector({1, 1, 1, 2}, tg::f32, {0, 4});
  expect_values(rs(two, {1, 4}, tg::CoordinateMode::half_pixel, tg::Layout::nchw), {0, 1, 3, 4});
  expect_values(rs(two, {1, 3}, tg::CoordinateMode::align_corners, tg::Layout::nchw), {0, 2, 4});
  expect_values(rs(two, {1, 4}, tg::CoordinateMode::asymmetric, tg::Layout::nchw), {0, 2, 4, 4});
  TensorData four = TensorData::from_vector({1, 1, 1, 4}, tg::f32, {0, 1, 2, 3});
  expect_values(rs(four, {1, 1}, tg::CoordinateMode::half_pixel, tg::Layout::nchw), {1.5});
  expect_values(rs(four, {1, 1}, tg::CoordinateMode::pytorch_half_pixel, tg::Layout::nchw), {0});
  // A linear function f(h, w, c) = 10h + w + 100c is reproduced exactly with align_corners.
  TensorData lin({1, 3, 4, 2}, tg::f64);
  for (int h = 0; h < 3; ++h)
    for (int w = 0; w < 4; ++w)
      for (int c = 0; c < 2; ++c) lin.set((h * 4 + w) * 2 + c, 10 * h + w + 100 * c);
  TensorData y = rs(lin, {5, 7}, tg::CoordinateMode::align_corners, tg::Layout::nhwc);
  expect_shape(y, {1, 5, 7, 2});
  for (int h = 0; h < 5; ++h)
    for (int w = 0; w < 7; ++w)
      for (int c = 0; c < 2; ++c)
        EXPECT_NEAR(y.at((h * 7 + w) * 2 + c), 10 * (h * 2.0 / 4) + w * 3.0 / 6 + 100 * c, 1e-12);
}
