// Reference interpreter: convolution (layouts, groups, dilation, padding, 3-D), transposed
// convolution, convolution gradients (checked as adjoints), pooling and its gradients.
#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {

double dot(const TensorData& a, const TensorData& b) {
  EXPECT_EQ(a.num_elements(), b.num_elements());
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) s += a.at(i) * b.at(i);
  return s;
}

// Naive NCHW / OIHW grouped convolution with explicit padding, written as plain loops.
TensorData naive_conv(const TensorData& x, const TensorData& w, int64_t G, int64_t s[2],
                      int64_t d[2], int64_t p[2], int64_t OH, int64_t OW) {
  const auto& xd = x.shape().dims();
  const auto& wd = w.shape().dims();
  int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], O = wd[0], KH = wd[2], KW = wd[3];
  TensorData y = TensorData::zeros({N, O, OH, OW}, tg::f64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          int64_t g = o / (O / G);
          for (int64_t i = 0; i < C / G; ++i)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * s[0] + kh * d[0] - p[0], iw = ow * s[1] + kw * d[1] - p[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += x.at(((n * C + g * (C / G) + i) * H + ih) * W + iw) * w.at(((o * (C / G) + i) * KH + kh) * KW + kw);
              }
          y.set(((n * O + o) * OH + oh) * OW + ow, acc);
        }
  return y;
}

// Permutes a rank-4 tensor: out[i0,i1,i2,i3] = in at the permuted coordinates (perm as transpose).
TensorData permute(const TensorData& x, std::vector<int64_t> perm) {
  tg::Graph g;
  auto t = g.placeholder(x.shape(), x.dtype());
  return eval(g, g.transpose(t, perm), {x});
}

}  // namespace

TEST(RefConv, HandExampleNHWC) {
  tg::Graph g;
  auto x = g.placeholder({1, 3, 3, 1}, tg::f32), w = g.placeholder({2, 2, 1, 1}, tg::f32);
  TensorData tx = TensorData::from_vector({1, 3, 3, 1}, tg::f32, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  TensorData y = eval(g, g.conv2d(x, w), {tx, TensorData::full({2, 2, 1, 1}, 1.0)});
  expect_shape(y, {1, 2, 2, 1});
  expect_values(y, {12, 16, 24, 28});
}

TEST(RefConv, GroupedDilatedPaddedStridedAllLayouts) {
  const int64_t N = 2, C = 4, H = 6, W = 5, O = 6, G = 2, KH = 3, KW = 2;
  int64_t s[2] = {2, 1}, d[2] = {1, 2}, p[2] = {1, 0};
  TensorData x = TensorData::randn({N, C, H, W}, tg::f64, 1);      // NCHW
  TensorData w = TensorData::randn({O, C / G, KH, KW}, tg::f64, 2);  // OIHW
  const int64_t OH = (H + 2 * p[0] - ((KH - 1) * d[0] + 1)) / s[0] + 1;
  const int64_t OW = (W + 2 * p[1] - ((KW - 1) * d[1] + 1)) / s[1] + 1;
  TensorData expect = naive_conv(x, w, G, s, d, p, OH, OW);
  tg::ConvDesc cd{{2, 1}, {1, 2}, tg::PaddingStyle::explicit_, {1, 1, 0, 0}, tg::Layout::nchw, tg::Layout::oihw, G, {}};
  for (bool nhwc : {false, true})
    for (bool hwio : {false, true}) {
      cd.data_layout = nhwc ? tg::Layout::nhwc : tg::Layout::nchw;
      cd.weights_layout = hwio ? tg::Layout::hwio : tg::Layout::oihw;
      TensorData xi = nhwc ? permute(x, {0, 2, 3, 1}) : x, wi = hwio ? permute(w, {2, 3, 1, 0}) : w;
      tg::Graph g;
      auto tx = g.placeholder(xi.shape(), tg::f64), tw = g.placeholder(wi.shape(), tg::f64);
      TensorData y = eval(g, g.conv2d(tx, tw, cd), {xi, wi});
      if (nhwc) y = permute(y, {0, 3, 1, 2});
      expect_shape(y, {N, O, OH, OW});
      expect_values(y, expect.to_vector(), 1e-12);
    }
}

TEST(RefConv, SamePaddingSplit) {
  tg::Graph g;
  auto x = g.placeholder({1, 1, 4, 1}, tg::f32), w = g.placeholder({1, 2, 1, 1}, tg::f32);
  TensorData tx = TensorData::from_vector({1, 1, 4, 1}, tg::f32, {1, 2, 3, 4});
  TensorData tw = TensorData::from_vector({1, 2, 1, 1}, tg::f32, {1, 10});
  tg::ConvDesc same{.padding = tg::PaddingStyle::same};
  expect_values(eval(g, g.conv2d(x, w, same), {tx, tw}), {21, 32, 43, 4});  // the odd pad goes after
  tg::ConvDesc lower{.padding = tg::PaddingStyle::same_lower};
  expect_values(eval(g, g.conv2d(x, w, lower), {tx, tw}), {10, 21, 32, 43});
}

TEST(RefConv, Conv3dBoxSum) {
  tg::Graph g;
  auto x = g.placeholder({1, 3, 3, 3, 1}, tg::f64), w = g.placeholder({2, 2, 2, 1, 1}, tg::f64);
  TensorData tx = TensorData::randn({1, 3, 3, 3, 1}, tg::f64, 3);
  TensorData y = eval(g, g.conv3d(x, w, {.data_layout = tg::Layout::ndhwc, .weights_layout = tg::Layout::dhwio}),
                      {tx, TensorData::full({2, 2, 2, 1, 1}, 1.0, tg::f64)});
  expect_shape(y, {1, 2, 2, 2, 1});
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) {
        double s = 0;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j)
            for (int k = 0; k < 2; ++k) s += tx.at(((a + i) * 3 + b + j) * 3 + c + k);
        EXPECT_NEAR(y.at((a * 2 + b) * 2 + c), s, 1e-12);
      }
}

TEST(RefConv, ConvTransposeHandAndAdjoint) {
  tg::Graph g;
  auto x = g.placeholder({1, 1, 1, 2}, tg::f32), w = g.placeholder({1, 1, 1, 2}, tg::f32);
  tg::ConvDesc nchw{.data_layout = tg::Layout::nchw, .weights_layout = tg::Layout::oihw};
  TensorData y = eval(g, g.conv_transpose2d(x, w, nchw), {TensorData::from_vector({1, 1, 1, 2}, tg::f32, {1, 2}),
                                                         TensorData::from_vector({1, 1, 1, 2}, tg::f32, {1, 10})});
  expect_values(y, {1, 12, 20});
  // <conv(a, w), b> == <a, conv_transpose(b, w)> for the same descriptor (the definition).
  tg::ConvDesc d{{2, 2}, {1, 1}, tg::PaddingStyle::explicit_, {1, 0, 0, 1}, tg::Layout::nhwc, tg::Layout::hwio, 2, {}};
  tg::Graph h;
  auto a = h.placeholder({1, 5, 6, 4}, tg::f64), wt = h.placeholder({3, 2, 2, 6}, tg::f64);
  auto fwd = h.conv2d(a, wt, d);
  auto b = h.placeholder(fwd.shape(), tg::f64);
  tg::ConvDesc dt = d;
  dt.output_padding = {1, 1};  // the strided forward conv drops a row and a column; restore them
  auto bwd = h.conv_transpose2d(b, h.placeholder({3, 2, 2, 6}, tg::f64), dt);
  ASSERT_EQ(bwd.shape().dims(), (std::vector<int64_t>{1, 5, 6, 4}));
  TensorData ta = TensorData::randn({1, 5, 6, 4}, tg::f64, 4), tw = TensorData::randn({3, 2, 2, 6}, tg::f64, 5);
  TensorData tb = TensorData::randn(fwd.shape(), tg::f64, 6);
  double lhs = dot(eval(h, fwd, {ta, tw}), tb), rhs = dot(ta, eval(h, bwd, {tb, tw}));
  EXPECT_NEAR(lhs, rhs, 1e-9 * std::fabs(lhs) + 1e-9);
}

TEST(RefConv, GradientsAreAdjoints) {
  for (tg::Layout l : {tg::Layout::nhwc, tg::Layout::nchw}) {
    bool last = l == tg::Layout::nhwc;
    tg::ConvDesc d{{2, 1}, {1, 2}, tg::PaddingStyle::same, {}, l, last ? tg::Layout::hwio : tg::Layout::oihw, 2, {}};
    tg::Shape xs = last ? tg::Shape{2, 5, 6, 4} : tg::Shape{2, 4, 5, 6};
    tg::Shape ws = last ? tg::Shape{3, 2, 2, 6} : tg::Shape{6, 2, 3, 2};
    tg::Graph g;
    auto x = g.placeholder(xs, tg::f64), w = g.placeholder(ws, tg::f64);
    auto y = g.conv2d(x, w, d);
    auto dy = g.placeholder(y.shape(), tg::f64);
    auto dx = g.conv2d_data_grad(dy, w, xs, d), dw = g.conv2d_weight_grad(dy, x, ws, d);
    TensorData tx = TensorData::randn(xs, tg::f64, 7), tw = TensorData::randn(ws, tg::f64, 8);
    TensorData tdy = TensorData::randn(y.shape(), tg::f64, 9);
    double ref = dot(eval(g, y, {tx, tw}), tdy);
    EXPECT_NEAR(dot(tx, eval(g, dx, {tdy, tw})), ref, 1e-9 * std::fabs(ref));
    EXPECT_NEAR(dot(tw, eval(g, dw, {tdy, tx})), ref, 1e-9 * std::fabs(ref));
  }
  tg::Graph g;  // 3-D
  tg::ConvDesc d3{.padding = tg::PaddingStyle::valid, .data_layout = tg::Layout::ncdhw, .weights_layout = tg::Layout::oidhw};
  auto x = g.placeholder({1, 2, 3, 4, 3}, tg::f64), w = g.placeholder({3, 2, 2, 2, 2}, tg::f64);
  auto y = g.conv3d(x, w, d3);
  auto dy = g.placeholder(y.shape(), tg::f64);
  TensorData tx = TensorData::randn({1, 2, 3, 4, 3}, tg::f64, 1), tw = TensorData::randn({3, 2, 2, 2, 2}, tg::f64, 2);
  TensorData tdy = TensorData::randn(y.shape(), tg::f64, 3);
  double ref = dot(eval(g, y, {tx, tw}), tdy);
  EXPECT_NEAR(dot(tx, eval(g, g.conv3d_data_grad(dy, w, x.shape(), d3), {tdy, tw})), ref, 1e-9 * std::fabs(ref));
  EXPECT_NEAR(dot(tw, eval(g, g.conv3d_weight_grad(dy, x, w.shape(), d3), {tdy, tx})), ref, 1e-9 * std::fabs(ref));
}

TEST(RefPool, MaxPoolWithIndices) {
  tg::Graph g;
  auto x = g.placeholder({1, 2, 4, 4}, tg::f32);  // NCHW, channel 1 negated
  TensorData tx({1, 2, 4, 4}, tg::f32);
  for (int i = 0; i < 16; ++i) tx.set(i, i), tx.set(16 + i, -i);
  auto [v, idx] = g.max_pool2d_with_indices(x, {.kernel = {2, 2}, .data_layout = tg::Layout::nchw});
  auto out = eval_all(g, v, {tx});
  expect_values(out[0], {5, 7, 13, 15, 0, -2, -8, -10});
  expect_values(out[1], {5, 7, 13, 15, 0, 2, 8, 10});  // flat h*W + w within the channel
  EXPECT_EQ(out[1].dtype(), tg::i32);
}

TEST(RefPool, MaxPoolTiesNaNDilationCeil) {
  tg::Graph g;
  auto x = g.placeholder({1, 1, 5, 1}, tg::f32);  // NHWC: a row of 5 along w
  auto run = [&](tg::PoolDesc d, std::vector<double> v) {
    auto [y, i] = g.max_pool2d_with_indices(x, d);
    return eval_all(g, y, {TensorData::from_vector({1, 1, 5, 1}, tg::f32, v)});
  };
  auto r = run({.kernel = {1, 2}, .stride = {1, 1}}, {3, 3, 1, kNaN, 2});
  expect_values(r[0], {3, 3, kNaN, kNaN});
  expect_values(r[1], {0, 1, 3, 3});
  r = run({.kernel = {1, 2}, .stride = {1, 1}, .dilation = {1, 2}}, {1, 5, 2, 4, 3});
  expect_values(r[0], {2, 5, 3});
  r = run({.kernel = {1, 2}, .ceil_mode = true}, {1, 5, 2, 4, 3});
  expect_values(r[0], {5, 4, 3});
  r = run({.kernel = {1, 2}, .ceil_mode = false}, {1, 5, 2, 4, 3});
  expect_values(r[0], {5, 4});
}

TEST(RefPool, AvgPoolPaddingCounts) {
  tg::Graph g;
  auto x = g.placeholder({1, 3, 3, 1}, tg::f32);
  TensorData ones = TensorData::full({1, 3, 3, 1}, 1.0);
  tg::PoolDesc d{.kernel = {3, 3}, .stride = {1, 1}, .explicit_padding = {1, 1, 1, 1}};
  expect_values(eval(g, g.avg_pool2d(x, d), {ones}), std::vector<double>(9, 1.0));
  d.count_include_pad = true;
  expect_values(eval(g, g.avg_pool2d(x, d), {ones}),
                {4. / 9, 6. / 9, 4. / 9, 6. / 9, 1, 6. / 9, 4. / 9, 6. / 9, 4. / 9});
  auto r = g.placeholder({1, 1, 5, 1}, tg::f32);
  TensorData row = TensorData::from_vector({1, 1, 5, 1}, tg::f32, {1, 2, 3, 4, 10});
  tg::PoolDesc c{.kernel = {1, 2}, .ceil_mode = true, .count_include_pad = true};
  expect_values(eval(g, g.avg_pool2d(r, c), {row}), {1.5, 3.5, 10});  // the partial window counts 1
}

TEST(RefPool, GradientsAreAdjoints) {
  tg::Graph g;
  auto x = g.placeholder({2, 5, 6, 3}, tg::f64);
  for (bool include : {false, true}) {
    tg::PoolDesc d{.kernel = {3, 2}, .stride = {2, 1}, .explicit_padding = {1, 1, 0, 1}, .ceil_mode = true,
                   .count_include_pad = include};
    auto y = g.avg_pool2d(x, d);
    auto dy = g.placeholder(y.shape(), tg::f64);
    TensorData tx = TensorData::randn({2, 5, 6, 3}, tg::f64, 1), tdy = TensorData::randn(y.shape(), tg::f64, 2);
    double ref = dot(eval(g, y, {tx}), tdy);
    EXPECT_NEAR(dot(tx, eval(g, g.avg_pool2d_grad(dy, x, d), {tdy, tx})), ref, 1e-9 * std::fabs(ref));
  }
  auto r = g.placeholder({1, 1, 3, 1}, tg::f32);
  tg::PoolDesc d{.kernel = {1, 2}, .stride = {1, 1}};
  auto dy = g.placeholder({1, 1, 2, 1}, tg::f32);
  TensorData dx = eval(g, g.max_pool2d_grad(dy, r, d), {TensorData::from_vector({1, 1, 2, 1}, tg::f32, {1, 10}),
                                                         TensorData::from_vector({1, 1, 3, 1}, tg::f32, {1, 3, 2})});
  expect_values(dx, {0, 11, 0});
}
