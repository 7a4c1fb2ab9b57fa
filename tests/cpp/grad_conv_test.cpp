// Gradients of convolution and pooling against finite differences (f64).
#include "grad_check.h"
#include "test_util.h"

using namespace tg;
using gradcheck::check;
using gradcheck::u;

namespace {
using Ts = std::vector<Tensor>;

ConvDesc conv_desc(std::vector<int64_t> stride, std::vector<int64_t> dil, std::vector<int64_t> pad,
                   Layout data = Layout::nhwc, Layout weights = Layout::hwio, int64_t groups = 1) {
  ConvDesc d;
  d.stride = std::move(stride);
  d.dilation = std::move(dil);
  d.explicit_padding = std::move(pad);
  d.data_layout = data;
  d.weights_layout = weights;
  d.groups = groups;
  return d;
}

// Distinct values (a shuffled ramp): no max-pool ties, gaps far above the FD step.
TensorData distinct(Shape s, uint64_t seed) {
  TensorData r = u(s, 0, 1, seed);
  const int64_t n = r.num_elements();
  std::vector<std::pair<double, int64_t>> order;
  for (int64_t i = 0; i < n; ++i) order.emplace_back(r.at(i), i);
  std::sort(order.begin(), order.end());
  for (int64_t j = 0; j < n; ++j) r.set(order[static_cast<size_t>(j)].second, -1.0 + 2.0 * static_cast<double>(j) / static_cast<double>(n));
  return r;
}
}  // namespace

TEST(GradConv, Conv2d) {
  check("nhwc hwio plain", [](Graph& g, const Ts& a) { return Ts{g.conv2d(a[0], a[1])}; },
        {u({2, 4, 4, 3}, -1, 1, 1), u({3, 3, 3, 2}, -1, 1, 2)});
  check("nhwc stride dilation padding",
        [](Graph& g, const Ts& a) { return Ts{g.conv2d(a[0], a[1], conv_desc({2, 1}, {1, 2}, {1, 0, 2, 1}))}; },
        {u({1, 5, 6, 2}, -1, 1, 3), u({2, 2, 2, 3}, -1, 1, 4)});
  check("nchw oihw groups",
        [](Graph& g, const Ts& a) {
          return Ts{g.conv2d(a[0], a[1], conv_desc({1, 2}, {}, {1, 1, 0, 1}, Layout::nchw, Layout::oihw, 2))};
        },
        {u({1, 4, 4, 5}, -1, 1, 5), u({6, 2, 2, 3}, -1, 1, 6)});
  check("same padding", [](Graph& g, const Ts& a) {
    ConvDesc d = conv_desc({2, 2}, {}, {});
    d.padding = PaddingStyle::same;
    return Ts{g.conv2d(a[0], a[1], d)};
  }, {u({1, 5, 4, 2}, -1, 1, 7), u({3, 2, 2, 2}, -1, 1, 8)});
}

TEST(GradConv, Conv3d) {
  check("ndhwc", [](Graph& g, const Ts& a) { return Ts{g.conv3d(a[0], a[1])}; },
        {u({1, 3, 4, 3, 2}, -1, 1, 11), u({2, 2, 2, 2, 2}, -1, 1, 12)});
  check("ncdhw stride padding groups",
        [](Graph& g, const Ts& a) {
          return Ts{g.conv3d(a[0], a[1],
                             conv_desc({1, 2, 1}, {}, {1, 0, 0, 1, 1, 1}, Layout::ncdhw, Layout::oidhw, 2))};
        },
        {u({1, 2, 3, 4, 3}, -1, 1, 13), u({4, 1, 2, 2, 2}, -1, 1, 14)});
}

TEST(GradConv, ConvTranspose2d) {
  check("nhwc plain", [](Graph& g, const Ts& a) { return Ts{g.conv_transpose2d(a[0], a[1])}; },
        {u({1, 3, 3, 2}, -1, 1, 21), u({2, 2, 3, 2}, -1, 1, 22)});
  check("stride padding output_padding",
        [](Graph& g, const Ts& a) {
          ConvDesc d = conv_desc({2, 2}, {}, {1, 0, 0, 1});
          d.output_padding = {1, 1};
          return Ts{g.conv_transpose2d(a[0], a[1], d)};
        },
        {u({2, 3, 2, 2}, -1, 1, 23), u({3, 3, 2, 2}, -1, 1, 24)});
  check("nchw oihw groups dilation",
        [](Graph& g, const Ts& a) {
          return Ts{g.conv_transpose2d(a[0], a[1], conv_desc({2, 1}, {1, 2}, {}, Layout::nchw, Layout::oihw, 2))};
        },
        {u({1, 4, 2, 3}, -1, 1, 25), u({4, 3, 2, 2}, -1, 1, 26)});
}

TEST(GradConv, Pooling) {
  auto x = distinct({2, 5, 6, 3}, 31);
  PoolDesc plain;
  PoolDesc strided{{3, 2}, {2, 1}, {}, PaddingStyle::explicit_, {1, 1, 0, 1}, Layout::nhwc, false, false};
  PoolDesc ceil_nchw{{2, 2}, {2, 2}, {}, PaddingStyle::explicit_, {1, 0, 0, 1}, Layout::nchw, true, true};
  for (const PoolDesc& d : {plain, strided, ceil_nchw}) {
    check("max_pool2d", [&](Graph& g, const Ts& a) { return Ts{g.max_pool2d(a[0], d)}; }, {x});
    check("avg_pool2d", [&](Graph& g, const Ts& a) { return Ts{g.avg_pool2d(a[0], d)}; }, {x});
  }
  check("max_pool2d_with_indices values", [&](Graph& g, const Ts& a) {
    auto [v, i] = g.max_pool2d_with_indices(a[0], strided);
    return Ts{v, i};
  }, {x});
  PoolDesc dilated{{2, 2}, {1, 1}, {2, 1}, PaddingStyle::same, {}, Layout::nhwc, false, false};
  check("max_pool2d dilated same", [&](Graph& g, const Ts& a) { return Ts{g.max_pool2d(a[0], dilated)}; }, {x});
  check("avg_pool2d dilated same", [&](Graph& g, const Ts& a) { return Ts{g.avg_pool2d(a[0], dilated)}; }, {x});
}

TEST(GradConv, ConvNetChain) {
  // conv -> relu-free smooth activation -> max pool -> conv: gradients compose through the chain.
  check("chain", [](Graph& g, const Ts& a) {
    Tensor h = g.tanh(g.conv2d(a[0], a[1], conv_desc({}, {}, {1, 1, 1, 1})));
    return Ts{g.conv2d(g.avg_pool2d(h), a[2])};
  }, {u({1, 4, 4, 2}, -1, 1, 41), u({3, 3, 2, 3}, -1, 1, 42), u({1, 1, 3, 2}, -1, 1, 43)});
}

TEST(GradConv, GradientOpsHaveNoRuleYet) {
  // Second-order gradients (through the gradient ops themselves) are not supported yet.
  Graph g;
  Tensor x = g.placeholder({1, 2, 2, 1}, f64);
  EXPECT_TG_ERROR(g.gradients(g.reduce_sum(g.avg_pool2d_grad(x, x, PoolDesc{{1, 1}})), {x}),
                  "[gradients] no gradient rule for op 'avg_pool2d_grad'");
}
