// Reference interpreter: stencil reductions, boundary modes, padding styles, 4-D windows.
#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {

// A stencil along the last dim only: source [1,1,1,n], weights [1,1,1,k].
TensorData stencil_1d(const std::vector<double>& x, const std::vector<double>& w, tg::StencilDesc d) {
  int64_t n = static_cast<int64_t>(x.size()), k = static_cast<int64_t>(w.size());
  tg::Graph g;
  auto s = g.placeholder({1, 1, 1, n}, tg::f64), t = g.placeholder({1, 1, 1, k}, tg::f64);
  return eval(g, g.stencil(s, t, d), {TensorData::from_vector({1, 1, 1, n}, tg::f64, x),
                                      TensorData::from_vector({1, 1, 1, k}, tg::f64, w)});
}

tg::StencilDesc with(tg::Reduction r, tg::Boundary b, tg::PaddingStyle p = tg::PaddingStyle::same) {
  tg::StencilDesc d;
  d.reduction = r;
  d.boundary = b;
  d.padding_style = p;
  return d;
}

}  // namespace

TEST(RefStencil, SumZeroSamePadding) {
  expect_values(stencil_1d({1, 2, 3, 4, 5}, {1, 1, 1}, with(tg::Reduction::sum, tg::Boundary::zero)), {3, 6, 9, 12, 9});
}

TEST(RefStencil, BoundaryModes) {
  // out[i] = sum_t w[t] * x[i + t - 2]; digits of the weights expose which element each tap read.
  const std::vector<double> x = {1, 2, 3, 4}, w = {1, 10, 100, 1000, 10000};
  struct Case { tg::Boundary b; double first, last; };
  const Case cases[] = {{tg::Boundary::zero, 32100, 432},          {tg::Boundary::constant, 32177, 77432},
                        {tg::Boundary::clamp_to_edge, 32111, 44432}, {tg::Boundary::reflect, 32123, 23432},
                        {tg::Boundary::symmetric, 32112, 34432},     {tg::Boundary::periodic, 32143, 21432},
                        {tg::Boundary::anti_periodic, 32057, -20568}};
  for (const Case& c : cases) {
    tg::StencilDesc d = with(tg::Reduction::sum, c.b);
    d.padding_constant = 7;
    TensorData y = stencil_1d(x, w, d);
    ASSERT_EQ(y.num_elements(), 4);
    EXPECT_DOUBLE_EQ(y.at(0), c.first) << tg::detail::enum_name(c.b);
    EXPECT_DOUBLE_EQ(y.at(3), c.last) << tg::detail::enum_name(c.b);
  }
  // Anti-periodic flips the sign once per wrap: a wrap of two periods keeps it.
  expect_values(stencil_1d({3}, w, with(tg::Reduction::sum, tg::Boundary::anti_periodic)), {3 - 30 + 300 - 3000 + 30000});
  expect_values(stencil_1d({3}, w, with(tg::Reduction::sum, tg::Boundary::reflect)), {33333});
}

TEST(RefStencil, Reductions) {
  const std::vector<double> x = {3, 1, 4, 1, 5}, ones = {1, 1, 1};
  auto run = [&](tg::Reduction r, std::vector<double> w = {1, 1, 1}) {
    return stencil_1d(x, w, with(r, tg::Boundary::zero, tg::PaddingStyle::valid));
  };
  expect_values(run(tg::Reduction::max), {4, 4, 5});
  expect_values(run(tg::Reduction::min), {1, 1, 1});
  expect_values(run(tg::Reduction::product), {12, 4, 20});
  TensorData am = run(tg::Reduction::argmax);
  EXPECT_EQ(am.dtype(), tg::i32);
  expect_values(am, {2, 1, 2});
  expect_values(run(tg::Reduction::argmin), {1, 0, 1});  // the first minimum
  expect_values(run(tg::Reduction::max, {1, -1, 1}), {4, 1, 5});  // max of weighted values
  expect_values(run(tg::Reduction::min, {2, 1, 1}), {1, 1, 1});
  // Out-of-range taps read 0 under the zero boundary and take part in min / max.
  expect_values(stencil_1d({3, 1, 4}, ones, with(tg::Reduction::min, tg::Boundary::zero)), {0, 1, 0});
  expect_values(stencil_1d({3, 1, 4}, ones, with(tg::Reduction::argmax, tg::Boundary::clamp_to_edge)), {0, 2, 1});
}

TEST(RefStencil, FourDimWindowsWithLeadingDim) {
  tg::Graph g;
  auto s = g.placeholder({2, 1, 2, 4, 5}, tg::f64), w = g.placeholder({1, 2, 2, 2}, tg::f64);
  TensorData ts = TensorData::randn({2, 1, 2, 4, 5}, tg::f64, 1), tw = TensorData::randn({1, 2, 2, 2}, tg::f64, 2);
  tg::StencilDesc d = with(tg::Reduction::sum, tg::Boundary::zero, tg::PaddingStyle::valid);
  d.strides = {1, 1, 2, 1};
  d.dilation_rates = {1, 1, 1, 2};
  TensorData y = eval(g, g.stencil(s, w, d), {ts, tw});
  expect_shape(y, {2, 1, 1, 2, 3});
  for (int l = 0; l < 2; ++l)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 3; ++b) {
        double acc = 0;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j)
            for (int k = 0; k < 2; ++k) acc += ts.at(l * 40 + i * 20 + (2 * a + j) * 5 + b + 2 * k) * tw.at(i * 4 + j * 2 + k);
        EXPECT_NEAR(y.at(l * 6 + a * 3 + b), acc, 1e-12);
      }
  d.reduction = tg::Reduction::argmax;
  TensorData am = eval(g, g.stencil(s, w, d), {ts, tw});
  for (int l = 0; l < 2; ++l) {  // the flattened (row-major) index of the maximal weighted tap
    double best = -1e300;
    int64_t arg = -1;
    for (int t = 0; t < 8; ++t) {
      int i = t / 4, j = (t / 2) % 2, k = t % 2;
      double v = ts.at(l * 40 + i * 20 + j * 5 + 2 * k) * tw.at(t);
      if (v > best) best = v, arg = t;
    }
    EXPECT_EQ(am.at(l * 6), arg);
  }
}

TEST(RefStencil, ExplicitPaddingAndOffsets) {
  tg::StencilDesc d = with(tg::Reduction::sum, tg::Boundary::constant, tg::PaddingStyle::explicit_);
  d.padding_constant = -1;
  d.explicit_padding = {0, 0, 0, 0, 0, 0, 2, 1};
  expect_values(stencil_1d({1, 2, 3}, {1, 10}, d), {-11, 9, 21, 32, 3 - 10});
  d.padding_style = tg::PaddingStyle::explicit_offset;
  d.explicit_padding = {};
  d.offsets = {0, 0, 0, 1};
  expect_values(stencil_1d({1, 2, 3}, {1}, d), {2, 3, -1});
  d.padding_style = tg::PaddingStyle::same_lower;
  d.offsets = {};
  expect_values(stencil_1d({1, 2, 3, 4}, {1, 10}, d), {10 - 1, 21, 32, 43});
}
