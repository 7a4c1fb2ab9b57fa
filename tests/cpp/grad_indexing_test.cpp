// Gradients of shape ops, gather / scatter, sorting, scans and dropout against finite
// differences (f64).
#include "grad_check.h"
#include "test_util.h"

using namespace tg;
using gradcheck::check;
using gradcheck::u;

namespace {
using Ts = std::vector<Tensor>;

Tensor ints(Graph& g, Shape s, std::vector<double> v, DType t = i32) {
  return g.constant(TensorData::from_vector(std::move(s), t, std::move(v)));
}
}  // namespace

TEST(GradIndexing, SliceAndPad) {
  auto x = u({4, 5, 3}, -1, 1, 1);
  SliceDesc s{{1, -1, 0}, {4, 0, 2}, {2, -2, 1}, 0, 0, 0};
  check("strided_slice", [&](Graph& g, const Ts& a) { return Ts{g.strided_slice(a[0], s)}; }, {x});
  SliceDesc sq{{2, 1}, {3, 4}, {1, 1}, 0, 0, 1};  // squeezes dim 0
  check("strided_slice squeeze", [&](Graph& g, const Ts& a) { return Ts{g.strided_slice(a[0], sq)}; }, {x});
  check("slice dynamic", [](Graph& g, const Ts& a) { return Ts{g.slice(a[0], {1, 0, 1}, {3, -1, -1})}; }, {x}, 1e-5,
        1e-6, true);
  check("slice_update", [&](Graph& g, const Ts& a) { return Ts{g.slice_update(a[0], a[1], s)}; },
        {x, u({2, 2, 2}, -1, 1, 2)});
  check("slice_update squeeze", [&](Graph& g, const Ts& a) { return Ts{g.slice_update(a[0], a[1], sq)}; },
        {x, u({3, 3}, -1, 1, 3)});
  auto p = u({3, 4}, -1, 1, 4);
  for (PadMode m : {PadMode::constant, PadMode::edge, PadMode::reflect, PadMode::symmetric}) {
    check("pad", [&](Graph& g, const Ts& a) { return Ts{g.pad(a[0], {2, 0}, {1, 3}, m, 0.5)}; }, {p});
    check("pad one side", [&](Graph& g, const Ts& a) { return Ts{g.pad(a[0], {0, 1}, {2, 0}, m)}; }, {p});
  }
  check("pad constant dynamic", [](Graph& g, const Ts& a) { return Ts{g.pad(a[0], {1, 2}, {0, 1})}; }, {p}, 1e-5,
        1e-6, true);
}

TEST(GradIndexing, ShapeOps) {
  auto x = u({2, 3, 2}, -1, 1, 11);
  check("tile", [](Graph& g, const Ts& a) { return Ts{g.tile(a[0], {2, 1, 3})}; }, {x});
  check("reverse", [](Graph& g, const Ts& a) { return Ts{g.reverse(a[0], {0, 2})}; }, {x});
  auto img = u({1, 4, 6, 3}, -1, 1, 12);
  check("space_to_depth", [](Graph& g, const Ts& a) { return Ts{g.space_to_depth(a[0], 2)}; }, {img});
  check("depth_to_space nchw", [](Graph& g, const Ts& a) { return Ts{g.depth_to_space(a[0], 2, Layout::nchw)}; },
        {u({1, 8, 2, 3}, -1, 1, 13)});
  ResizeDesc up{{7, 5}, ResizeMode::nearest, CoordinateMode::half_pixel, NearestRounding::round_prefer_floor, Layout::nhwc};
  check("resize nearest up", [&](Graph& g, const Ts& a) { return Ts{g.resize(a[0], up)}; }, {img});
  ResizeDesc down{{3, 2}, ResizeMode::nearest, CoordinateMode::asymmetric, NearestRounding::floor, Layout::nchw};
  check("resize nearest down nchw", [&](Graph& g, const Ts& a) { return Ts{g.resize(a[0], down)}; },
        {u({2, 3, 4, 5}, -1, 1, 14)});
  check("one_hot (no gradient wrt indices)", [](Graph& g, const Ts& a) {
    Tensor oh = g.one_hot(ints(g, {3}, {0, 2, 1}), 3, -1, f64);
    return Ts{g.mul(oh, a[0])};
  }, {u({3, 3}, -1, 1, 15)});
  for (CoordinateMode cm : {CoordinateMode::half_pixel, CoordinateMode::align_corners, CoordinateMode::asymmetric}) {
    ResizeDesc bil{{7, 4}, ResizeMode::bilinear, cm, NearestRounding::round_prefer_floor, Layout::nhwc};
    check("resize bilinear", [&](Graph& g, const Ts& a) { return Ts{g.resize(a[0], bil)}; }, {img});
    bil.data_layout = Layout::nchw;
    bil.size = {2, 9};
    check("resize bilinear nchw", [&](Graph& g, const Ts& a) { return Ts{g.resize(a[0], bil)}; },
          {u({1, 2, 3, 4}, -1, 1, 16)});
  }
}

TEST(GradIndexing, Gather) {
  auto x = u({4, 3}, -1, 1, 21);
  check("gather repeated indices", [](Graph& g, const Ts& a) {
    return Ts{g.gather(a[0], ints(g, {2, 2}, {3, 0, 3, -1}))};
  }, {x});
  check("gather axis 1 batch_dims", [](Graph& g, const Ts& a) {
    return Ts{g.gather(a[0], ints(g, {4, 2}, {0, 2, 1, 1, 2, 0, 0, 0}, i64), 1, 1)};
  }, {x});
  check("gather_nd", [](Graph& g, const Ts& a) {
    return Ts{g.gather_nd(a[0], ints(g, {3, 2}, {0, 1, 3, 2, 0, 1}))};
  }, {x});
  check("gather_nd rows", [](Graph& g, const Ts& a) { return Ts{g.gather_nd(a[0], ints(g, {2, 1}, {2, 2}))}; }, {x});
  check("gather_along_axis", [](Graph& g, const Ts& a) {
    return Ts{g.gather_along_axis(a[0], ints(g, {2, 3}, {0, 3, 3, 1, 1, 2}), 0)};
  }, {x});
}

TEST(GradIndexing, Scatter) {
  auto x = u({4, 3}, -1, 1, 31);
  for (ScatterMode m : {ScatterMode::set, ScatterMode::add, ScatterMode::sub}) {
    check("scatter", [&](Graph& g, const Ts& a) { return Ts{g.scatter(a[0], ints(g, {2}, {2, 0}), a[1], 0, m)}; },
          {x, u({2, 3}, -1, 1, 32)});
    check("scatter duplicates", [&](Graph& g, const Ts& a) {
      return Ts{g.scatter(a[0], ints(g, {3}, {1, 3, 1}), a[1], 0, m)};
    }, {x, u({3, 3}, -1, 1, 33)});
    check("scatter_nd", [&](Graph& g, const Ts& a) {
      return Ts{g.scatter_nd(a[0], ints(g, {3, 2}, {0, 1, 3, 2, 0, 1}), a[1], m)};
    }, {x, u({3}, -1, 1, 34)});
    check("scatter_along_axis", [&](Graph& g, const Ts& a) {
      return Ts{g.scatter_along_axis(a[0], ints(g, {2, 2}, {2, 0, 1, 2}), a[1], 1, m)};
    }, {x, u({2, 2}, -1, 1, 35)});
  }
  // mul / div with updates away from 0; min / max on distinct values (no ties).
  auto xs = TensorData::from_vector({4, 3}, f64, {0.9, -0.3, 1.7, -1.2, 0.4, 2.2, 1.1, -0.8, 0.2, 0.6, -1.9, 1.4});
  auto us = TensorData::from_vector({3, 3}, f64, {1.3, -0.7, 0.5, -1.6, 0.8, 1.9, 0.7, 1.2, -0.6});
  for (ScatterMode m : {ScatterMode::mul, ScatterMode::div, ScatterMode::min, ScatterMode::max}) {
    check("scatter duplicates mul/div/min/max", [&](Graph& g, const Ts& a) {
      return Ts{g.scatter(a[0], ints(g, {3}, {1, 3, 1}), a[1], 0, m)};
    }, {xs, us});
    check("scatter_along_axis mul/div/min/max", [&](Graph& g, const Ts& a) {
      return Ts{g.scatter_along_axis(a[0], ints(g, {2, 2}, {2, 0, 1, 2}), a[1], 1, m)};
    }, {xs, u({2, 2}, 0.5, 1.5, 36)});
  }
}

TEST(GradIndexing, SortAndScans) {
  auto x = u({3, 5}, -2, 2, 41);  // continuous: no ties
  check("top_k", [](Graph& g, const Ts& a) {
    auto [v, i] = g.top_k(a[0], 2);
    return Ts{v, i};
  }, {x});
  check("top_k smallest axis 0", [](Graph& g, const Ts& a) { return Ts{g.top_k(a[0], 2, 0, false).first}; }, {x});
  check("sort", [](Graph& g, const Ts& a) { return Ts{g.sort(a[0])}; }, {x});
  check("sort descending axis 0", [](Graph& g, const Ts& a) { return Ts{g.sort(a[0], 0, true)}; }, {x});
  auto pos = u({3, 4}, 0.5, 1.5, 42);
  // An exclusive cummax / cummin starts from -inf / +inf; those entries are zeroed.
  auto finite = [](Graph& g, Tensor y) { return Ts{g.select(g.is_finite(y), y, g.scalar(0.0, f64))}; };
  for (bool excl : {false, true})
    for (bool rev : {false, true}) {
      check("cumprod", [&](Graph& g, const Ts& a) { return Ts{g.cumprod(a[0], 1, excl, rev)}; }, {pos});
      check("cummax", [&](Graph& g, const Ts& a) { return finite(g, g.cummax(a[0], 1, excl, rev)); }, {x});
      check("cummin", [&](Graph& g, const Ts& a) { return finite(g, g.cummin(a[0], -1, excl, rev)); }, {x});
      check("cummax axis 0", [&](Graph& g, const Ts& a) { return finite(g, g.cummax(a[0], 0, excl, rev)); }, {x});
    }
}

TEST(GradIndexing, Dropout) {
  check("dropout", [](Graph& g, const Ts& a) {
    auto [y, st] = g.dropout(a[0], g.random_state(7), 0.4);
    return Ts{y, st};
  }, {u({4, 5}, -1, 1, 51)});
  check("dropout chained states", [](Graph& g, const Ts& a) {
    auto [y1, s1] = g.dropout(a[0], g.random_state(3), 0.5);
    auto [y2, s2] = g.dropout(g.exp(y1), s1, 0.3);
    return Ts{y2};
  }, {u({6}, -1, 1, 52)});
}

TEST(GradIndexing, Stencil) {
  auto src = u({2, 1, 3, 4, 3}, -1, 1, 61), w = u({1, 2, 3, 2}, -1, 1, 62);
  for (Boundary b : {Boundary::zero, Boundary::constant, Boundary::clamp_to_edge, Boundary::reflect,
                     Boundary::symmetric, Boundary::periodic, Boundary::anti_periodic}) {
    StencilDesc d;
    d.boundary = b;
    d.padding_constant = 0.7;
    check("stencil same", [&](Graph& g, const Ts& a) { return Ts{g.stencil(a[0], a[1], d)}; }, {src, w});
    // Large explicit padding wraps / mirrors more than once.
    d.padding_style = PaddingStyle::explicit_;
    d.explicit_padding = {0, 0, 1, 0, 4, 2, 3, 5};
    d.strides = {1, 2, 1, 2};
    d.dilation_rates = {1, 1, 2, 1};
    check("stencil explicit strided dilated", [&](Graph& g, const Ts& a) { return Ts{g.stencil(a[0], a[1], d)}; },
          {src, w});
  }
  StencilDesc v;
  v.padding_style = PaddingStyle::explicit_offset;
  v.explicit_padding = {0, 0, 0, 0, 1, 1, 0, 0};
  v.offsets = {0, 0, -1, 1};
  check("stencil offsets rank 4", [&](Graph& g, const Ts& a) { return Ts{g.stencil(a[0], a[1], v)}; },
        {u({1, 3, 5, 4}, -1, 1, 63), w});
  for (Reduction r : {Reduction::product, Reduction::min, Reduction::max}) {
    StencilDesc d;
    d.reduction = r;
    d.boundary = Boundary::reflect;
    check("stencil product/min/max", [&](Graph& g, const Ts& a) { return Ts{g.stencil(a[0], a[1], d)}; },
          {u({1, 3, 4, 3}, 0.5, 2, 64), u({1, 2, 2, 2}, 0.5, 1.5, 65)});
  }
}
