// The space-to-depth rewrite of strided few-channel convolutions (passes/space_to_depth.h):
// the forward and the weight gradient, rewritten and run on the CPU, give the numbers of the
// original graph (every kernel tap, padding, weights layout and stride it accepts), and the
// convolutions it leaves behind have stride 1 and channels in whole 16-byte vectors.
#include "passes/space_to_depth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "module_util.h"
#include "ops/op_def.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;
using passtest::module_of;

namespace {

struct Case {
  std::string name;
  int64_t N, H, W, C, K, k, s;
  std::vector<int64_t> pad;  // empty: valid
  Layout wl;
};

// y = conv(x, w), loss = sum(y * r), dw by autodiff: targets {y, dw}.
struct Net {
  Tensor x, w, r;
  std::vector<Tensor> targets;
};

Net build(Graph& g, const Case& c) {
  Net n;
  n.x = g.placeholder({c.N, c.H, c.W, c.C}, f32);
  const Shape ws = c.wl == Layout::hwio ? Shape({c.k, c.k, c.C, c.K}) : Shape({c.K, c.C, c.k, c.k});
  n.w = g.placeholder(ws, f32);
  ConvDesc d;
  d.stride = {c.s, c.s};
  d.weights_layout = c.wl;
  d.padding = c.pad.empty() ? PaddingStyle::valid : PaddingStyle::explicit_;
  d.explicit_padding = c.pad;
  Tensor y = g.conv2d(n.x, n.w, d);
  n.r = g.placeholder(y.shape(), f32);
  Tensor loss = g.reduce_sum(g.mul(y, n.r));
  n.targets = {y, g.gradients(loss, {n.w}).at(n.w)};
  return n;
}

std::vector<TensorData> run(Graph& g, const Net& n, const std::vector<Tensor>& targets, const Case& c) {
  TensorData xv = TensorData::uniform(n.x.shape(), -1, 1, f32, 11), wv = TensorData::uniform(n.w.shape(), -0.5, 0.5, f32, 12),
             rv = TensorData::uniform(n.r.shape(), -1, 1, f32, 13);
  (void)c;
  return g.compile({{n.x, n.x.type()}, {n.w, n.w.type()}, {n.r, n.r.type()}}, targets, {}, {.device = Device::cpu()})
      .run({xv, wv, rv});
}

}  // namespace

TEST(SpaceToDepth, SameNumbersAsTheStridedConvolution) {
  const Case cases[] = {
      {"resnet stem", 2, 17, 16, 3, 5, 7, 2, {3, 3, 3, 3}, Layout::hwio},
      {"stem, oihw (PyTorch)", 1, 16, 16, 3, 4, 7, 2, {3, 3, 3, 3}, Layout::oihw},
      {"3x3/2, one channel, odd", 2, 15, 13, 1, 3, 3, 2, {1, 1, 1, 1}, Layout::hwio},
      {"patchify 4x4/4", 1, 16, 12, 3, 6, 4, 4, {}, Layout::oihw},
      {"5x5/3, uneven padding", 1, 14, 19, 2, 3, 5, 3, {2, 0, 1, 2}, Layout::hwio},
      {"7x7/2 valid", 2, 16, 16, 3, 2, 7, 2, {}, Layout::hwio},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph g;
    Net n = build(g, c);
    std::vector<TensorData> want = run(g, n, n.targets, c);
    Module m = module_of(g, n.targets);
    ASSERT_TRUE(SpaceToDepthConv().run(m));
    int convs = 0;
    for (const Node& node : m.graph.nodes) {
      if (node.kind != OpKind::Conv2d && node.kind != OpKind::Conv2dWeightGrad) continue;
      const ConvDesc& d = node.kind == OpKind::Conv2d ? std::get<ConvDesc>(node.attr) : std::get<ConvGradDesc>(node.attr).conv;
      if (d.stride != std::vector<int64_t>{1, 1}) continue;
      ++convs;
      const Shape ws = m.graph.values[static_cast<size_t>(node.kind == OpKind::Conv2d ? node.inputs[1] : node.outputs[0])].type.shape;
      EXPECT_EQ(ws[2] % 8, 0) << ws.str();  // channels in whole 16-byte vectors of 16-bit data
    }
    EXPECT_EQ(convs, 2);  // the forward and the weight gradient
    g.impl() = m.graph;
    std::vector<Tensor> targets;
    for (int32_t t : m.targets) targets.push_back(Tensor(&g.impl(), t));
    std::vector<TensorData> got = run(g, n, targets, c);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape());
      for (int64_t e = 0; e < want[i].num_elements(); ++e)
        ASSERT_NEAR(got[i].at(e), want[i].at(e), 1e-4 * (1 + std::abs(want[i].at(e)))) << "target " << i << " element " << e;
    }
  }
}

TEST(SpaceToDepth, LeavesWhatItCannotFold) {
  // Stride 1, 8 channels, dilation and groups stay as they are.
  auto try_fold = [](int64_t C, int64_t s, int64_t dil, int64_t groups) {
    Graph g;
    Tensor x = g.placeholder({1, 12, 12, C}, f32), w = g.placeholder({3, 3, C / groups, 4}, f32);
    ConvDesc d;
    d.stride = {s, s};
    d.dilation = {dil, dil};
    d.groups = groups;
    Module m = module_of(g, {g.conv2d(x, w, d)});
    return SpaceToDepthConv().run(m);
  };
  EXPECT_TRUE(try_fold(3, 2, 1, 1));
  EXPECT_FALSE(try_fold(3, 1, 1, 1));
  EXPECT_FALSE(try_fold(8, 2, 1, 1));
  EXPECT_FALSE(try_fold(3, 2, 2, 1));
  EXPECT_FALSE(try_fold(4, 2, 1, 2));
}
