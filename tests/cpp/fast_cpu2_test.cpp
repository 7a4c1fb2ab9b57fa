// The second set of fast CPU kernels (conv2d gradients, pooling and its gradients,
// normalisations, softmax and cross-entropy, reductions, data movement, select / cast /
// compare / rsqrt) against the reference interpreter on random non-zero inputs: same shapes
// and dtypes, values within f32 tolerances, and a refusal where a kernel does not apply.
#include <gtest/gtest.h>

#include "fast_test_util.h"

#include <cmath>
#include <thread>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/reference.h"
#include "tgraph/tgraph.h"

using tg::TensorData;

using fasttest::expect_close;
using fasttest::rnd;

namespace {

const tg::detail::Node& node_of(const tg::Graph& g, tg::Tensor t) {
  return g.impl().nodes[static_cast<size_t>(t.op().id())];
}

std::vector<TensorData> fast_all(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  std::vector<TensorData> out;
  EXPECT_TRUE(tg::detail::cpu_fast_eval(g.impl(), node_of(g, t), in, out)) << "fast path declined";
  return out;
}
TensorData fast(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  auto out = fast_all(g, t, in);
  return out.empty() ? TensorData() : out[0];
}
bool declines(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  std::vector<TensorData> out;
  return !tg::detail::cpu_fast_eval(g.impl(), node_of(g, t), in, out) && out.empty();
}
std::vector<TensorData> ref_all(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  return tg::detail::reference_eval(g.impl(), node_of(g, t), in);
}
TensorData ref(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) { return ref_all(g, t, in).at(0); }



// Fast and reference agree on every output of t's node.
void check(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in, double rtol = 1e-5) {
  auto want = ref_all(g, t, in);
  auto got = fast_all(g, t, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    expect_close(got[k], want[k], rtol);
  }
}

tg::ConvDesc conv(tg::Layout data, tg::Layout weights, tg::PaddingStyle p = tg::PaddingStyle::same,
                  std::vector<int64_t> stride = {}, std::vector<int64_t> dil = {}, int64_t groups = 1) {
  tg::ConvDesc d;
  d.data_layout = data;
  d.weights_layout = weights;
  d.padding = p;
  d.stride = std::move(stride);
  d.dilation = std::move(dil);
  d.groups = groups;
  return d;
}

// Both gradients of the conv of x [sx] by w [sw].
void check_conv_grads(tg::Shape sx, tg::Shape sw, const tg::ConvDesc& d, uint64_t seed) {
  tg::Graph g;
  auto x = g.placeholder(sx, tg::f32), w = g.placeholder(sw, tg::f32);
  tg::Shape sy = g.conv2d(x, w, d).shape();
  auto dy = g.placeholder(sy, tg::f32);
  auto dx = g.conv2d_data_grad(dy, w, sx, d);
  auto dw = g.conv2d_weight_grad(dy, x, sw, d);
  TensorData xv = rnd(sx, seed), wv = rnd(sw, seed + 1), dyv = rnd(sy, seed + 2);
  {
    SCOPED_TRACE("data grad");
    check(g, dx, {dyv, wv}, 1e-4);
  }
  {
    SCOPED_TRACE("weight grad");
    check(g, dw, {dyv, xv}, 1e-4);
  }
}

}  // namespace

TEST(FastCpu2, Conv2dGrads) {
  using tg::Layout;
  using tg::PaddingStyle;
  check_conv_grads({2, 7, 6, 5}, {3, 3, 5, 4}, conv(Layout::nhwc, Layout::hwio), 1);
  check_conv_grads({2, 5, 7, 6}, {4, 5, 3, 3}, conv(Layout::nchw, Layout::oihw), 2);
  check_conv_grads({2, 5, 7, 6}, {3, 3, 5, 4}, conv(Layout::nchw, Layout::hwio), 3);
  check_conv_grads({3, 9, 8, 4}, {3, 3, 4, 6}, conv(Layout::nhwc, Layout::hwio, PaddingStyle::same, {2, 2}), 4);
  check_conv_grads({2, 9, 9, 4}, {3, 2, 4, 6}, conv(Layout::nhwc, Layout::hwio, PaddingStyle::valid, {2, 1}, {1, 2}), 5);
  check_conv_grads({2, 8, 8, 6}, {3, 3, 3, 4}, conv(Layout::nhwc, Layout::hwio, PaddingStyle::same_lower, {2, 2}, {}, 2), 6);
  check_conv_grads({2, 6, 8, 8}, {6, 2, 3, 3}, conv(Layout::nchw, Layout::oihw, PaddingStyle::same, {1, 1}, {2, 2}, 3), 7);
  tg::ConvDesc e = conv(Layout::nhwc, Layout::hwio, PaddingStyle::explicit_, {2, 2});
  e.explicit_padding = {1, 0, 2, 1};
  check_conv_grads({2, 7, 9, 3}, {3, 3, 3, 5}, e, 8);
  // the shapes of the CNN benchmark's second conv
  check_conv_grads({4, 28, 28, 32}, {3, 3, 32, 64}, conv(Layout::nhwc, Layout::hwio, PaddingStyle::same, {2, 2}), 9);
}

TEST(FastCpu2, Conv2dGradDeclinesOtherDtypes) {
  tg::Graph g;
  auto dy = g.placeholder({1, 4, 4, 2}, tg::f64), w = g.placeholder({3, 3, 1, 2}, tg::f64);
  auto dx = g.conv2d_data_grad(dy, w, {1, 4, 4, 1}, conv(tg::Layout::nhwc, tg::Layout::hwio));
  EXPECT_TRUE(declines(g, dx, {TensorData::uniform({1, 4, 4, 2}, -1, 1, tg::f64, 1),
                               TensorData::uniform({3, 3, 1, 2}, -1, 1, tg::f64, 2)}));
}

namespace {

tg::PoolDesc pool(tg::Layout l, std::vector<int64_t> k, std::vector<int64_t> s, tg::PaddingStyle p,
                  std::vector<int64_t> expl = {}, bool ceil = false, bool cip = false) {
  tg::PoolDesc d;
  d.kernel = std::move(k);
  d.stride = std::move(s);
  d.padding = p;
  d.explicit_padding = std::move(expl);
  d.data_layout = l;
  d.ceil_mode = ceil;
  d.count_include_pad = cip;
  return d;
}

void check_pool(tg::Shape sx, const tg::PoolDesc& d, uint64_t seed) {
  tg::Graph g;
  auto x = g.placeholder(sx, tg::f32);
  auto ym = g.max_pool2d(x, d), ya = g.avg_pool2d(x, d);
  auto ymi = g.max_pool2d_with_indices(x, d).first;
  auto dy = g.placeholder(ym.shape(), tg::f32);
  auto gm = g.max_pool2d_grad(dy, x, d), ga = g.avg_pool2d_grad(dy, x, d);
  TensorData xv = rnd(sx, seed), dyv = rnd(ym.shape(), seed + 1);
  { SCOPED_TRACE("max"); check(g, ym, {xv}); }
  { SCOPED_TRACE("max with indices"); check(g, ymi, {xv}); }
  {  // ties: small integers, so windows hold equal maxima and the first must win
    TensorData tv = xv.clone();
    for (int64_t i = 0; i < tv.num_elements(); ++i) tv.set(i, std::floor(tv.at(i)));
    SCOPED_TRACE("max with indices, ties");
    check(g, ymi, {tv});
  }
  { SCOPED_TRACE("avg"); check(g, ya, {xv}); }
  { SCOPED_TRACE("max grad"); check(g, gm, {dyv, xv}); }
  { SCOPED_TRACE("avg grad"); check(g, ga, {dyv, xv}); }
}

}  // namespace

TEST(FastCpu2, Pooling) {
  using tg::Layout;
  using tg::PaddingStyle;
  for (Layout l : {Layout::nhwc, Layout::nchw}) {
    SCOPED_TRACE(l == Layout::nhwc ? "nhwc" : "nchw");
    tg::Shape s = l == Layout::nhwc ? tg::Shape{2, 9, 8, 3} : tg::Shape{2, 3, 9, 8};
    check_pool(s, pool(l, {2, 2}, {}, PaddingStyle::valid), 1);
    check_pool(s, pool(l, {3, 3}, {2, 2}, PaddingStyle::same), 2);
    check_pool(s, pool(l, {3, 2}, {1, 2}, PaddingStyle::same_lower), 3);
    check_pool(s, pool(l, {3, 3}, {2, 2}, PaddingStyle::explicit_, {1, 1, 1, 0}), 4);
    check_pool(s, pool(l, {3, 3}, {2, 2}, PaddingStyle::explicit_, {1, 1, 1, 1}, false, true), 5);
    check_pool(s, pool(l, {2, 2}, {2, 2}, PaddingStyle::valid, {}, true), 6);                      // ceil_mode
    check_pool(s, pool(l, {3, 3}, {2, 2}, PaddingStyle::explicit_, {1, 1, 0, 1}, true, true), 7);  // both
    tg::PoolDesc dil = pool(l, {2, 2}, {1, 1}, PaddingStyle::valid);
    dil.dilation = {2, 3};
    check_pool(s, dil, 8);
  }
}

TEST(FastCpu2, MaxPoolNaNWins) {
  for (tg::Layout l : {tg::Layout::nhwc, tg::Layout::nchw}) {
    tg::Graph g;
    const bool last = l == tg::Layout::nhwc;
    auto x = g.placeholder(last ? tg::Shape{1, 4, 4, 1} : tg::Shape{1, 1, 4, 4}, tg::f32);
    auto y = last ? g.max_pool2d(x, pool(l, {2, 2}, {}, tg::PaddingStyle::valid))
                  : g.max_pool2d(x, pool(l, {3, 3}, {1, 1}, tg::PaddingStyle::same));
    TensorData xv = rnd(x.shape(), 3);
    xv.ptr<float>()[5] = std::nanf("");
    check(g, y, {xv});
    auto yi = g.max_pool2d_with_indices(x, pool(l, {3, 3}, {1, 1}, tg::PaddingStyle::same)).first;
    check(g, yi, {xv});
  }
}

TEST(FastCpu2, BatchNorm) {
  for (int64_t axis : {-1, 1}) {
    SCOPED_TRACE(axis);
    tg::Graph g;
    tg::Shape s{4, 5, 6, 3};
    int64_t C = axis == -1 ? 3 : 5;
    auto x = g.placeholder(s, tg::f32), m = g.placeholder({C}, tg::f32), v = g.placeholder({C}, tg::f32),
         ga = g.placeholder({C}, tg::f32), be = g.placeholder({C}, tg::f32);
    auto y = g.batch_norm(x, m, v, ga, be, axis, 1e-3);
    auto yt = g.batch_norm_training(x, ga, be, axis, 1e-3);
    TensorData xv = rnd(s, 1, -2, 3), mv = rnd({C}, 2), vv = rnd({C}, 3, 0.1, 2), gv = rnd({C}, 4), bv = rnd({C}, 5);
    check(g, y, {xv, mv, vv, gv, bv});
    check(g, yt[0], {xv, gv, bv});
  }
  // the CNN benchmark's first BN, big enough to run in parallel
  tg::Graph g;
  auto x = g.placeholder({16, 28, 28, 32}, tg::f32), ga = g.placeholder({32}, tg::f32), be = g.placeholder({32}, tg::f32);
  auto yt = g.batch_norm_training(x, ga, be);
  check(g, yt[0], {rnd({16, 28, 28, 32}, 7, -1, 2), rnd({32}, 8), rnd({32}, 9)});
}

TEST(FastCpu2, LayerNorm) {
  for (int64_t axis : {-1, 1, 2}) {
    SCOPED_TRACE(axis);
    tg::Graph g;
    tg::Shape s{3, 4, 7};
    std::vector<int64_t> ps(s.dims().begin() + (axis < 0 ? 2 : axis), s.dims().end());
    auto x = g.placeholder(s, tg::f32), ga = g.placeholder(tg::Shape(ps), tg::f32), be = g.placeholder(tg::Shape(ps), tg::f32);
    auto y = g.layer_norm(x, ga, be, axis);
    check(g, y, {rnd(s, 1, -1, 2), rnd(tg::Shape(ps), 2), rnd(tg::Shape(ps), 3)});
  }
}

// Probabilities below the smallest normal float come out denormal, as the double reference
// rounds them, not flushed to zero; a logit far below the rest (an attention mask) gives 0.
TEST(FastCpu2, SoftmaxKeepsDenormalProbabilities) {
  std::vector<float> row(40, -3.f);
  row[0] = 0.f;
  row[1] = -100.f;  // e^-100 / sum ~ 3.6e-44: denormal
  row[2] = -1e30f;  // masked
  row[39] = 2.5f;
  tg::Graph g;
  auto x = g.placeholder({1, 40}, tg::f32);
  auto y = g.compile({{x, x.type()}}, {g.softmax(x, -1)}, {}, {.device = tg::Device::cpu()})
               .run({TensorData::from_floats({1, 40}, row)})[0];
  double s = 0;
  for (float v : row) s += std::exp(static_cast<double>(v) - 2.5);
  for (int i = 0; i < 40; ++i) {
    const float want = static_cast<float>(std::exp(static_cast<double>(row[static_cast<size_t>(i)]) - 2.5) / s);
    if (i == 1) {
      EXPECT_GT(y.at(i), 0.0);
      EXPECT_LT(y.at(i), 1.2e-38);
    }
    EXPECT_NEAR(y.at(i), want, 1e-6 * want + 3e-45) << i;  // a denormal step is 1.4e-45
  }
  EXPECT_EQ(y.at(2), 0.0);
}

TEST(FastCpu2, SoftmaxAndLogSoftmax) {
  for (int64_t axis : {-1, 0, 1}) {
    SCOPED_TRACE(axis);
    tg::Graph g;
    auto x = g.placeholder({3, 5, 4}, tg::f32);
    TensorData xv = rnd({3, 5, 4}, 1, -5, 5);
    check(g, g.softmax(x, axis), {xv});
    check(g, g.log_softmax(x, axis), {xv});
  }
  tg::Graph g;
  auto x = g.placeholder({128, 1000}, tg::f32);
  check(g, g.softmax(x), {rnd({128, 1000}, 2, -8, 8)});
  check(g, g.log_softmax(x), {rnd({128, 1000}, 3, -30, 30)});
  // Element by element (not against the row's largest value): the float exp stays within a
  // few ulps, down to probabilities of 1e-30.
  {
    tg::Graph s;
    auto z = s.placeholder({64, 300}, tg::f32);
    TensorData zv = rnd({64, 300}, 5, -70, 5);
    auto got = fast_all(s, s.softmax(z), {zv}), want = ref_all(s, s.softmax(z), {zv});
    double worst = 0;
    for (int64_t i = 0; i < zv.num_elements(); ++i)
      if (want[0].at(i) > 1e-30) worst = std::max(worst, std::fabs(got[0].at(i) / want[0].at(i) - 1));
    EXPECT_LT(worst, 2e-6);
  }
  // Rows with a NaN, +inf, all -inf: the contiguous float path hands them to the double line.
  tg::Graph h;
  auto z = h.placeholder({4, 6}, tg::f32);
  TensorData zv = rnd({4, 6}, 4, -2, 2);
  zv.set(2, NAN);
  zv.set(6 + 3, INFINITY);
  for (int j = 0; j < 6; ++j) zv.set(12 + j, -INFINITY);
  check(h, h.softmax(z), {zv});
  check(h, h.log_softmax(z), {zv});
}

TEST(FastCpu2, SoftmaxCrossEntropy) {
  for (int64_t axis : {-1, 0})
    for (auto red : {tg::LossReduction::mean, tg::LossReduction::sum, tg::LossReduction::none}) {
      SCOPED_TRACE(std::to_string(axis) + " " + std::to_string(static_cast<int>(red)));
      tg::Graph g;
      auto a = g.placeholder({6, 10}, tg::f32), b = g.placeholder({6, 10}, tg::f32);
      auto y = g.softmax_cross_entropy(a, b, axis, red);
      check(g, y, {rnd({6, 10}, 1, -3, 3), rnd({6, 10}, 2, 0, 1)});
    }
}

TEST(FastCpu2, Reductions) {
  tg::Shape s{4, 5, 6, 7};
  TensorData xv = rnd(s, 1, -1, 2);
  std::vector<std::vector<int64_t>> axes_list{{}, {0}, {3}, {-1}, {1, 2}, {0, 1, 2}, {1, 2, 3}, {0, 3}, {0, 2}, {1, 3}};
  for (const auto& axes : axes_list)
    for (bool keep : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(axes) + (keep ? " keep" : ""));
      tg::Graph g;
      auto x = g.placeholder(s, tg::f32);
      for (tg::Tensor y : {g.reduce_sum(x, axes, keep), g.reduce_mean(x, axes, keep), g.reduce_max(x, axes, keep),
                           g.reduce_min(x, axes, keep)})
        check(g, y, {xv}, 1e-6);
    }
  // large enough for the parallel paths: [K, R], [R, K] and [K1, R, K2]
  tg::Graph g;
  tg::Shape b{64, 14, 14, 64};
  auto x = g.placeholder(b, tg::f32);
  TensorData bv = rnd(b, 2, -1, 2);
  for (const auto& axes : std::vector<std::vector<int64_t>>{{3}, {0, 1, 2}, {1, 2}, {}, {0, 3}, {0, 2}})
    for (tg::Tensor y : {g.reduce_sum(x, axes), g.reduce_mean(x, axes, true), g.reduce_max(x, axes)}) check(g, y, {bv}, 1e-6);
}

TEST(FastCpu2, ReductionsDeclineOtherDtypes) {
  tg::Graph g;
  auto x = g.placeholder({3, 4}, tg::i32);
  EXPECT_TRUE(declines(g, g.reduce_sum(x, {1}), {TensorData::uniform({3, 4}, -9, 9, tg::i32, 1)}));
}

TEST(FastCpu2, ReduceAnyAllOfBool) {
  for (double density : {0.002, 0.5, 0.998}) {  // mostly false, mixed, mostly true
    SCOPED_TRACE(density);
    tg::Graph g;
    tg::Shape s{2, 12, 16, 17};
    auto x = g.placeholder(s, tg::boolean);
    TensorData u = rnd(s, 7, 0, 1), xv(s, tg::boolean);
    for (int64_t i = 0; i < xv.num_elements(); ++i) xv.set(i, u.at(i) < density);
    for (const auto& axes : std::vector<std::vector<int64_t>>{{3}, {-1}, {0}, {1, 3}, {}, {0, 1, 2, 3}})
      for (bool keep : {false, true}) {
        check(g, g.reduce_any(x, axes, keep), {xv});
        check(g, g.reduce_all(x, axes, keep), {xv});
      }
  }
}

TEST(FastCpu2, ReduceMaxPropagatesNaN) {
  tg::Graph g;
  auto x = g.placeholder({3, 4}, tg::f32);
  TensorData xv = rnd({3, 4}, 1);
  xv.ptr<float>()[5] = std::nanf("");
  check(g, g.reduce_max(x, {1}), {xv});
  check(g, g.reduce_min(x, {0}), {xv});
}

TEST(FastCpu2, SumToLikeAndBroadcasts) {
  tg::Graph g;
  auto x = g.placeholder({4, 5, 6}, tg::f32), l1 = g.placeholder({5, 1}, tg::f32), l2 = g.placeholder({1, 5, 6}, tg::f32);
  auto v = g.placeholder({5, 1}, tg::f32);
  TensorData xv = rnd({4, 5, 6}, 1), l1v = rnd({5, 1}, 2), l2v = rnd({1, 5, 6}, 3), vv = rnd({5, 1}, 4);
  check(g, g.sum_to_like(x, l1), {xv, l1v}, 1e-6);
  check(g, g.sum_to_like(x, l2), {xv, l2v}, 1e-6);
  check(g, g.broadcast_to(v, {3, 5, 7}), {vv});
  check(g, g.broadcast_like(v, x), {vv, xv});
  auto s = g.placeholder({}, tg::f32);
  check(g, g.broadcast_to(s, {2, 3}), {rnd({}, 5)});
  check(g, g.broadcast_to(s, {16, 28, 28, 32}), {rnd({}, 6)});  // parallel fill
  auto c = g.placeholder({1, 1, 1, 32}, tg::f32), r = g.placeholder({16, 1, 28, 1}, tg::f32);
  check(g, g.broadcast_to(c, {16, 28, 28, 32}), {rnd({1, 1, 1, 32}, 7)});
  check(g, g.broadcast_to(r, {16, 28, 28, 32}), {rnd({16, 1, 28, 1}, 8)});
}

TEST(FastCpu2, ReshapeTransposeConcat) {
  tg::Graph g;
  auto x = g.placeholder({2, 3, 4, 5}, tg::f32);
  TensorData xv = rnd({2, 3, 4, 5}, 1);
  check(g, g.reshape(x, {6, -1}), {xv});
  check(g, g.transpose(x, {0, 3, 1, 2}), {xv});
  check(g, g.transpose(x, {3, 2, 1, 0}), {xv});
  check(g, g.transpose(x, {1, 0, 2, 3}), {xv});
  auto y = g.placeholder({2, 1, 4, 5}, tg::f32), z = g.placeholder({2, 3, 4, 2}, tg::f32);
  TensorData yv = rnd({2, 1, 4, 5}, 2), zv = rnd({2, 3, 4, 2}, 3);
  check(g, g.concat({x, y, x}, 1), {xv, yv, xv});
  check(g, g.concat({x, z}, -1), {xv, zv});
  check(g, g.concat({x, x}, 0), {xv, xv});
  auto i = g.placeholder({3, 4}, tg::i32);
  TensorData iv = TensorData::uniform({3, 4}, -100, 100, tg::i32, 4);
  check(g, g.transpose(i, {1, 0}), {iv});
}

TEST(FastCpu2, SelectCastCompareRsqrt) {
  tg::Graph g;
  auto a = g.placeholder({4, 6}, tg::f32), b = g.placeholder({4, 6}, tg::f32), c = g.placeholder({4, 6}, tg::boolean);
  TensorData av = rnd({4, 6}, 1, -3, 3), bv = rnd({4, 6}, 2, -3, 3);
  av.ptr<float>()[3] = bv.ptr<float>()[3];
  av.ptr<float>()[4] = 3e9f;
  av.ptr<float>()[5] = std::nanf("");
  TensorData cv(tg::Shape{4, 6}, tg::boolean);
  for (int64_t k = 0; k < 24; ++k) cv.ptr<uint8_t>()[k] = (k * 7) % 3 == 0;
  check(g, g.select(c, a, b), {cv, av, bv});
  auto s = g.placeholder({6}, tg::f32);
  check(g, g.select(c, a, s), {cv, av, rnd({6}, 3)});
  check(g, g.cast(a, tg::i32), {av});
  check(g, g.cast(a, tg::boolean), {av});
  check(g, g.cast(c, tg::f32), {cv});
  auto i = g.placeholder({4, 6}, tg::i32);
  check(g, g.cast(i, tg::f32), {TensorData::uniform({4, 6}, -1e8, 1e8, tg::i32, 5)});
  for (tg::Tensor t : {g.greater(a, b), g.greater_equal(a, b), g.less(a, b), g.less_equal(a, b)}) check(g, t, {av, bv});
  check(g, g.rsqrt(b), {rnd({4, 6}, 6, 0.01, 4)});
}

TEST(FastCpu2, ConcurrentRunsAgree) {
  tg::Graph g;
  auto dy = g.placeholder({2, 4, 4, 8}, tg::f32), x = g.placeholder({2, 8, 8, 3}, tg::f32);
  auto dw = g.conv2d_weight_grad(dy, x, {3, 3, 3, 8}, conv(tg::Layout::nhwc, tg::Layout::hwio, tg::PaddingStyle::same, {2, 2}));
  std::vector<TensorData> in{rnd({2, 4, 4, 8}, 1), rnd({2, 8, 8, 3}, 2)};
  TensorData want = ref(g, dw, in);
  for (const TensorData& r : fasttest::concurrent_fast_eval(g.impl(), node_of(g, dw), in)) expect_close(r, want, 1e-4);
}

// tile as one strided copy (every dtype, a zero multiple, rank 1 to 4) equals the reference:
// Keras's mean gradient tiles over the reduced axes, which had run element by element.
TEST(FastCpu2, Tile) {
  struct Case {
    tg::Shape x;
    std::vector<int64_t> reps;
    tg::DType t;
  };
  for (const Case& c : {Case{{8, 1, 1, 32}, {1, 3, 3, 1}, tg::f32}, Case{{5}, {4}, tg::f32},
                        Case{{2, 3}, {2, 2}, tg::DType::i64}, Case{{3, 2, 4}, {1, 0, 2}, tg::f32},
                        Case{{2, 1, 3}, {2, 5, 1}, tg::DType::f16}}) {
    tg::Graph g;
    tg::Tensor x = g.placeholder(c.x, c.t, "x");
    tg::Tensor y = g.tile(x, c.reps);
    tg::TensorData in = tg::TensorData::uniform(c.x, -3, 3, c.t, 11);
    std::vector<tg::TensorData> out;
    ASSERT_TRUE(tg::detail::cpu_fast_eval(g.impl(), g.impl().nodes[static_cast<size_t>(y.op().id())], {in}, out));
    tg::TensorData want = tg::detail::reference_eval(g.impl(), g.impl().nodes[static_cast<size_t>(y.op().id())], {in}).at(0);
    ASSERT_EQ(out.at(0).shape().dims(), want.shape().dims());
    EXPECT_EQ(out[0].to_vector(), want.to_vector());
  }
}
