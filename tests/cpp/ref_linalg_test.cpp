// Reference interpreter: matmul (transposes, broadcast batch dims) and band_part.
#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

TEST(RefLinalg, MatmulHandExample) {
  tg::Graph g;
  auto a = g.placeholder({2, 3}, tg::f32), b = g.placeholder({3, 2}, tg::f32);
  TensorData ta = TensorData::from_vector({2, 3}, tg::f32, {1, 2, 3, 4, 5, 6});
  TensorData tb = TensorData::from_vector({3, 2}, tg::f32, {7, 8, 9, 10, 11, 12});
  TensorData y = eval(g, g.matmul(a, b), {ta, tb});
  expect_shape(y, {2, 2});
  expect_values(y, {58, 64, 139, 154});
}

TEST(RefLinalg, MatmulTransposes) {
  tg::Graph g;
  // a^T with a stored [3,2]; b^T with b stored [2,3]: same product as the hand example.
  auto a = g.placeholder({3, 2}, tg::f64), b = g.placeholder({2, 3}, tg::f64);
  TensorData ta = TensorData::from_vector({3, 2}, tg::f64, {1, 4, 2, 5, 3, 6});
  TensorData tb = TensorData::from_vector({2, 3}, tg::f64, {7, 9, 11, 8, 10, 12});
  expect_values(eval(g, g.matmul(a, b, true, true), {ta, tb}), {58, 64, 139, 154});
  auto a2 = g.placeholder({3, 2}, tg::f64), b2 = g.placeholder({3, 2}, tg::f64);
  TensorData tb2 = TensorData::from_vector({3, 2}, tg::f64, {7, 8, 9, 10, 11, 12});
  expect_values(eval(g, g.matmul(a2, b2, true, false), {ta, tb2}), {58, 64, 139, 154});
}

TEST(RefLinalg, MatmulBroadcastBatchMatchesLoops) {
  tg::Graph g;
  auto a = g.placeholder({2, 1, 3, 4}, tg::f32), b = g.placeholder({3, 4, 5}, tg::f32);
  TensorData ta = TensorData::randn({2, 1, 3, 4}, tg::f32, 1);
  TensorData tb = TensorData::randn({3, 4, 5}, tg::f32, 2);
  TensorData y = eval(g, g.matmul(a, b), {ta, tb});
  expect_shape(y, {2, 3, 3, 5});
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 3; ++q)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) {
          double s = 0;
          for (int k = 0; k < 4; ++k) s += ta.at(p * 12 + i * 4 + k) * tb.at(q * 20 + k * 5 + j);
          EXPECT_NEAR(y.at(((p * 3 + q) * 3 + i) * 5 + j), s, 1e-5);
        }
}

TEST(RefLinalg, MatmulIntegerAndEmptyInner) {
  tg::Graph g;
  auto a = g.placeholder({1, 2}, tg::i32), b = g.placeholder({2, 1}, tg::i32);
  TensorData y = eval(g, g.matmul(a, b), {TensorData::from_vector({1, 2}, tg::i32, {65536, 3}),
                                          TensorData::from_vector({2, 1}, tg::i32, {65536, 4})});
  EXPECT_EQ(y.dtype(), tg::i32);
  expect_values(y, {12});  // 2^32 wraps to 0
  auto e = g.placeholder({2, -1}, tg::f32), f = g.placeholder({-1, 3}, tg::f32);
  TensorData z = eval(g, g.matmul(e, f), {TensorData::zeros({2, 0}), TensorData::zeros({0, 3})});
  expect_shape(z, {2, 3});
  expect_values(z, {0, 0, 0, 0, 0, 0});
}

TEST(RefLinalg, BandPart) {
  tg::Graph g;
  auto x = g.placeholder({2, 3, 3}, tg::f32);
  TensorData in = TensorData::uniform({2, 3, 3}, 1, 2, tg::f32, 4);
  auto check = [&](int64_t lo, int64_t up) {
    TensorData y = eval(g, g.band_part(x, lo, up), {in});
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          bool in_band = (lo < 0 || i - j <= lo) && (up < 0 || j - i <= up);
          int64_t f = b * 9 + i * 3 + j;
          EXPECT_EQ(y.at(f), in_band ? in.at(f) : 0.0) << lo << "," << up << " at " << f;
        }
  };
  check(0, 0);
  check(1, 0);
  check(-1, 0);
  check(0, -1);
  check(-1, -1);
  TensorData lower = eval(g, g.band_part(x, -1, 0), {in});
  EXPECT_EQ(lower.at(1), 0.0);  // (0,1) is above the diagonal
  EXPECT_EQ(lower.at(3), in.at(3));
}
