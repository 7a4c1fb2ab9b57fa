// The fast CPU path (oneDNN matmul / conv2d, OpenMP elementwise loops) against the reference
// interpreter: same values within f32 tolerances, same shapes, and a refusal (so the caller
// falls back to the reference) for everything it does not cover.
#include <gtest/gtest.h>

#include "fast_test_util.h"
#include "test_util.h"

#include <cmath>
#include <thread>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed_weights.h"
#include "backends/cpu/reference.h"
#include "tgraph/tgraph.h"

using tg::TensorData;

using fasttest::expect_close;
using fasttest::rnd;

namespace {

const tg::detail::Node& node_of(const tg::Graph& g, tg::Tensor t) {
  return g.impl().nodes[static_cast<size_t>(t.op().id())];
}

// Runs the fast kernel of t's node; fails the test when it declines.
TensorData fast(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  std::vector<TensorData> out;
  EXPECT_TRUE(tg::detail::cpu_fast_eval(g.impl(), node_of(g, t), in, out)) << "fast path declined";
  return out.empty() ? TensorData() : out[0];
}

bool declines(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  std::vector<TensorData> out;
  return !tg::detail::cpu_fast_eval(g.impl(), node_of(g, t), in, out) && out.empty();
}

TensorData ref(const tg::Graph& g, tg::Tensor t, const std::vector<TensorData>& in) {
  return tg::detail::reference_eval(g.impl(), node_of(g, t), in).at(0);
}



// matmul of a [sa] and b [sb] with transposes, fast vs reference.
void check_matmul(tg::Shape sa, tg::Shape sb, bool ta, bool tb, uint64_t seed) {
  tg::Graph g;
  auto a = g.placeholder(sa, tg::f32), b = g.placeholder(sb, tg::f32);
  auto y = g.matmul(a, b, ta, tb);
  std::vector<TensorData> in{rnd(sa, seed), rnd(sb, seed + 1)};
  expect_close(fast(g, y, in), ref(g, y, in), 1e-4);
}

}  // namespace

TEST(FastCpu, MatmulPlain) {
  check_matmul({5, 7}, {7, 3}, false, false, 1);
  check_matmul({64, 96}, {96, 80}, false, false, 2);
  check_matmul({1, 1}, {1, 1}, false, false, 3);
}

TEST(FastCpu, MatmulTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::to_string(ta) + std::to_string(tb));
      tg::Shape sa = ta ? tg::Shape{3, 9, 6} : tg::Shape{3, 6, 9};
      tg::Shape sb = tb ? tg::Shape{3, 5, 9} : tg::Shape{3, 9, 5};
      check_matmul(sa, sb, ta, tb, 10);
    }
}

TEST(FastCpu, MatmulBatchBroadcast) {
  check_matmul({2, 1, 3, 4}, {3, 4, 5}, false, false, 20);  // ranks differ, size-1 stretches
  check_matmul({4, 5}, {3, 5, 6}, false, false, 21);        // a shared by every batch
  check_matmul({2, 3, 4, 5}, {5, 6}, false, false, 22);     // b shared: a's batch folds into its rows
  check_matmul({2, 3, 4, 5}, {6, 5}, false, true, 24);      // the same, b transposed
  check_matmul({2, 3, 5, 4}, {5, 6}, true, false, 25);      // a transposed: batched, no fold
  check_matmul({2, 1, 5, 4}, {1, 3, 6, 5}, true, true, 23); // both stretch, transposed
}

// A constant 2-D B (a layer's weights) is packed into the primitive's layout once and kept:
// the same values as the reference, on the first call (packing) and later ones (the kept
// copy), transposed or not, under a batched A; and a placeholder B of the same shape (never
// packed) agrees too. Two constants with the same shape keep separate copies.
TEST(FastCpu, ConstantWeightsArePackedOnce) {
  for (bool tb : {false, true}) {
    tg::Graph g;
    auto a = g.placeholder({2, 48, 96}, tg::f32);
    TensorData wv = rnd(tb ? tg::Shape{80, 96} : tg::Shape{96, 80}, 40 + tb), wv2 = rnd(wv.shape(), 50 + tb);
    auto w = g.constant(wv), w2 = g.constant(wv2), wp = g.placeholder(wv.shape(), tg::f32);
    auto y = g.matmul(a, w, false, tb), y2 = g.matmul(a, w2, false, tb), yp = g.matmul(a, wp, false, tb);
    for (uint64_t seed : {41, 42}) {
      std::vector<TensorData> in{rnd({2, 48, 96}, seed), wv}, in2{in[0], wv2}, inp{in[0], wv};
      expect_close(fast(g, y, in), ref(g, y, in), 1e-4);
      expect_close(fast(g, y2, in2), ref(g, y2, in2), 1e-4);
      expect_close(fast(g, yp, inp), ref(g, y, in), 1e-4);
    }
  }
}

// One constant read by matmuls of several row counts (a dynamic executable's per-size copies
// are new primitives over the same weights) is packed once per layout, not per primitive; and
// the same bytes read as B and as B^T are two packed copies, each right.
TEST(FastCpu, PackedWeightsAreSharedByProblemsOfOtherRowCounts) {
  tg::Graph g;
  TensorData wv = rnd({96, 96}, 60);
  auto a = g.placeholder({-1, 96}, tg::f32);
  auto w = g.constant(wv);
  auto y = g.matmul(a, w), yt = g.matmul(a, w, false, true);
  std::vector<TensorData> first{rnd({48, 96}, 61), wv};
  const size_t before = tg::detail::fast::packed_weights_bytes();
  expect_close(fast(g, y, first), ref(g, y, first), 1e-4);
  const size_t once = tg::detail::fast::packed_weights_bytes();
  if (once == before) GTEST_SKIP() << "oneDNN keeps this B in its own layout here: nothing is packed";
  for (int64_t rows : {64, 40, 48}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    std::vector<TensorData> in{rnd({rows, 96}, 62 + rows), wv};
    expect_close(fast(g, y, in), ref(g, y, in), 1e-4);
    EXPECT_EQ(tg::detail::fast::packed_weights_bytes(), once);
  }
  std::vector<TensorData> in{rnd({32, 96}, 70), wv};
  expect_close(fast(g, yt, in), ref(g, yt, in), 1e-4);
  EXPECT_GT(tg::detail::fast::packed_weights_bytes(), once);  // B^T: the same bytes, another copy
  expect_close(fast(g, y, in), ref(g, y, in), 1e-4);
}

TEST(FastCpu, MatmulConcurrentRunsAgree) {
  tg::Graph g;
  auto a = g.placeholder({2, 33, 47}, tg::f32), b = g.placeholder({47, 29}, tg::f32);
  auto y = g.matmul(a, b);
  std::vector<TensorData> in{rnd({2, 33, 47}, 30), rnd({47, 29}, 31)};
  TensorData want = ref(g, y, in);
  for (const TensorData& r : fasttest::concurrent_fast_eval(g.impl(), node_of(g, y), in)) expect_close(r, want, 1e-4);
}

namespace {

// conv2d (or conv_transpose2d) of x [sx] by w [sw], fast vs reference.
void check_conv(tg::Shape sx, tg::Shape sw, const tg::ConvDesc& d, uint64_t seed, bool transposed = false) {
  tg::Graph g;
  auto x = g.placeholder(sx, tg::f32), w = g.placeholder(sw, tg::f32);
  auto y = transposed ? g.conv_transpose2d(x, w, d) : g.conv2d(x, w, d);
  std::vector<TensorData> in{rnd(sx, seed), rnd(sw, seed + 1)};
  TensorData want = ref(g, y, in);
  EXPECT_EQ(want.shape(), y.shape());
  expect_close(fast(g, y, in), want, 1e-4);
}

tg::ConvDesc conv(tg::Layout data, tg::Layout weights) {
  tg::ConvDesc d;
  d.data_layout = data;
  d.weights_layout = weights;
  return d;
}

}  // namespace

TEST(FastCpu, Conv2dLayouts) {
  using tg::Layout;
  check_conv({2, 7, 6, 5}, {3, 3, 5, 4}, conv(Layout::nhwc, Layout::hwio), 40);
  check_conv({2, 5, 7, 6}, {4, 5, 3, 3}, conv(Layout::nchw, Layout::oihw), 41);
  check_conv({2, 7, 6, 5}, {4, 5, 3, 2}, conv(Layout::nhwc, Layout::oihw), 42);
  check_conv({2, 5, 7, 6}, {2, 3, 5, 4}, conv(Layout::nchw, Layout::hwio), 43);
}

// A transposed convolution runs as the data gradient of the convolution it transposes
// (oneDNN's backward-data); its values are the reference's in every layout, with stride,
// padding, output padding, groups and dilation; "same" padding is left to the reference.
TEST(FastCpu, ConvTransposeRunsAsTheDataGradient) {
  using tg::Layout;
  auto check = [](tg::Shape sx, tg::Shape sw, const tg::ConvDesc& d, uint64_t seed) {
    check_conv(sx, sw, d, seed, /*transposed=*/true);
  };
  check({2, 5, 4, 6}, {3, 3, 4, 6}, conv(Layout::nhwc, Layout::hwio), 60);  // [kh, kw, C_out, C_in]
  auto d = conv(Layout::nchw, Layout::oihw);  // Mask R-CNN's mask head: 2x2, stride 2
  d.stride = {2, 2};
  check({3, 8, 7, 7}, {8, 6, 2, 2}, d, 61);
  d.explicit_padding = {1, 0, 1, 0};  // rows: 1 before, 0 after; columns the same
  d.output_padding = {1, 1};
  d.stride = {2, 3};
  check({2, 8, 5, 4}, {8, 6, 3, 3}, d, 62);
  d = conv(Layout::nhwc, Layout::hwio);
  d.groups = 2;
  d.dilation = {2, 1};
  d.stride = {2, 2};
  check({1, 5, 6, 4}, {3, 2, 3, 4}, d, 63);
  d = conv(Layout::nhwc, Layout::hwio);
  d.padding = tg::PaddingStyle::same;
  d.stride = {2, 2};
  tg::Graph g;
  auto x = g.placeholder({1, 4, 4, 3}, tg::f32), w = g.placeholder({3, 3, 2, 3}, tg::f32);
  EXPECT_TRUE(declines(g, g.conv_transpose2d(x, w, d), {rnd({1, 4, 4, 3}, 64), rnd({3, 3, 2, 3}, 65)}));
}

TEST(FastCpu, Conv2dGroupsAndDepthwise) {
  using tg::Layout;
  auto d = conv(Layout::nhwc, Layout::hwio);
  d.groups = 2;
  check_conv({2, 6, 6, 4}, {3, 3, 2, 6}, d, 50);
  d = conv(Layout::nchw, Layout::oihw);
  d.groups = 3;
  check_conv({1, 6, 5, 5}, {9, 2, 3, 3}, d, 51);
  d = conv(Layout::nhwc, Layout::hwio);  // depthwise, multiplier 2
  d.groups = 8;
  check_conv({2, 9, 9, 8}, {3, 3, 1, 16}, d, 52);
  d = conv(Layout::nchw, Layout::oihw);  // depthwise, multiplier 1
  d.groups = 8;
  check_conv({2, 8, 9, 9}, {8, 1, 3, 3}, d, 53);
}

TEST(FastCpu, Conv2dStrideDilationPadding) {
  using tg::Layout;
  using tg::PaddingStyle;
  auto d = conv(Layout::nhwc, Layout::hwio);
  d.stride = {2, 2};
  check_conv({2, 9, 8, 3}, {3, 3, 3, 4}, d, 60);  // valid (explicit 0), stride 2
  d = conv(Layout::nhwc, Layout::hwio);
  d.dilation = {2, 2};
  check_conv({1, 11, 10, 3}, {3, 3, 3, 5}, d, 61);
  d = conv(Layout::nhwc, Layout::hwio);
  d.padding = PaddingStyle::same;
  check_conv({2, 7, 8, 3}, {3, 3, 3, 4}, d, 62);
  d.stride = {2, 2};  // odd total padding: the extra unit goes after
  check_conv({2, 8, 9, 3}, {4, 4, 3, 4}, d, 63);
  d.padding = PaddingStyle::same_lower;  // ... or before
  check_conv({2, 8, 9, 3}, {4, 4, 3, 4}, d, 64);
  d = conv(Layout::nchw, Layout::oihw);
  d.padding = PaddingStyle::same;
  d.dilation = {2, 1};
  d.stride = {1, 2};
  check_conv({1, 3, 9, 10}, {4, 3, 3, 3}, d, 65);
  d = conv(Layout::nhwc, Layout::hwio);
  d.padding = PaddingStyle::explicit_;
  d.explicit_padding = {1, 2, 0, 1};  // asymmetric
  d.stride = {2, 1};
  check_conv({2, 7, 6, 3}, {3, 2, 3, 4}, d, 66);
  d = conv(Layout::nhwc, Layout::hwio);
  d.padding = PaddingStyle::valid;
  check_conv({1, 5, 5, 64}, {1, 1, 64, 32}, d, 67);  // 1x1
  d = conv(Layout::nhwc, Layout::hwio);
  d.padding = PaddingStyle::same;  // stride beyond the window: no padding at all
  d.stride = {3, 3};
  check_conv({1, 6, 7, 3}, {1, 1, 3, 2}, d, 71);
  d = conv(Layout::nchw, Layout::oihw);  // 1x1 on nchw: run in place, no reorders
  check_conv({2, 16, 5, 6}, {8, 16, 1, 1}, d, 68);
  d.groups = 4;
  check_conv({2, 16, 5, 6}, {8, 4, 1, 1}, d, 69);
  d = conv(Layout::nchw, Layout::hwio);
  check_conv({2, 16, 5, 6}, {1, 1, 16, 8}, d, 70);
}

namespace {

// One elementwise op, fast vs reference: exact for ops rounded once in f32, close otherwise.
template <class Make>
void check_elementwise(Make make, int arity, double rtol, int64_t size = 3 * 5 * 7) {
  tg::Graph g;
  tg::Shape s = size == 105 ? tg::Shape{3, 5, 7} : tg::Shape{size};
  auto a = g.placeholder(s, tg::f32), b = g.placeholder(s, tg::f32);
  tg::Tensor y = arity == 1 ? make(g, a, a) : make(g, a, b);
  TensorData ta = TensorData::uniform(s, -4.0, 4.0, tg::f32, 70), tb = rnd(s, 71);
  // A few special values: NaN in either operand, both, infinities, signed zeros.
  float specials[][2] = {{NAN, 1.f}, {1.f, NAN}, {NAN, NAN}, {INFINITY, 2.f}, {-INFINITY, -2.f},
                         {-0.f, 0.f}, {0.f, -0.f}, {-30.f, 3.f}, {30.f, -3.f}, {1e-30f, 1e30f}};
  for (int i = 0; i < 10; ++i) {
    ta.ptr<float>()[i] = specials[i][0];
    tb.ptr<float>()[i] = specials[i][1];
  }
  std::vector<TensorData> in{ta};
  if (arity == 2) in.push_back(tb);
  TensorData want = ref(g, y, in), got = fast(g, y, in);
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double gv = got.at(i), wv = want.at(i);
    if (std::isnan(wv)) EXPECT_TRUE(std::isnan(gv)) << "at " << i << ": " << gv;
    else if (rtol == 0 || std::isinf(wv)) EXPECT_EQ(gv, wv) << "at " << i;
    else EXPECT_NEAR(gv, wv, rtol * std::max(1.0, std::fabs(wv))) << "at " << i;
  }
}

}  // namespace

TEST(FastCpu, Conv2dConcurrentRunsOfOneExecutableAgree) {
  tg::Graph g;
  auto x = g.placeholder({2, 9, 9, 8}, tg::f32, "x"), w = g.placeholder({3, 3, 8, 16}, tg::f32, "w");
  tg::ConvDesc d;
  d.padding = tg::PaddingStyle::same;
  d.stride = {2, 2};
  auto y = g.conv2d(x, w, d);
  tg::Executable exe = g.compile({{x, x.type()}, {w, w.type()}}, {y}, {}, {.device = tg::Device::cpu()});
  std::vector<TensorData> in{rnd({2, 9, 9, 8}, 100), rnd({3, 3, 8, 16}, 101)};
  TensorData want = ref(g, y, in);
  std::vector<TensorData> got(4);
  std::vector<std::thread> ts;
  for (size_t t = 0; t < got.size(); ++t)
    ts.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) got[t] = exe.run(in).at(0);
    });
  for (auto& t : ts) t.join();
  for (const TensorData& r : got) expect_close(r, want, 1e-4);
}

TEST(FastCpu, ElementwiseBinaryExact) {
  using G = tg::Graph;
  using T = tg::Tensor;
  for (int64_t size : {105, 1 << 17}) {  // inline and OpenMP-parallel
    check_elementwise([](G& g, T a, T b) { return g.add(a, b); }, 2, 0, size);
    check_elementwise([](G& g, T a, T b) { return g.sub(a, b); }, 2, 0, size);
    check_elementwise([](G& g, T a, T b) { return g.mul(a, b); }, 2, 0, size);
    check_elementwise([](G& g, T a, T b) { return g.div(a, b); }, 2, 0, size);
    check_elementwise([](G& g, T a, T b) { return g.maximum(a, b); }, 2, 0, size);
    check_elementwise([](G& g, T a, T b) { return g.minimum(a, b); }, 2, 0, size);
  }
}

TEST(FastCpu, ElementwiseUnary) {
  using G = tg::Graph;
  using T = tg::Tensor;
  for (int64_t size : {105, 1 << 17}) {
    check_elementwise([](G& g, T a, T) { return g.relu(a); }, 1, 0, size);
    check_elementwise([](G& g, T a, T) { return g.neg(a); }, 1, 0, size);
    check_elementwise([](G& g, T a, T) { return g.abs(a); }, 1, 0, size);
    check_elementwise([](G& g, T a, T) { return g.square(a); }, 1, 0, size);
    check_elementwise([](G& g, T a, T) { return g.sqrt(a); }, 1, 0, size);
    check_elementwise([](G& g, T a, T) { return g.exp(a); }, 1, 1e-7, size);
    check_elementwise([](G& g, T a, T) { return g.tanh(a); }, 1, 1e-7, size);
    check_elementwise([](G& g, T a, T) { return g.sigmoid(a); }, 1, 1e-7, size);
    check_elementwise([](G& g, T a, T) { return g.gelu(a); }, 1, 1e-7, size);
    check_elementwise([](G& g, T a, T) { return g.silu(a); }, 1, 1e-7, size);
  }
}

// strided_slice by strided copies, any dtype: ranges, negative strides and indices, masks,
// squeezed dims, dims past the description, an empty result — the reference's values exactly.
TEST(FastCpu, StridedSliceMatchesReference) {
  struct Case {
    tg::Shape x;
    tg::SliceDesc d;
  };
  const std::vector<Case> cases = {
      {{5, 7, 6}, slice_desc({1, 0, 2}, {4, 7, 6}, {1, 2, 1})},
      {{5, 7, 6}, slice_desc({4, -1}, {0, -8}, {-1, -2})},
      {{5, 7, 6}, slice_desc({0, 3}, {0, 0}, {1, 1}, 1, 3)},          // x[:, 3:]
      {{5, 7}, slice_desc({2}, {3}, {1}, 0, 0, 1)},                  // x[2]
      {{8, 6, 4}, slice_desc({0, 0}, {8, 1}, {1, 1}, 0, 0, 2)},       // x[:, 0] (BERT's pooler)
      {{4, 3, 5}, slice_desc({1}, {3}, {1})},                        // later dims whole
      {{4, 3, 5}, slice_desc({3, 0}, {1, 3}, {1, 1})},                 // empty
      {{2, 3, 4, 5}, slice_desc({0, 0, 0, 4}, {2, 3, 4, 0}, {1, 1, 1, -1}, 0, 8)},  // last dim reversed
      {{64, 300}, slice_desc({0, 10}, {64, 290}, {3, 1})},
  };
  uint64_t seed = 300;
  for (const Case& c : cases)
    for (tg::DType dt : {tg::f32, tg::i32, tg::f16}) {
      tg::Graph g;
      auto x = g.placeholder(c.x, dt);
      auto y = g.strided_slice(x, c.d);
      TensorData in = dt == tg::f32 ? rnd(c.x, seed++) : dt == tg::i32 ? TensorData::uniform(c.x, -100, 100, tg::f32, seed++).cast(tg::i32) : rnd(c.x, seed++).cast(tg::f16);
      const TensorData got = fast(g, y, {in}), want = ref(g, y, {in});
      ASSERT_EQ(got.shape(), want.shape()) << c.x.str();
      EXPECT_EQ(got.dtype(), want.dtype());
      for (int64_t i = 0; i < want.num_elements(); ++i) EXPECT_EQ(got.at(i), want.at(i)) << c.x.str() << " at " << i;
    }
}

TEST(FastCpu, UnsupportedCasesFallBack) {
  tg::Graph g;
  // broadcasting elementwise
  auto a = g.placeholder({3, 4}, tg::f32), v = g.placeholder({4}, tg::f32);
  auto y = g.add(a, v);
  std::vector<TensorData> in{rnd({3, 4}, 80), rnd({4}, 81)};
  EXPECT_TRUE(declines(g, y, in));
  expect_close(tg::detail::cpu_eval(g.impl(), node_of(g, y), in).at(0), ref(g, y, in), 0);
  // f64 and integer dtypes
  auto d = g.placeholder({3}, tg::f64);
  EXPECT_TRUE(declines(g, g.exp(d), {TensorData::randn({3}, tg::f64, 1)}));
  auto i = g.placeholder({2, 2}, tg::i32);
  TensorData ti = TensorData::from_vector({2, 2}, tg::i32, {1, 2, 3, 4});
  auto mi = g.matmul(i, i);
  EXPECT_TRUE(declines(g, mi, {ti, ti}));
  expect_close(tg::detail::cpu_eval(g.impl(), node_of(g, mi), {ti, ti}).at(0), ref(g, mi, {ti, ti}), 0);
  // an op with no fast kernel
  EXPECT_TRUE(declines(g, g.reduce_prod(a), {in[0]}));
  // empty matmul operands
  auto e = g.placeholder({2, -1}, tg::f32), f = g.placeholder({-1, 3}, tg::f32);
  EXPECT_TRUE(declines(g, g.matmul(e, f), {TensorData::zeros({2, 0}), TensorData::zeros({0, 3})}));
  // padding as wide as the window (windows of only padding): left to the reference
  tg::ConvDesc wide;
  wide.explicit_padding = {2, 2, 0, 0};
  auto xw = g.placeholder({1, 4, 4, 2}, tg::f32), ww = g.placeholder({2, 2, 2, 3}, tg::f32);
  EXPECT_TRUE(declines(g, g.conv2d(xw, ww, wide), {rnd({1, 4, 4, 2}, 84), rnd({2, 2, 2, 3}, 85)}));
  // conv3d and conv2d in f64
  auto x3 = g.placeholder({1, 4, 4, 4, 2}, tg::f32), w3 = g.placeholder({2, 2, 2, 2, 3}, tg::f32);
  EXPECT_TRUE(declines(g, g.conv3d(x3, w3), {rnd({1, 4, 4, 4, 2}, 82), rnd({2, 2, 2, 2, 3}, 83)}));
  auto x2 = g.placeholder({1, 4, 4, 2}, tg::f64), w2 = g.placeholder({2, 2, 2, 3}, tg::f64);
  EXPECT_TRUE(declines(g, g.conv2d(x2, w2),
                       {TensorData::randn({1, 4, 4, 2}, tg::f64, 2), TensorData::randn({2, 2, 2, 3}, tg::f64, 3)}));
}

TEST(FastCpu, CompiledGraphMatchesReference) {
  tg::Graph g;
  auto x = g.placeholder({2, 8, 8, 3}, tg::f32, "x");
  auto w = g.placeholder({3, 3, 3, 4}, tg::f32, "w");
  auto m = g.placeholder({4, 5}, tg::f32, "m");
  tg::ConvDesc d;
  d.padding = tg::PaddingStyle::same;
  auto c = g.conv2d(x, w, d);
  auto h = g.relu(c);
  auto mm = g.matmul(h, m);
  auto y = g.sigmoid(mm);
  tg::Executable exe = g.compile({{x, x.type()}, {w, w.type()}, {m, m.type()}}, {y}, {},
                                 {.device = tg::Device::cpu()});
  std::vector<TensorData> in{rnd({2, 8, 8, 3}, 90), rnd({3, 3, 3, 4}, 91), rnd({4, 5}, 92)};
  TensorData got = exe.run(in).at(0);
  TensorData want = ref(g, y, {ref(g, mm, {ref(g, h, {ref(g, c, {in[0], in[1]})}), in[2]})});
  expect_close(got, want, 1e-4);
}

// Constant conv weights are reordered once and kept (fast_conv.cpp): two convolutions of one
// shape with different constant weights, run twice, equal the same convolutions with the
// weights fed as placeholders (reordered per call), NCHW and NHWC.
TEST(FastCpu, ConstantConvWeightsPackedOnce) {
  for (tg::Layout l : {tg::Layout::nchw, tg::Layout::nhwc}) {
    tg::ConvDesc d;
    d.data_layout = l;
    d.weights_layout = l == tg::Layout::nchw ? tg::Layout::oihw : tg::Layout::hwio;
    d.padding = tg::PaddingStyle::same;
    const tg::Shape xs = l == tg::Layout::nchw ? tg::Shape{2, 16, 9, 9} : tg::Shape{2, 9, 9, 16};
    const tg::Shape ws = l == tg::Layout::nchw ? tg::Shape{16, 16, 3, 3} : tg::Shape{3, 3, 16, 16};
    TensorData w1 = rnd(ws, 11), w2 = rnd(ws, 12), xv = rnd(xs, 13);
    tg::Graph gc, gp;
    auto xc = gc.placeholder(xs, tg::f32);
    auto yc = gc.conv2d(gc.conv2d(xc, gc.constant(w1), d), gc.constant(w2), d);
    auto xp = gp.placeholder(xs, tg::f32), a = gp.placeholder(ws, tg::f32), b = gp.placeholder(ws, tg::f32);
    auto yp = gp.conv2d(gp.conv2d(xp, a, d), b, d);
    tg::Executable ec = gc.compile({{xc, xc.type()}}, {yc}), ep = gp.compile({{xp, xp.type()}, {a, a.type()}, {b, b.type()}}, {yp});
    TensorData want = ep.run({xv, w1, w2})[0];
    for (int run = 0; run < 2; ++run) expect_close(ec.run({xv})[0], want, 1e-5);
    // A second executable with other constants of the same shapes gets its own packing.
    tg::Graph g2;
    auto x2 = g2.placeholder(xs, tg::f32);
    auto y2 = g2.conv2d(g2.conv2d(x2, g2.constant(w2), d), g2.constant(w1), d);
    expect_close(g2.compile({{x2, x2.type()}}, {y2}).run({xv})[0], ep.run({xv, w2, w1})[0], 1e-5);
  }
}

// 3x3 stride-1 convolutions with enough channels run oneDNN's Winograd algorithm (with the
// bias and a ReLU as post-ops): within f32 tolerance of the reference, and not bit-for-bit the
// direct algorithm's result (TGRAPH_CPU_NO_WINOGRAD=1), which shows Winograd ran.
TEST(FastCpu, Conv2dThreeByThreeWinograd) {
  using tg::Layout;
  for (bool nhwc : {true, false}) {
    const int64_t C = 32, H = 10;
    tg::ConvDesc d = nhwc ? conv(Layout::nhwc, Layout::hwio) : conv(Layout::nchw, Layout::oihw);
    d.padding = tg::PaddingStyle::same;
    const tg::Shape sx = nhwc ? tg::Shape{1, H, H, C} : tg::Shape{1, C, H, H};
    const tg::Shape sw = nhwc ? tg::Shape{3, 3, C, C} : tg::Shape{C, C, 3, 3};
    tg::Graph g;
    TensorData wv = rnd(sw, 61);
    // Winograd for constant weights (transformed once); fed weights (a training step's, new
    // each call) run direct: its weight transform costs more than it saves per call.
    auto x = g.placeholder(sx, tg::f32), w = g.constant(wv), wf = g.placeholder(sw, tg::f32);
    auto y = g.conv2d(x, w, d), yf = g.conv2d(x, wf, d);
    std::vector<TensorData> in{rnd(sx, 60), wv};
    TensorData want = ref(g, y, in);
    TensorData wino = fast(g, y, in);
    TensorData fed = fast(g, yf, in);
    expect_close(wino, want, 1e-5);
    TensorData direct;
    {
      WithSwitches off({{"TGRAPH_CPU_NO_WINOGRAD", "1"}});
      direct = fast(g, y, in);
    }
    expect_close(direct, want, 1e-5);
    bool differ = false;
    for (int64_t i = 0; i < want.num_elements() && !differ; ++i) differ = wino.at(i) != direct.at(i);
    EXPECT_TRUE(differ) << (nhwc ? "nhwc" : "nchw") << ": the same bits as direct; Winograd did not run?";
    EXPECT_EQ(fed.to_vector(), direct.to_vector()) << "fed weights went through Winograd";

    // With the bias (the primitive's own) and a ReLU as post-ops.
    TensorData bias = rnd(nhwc ? tg::Shape{C} : tg::Shape{C, 1, 1}, 62);  // one per channel
    std::vector<tg::detail::fast::PostOp> post(2);
    post[0].kind = tg::detail::OpKind::Add;
    post[0].operand = &bias;
    post[1].kind = tg::detail::OpKind::Relu;
    std::vector<TensorData> out;
    ASSERT_TRUE(tg::detail::fast::conv2d(node_of(g, y), in, out, &g.impl(), &post));
    TensorData expect = want.clone();
    for (int64_t i = 0; i < expect.num_elements(); ++i) {
      const int64_t c = nhwc ? i % C : (i / (H * H)) % C;
      expect.set(i, std::max(0.0, want.at(i) + bias.at(c)));
    }
    expect_close(out.at(0), expect, 1e-5);
  }
}
