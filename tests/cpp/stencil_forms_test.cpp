// The 2-D and 3-D stencil forms: equal to the 4-D op with unit leading window dims, hand-checked
// on a Laplacian, descriptors of the form's length, gradients, and errors that name the form.
#include <gtest/gtest.h>

#include "grad_check.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

TensorData run(Graph& g, const std::vector<Tensor>& feeds, Tensor y, const std::vector<TensorData>& in) {
  std::vector<std::pair<Tensor, TensorType>> f;
  for (const Tensor& t : feeds) f.emplace_back(t, t.type());
  return g.compile(f, {y}, {}, {.device = Device::cpu()}).run(in)[0];
}

void expect_equal(const TensorData& a, const TensorData& b) {
  ASSERT_EQ(a.type(), b.type());
  for (int64_t i = 0; i < a.num_elements(); ++i) ASSERT_EQ(a.at(i), b.at(i)) << i;
}

TEST(StencilForms, TwoDLaplacianByHand) {
  // 5-point Laplacian on a 3x4 ramp x[i][j] = i*i + j, zero boundary.
  Graph g;
  Tensor x = g.placeholder({3, 4}, f64), w = g.placeholder({3, 3}, f64);
  TensorData tx({3, 4}, f64);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) tx.set(i * 4 + j, i * i + j);
  TensorData tw = TensorData::from_vector({3, 3}, f64, {0, 1, 0, 1, -4, 1, 0, 1, 0});
  TensorData y = run(g, {x, w}, g.stencil_2d(x, w), {tx, tw});
  ASSERT_EQ(y.shape(), Shape({3, 4}));
  // interior (1,1): up 1, down 5, left 1, right 3, centre 2 -> 1+5+1+3-8 = 2
  EXPECT_EQ(y.at(1 * 4 + 1), 2.0);
  // corner (0,0): right 1, down 1 (others zero) -> 2 - 0 = 2
  EXPECT_EQ(y.at(0), 2.0);
}

TEST(StencilForms, MatchTheFourDOpWithWidenedDescriptors) {
  TensorData src2 = TensorData::uniform({2, 5, 9, 8}, -1, 1, f64, 1), w2 = TensorData::uniform({3, 2}, -1, 1, f64, 2);
  for (Reduction r : {Reduction::sum, Reduction::max, Reduction::argmax}) {
    StencilDesc d2;
    d2.reduction = r;
    d2.boundary = Boundary::reflect;
    d2.padding_style = PaddingStyle::explicit_;
    d2.strides = {2, 1};
    d2.dilation_rates = {1, 2};
    d2.explicit_padding = {1, 2, 0, 3};
    StencilDesc d4 = d2;
    d4.strides = {1, 1, 2, 1};
    d4.dilation_rates = {1, 1, 1, 2};
    d4.explicit_padding = {0, 0, 0, 0, 1, 2, 0, 3};
    Graph g;
    Tensor s = g.placeholder(src2.shape(), f64), w = g.placeholder(w2.shape(), f64);
    TensorData got = run(g, {s, w}, g.stencil_2d(s, w, d2), {src2, w2});
    Graph h;
    Tensor s4 = h.placeholder({2, 5, 1, 1, 9, 8}, f64), w4 = h.placeholder({1, 1, 3, 2}, f64);
    TensorData want = run(h, {s4, w4}, h.stencil(s4, w4, d4),
                          {src2.reshaped({2, 5, 1, 1, 9, 8}), w2.reshaped({1, 1, 3, 2})});
    ASSERT_EQ(want.shape().dims()[2], 1);
    expect_equal(got, want.reshaped(got.shape()));
  }
  // 3-D: a 7-point Laplacian on a batch of volumes, periodic boundary.
  TensorData src3 = TensorData::uniform({2, 4, 5, 6}, -1, 1, f64, 3);
  std::vector<double> lap(27, 0.0);
  for (int k : {4, 10, 12, 14, 16, 22}) lap[static_cast<size_t>(k)] = 1;
  lap[13] = -6;
  TensorData w3 = TensorData::from_vector({3, 3, 3}, f64, lap);
  StencilDesc d3;
  d3.boundary = Boundary::periodic;
  Graph g;
  Tensor s = g.placeholder(src3.shape(), f64), w = g.placeholder(w3.shape(), f64);
  TensorData got = run(g, {s, w}, g.stencil_3d(s, w, d3), {src3, w3});
  ASSERT_EQ(got.shape(), src3.shape());
  auto at = [&](int b, int z, int y, int x) {
    auto m = [](int v, int n) { return ((v % n) + n) % n; };
    return src3.at(((b * 4 + m(z, 4)) * 5 + m(y, 5)) * 6 + m(x, 6));
  };
  for (int b = 0; b < 2; ++b)
    for (int z = 0; z < 4; ++z)
      for (int y = 0; y < 5; ++y)
        for (int x = 0; x < 6; ++x) {
          double want = at(b, z - 1, y, x) + at(b, z + 1, y, x) + at(b, z, y - 1, x) + at(b, z, y + 1, x) +
                        at(b, z, y, x - 1) + at(b, z, y, x + 1) - 6 * at(b, z, y, x);
          ASSERT_NEAR(got.at(((b * 4 + z) * 5 + y) * 6 + x), want, 1e-12);
        }
}

TEST(StencilForms, GradientsFlowThroughTheForms) {
  using Ts = std::vector<Tensor>;
  StencilDesc d;
  d.boundary = Boundary::symmetric;
  gradcheck::check("stencil_2d", [&](Graph& g, const Ts& a) { return Ts{g.stencil_2d(a[0], a[1], d)}; },
                   {gradcheck::u({2, 4, 5}, -1, 1, 7), gradcheck::u({2, 3}, -1, 1, 8)});
  gradcheck::check("stencil_3d", [&](Graph& g, const Ts& a) { return Ts{g.stencil_3d(a[0], a[1], d)}; },
                   {gradcheck::u({3, 4, 3}, -1, 1, 9), gradcheck::u({2, 2, 2}, -1, 1, 10)});
}

TEST(StencilForms, ErrorsNameTheForm) {
  Graph g;
  Tensor v = g.placeholder({7}, f32), x = g.placeholder({4, 5}, f32), w = g.placeholder({3, 3}, f32);
  EXPECT_TG_ERROR(g.stencil_2d(v, w), "[stencil_2d] source must have rank >= 2");
  EXPECT_TG_ERROR(g.stencil_2d(x, g.placeholder({1, 3, 3}, f32)), "[stencil_2d] weights must have rank 2");
  StencilDesc d;
  d.strides = {1, 1, 1, 1};
  EXPECT_TG_ERROR(g.stencil_2d(x, w, d), "[stencil_2d] strides needs 2 values for the 2-D form, got 4");
  EXPECT_TG_ERROR(g.stencil_3d(x, g.placeholder({3, 3, 3}, f32)), "[stencil_3d] source must have rank >= 3");
}

}  // namespace
