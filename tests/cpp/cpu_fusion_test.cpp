// The fused CPU executor (backends/cpu/fused_plan.h, fused_elementwise.h) against the unfused
// one (TGRAPH_NO_FUSION=1) on random inputs: elementwise chains with broadcasting in f32, f16,
// bf16 and bool give the same bits; folded reductions agree to f32 rounding; and the plan
// keeps intermediates of a chain out of memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "backends/cpu/fused_plan.h"
#include "runtime/executable_impl.h"
#include "test_util.h"
#include "tgraph/optim.h"
#include "tgraph/tgraph.h"

using tg::DType;
using tg::Graph;
using tg::Tensor;
using tg::TensorData;
using tg::TensorType;

namespace {

TensorData rnd(tg::Shape s, uint64_t seed, DType t = tg::f32, double lo = -2.0, double hi = 2.0) {
  return TensorData::uniform(s, lo, hi, t, seed);
}

TensorData mask(tg::Shape s, uint64_t seed) {
  TensorData u = TensorData::uniform(s, 0.0, 1.0, tg::f32, seed);
  TensorData m(s, tg::boolean);
  for (int64_t i = 0; i < u.num_elements(); ++i) m.set(i, u.at(i) > 0.5);
  return m;
}

// Runs exe fused and unfused on the same inputs.
std::pair<std::vector<TensorData>, std::vector<TensorData>> run_both(const tg::Executable& exe,
                                                                     const std::vector<TensorData>& in) {
  std::vector<TensorData> fused = exe.run(in);
  WithSwitches off({{"TGRAPH_NO_FUSION", "1"}});
  std::vector<TensorData> plain = exe.run(in);
  return {fused, plain};
}

// Same type and the same bits (any NaN matches any NaN).
void expect_same(const TensorData& got, const TensorData& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements() && bad < 5; ++i) {
    double g = got.at(i), w = want.at(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g != w || std::signbit(g) != std::signbit(w))
      ++bad, ADD_FAILURE() << what << " at " << i << ": " << g << " vs " << w;
  }
}

// Same type; |got - want| <= rtol * max(1, |want|).
void expect_close(const TensorData& got, const TensorData& want, double rtol, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements() && bad < 5; ++i) {
    double g = got.at(i), w = want.at(i);
    if (!(std::fabs(g - w) <= rtol * std::max(1.0, std::fabs(w))))
      ++bad, ADD_FAILURE() << what << " at " << i << ": " << g << " vs " << w;
  }
}

tg::detail::CpuPlan plan_of(const tg::Executable& exe) {
  return tg::detail::plan_cpu_fusion(exe.impl().module);
}

// Kernels of at least min_nodes ops; every kernel must have compiled.
size_t kernels_with(const tg::detail::CpuPlan& p, size_t min_nodes) {
  size_t n = 0;
  for (const auto& k : p.kernels) {
    EXPECT_TRUE(k.program != nullptr) << "a kernel of " << k.nodes.size() << " ops did not compile";
    n += k.nodes.size() >= min_nodes;
  }
  return n;
}

}  // namespace

// Broadcast operands (scalars, per-channel rows, middle dims), many ops, f32 / f16 / bf16 /
// bool, sizes that leave a partial tile and that run on several threads.
TEST(CpuFusion, ElementwiseMatchesUnfusedBitForBit) {
  for (tg::Shape shape : {tg::Shape{3, 5, 7}, tg::Shape{6, 50, 333}}) {
    const int64_t A = shape[0], C = shape[2];
    Graph g;
    Tensor a = g.placeholder(shape, tg::f32, "a"), b = g.placeholder({C}, tg::f32, "b");
    Tensor c = g.placeholder({A, 1, C}, tg::f32, "c"), h = g.placeholder(shape, tg::f16, "h");
    Tensor bf = g.placeholder(shape, tg::bf16, "bf"), m = g.placeholder(shape, tg::boolean, "m");
    Tensor s = g.scalar(0.75);
    Tensor y1 = g.relu(g.add(g.mul(a, b), c));
    Tensor y2 = g.select(g.greater(a, s), g.exp(g.neg(a)), g.sigmoid(g.sub(c, a)));
    Tensor y3 = g.clamp(g.div(g.square(a), g.add(g.abs(b), s)), g.neg(s), g.scalar(1.5));
    Tensor y4 = g.add(g.tanh(g.mul(h, h)), g.cast(g.maximum(a, c), tg::f16));
    Tensor y5 = g.mul(g.sqrt(g.abs(bf)), g.cast(g.minimum(a, b), tg::bf16));
    Tensor y6 = g.logical_and(m, g.logical_not(g.less(a, c)));
    Tensor y7 = g.select(m, g.rsqrt(g.add(g.abs(a), s)), g.pow(g.abs(c), b));
    Tensor y8 = g.cast(g.leaky_relu(g.cast(h, tg::f32), 0.2), tg::bf16);
    tg::Executable exe = g.compile(
        {{a, a.type()}, {b, b.type()}, {c, c.type()}, {h, h.type()}, {bf, bf.type()}, {m, m.type()}},
        {y1, y2, y3, y4, y5, y6, y7, y8}, {}, {.device = tg::Device::cpu()});
    std::vector<TensorData> in{rnd(shape, 1),           rnd({C}, 2),
                               rnd({A, 1, C}, 3),       rnd(shape, 4, tg::f16),
                               rnd(shape, 5, tg::bf16), mask(shape, 6)};
    auto [fused, plain] = run_both(exe, in);
    ASSERT_EQ(fused.size(), plain.size());
    for (size_t i = 0; i < fused.size(); ++i) expect_same(fused[i], plain[i], "y" + std::to_string(i + 1));
    EXPECT_GE(kernels_with(plan_of(exe), 3), 1u);
  }
}

// A chain's intermediates stay in registers: one kernel writes only the chain's end.
TEST(CpuFusion, ChainIsOneKernelWithOneOutput) {
  Graph g;
  Tensor a = g.placeholder({64, 32}, tg::f32), b = g.placeholder({32}, tg::f32);
  Tensor y = a;
  for (int i = 0; i < 8; ++i) y = g.add(g.mul(y, b), g.scalar(0.5 * i));
  y = g.relu(y);
  tg::Executable exe = g.compile({{a, a.type()}, {b, b.type()}}, {y}, {}, {.device = tg::Device::cpu()});
  tg::detail::CpuPlan p = plan_of(exe);
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].outputs.size(), 1u);
  EXPECT_TRUE(p.kernels[0].program != nullptr);
  auto [fused, plain] = run_both(exe, {rnd({64, 32}, 7), rnd({32}, 8)});
  expect_same(fused[0], plain[0], "chain");
}

// Per-channel and full sums / means of a chain are folded into its loop (the chain itself is
// not stored), and agree with the unfused reductions to f32 rounding.
TEST(CpuFusion, ReductionsFoldIntoTheLoop) {
  for (tg::Shape shape : {tg::Shape{4, 6, 6, 8}, tg::Shape{32, 28, 28, 32}, tg::Shape{10, 3, 7}}) {
    Graph g;
    const int64_t C = shape[shape.rank() - 1];
    Tensor x = g.placeholder(shape, tg::f32), gamma = g.placeholder({C}, tg::f32);
    std::vector<int64_t> lead;
    for (int64_t i = 0; i + 1 < shape.rank(); ++i) lead.push_back(i);
    Tensor t = g.mul(g.relu(x), gamma);
    Tensor s1 = g.reduce_sum(g.mul(t, x), lead);
    Tensor s2 = g.reduce_mean(t, lead, true);
    Tensor s3 = g.reduce_sum(g.square(t));
    Tensor d = g.sub(t, g.mul(x, s2));  // reads a reduction: a second loop
    tg::Executable exe =
        g.compile({{x, x.type()}, {gamma, gamma.type()}}, {s1, s2, s3, d}, {}, {.device = tg::Device::cpu()});
    tg::detail::CpuPlan p = plan_of(exe);
    kernels_with(p, 1);
    size_t reductions = 0;
    for (const auto& k : p.kernels) reductions += k.reductions.size();
    EXPECT_EQ(reductions, 3u);
    EXPECT_EQ(p.kernels.size(), 2u);
    auto [fused, plain] = run_both(exe, {rnd(shape, 9), rnd({C}, 10)});
    for (size_t i = 0; i < 3; ++i) expect_close(fused[i], plain[i], 1e-5, "s" + std::to_string(i + 1));
    expect_close(fused[3], plain[3], 1e-5, "d");
  }
}

// Training: batch-norm backward (decomposed into elementwise ops and reductions), the relu
// mask and AdamW all run fused; a few steps give the same losses and variables.
TEST(CpuFusion, TrainingStepsMatchUnfused) {
  auto build = [](Graph& g, Tensor& x, Tensor& loss, std::vector<tg::Operation>& ops,
                  std::vector<Tensor>& params) {
    x = g.placeholder({8, 6, 6, 4}, tg::f32, "x");
    Tensor w = g.variable(TensorData::randn({3, 3, 4, 8}, tg::f32, 11), "w");
    Tensor gamma = g.variable(TensorData::uniform({8}, 0.5, 1.5, tg::f32, 12), "gamma");
    Tensor beta = g.variable(TensorData::uniform({8}, -0.5, 0.5, tg::f32, 13), "beta");
    Tensor y = g.conv2d(x, w,
                        {.padding = tg::PaddingStyle::same,
                         .data_layout = tg::Layout::nhwc,
                         .weights_layout = tg::Layout::hwio});
    std::vector<Tensor> bn = g.batch_norm_training(y, gamma, beta);
    Tensor r = g.relu(bn[0]);
    loss = g.reduce_mean(g.square(g.sub(r, g.scalar(0.3))));
    params = {w, gamma, beta};
    auto grads = g.gradients(loss, params);
    ops.push_back(tg::optim::adamw(g, params, grads, g.scalar(0.01), {.weight_decay = 1e-2}));
  };
  std::vector<double> losses[2];
  std::vector<TensorData> finals[2];
  for (int mode = 0; mode < 2; ++mode) {
    Graph g;
    Tensor x, loss;
    std::vector<tg::Operation> ops;
    std::vector<Tensor> params;
    build(g, x, loss, ops, params);
    tg::Executable exe = g.compile({{x, x.type()}}, {loss}, ops, {.device = tg::Device::cpu()});
    if (mode == 0) EXPECT_GE(kernels_with(plan_of(exe), 8), 2u);
    {
      WithSwitches off(mode == 1 ? std::map<std::string, std::string>{{"TGRAPH_NO_FUSION", "1"}}
                                 : std::map<std::string, std::string>{});
      for (int step = 0; step < 3; ++step)
        losses[mode].push_back(exe.run({rnd({8, 6, 6, 4}, 20 + step)})[0].at(0));
    }
    for (const char* name : {"w", "gamma", "beta"}) finals[mode].push_back(exe.variable(name));
  }
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[0][i], losses[1][i], 1e-5 * std::fabs(losses[1][i]));
  for (size_t i = 0; i < finals[0].size(); ++i)
    expect_close(finals[0][i], finals[1][i], 1e-4, "variable " + std::to_string(i));
}

// One executable run from several threads at once gives every thread the fused result.
TEST(CpuFusion, ConcurrentRuns) {
  Graph g;
  Tensor a = g.placeholder({40, 1000}, tg::f32), b = g.placeholder({1000}, tg::f32);
  Tensor t = g.tanh(g.mul(a, b));
  Tensor y = g.add(t, g.reduce_mean(t, {0}));
  tg::Executable exe = g.compile({{a, a.type()}, {b, b.type()}}, {y}, {}, {.device = tg::Device::cpu()});
  std::vector<TensorData> in{rnd({40, 1000}, 30), rnd({1000}, 31)};
  TensorData want = exe.run(in)[0];
  std::vector<TensorData> got(4);
  std::vector<std::thread> ts;
  for (size_t i = 0; i < got.size(); ++i)
    ts.emplace_back([&, i] {
      for (int rep = 0; rep < 10; ++rep) got[i] = exe.run(in)[0];
    });
  for (auto& th : ts) th.join();
  for (const TensorData& r : got) expect_same(r, want, "concurrent");
}

// Values that must stay in memory: read inside a region, by a control-dependent op, by an
// assign and a later read_variable, by a broadcast of another shape, and a target that is
// also an intermediate. Fused and unfused runs agree, variables included.
TEST(CpuFusion, RegionsAssignsAndControlDeps) {
  Graph g;
  Tensor a = g.placeholder({16, 24}, tg::f32, "a"), p = g.placeholder({}, tg::boolean, "p");
  Tensor v = g.variable(TensorData::uniform({16, 24}, -1, 1, tg::f32, 40), "v");
  Tensor t = g.mul(g.add(a, g.scalar(1.0)), v);                  // intermediate and target
  Tensor row = g.reduce_sum(t, {0});                             // [24], folded
  Tensor wide = g.mul(g.broadcast_to(g.exp(row), {16, 24}), t);  // broadcast of a computed row
  tg::Operation up = g.assign(v, g.sub(v, g.mul(wide, g.scalar(0.01))));
  Tensor after = g.control_dependency({up}, [&] { return std::vector{g.add(g.read_variable(v), t)}; })[0];
  Tensor branch = g.if_else(
      p, [&](Graph& b) { return std::vector{b.relu(b.sub(t, wide))}; },
      [&](Graph& b) { return std::vector{t}; })[0];
  Tensor tail = g.sigmoid(g.add(branch, after));
  tg::Executable exe =
      g.compile({{a, a.type()}, {p, p.type()}}, {t, row, tail}, {up}, {.device = tg::Device::cpu()});
  kernels_with(plan_of(exe), 1);
  for (bool pred : {true, false}) {
    std::vector<TensorData> in{rnd({16, 24}, 41), TensorData::scalar(pred, tg::boolean)};
    TensorData v0 = exe.variable("v");
    std::vector<TensorData> fused = exe.run(in);
    TensorData v_fused = exe.variable("v");
    exe.set_variable("v", v0);
    std::vector<TensorData> plain;
    {
      WithSwitches off({{"TGRAPH_NO_FUSION", "1"}});
      plain = exe.run(in);
    }
    expect_same(fused[0], plain[0], "t");
    expect_close(fused[1], plain[1], 1e-6, "row");
    expect_close(fused[2], plain[2], 1e-6, "tail");
    expect_close(v_fused, exe.variable("v"), 1e-6, "v");
  }
}

// A chain over a tensor with a zero dim (broadcast against a scalar) runs and gives an empty
// result: the fused gather divided by the zero dim (SIGFPE) before it checked for no work.
TEST(CpuFusion, ZeroSizeTensorsRun) {
  Graph g;
  Tensor x = g.placeholder({0, 3}, tg::f32, "x");
  Tensor y = g.add(g.mul(g.exp(x), g.scalar(3.0)), g.scalar(1.0));
  tg::Executable exe = g.compile({{x, TensorType({0, 3}, tg::f32)}}, {y}, {}, {.device = tg::Device::cpu()});
  auto [fused, unfused] = run_both(exe, {TensorData(tg::Shape{0, 3}, tg::f32)});
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(fused[0].shape(), (tg::Shape{0, 3}));
  EXPECT_EQ(unfused[0].shape(), (tg::Shape{0, 3}));
}

// A kernel that folds the reduction of a leaf (a matmul's result, read in place) and stores an
// elementwise result in the bytes of that leaf (it dies at the kernel): the reduction must read
// the leaf before the store (found through the PyTorch frontend: a LayerNorm bias gradient).
TEST(CpuFusion, ReductionOfALeafReadsItBeforeAnOutputTakesItsBytes) {
  Graph g;
  Tensor a = g.placeholder({4, 5}, tg::f32, "a"), b = g.placeholder({5, 6}, tg::f32, "b");
  Tensor p = g.placeholder({6}, tg::f32, "p");
  Tensor x = g.matmul(a, b);
  Tensor column_sums = g.reduce_sum(x, {0});
  Tensor row_sums = g.reduce_sum(g.mul(x, p), {1}, true);
  tg::Executable exe = g.compile({{a, a.type()}, {b, b.type()}, {p, p.type()}}, {column_sums, row_sums}, {},
                                 {.device = tg::Device::cpu()});
  TensorData av = rnd({4, 5}, 1), bv = rnd({5, 6}, 2), pv = rnd({6}, 3);
  auto [fused, unfused] = run_both(exe, {av, bv, pv});
  for (size_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < fused[o].num_elements(); ++i)
      EXPECT_NEAR(fused[o].at(i), unfused[o].at(i), 1e-4) << "output " << o << " element " << i;
  for (int64_t j = 0; j < 6; ++j) {  // against sums computed here
    double s = 0;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < 5; ++k) s += av.at(i * 5 + k) * bv.at(k * 6 + j);
    EXPECT_NEAR(fused[0].at(j), s, 1e-4);
  }
}

// Elementwise chains after f32 convolutions run as oneDNN post-ops (post_op_plan.cpp): bias
// and activation, a per-channel operand fed at run time, a scalar, a residual (the block's
// input; a later convolution's result), and chains that must stop (a value read twice, a
// target). Values against the unfused run, in both data layouts; the plan's chains checked.
TEST(CpuFusion, ConvolutionsTakeTheirChainsAsPostOps) {
  for (bool nhwc : {true, false}) {
    WithSwitches keep_layout({{"TGRAPH_NO_LAYOUT", nhwc ? "0" : "1"}});
    const int64_t N = 2, C = 8, H = 9;
    tg::ConvDesc d;
    d.padding = tg::PaddingStyle::same;
    d.data_layout = nhwc ? tg::Layout::nhwc : tg::Layout::nchw;
    d.weights_layout = nhwc ? tg::Layout::hwio : tg::Layout::oihw;
    const tg::Shape xs = nhwc ? tg::Shape{N, H, H, C} : tg::Shape{N, C, H, H};
    const tg::Shape w3s = nhwc ? tg::Shape{3, 3, C, C} : tg::Shape{C, C, 3, 3};
    const tg::Shape w1s = nhwc ? tg::Shape{1, 1, C, C} : tg::Shape{C, C, 1, 1};
    const tg::Shape per_channel = nhwc ? tg::Shape{C} : tg::Shape{C, 1, 1};
    Graph g;
    Tensor x = g.placeholder(xs, tg::f32, "x"), scale = g.placeholder(per_channel, tg::f32, "scale");
    Tensor w3 = g.constant(rnd(w3s, 11, tg::f32, -0.3, 0.3)), w1 = g.constant(rnd(w1s, 12, tg::f32, -0.3, 0.3));
    Tensor b1 = g.constant(rnd(per_channel, 13)), b2 = g.constant(rnd(per_channel, 14));
    Tensor y1 = g.relu(g.add(g.conv2d(x, w3, d), b1));                                  // bias, relu
    Tensor y2 = g.leaky_relu(g.add(g.sub(g.mul(g.conv2d(y1, w1, d), scale), g.scalar(0.5)), x), 0.1);
    Tensor c3 = g.conv2d(y2, w3, d);                                                     // added to c4:
    Tensor y3 = g.sigmoid(g.add(c3, g.add(g.conv2d(y2, w1, d), b2)));                   // the later one
    Tensor t = g.div(g.conv2d(y3, w1, d), b1);                                           // a target:
    Tensor y4 = g.gelu(t);                                                               // the chain stops
    Tensor c5 = g.conv2d(y4, w3, d);                                                     // read twice
    Tensor y5 = g.add(g.silu(c5), g.elu(g.add(c5, b2), 0.7));
    tg::Executable exe = g.compile({{x, x.type()}, {scale, scale.type()}}, {y2, y3, t, y4, y5}, {},
                                   {.device = tg::Device::cpu()});
    const std::string layout = nhwc ? "nhwc" : "nchw";
    auto [fused, plain] = run_both(exe, {rnd(xs, 1), rnd(per_channel, 2)});
    for (size_t i = 0; i < fused.size(); ++i) expect_close(fused[i], plain[i], 1e-5, layout + " output " + std::to_string(i));

    // y1: add relu; y2: mul sub add leaky_relu; y3's pair: add(bias) add(c3) sigmoid on c4;
    // t: div. c3 and c5 (read twice) take none.
    tg::detail::CpuPlan p = plan_of(exe);
    std::vector<size_t> chains;
    for (const auto& post : p.posts) chains.push_back(post.ops.size());
    std::sort(chains.begin(), chains.end());
    EXPECT_EQ(chains, (std::vector<size_t>{1, 2, 3, 4})) << layout;
    int sums = 0;
    for (const auto& post : p.posts) sums += post.sum >= 0;
    EXPECT_EQ(sums, 2) << layout;  // x into y2, c3 into c4's chain

    WithSwitches off({{"TGRAPH_NO_CONV_POST_OPS", "1"}});
    EXPECT_TRUE(plan_of(exe).posts.empty());
  }
}

// When oneDNN declines a convolution (padding wider than its 1x1 kernel), its step runs the
// convolution and the chain one op at a time, the shared broadcast included.
TEST(CpuFusion, ConvolutionPostOpsFallBackOpByOp) {
  const int64_t C = 4;
  tg::ConvDesc d;
  d.explicit_padding = {1, 1, 1, 1};
  Graph g;
  Tensor x = g.placeholder({2, 5, 5, C}, tg::f32, "x");
  Tensor w = g.constant(rnd({1, 1, C, C}, 3)), b = g.constant(rnd({C}, 4));
  Tensor c = g.conv2d(x, w, d);
  Tensor y = g.relu(g.add(c, b));
  Tensor z = g.mul(g.conv2d(y, w, d), b);  // the same broadcast of b, read through its source
  tg::Executable exe = g.compile({{x, x.type()}}, {y, z}, {}, {.device = tg::Device::cpu()});
  ASSERT_EQ(plan_of(exe).posts.size(), 2u);  // (add, relu), ending at the target y; (mul)
  auto [fused, plain] = run_both(exe, {rnd({2, 5, 5, C}, 1)});
  expect_close(fused[0], plain[0], 1e-6, "y");
  expect_close(fused[1], plain[1], 1e-6, "z");
}

// A reshape's result takes its input's arena bytes (no copy), and those bytes stay reserved
// until the reshape's (or a reshape of it's) last reader: values computed in between, which
// would otherwise reuse them, must not clobber it.
TEST(CpuFusion, ReshapesShareTheirInputsBytes) {
  Graph g;
  Tensor x = g.placeholder({64, 48}, tg::f32, "x"), w = g.placeholder({48, 48}, tg::f32, "w");
  Tensor w2 = g.placeholder({48, 48}, tg::f32, "w2");
  Tensor a = g.matmul(x, w);                             // in the arena
  Tensor r = g.reshape(g.reshape(a, {48, 64}), {3072});  // views of a's bytes
  Tensor b = g.matmul(g.matmul(x, w2), w2);              // allocations of a's size after its last direct reader
  Tensor c = g.add(g.exp(g.reshape(b, {3072})), r);
  tg::Executable exe = g.compile({{x, x.type()}, {w, w.type()}, {w2, w2.type()}}, {c}, {},
                                 {.device = tg::Device::cpu()});
  tg::detail::CpuPlan p = plan_of(exe);
  const auto& G = exe.impl().module.graph;
  int shared = 0;
  for (size_t v = 0; v < G.values.size(); ++v) {
    const int32_t producer = G.values[v].node;
    if (producer < 0 || G.nodes[static_cast<size_t>(producer)].kind != tg::detail::OpKind::Reshape) continue;
    const int32_t in = G.nodes[static_cast<size_t>(producer)].inputs[0];
    shared += p.offset[v] >= 0 && p.offset[v] == p.offset[static_cast<size_t>(in)];
  }
  EXPECT_GE(shared, 2);
  TensorData xv = rnd({64, 48}, 1, tg::f32, -0.5, 0.5), wv = rnd({48, 48}, 2, tg::f32, -0.5, 0.5);
  TensorData w2v = rnd({48, 48}, 3, tg::f32, -0.5, 0.5);
  auto [fused, plain] = run_both(exe, {xv, wv, w2v});
  expect_close(fused[0], plain[0], 1e-6, "c");
  auto again = exe.run({xv, wv, w2v});  // a second run over the same (reused) arena
  expect_close(again[0], plain[0], 1e-6, "c, second run");
}

// Matmuls take bias and activation as oneDNN post-ops too, also across a reshape of the result
// (BERT's intermediate layer: matmul, bias, reshape, GELU); a residual add stays a loop.
TEST(CpuFusion, MatmulsTakeBiasAndActivationAsPostOps) {
  Graph g;
  Tensor x = g.placeholder({2, 16, 24}, tg::f32, "x"), w = g.constant(rnd({32, 24}, 2, tg::f32, -0.3, 0.3));
  Tensor b = g.constant(rnd({32}, 3));
  Tensor flat = g.reshape(x, {32, 24});
  Tensor h = g.gelu(g.reshape(g.add(g.matmul(flat, w, false, true), b), {2, 16, 32}));  // bias, reshape, gelu
  Tensor w2 = g.constant(rnd({32, 32}, 4, tg::f32, -0.3, 0.3));
  Tensor r = g.add(g.matmul(h, w2), h);                                                  // a residual: a loop
  Tensor w3 = g.constant(rnd({32, 8}, 5, tg::f32, -0.3, 0.3));
  Tensor t = g.tanh(g.mul(g.matmul(h, w3), g.scalar(0.5)));                              // scalar, activation
  tg::Executable exe = g.compile({{x, x.type()}}, {r, t}, {}, {.device = tg::Device::cpu()});
  tg::detail::CpuPlan p = plan_of(exe);
  std::vector<size_t> chains;
  for (const auto& post : p.posts) chains.push_back(post.ops.size());
  std::sort(chains.begin(), chains.end());
  EXPECT_EQ(chains, (std::vector<size_t>{2, 2}));  // (add, gelu) across the reshape; (mul, tanh)
  auto [fused, plain] = run_both(exe, {rnd({2, 16, 24}, 1)});
  expect_close(fused[0], plain[0], 1e-5, "residual");
  expect_close(fused[1], plain[1], 1e-5, "tanh");
}
