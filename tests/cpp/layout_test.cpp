// The channels-last pass (passes/layout.h): an nchw convolution network compiled for the CPU
// keeps only the transposes at its edges and gives the same numbers as with the pass off
// (TGRAPH_NO_LAYOUT=1). Training graphs too: the convolution and pooling gradients, training
// batch norm (whole or decomposed, as CUDA has it), max pooling with indices and reductions
// without keep_dims run channels-last, and the loss and every gradient are unchanged.
// CompileOptions::free_output_layouts returns conv-derived outputs channels-last with their
// permutation (and such an executable is not saved); SinkBroadcasts computes an elementwise op
// of broadcasts on the small shape; AlgebraicSimplify makes a transpose that moves only size-1
// dims a reshape.
#include "passes/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "module_util.h"
#include "ops/op_def.h"
#include "passes/pipeline.h"
#include "test_util.h"
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

// A small nchw training step: conv (variable weights) -> training batch norm on axis 1 -> relu
// -> max pooling with indices (its values) -> a residual block (conv, relu, add of the pooled
// input) -> average pooling -> the mean over H and W (no keep dims: [N, C]) -> an mse loss.
// Targets: the loss, then its gradients with respect to both convs' weights, the batch norm's
// gamma and beta, and the input x.
struct TrainNet {
  Tensor x;
  std::vector<Tensor> targets;  // loss, dw1, dw2, dgamma, dbeta, dx
};

TrainNet train_net(Graph& g) {
  Tensor x = g.placeholder({2, 3, 8, 8}, f32, "x");
  ConvDesc c;
  c.data_layout = Layout::nchw;
  c.weights_layout = Layout::oihw;
  c.padding = PaddingStyle::same;
  Tensor w1 = g.variable(TensorData::uniform({8, 3, 3, 3}, -0.4, 0.4, f32, 21), "w1");
  Tensor w2 = g.variable(TensorData::uniform({8, 8, 3, 3}, -0.3, 0.3, f32, 22), "w2");
  Tensor gamma = g.variable(TensorData::uniform({8}, 0.5, 1.5, f32, 23), "gamma");
  Tensor beta = g.variable(TensorData::uniform({8}, -0.2, 0.2, f32, 24), "beta");
  std::vector<Tensor> bn = g.batch_norm_training(g.conv2d(x, w1, c), gamma, beta, 1);
  Tensor h = g.relu(bn[0]);
  PoolDesc mp;
  mp.kernel = {3, 3};
  mp.stride = {2, 2};
  mp.padding = PaddingStyle::same;
  mp.data_layout = Layout::nchw;
  Tensor pooled = g.max_pool2d_with_indices(h, mp).first;  // [2,8,4,4]
  Tensor r = g.add(g.relu(g.conv2d(pooled, w2, c)), pooled);
  PoolDesc ap;
  ap.kernel = {2, 2};
  ap.stride = {2, 2};
  ap.padding = PaddingStyle::valid;
  ap.data_layout = Layout::nchw;
  Tensor feat = g.reduce_mean(g.avg_pool2d(r, ap), {2, 3});  // [2,8]
  Tensor loss = g.mse(feat, g.constant(TensorData::uniform({2, 8}, -0.5, 0.5, f32, 25)));
  auto gr = g.gradients(loss, {w1, w2, gamma, beta, x});
  return {x, {loss, gr.at(w1), gr.at(w2), gr.at(gamma), gr.at(beta), gr.at(x)}};
}

double max_abs(const TensorData& t) {
  double m = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) m = std::max(m, std::abs(t.at(i)));
  return m;
}

// Element i of value = transpose(out, perm) (value's dim k is out's dim perm[k]), row-major.
double transposed_at(const TensorData& out, const std::vector<int64_t>& perm, int64_t i) {
  const int64_t r = out.shape().rank();
  std::vector<int64_t> vdims(static_cast<size_t>(r)), vidx(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) vdims[static_cast<size_t>(k)] = out.shape()[perm[static_cast<size_t>(k)]];
  for (int64_t k = r - 1; k >= 0; --k) {
    vidx[static_cast<size_t>(k)] = i % vdims[static_cast<size_t>(k)];
    i /= vdims[static_cast<size_t>(k)];
  }
  std::vector<int64_t> oidx(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) oidx[static_cast<size_t>(perm[static_cast<size_t>(k)])] = vidx[static_cast<size_t>(k)];
  int64_t flat = 0;
  for (int64_t k = 0; k < r; ++k) flat = flat * out.shape()[k] + oidx[static_cast<size_t>(k)];
  return out.at(flat);
}

const Node* only_node(const Module& m, OpKind k) {
  const Node* found = nullptr;
  for (int32_t id : m.graph.blocks[0].nodes) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind != k) continue;
    if (found) return nullptr;
    found = &n;
  }
  return found;
}

}  // namespace

TEST(PassChannelsLast, TransposesCancelBetweenConvolutions) {
  Graph g;
  Tensor x = g.placeholder({2, 3, 16, 16}, f32);
  Tensor y = net(g, x);
  Module m = module_of(g, {y});
  run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/false, Precision::f32, /*channels_last=*/true);
  // The input in. The pooled result's way back ([2,1,1,8] to [2,8,1,1]) moves only size-1
  // dims: AlgebraicSimplify makes it a reshape, which joins the flattening reshape.
  EXPECT_EQ(count(m, OpKind::Transpose), 1);
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
    Graph g;
    Tensor x = g.placeholder({2, 3, 16, 16}, f32);
    CompileOptions o{.device = Device::cpu()};
    if (off) o.switches = {{"TGRAPH_NO_LAYOUT", "1"}};  // for this executable only (docs/switches.md)
    out[off] = g.compile({{x, x.type()}}, {net(g, x)}, {}, o).run({xv});
  }
  ASSERT_EQ(out[0][0].shape(), out[1][0].shape());
  for (int64_t i = 0; i < out[0][0].num_elements(); ++i)
    EXPECT_NEAR(out[0][0].at(i), out[1][0].at(i), 1e-5) << i;
}

// Transposes written with negative axes sink like any other, and the result is unchanged.
TEST(PassChannelsLast, NegativeAxesAndUserTransposes) {
  TensorData xv = TensorData::uniform({2, 3, 4, 5}, -1, 1, f32, 3),
             bv = TensorData::uniform({2, 4, 5, 3}, -1, 1, f32, 4);
  std::vector<TensorData> out[2];
  for (int off = 0; off < 2; ++off) {
    WithSwitches s(off ? std::map<std::string, std::string>{{"TGRAPH_NO_LAYOUT", "1"}}
                       : std::map<std::string, std::string>{});
    Graph g;
    Tensor x = g.placeholder({2, 3, 4, 5}, f32), b = g.placeholder({2, 4, 5, 3}, f32);
    Tensor t = g.transpose(x, {0, -2, -1, 1});  // [2,4,5,3]
    Tensor y =
        g.reduce_max(g.add(g.relu(t), g.transpose(g.transpose(b, {0, 3, 1, 2}), {0, 2, 3, 1})), {1, 2}, true);
    out[off] = g.compile({{x, x.type()}, {b, b.type()}}, {y}, {}, {.device = Device::cpu()}).run({xv, bv});
  }
  ASSERT_EQ(out[0][0].shape(), out[1][0].shape());
  for (int64_t i = 0; i < out[0][0].num_elements(); ++i) EXPECT_EQ(out[0][0].at(i), out[1][0].at(i)) << i;
}

// A training graph (forward and backward) compiled for the CPU gives the same loss and
// gradients with the pass as without it.
TEST(PassChannelsLast, TrainingGraphSameLossAndGradients) {
  TensorData xv = TensorData::uniform({2, 3, 8, 8}, -1, 1, f32, 20);
  std::vector<TensorData> out[2];
  for (int off = 0; off < 2; ++off) {
    WithSwitches s(off ? std::map<std::string, std::string>{{"TGRAPH_NO_LAYOUT", "1"}}
                       : std::map<std::string, std::string>{});
    Graph g;
    TrainNet t = train_net(g);
    Executable e = g.compile({{t.x, t.x.type()}}, t.targets, {}, {.device = Device::cpu()});
    // the pass did run (or not): the two programs compared are different
    EXPECT_EQ(e.str().find("data_layout=nhwc") != std::string::npos, off == 0) << e.str();
    out[off] = e.run({xv});
  }
  const char* names[] = {"loss", "dw1", "dw2", "dgamma", "dbeta", "dx"};
  ASSERT_EQ(out[0].size(), 6u);
  ASSERT_EQ(out[1].size(), 6u);
  for (size_t k = 0; k < 6; ++k) {
    SCOPED_TRACE(names[k]);
    ASSERT_EQ(out[0][k].shape(), out[1][k].shape());
    const double scale = max_abs(out[1][k]);
    EXPECT_GT(scale, 0);  // a real value, not an all-zero gradient
    for (int64_t i = 0; i < out[0][k].num_elements(); ++i)
      EXPECT_NEAR(out[0][k].at(i), out[1][k].at(i), 1e-4 * std::max(std::abs(out[1][k].at(i)), scale)) << i;
  }
}

// The same graph through the pipeline as the CPU (composites whole) and as CUDA (composites
// decomposed) run it: the convolutions, pooling and their gradients are channels-last, and
// the only transposes left are x's into nhwc and dx's back to nchw (the graph's two rank-4
// nchw activations at its edges; the weight gradients are oihw as the weights are).
TEST(PassChannelsLast, TrainingGraphKeepsOnlyEdgeTransposes) {
  for (bool decompose : {false, true}) {
    SCOPED_TRACE(decompose ? "decomposed" : "composites whole");
    Graph g;
    TrainNet t = train_net(g);
    Module m = module_of(g, t.targets);
    run_pipeline(m, /*optimize=*/true, decompose, Precision::f32, /*channels_last=*/true);
    // x's into nhwc and dx's back; every other transpose cancels or becomes a reshape. (The
    // mean's gradient, broadcast_to([2,8,1,1] -> [2,8,2,2]), reaches avg_pool2d_grad's dy
    // directly: its transpose into nhwc must become a broadcast of the small value.)
    EXPECT_EQ(count(m, OpKind::Transpose), 2);
    EXPECT_EQ(count(m, OpKind::Conv2dDataGrad), 2);  // into the pooled values, and dx
    EXPECT_EQ(count(m, OpKind::Conv2dWeightGrad), 2);
    EXPECT_EQ(count(m, OpKind::MaxPool2dGrad), 1);
    EXPECT_EQ(count(m, OpKind::AvgPool2dGrad), 1);
    for (int32_t id : m.graph.blocks[0].nodes) {
      const Node& n = m.graph.nodes[static_cast<size_t>(id)];
      switch (n.kind) {
        case OpKind::Conv2d: EXPECT_EQ(std::get<ConvDesc>(n.attr).data_layout, Layout::nhwc); break;
        case OpKind::Conv2dDataGrad: case OpKind::Conv2dWeightGrad:
          EXPECT_EQ(std::get<ConvGradDesc>(n.attr).conv.data_layout, Layout::nhwc) << op_name(n.kind);
          break;
        case OpKind::MaxPool2dWithIndices: case OpKind::MaxPool2d: case OpKind::AvgPool2d:
        case OpKind::MaxPool2dGrad: case OpKind::AvgPool2dGrad:
          EXPECT_EQ(std::get<PoolDesc>(n.attr).data_layout, Layout::nhwc) << op_name(n.kind);
          break;
        case OpKind::BatchNormTraining: EXPECT_EQ(std::get<NormDesc>(n.attr).axis, 3); break;
        default: break;
      }
    }
  }
}

// free_output_layouts: the conv and the relu after it come back channels-last with the
// permutation to nchw, x*2 (no convolution) as it is; the values are those compiled without
// the option; such an executable refuses to save.
TEST(PassChannelsLast, FreeOutputLayouts) {
  TensorData xv = TensorData::uniform({2, 3, 6, 5}, -1, 1, f32, 31);
  std::vector<TensorData> out[2];
  Executable exe[2];
  for (int fr = 0; fr < 2; ++fr) {
    Graph g;
    Tensor x = g.placeholder({2, 3, 6, 5}, f32);
    ConvDesc c;
    c.data_layout = Layout::nchw;
    c.weights_layout = Layout::oihw;
    c.padding = PaddingStyle::same;
    Tensor y = g.conv2d(x, g.constant(TensorData::uniform({4, 3, 3, 3}, -0.5, 0.5, f32, 32)), c);
    CompileOptions o;
    o.device = Device::cpu();
    o.free_output_layouts = fr != 0;
    exe[fr] = g.compile({{x, x.type()}}, {y, g.relu(y), g.mul(x, g.scalar(2))}, {}, o);
    out[fr] = exe[fr].run({xv});
  }
  const std::vector<int64_t> to_nchw{0, 3, 1, 2};
  using Perms = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(exe[0].output_permutations(), (Perms{{}, {}, {}}));
  ASSERT_EQ(exe[1].output_permutations(), (Perms{to_nchw, to_nchw, {}}));
  ASSERT_EQ(out[1].size(), 3u);
  EXPECT_EQ(out[1][0].shape(), Shape({2, 6, 5, 4}));
  EXPECT_EQ(out[1][1].shape(), Shape({2, 6, 5, 4}));
  EXPECT_EQ(out[1][2].shape(), Shape({2, 3, 6, 5}));
  const Perms perms = exe[1].output_permutations();
  for (size_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(k);
    ASSERT_EQ(out[0][k].shape(), k < 2 ? Shape({2, 4, 6, 5}) : Shape({2, 3, 6, 5}));
    ASSERT_EQ(out[0][k].num_elements(), out[1][k].num_elements());
    EXPECT_GT(max_abs(out[0][k]), 0);
    for (int64_t i = 0; i < out[0][k].num_elements(); ++i) {
      const double v = perms[k].empty() ? out[1][k].at(i) : transposed_at(out[1][k], perms[k], i);
      EXPECT_NEAR(v, out[0][k].at(i), 1e-5) << i;
    }
  }
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tgraph_layout_free_" + std::to_string(::getpid()) + ".tgx"))
                               .string();
  try {
    exe[1].save(path);
    ADD_FAILURE() << "save of a free-layout executable did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("free_output_layouts"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(exe[0].save(path));
  std::filesystem::remove(path);
}

// mul(broadcast a[1,4,1,1], broadcast s[1]) + b: the product is computed on [1,4,1,1] and then
// broadcast (SinkBroadcasts, which runs with the layout pass), with the same values.
TEST(PassChannelsLast, SinkBroadcastsComputesOnTheSmallShape) {
  const std::vector<int64_t> full{2, 4, 3, 3};
  auto build = [&](Graph& g, Tensor& a, Tensor& s, Tensor& b) {
    a = g.placeholder({1, 4, 1, 1}, f32);
    s = g.placeholder({1}, f32);
    b = g.placeholder(Shape(full), f32);
    return g.add(g.mul(g.broadcast_to(a, full), g.broadcast_to(s, full)), b);
  };
  {
    Graph g;
    Tensor a, s, b;
    Tensor y = build(g, a, s, b);
    Module m = module_of(g, {y});
    run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/false, Precision::f32, /*channels_last=*/true);
    const Node* mul = only_node(m, OpKind::Mul);
    ASSERT_NE(mul, nullptr);
    EXPECT_EQ(m.graph.type(mul->outputs[0]).shape.num_elements(), 4);
  }
  TensorData av = TensorData::uniform({1, 4, 1, 1}, -2, 2, f32, 41), sv = TensorData::uniform({1}, 0.5, 2, f32, 42),
             bv = TensorData::uniform(Shape(full), -1, 1, f32, 43);
  Graph g;
  Tensor a, s, b;
  Tensor y = build(g, a, s, b);
  auto r = g.compile({{a, a.type()}, {s, s.type()}, {b, b.type()}}, {y}, {}, {.device = Device::cpu()})
               .run({av, sv, bv});
  ASSERT_EQ(r[0].shape(), Shape(full));
  for (int64_t i = 0; i < r[0].num_elements(); ++i) {
    const int64_t ch = (i / 9) % 4;
    const float want = static_cast<float>(av.at(ch)) * static_cast<float>(sv.at(0)) + static_cast<float>(bv.at(i));
    EXPECT_NEAR(r[0].at(i), want, 1e-6) << i;
  }
}

// A transpose that moves only size-1 dims is a reshape (the same bytes); one that reorders
// two dims larger than 1 stays a transpose. The values are those of the transposes.
TEST(PassChannelsLast, TransposeOfUnitDimsIsAReshape) {
  TensorData v = TensorData::uniform({1, 4, 1, 1}, -1, 1, f32, 51), u = TensorData::uniform({1, 4, 1, 3}, -1, 1, f32, 52);
  auto build = [](Graph& g, Tensor& p, Tensor& q) {
    p = g.placeholder({1, 4, 1, 1}, f32);
    q = g.placeholder({1, 4, 1, 3}, f32);
    return std::vector<Tensor>{g.transpose(p, {0, 2, 3, 1}), g.transpose(q, {0, 3, 2, 1})};
  };
  {
    Graph g;
    Tensor p, q;
    std::vector<Tensor> ys = build(g, p, q);
    Module m = module_of(g, {ys[0]});
    run_pipeline(m, true, false, Precision::f32, false);
    EXPECT_EQ(count(m, OpKind::Transpose), 0);
    EXPECT_EQ(count(m, OpKind::Reshape), 1);
    Module m2 = module_of(g, {ys[1]});
    run_pipeline(m2, true, false, Precision::f32, false);
    EXPECT_EQ(count(m2, OpKind::Transpose), 1);
  }
  Graph g;
  Tensor p, q;
  std::vector<Tensor> ys = build(g, p, q);
  auto r = g.compile({{p, p.type()}, {q, q.type()}}, ys, {}, {.device = Device::cpu()}).run({v, u});
  ASSERT_EQ(r[0].shape(), Shape({1, 1, 1, 4}));
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(r[0].at(i), v.at(i)) << i;
  ASSERT_EQ(r[1].shape(), Shape({1, 3, 1, 4}));
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(r[1].at(i), transposed_at(u, {0, 3, 2, 1}, i)) << i;
}
