// The channels-last pass (passes/layout.h): an nchw convolution network compiled for the CPU
// keeps only the transposes at its edges and gives the same numbers as with the pass off
// (TGRAPH_NO_LAYOUT=1); training graphs are left alone.
#include "passes/layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "module_util.h"
#include "passes/pipeline.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;
using passtest::module_of;

namespace {

int count(const Module& m, OpKind k) {
  int c = 0;
  for (int32_t id : m.graph.blocks[0].nodes) c += m.graph.nodes[static_cast<size_t>(id)].kind == k;
  return c;
}

// A small ResNet-like nchw network: conv + per-channel bias + relu, max pool, a residual block
// (conv, bias, relu, conv, batch norm, add of the block input, relu), a scaled branch, average
// pooling over H and W (keep dims), flatten.
Tensor net(Graph& g, Tensor x) {
  ConvDesc c;
  c.data_layout = Layout::nchw;
  c.weights_layout = Layout::oihw;
  c.padding = PaddingStyle::same;
  auto w = [&](int64_t o, int64_t i, uint64_t seed) {
    return g.constant(TensorData::uniform({o, i, 3, 3}, -0.3, 0.3, f32, seed));
  };
  auto bias = [&](int64_t o, uint64_t seed) {
    return g.constant(TensorData::uniform({1, o, 1, 1}, -0.1, 0.1, f32, seed));
  };
  Tensor h = g.relu(g.add(g.conv2d(x, w(8, 3, 1), c), bias(8, 2)));
  PoolDesc p;
  p.kernel = {3, 3};
  p.stride = {2, 2};
  p.padding = PaddingStyle::same;
  p.data_layout = Layout::nchw;
  h = g.max_pool2d(h, p);
  Tensor r = g.relu(g.add(g.conv2d(h, w(8, 8, 3), c), bias(8, 4)));
  auto per_channel = [&](double lo, double hi, uint64_t seed) {
    return g.constant(TensorData::uniform({8}, lo, hi, f32, seed));
  };
  Tensor bn = g.batch_norm(g.conv2d(r, w(8, 8, 5), c), per_channel(-0.2, 0.2, 6), per_channel(0.5, 2, 7),
                           per_channel(0.5, 1.5, 8), per_channel(-0.1, 0.1, 10), 1);  // a PyTorch conv -> BN
  r = g.add(bn, h);
  h = g.relu(g.mul(r, g.scalar(0.5)));
  Tensor pooled = g.reduce_mean(h, {2, 3}, true);
  return g.reshape(pooled, {pooled.shape()[0], 8});
}

}  // namespace

TEST(PassChannelsLast, TransposesCancelBetweenConvolutions) {
  Graph g;
  Tensor x = g.placeholder({2, 3, 16, 16}, f32);
  Tensor y = net(g, x);
  Module m = module_of(g, {y});
  run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/false, Precision::f32, /*channels_last=*/true);
  EXPECT_EQ(count(m, OpKind::Transpose), 2);  // the input in, the pooled result out
  for (int32_t id : m.graph.blocks[0].nodes) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::Conv2d) EXPECT_EQ(std::get<ConvDesc>(n.attr).data_layout, Layout::nhwc);
    if (n.kind == OpKind::MaxPool2d) EXPECT_EQ(std::get<PoolDesc>(n.attr).data_layout, Layout::nhwc);
  }
}

TEST(PassChannelsLast, SameNumbersAsWithoutThePass) {
  TensorData xv = TensorData::uniform({2, 3, 16, 16}, -1, 1, f32, 9);
  std::vector<TensorData> out[2];
  for (int off = 0; off < 2; ++off) {
    if (off) setenv("TGRAPH_NO_LAYOUT", "1", 1);
    Graph g;
    Tensor x = g.placeholder({2, 3, 16, 16}, f32);
    out[off] = g.compile({{x, x.type()}}, {net(g, x)}, {}, {.device = Device::cpu()}).run({xv});
    unsetenv("TGRAPH_NO_LAYOUT");
  }
  ASSERT_EQ(out[0][0].shape(), out[1][0].shape());
  for (int64_t i = 0; i < out[0][0].num_elements(); ++i)
    EXPECT_NEAR(out[0][0].at(i), out[1][0].at(i), 1e-5) << i;
}

TEST(PassChannelsLast, TrainingGraphsKeepTheirLayout) {
  Graph g;
  Tensor x = g.placeholder({2, 3, 8, 8}, f32);
  Tensor w = g.variable(TensorData::uniform({4, 3, 3, 3}, -0.3, 0.3, f32, 1), "w");
  ConvDesc c;
  c.data_layout = Layout::nchw;
  c.weights_layout = Layout::oihw;
  Tensor loss = g.reduce_sum(g.square(g.conv2d(x, w, c)));
  auto gr = g.gradients(loss, {w});
  Module m = module_of(g, {loss, gr[w]});
  run_pipeline(m, true, false, Precision::f32, true);
  EXPECT_EQ(count(m, OpKind::Transpose), 0);
}

// Transposes written with negative axes sink like any other, and the result is unchanged.
TEST(PassChannelsLast, NegativeAxesAndUserTransposes) {
  TensorData xv = TensorData::uniform({2, 3, 4, 5}, -1, 1, f32, 3),
             bv = TensorData::uniform({2, 4, 5, 3}, -1, 1, f32, 4);
  std::vector<TensorData> out[2];
  for (int off = 0; off < 2; ++off) {
    if (off) setenv("TGRAPH_NO_LAYOUT", "1", 1);
    Graph g;
    Tensor x = g.placeholder({2, 3, 4, 5}, f32), b = g.placeholder({2, 4, 5, 3}, f32);
    Tensor t = g.transpose(x, {0, -2, -1, 1});  // [2,4,5,3]
    Tensor y =
        g.reduce_max(g.add(g.relu(t), g.transpose(g.transpose(b, {0, 3, 1, 2}), {0, 2, 3, 1})), {1, 2}, true);
    out[off] = g.compile({{x, x.type()}, {b, b.type()}}, {y}, {}, {.device = Device::cpu()}).run({xv, bv});
    unsetenv("TGRAPH_NO_LAYOUT");
  }
  ASSERT_EQ(out[0][0].shape(), out[1][0].shape());
  for (int64_t i = 0; i < out[0][0].num_elements(); ++i) EXPECT_EQ(out[0][0].at(i), out[1][0].at(i)) << i;
}
