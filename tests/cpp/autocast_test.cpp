// The autocast pass (CompileOptions::precision bf16 / f16): which nodes get casts, one cast per
// value, types at the boundaries unchanged, fusion of the casts; and bf16 training on the CPU
// against f32.
#include "passes/autocast.h"

#include <cmath>
#include <filesystem>
#include <map>

#include "backends/cpu/kernels.h"
#include "backends/cpu/reference.h"
#include "ir/verifier.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "runtime/executable_impl.h"
#include "test_util.h"
#include "tgraph/optim.h"
#include "tgraph/tgraph.h"
#include "module_util.h"

using namespace tg;
using namespace tg::detail;

namespace {

using passtest::module_of;

const Node& producer(const Module& m, int32_t v) {
  return m.graph.nodes[static_cast<size_t>(m.graph.values[static_cast<size_t>(v)].node)];
}

bool is_compute(OpKind k) {
  Family f = op_def(k).family;
  return f == Family::matmul || f == Family::conv || f == Family::conv_grad || k == OpKind::MaxPool2d ||
         k == OpKind::MaxPool2dGrad;
}

// Live nodes of every block, in order.
std::vector<int32_t> live_nodes(const Module& m) {
  std::vector<int32_t> ids;
  for (const Block& b : m.graph.blocks) ids.insert(ids.end(), b.nodes.begin(), b.nodes.end());
  return ids;
}

int count(const Module& m, OpKind k) {
  int c = 0;
  for (int32_t id : live_nodes(m)) c += m.graph.nodes[static_cast<size_t>(id)].kind == k;
  return c;
}

// Every matmul / conv computes in `half` from half operands, its result is read only by one
// cast back to f32, and no value is cast to half twice.
void expect_autocast(const Module& m, DType half) {
  EXPECT_EQ(verify(m.graph), "");
  std::map<int32_t, int> casts_of;  // value -> casts of it to half
  int compute = 0;
  for (int32_t id : live_nodes(m)) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::Cast && std::get<CastDesc>(n.attr).to == half) ++casts_of[n.inputs[0]];
    if (!is_compute(n.kind)) continue;
    ++compute;
    SCOPED_TRACE(op_name(n.kind));
    for (int32_t v : n.inputs) EXPECT_EQ(m.graph.type(v).dtype, half);
    int32_t y = n.outputs[0];
    EXPECT_EQ(m.graph.type(y).dtype, half);
    // Read by one cast back to f32, and directly by other ops computing in half.
    int back = 0;
    for (int32_t other : live_nodes(m)) {
      const Node& o = m.graph.nodes[static_cast<size_t>(other)];
      for (int32_t v : o.inputs)
        if (v == y) {
          if (o.kind == OpKind::Cast)
            back += m.graph.type(o.outputs[0]).dtype == DType::f32;
          else
            EXPECT_TRUE(is_compute(o.kind)) << op_name(o.kind) << " reads a half result";
        }
    }
    EXPECT_EQ(back, 1);
  }
  EXPECT_GT(compute, 0);
  for (auto [v, c] : casts_of)
    EXPECT_EQ(c, 1) << "value " << m.graph.value_name(v) << " is cast " << c << " times";
}

std::vector<TensorType> types_of(const Module& m, const std::vector<int32_t>& values) {
  std::vector<TensorType> t;
  for (int32_t v : values) t.push_back(m.graph.type(v));
  return t;
}

}  // namespace

TEST(PassAutocast, MlpWithGradientsCastsEveryMatmulOnce) {
  Graph g;
  Tensor x = g.placeholder({4, 8}, f32, "x");
  Tensor w1 = g.variable(TensorData::randn({8, 16}, f32, 1), "w1");
  Tensor b1 = g.variable(TensorData::randn({16}, f32, 2), "b1");
  Tensor w2 = g.variable(TensorData::randn({16, 3}, f32, 3), "w2");
  Tensor h = g.relu(g.add(g.matmul(x, w1), b1));
  Tensor y = g.matmul(h, w2);
  Tensor loss = g.reduce_mean(g.square(y));
  auto grads = g.gradients(loss, {w1, b1, w2});
  std::vector<Tensor> targets{loss, grads[w1], grads[b1], grads[w2], y};
  Module m = module_of(g, targets);
  std::vector<TensorType> before = types_of(m, m.targets);
  const int matmuls = count(m, OpKind::MatMul);
  ASSERT_GE(matmuls, 5);  // 2 forward, 3 backward (dx of layer 1 is not needed)

  EXPECT_TRUE(Autocast(DType::bf16).run(m));
  expect_autocast(m, DType::bf16);
  EXPECT_EQ(count(m, OpKind::MatMul), matmuls);
  EXPECT_EQ(types_of(m, m.targets), before);  // the graph's outputs keep their f32 types
  EXPECT_EQ(m.graph.type(y.id()).dtype, f32);
  EXPECT_EQ(producer(m, y.id()).kind, OpKind::Cast);  // y's id is now the cast back
  // w1 is read by the forward matmul only; w2 by the forward one and dh = dy w2^T: both
  // read the same single cast.
  int w2_casts = 0;
  for (int32_t id : live_nodes(m)) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    w2_casts += n.kind == OpKind::Cast && n.inputs[0] == w2.id();
  }
  EXPECT_EQ(w2_casts, 1);
  // Nothing left to cast: the pass reports no change.
  EXPECT_FALSE(Autocast(DType::bf16).run(m));
}

TEST(PassAutocast, CnnForwardAndGradientsIncludingConvTranspose) {
  Graph g;
  Tensor x = g.placeholder({2, 6, 6, 3}, f32, "x");
  Tensor w = g.variable(TensorData::randn({3, 3, 3, 4}, f32, 1), "w");
  Tensor wt = g.variable(TensorData::randn({2, 2, 4, 4}, f32, 2), "wt");
  ConvDesc same{.stride = {1, 1}, .padding = PaddingStyle::same};
  Tensor c = g.relu(g.conv2d(x, w, same));
  Tensor up = g.conv_transpose2d(c, wt, {.stride = {2, 2}});
  Tensor loss = g.reduce_sum(g.square(up));
  auto grads = g.gradients(loss, {w, wt});
  Module m = module_of(g, {loss, grads[w], grads[wt]});
  std::vector<TensorType> before = types_of(m, m.targets);
  EXPECT_GE(count(m, OpKind::Conv2dWeightGrad), 1);
  EXPECT_TRUE(Autocast(DType::bf16).run(m));
  expect_autocast(m, DType::bf16);
  EXPECT_EQ(types_of(m, m.targets), before);
  // x feeds the forward conv and the weight gradient through one cast.
  int x_casts = 0;
  for (int32_t id : live_nodes(m)) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    x_casts += n.kind == OpKind::Cast && n.inputs[0] == x.id();
  }
  EXPECT_EQ(x_casts, 1);
  for (int32_t id : live_nodes(m)) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::Conv2dWeightGrad) EXPECT_EQ(m.graph.type(n.inputs[1]).dtype, DType::bf16);
  }
}

// Max pooling and its gradient compute in half, as PyTorch's autocast runs them, reading the
// convolution's half result directly where it follows one.
TEST(PassAutocast, MaxPoolingAndItsGradientComputeInHalf) {
  Graph g;
  Tensor x = g.placeholder({2, 8, 8, 3}, f32, "x");
  Tensor w = g.variable(TensorData::randn({3, 3, 3, 4}, f32, 1), "w");
  Tensor p = g.max_pool2d(g.conv2d(x, w, {.stride = {1, 1}, .padding = PaddingStyle::same}),
                          {.kernel = {3, 3}, .stride = {2, 2}, .explicit_padding = {1, 1, 1, 1}});
  Tensor loss = g.reduce_sum(g.square(p));
  auto grads = g.gradients(loss, {w});
  Module m = module_of(g, {loss, grads[w]});
  ASSERT_EQ(count(m, OpKind::MaxPool2dGrad), 1);
  EXPECT_TRUE(Autocast(DType::bf16).run(m));
  expect_autocast(m, DType::bf16);
  for (int32_t id : live_nodes(m)) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind != OpKind::MaxPool2d && n.kind != OpKind::MaxPool2dGrad) continue;
    for (int32_t v : n.inputs) EXPECT_EQ(m.graph.type(v).dtype, DType::bf16) << op_name(n.kind);
    if (n.kind == OpKind::MaxPool2d) EXPECT_EQ(producer(m, n.inputs[0]).kind, OpKind::Conv2d);
  }
}

TEST(PassAutocast, ChainedMatmulsReadTheHalfResultDirectly) {
  Graph g;
  Tensor x = g.placeholder({4, 8}, f32, "x");
  Tensor a = g.variable(TensorData::randn({8, 8}, f32, 1), "a");
  Tensor y = g.matmul(g.matmul(x, a), a);
  Module m = module_of(g, {y});
  EXPECT_TRUE(Autocast(DType::f16).run(m));
  expect_autocast(m, DType::f16);
  // x and a are cast once each (a serves both matmuls); the outer matmul reads the inner half
  // result, no f16 -> f32 -> f16 round trip; both results are cast back (dce drops the inner).
  EXPECT_EQ(count(m, OpKind::Cast), 4);
  const Node& outer = producer(m, producer(m, y.id()).inputs[0]);
  ASSERT_EQ(outer.kind, OpKind::MatMul);
  EXPECT_EQ(producer(m, outer.inputs[0]).kind, OpKind::MatMul);
}

// A Linear's x @ W^T with W a constant: the weight is cast, then transposed (the same bits as
// the cast of the transpose), so the cast folds as a weight's cast and the transpose becomes
// the matmul's flag — no transposed copy of the weight, in f32 or in half, and a dynamic
// executable's per-size copies fold nothing but the cast the first found (fold_memo.h). A
// transpose of a value that is not a constant is cast as before.
TEST(PassAutocast, AConstantWeightIsCastBeforeItsTranspose) {
  const TensorData w = TensorData::uniform({24, 16}, -1, 1, f32, 5);
  Graph g;
  Tensor x = g.placeholder({-1, 16}, f32, "x");
  Tensor act = g.placeholder({24, 16}, f32, "act");
  Tensor y = g.matmul(x, g.transpose(g.constant(w), {1, 0}));
  Tensor z = g.matmul(x, g.transpose(act, {1, 0}));
  Module m = module_of(g, {y, z});
  EXPECT_TRUE(Autocast(DType::f16).run(m));
  expect_autocast(m, DType::f16);
  const Node& mm = producer(m, producer(m, y.id()).inputs[0]);
  ASSERT_EQ(mm.kind, OpKind::MatMul);
  const Node& t = producer(m, mm.inputs[1]);
  ASSERT_EQ(t.kind, OpKind::Transpose);
  const Node& c = producer(m, t.inputs[0]);
  ASSERT_EQ(c.kind, OpKind::Cast);
  EXPECT_EQ(producer(m, c.inputs[0]).kind, OpKind::Constant);
  const Node& mz = producer(m, producer(m, z.id()).inputs[0]);
  EXPECT_EQ(producer(m, mz.inputs[1]).kind, OpKind::Cast) << "an activation's transpose is cast as before";

  // Through the whole pipeline: the matmul reads the weight's half copy with its transpose flag.
  Module full = module_of(g, {y});
  full.graph.values[static_cast<size_t>(x.id())].type = TensorType({4, 16}, f32);
  reinfer(full.graph);
  run_pipeline(full, true, true, Precision::f16, false);
  int transposes = 0, matmuls = 0;
  for (int32_t id : live_nodes(full)) {
    const Node& n = full.graph.nodes[static_cast<size_t>(id)];
    transposes += n.kind == OpKind::Transpose;
    if (n.kind != OpKind::MatMul) continue;
    ++matmuls;
    EXPECT_TRUE(std::get<MatmulDesc>(n.attr).transpose_b);
    const Node& weight = producer(full, n.inputs[1]);
    ASSERT_EQ(weight.kind, OpKind::Constant);
    ASSERT_EQ(weight.data.type(), TensorType({24, 16}, DType::f16));
    for (int64_t i = 0; i < w.num_elements(); ++i) {
      TensorData one({1}, DType::f16);
      one.set(0, w.at(i));
      ASSERT_EQ(weight.data.at(i), one.at(0)) << i;
    }
  }
  EXPECT_EQ(matmuls, 1);
  EXPECT_EQ(transposes, 0);

  // And the values, at two sizes of one dynamic executable, within half rounding of f32's.
  Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu(), .precision = Precision::f16});
  Executable r = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu()});
  for (int64_t rows : {4, 7}) {
    TensorData in = TensorData::uniform({rows, 16}, -1, 1, f32, 9);
    const auto got = e.run({in})[0].to_vector(), want = r.run({in})[0].to_vector();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-2) << rows << " rows, " << i;
  }
}

TEST(PassAutocast, LeavesOtherDtypesAndOpsAlone) {
  Graph g;
  Tensor a = g.placeholder({3, 4}, f64, "a");
  Tensor b = g.placeholder({4, 2}, f64, "b");
  Tensor i = g.placeholder({3, 4}, i32, "i");
  Tensor j = g.placeholder({4, 2}, i32, "j");
  Tensor s = g.softmax(g.placeholder({3, 4}, f32, "s"), -1);
  Module m = module_of(g, {g.matmul(a, b), g.matmul(i, j), s});
  EXPECT_FALSE(Autocast(DType::bf16).run(m));
  EXPECT_EQ(count(m, OpKind::Cast), 0);
}

TEST(PassAutocast, MatmulInsideARegionCastsTheOuterValueInItsBlock) {
  Graph g;
  Tensor p = g.placeholder({}, boolean, "p");
  Tensor x = g.placeholder({2, 3}, f32, "x");
  Tensor w = g.variable(TensorData::randn({3, 3}, f32, 1), "w");
  Tensor h = g.relu(x);
  auto out = g.if_else(
      p, [&](Graph& b) { return std::vector{b.matmul(h, w)}; },
      [&](Graph& b) { return std::vector{b.neg(h)}; });
  Module m = module_of(g, {out[0]});
  EXPECT_TRUE(Autocast(DType::bf16).run(m));
  expect_autocast(m, DType::bf16);
  // The cast of h sits right after relu in block 0, where h lives.
  const auto& top = m.graph.blocks[0].nodes;
  for (size_t k = 0; k + 1 < top.size(); ++k)
    if (m.graph.nodes[static_cast<size_t>(top[k])].kind == OpKind::Relu)
      EXPECT_EQ(m.graph.nodes[static_cast<size_t>(top[k + 1])].kind, OpKind::Cast);
  EXPECT_EQ(m.graph.type(out[0].id()).dtype, f32);
}

TEST(PassAutocast, F32AndTf32LeaveTheGraphUntouched) {
  Graph g;
  Tensor x = g.placeholder({4, 8}, f32, "x");
  Tensor w = g.variable(TensorData::randn({8, 2}, f32, 1), "w");
  Tensor y = g.matmul(x, w);
  for (Precision p : {Precision::f32, Precision::tf32}) {
    Module m = module_of(g, {y});
    const size_t nodes = m.graph.nodes.size(), values = m.graph.values.size();
    EXPECT_FALSE(apply_precision(m, p));
    EXPECT_EQ(m.graph.nodes.size(), nodes);
    EXPECT_EQ(m.graph.values.size(), values);
    EXPECT_EQ(m.graph.allow_tf32, p == Precision::tf32);
  }
  Module m = module_of(g, {y});
  EXPECT_TG_ERROR(apply_precision(m, static_cast<Precision>(7)), "[compile] unknown precision 7");
  EXPECT_TG_ERROR((g.compile({{x, x.type()}}, {y}, {},
                             {.device = Device::cpu(), .precision = static_cast<Precision>(9)})),
                  "unknown precision");
}

TEST(PassAutocast, CastsFuseIntoNeighbouringKernels) {
  // relu -> matmul -> relu: the cast of relu's output joins relu's kernel, the cast back joins
  // the next relu's kernel; only the weight's cast is a kernel of its own.
  Graph g;
  Tensor x = g.placeholder({16, 32}, f32, "x");
  Tensor w = g.variable(TensorData::randn({32, 32}, f32, 1), "w");
  Tensor y = g.exp(g.relu(g.matmul(g.relu(x), w)));
  Module m = module_of(g, {y});
  m.feeds.push_back(x.id());
  run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/true, Precision::bf16);
  expect_autocast(m, DType::bf16);
  FusionPlan plan = plan_fusion(m, 0);
  int lone_casts = 0, fused_casts = 0;
  for (const Step& s : plan.steps) {
    if (!s.fused()) {
      lone_casts += m.graph.nodes[static_cast<size_t>(s.node)].kind == OpKind::Cast;
      continue;
    }
    for (int32_t id : s.group.nodes)
      fused_casts += m.graph.nodes[static_cast<size_t>(id)].kind == OpKind::Cast;
  }
  EXPECT_EQ(fused_casts, 2);
  EXPECT_EQ(lone_casts, 1);  // the variable w
}

namespace {

// The CPU's fast path for a half op (f32 kernel on widened operands, one rounding) against the
// reference interpreter (double accumulation, one rounding): at most a unit in the last place
// of the half result apart, relative to the largest |value|.
void expect_fast_half_matches_reference(DType half) {
  Graph g;
  Tensor a = g.placeholder({5, 40}, half, "a"), b = g.placeholder({40, 7}, half, "b");
  Tensor x = g.placeholder({2, 6, 6, 8}, half, "x"), w = g.placeholder({3, 3, 8, 4}, half, "w");
  Tensor dy = g.placeholder({2, 6, 6, 4}, half, "dy"), xf = g.placeholder({3, 9}, f32, "xf");
  ConvDesc same{.stride = {1, 1}, .padding = PaddingStyle::same};
  const std::vector<Tensor> cases{
      g.matmul(a, b),
      g.matmul(b, a, true, true),
      g.conv2d(x, w, same),
      g.conv2d_data_grad(dy, w, Shape({2, 6, 6, 8}), same),
      g.conv2d_weight_grad(dy, x, Shape({3, 3, 8, 4}), same),
      g.cast(xf, half),
      g.cast(g.cast(xf, half), f32),
  };
  const GraphImpl& G = g.impl();
  uint64_t seed = 1;
  for (const Tensor& y : cases) {
    const Node& n = G.nodes[static_cast<size_t>(G.values[static_cast<size_t>(y.id())].node)];
    SCOPED_TRACE(op_name(n.kind));
    std::vector<TensorData> in;
    for (int32_t v : n.inputs)
      in.push_back(TensorData::uniform(G.type(v).shape, -1, 1, G.type(v).dtype, seed++));
    TensorData got = cpu_eval(G, n, in)[0], want = reference_eval(G, n, in)[0];
    ASSERT_EQ(got.type(), want.type());
    double scale = 1e-30, worst = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) scale = std::max(scale, std::abs(want.at(i)));
    for (int64_t i = 0; i < want.num_elements(); ++i)
      worst = std::max(worst, std::abs(got.at(i) - want.at(i)));
    EXPECT_LE(worst / scale, half == DType::bf16 ? 8e-3 : 1e-3);
    if (n.kind == OpKind::Cast) EXPECT_EQ(worst, 0.0);  // one rounding, round to nearest even
  }
}

}  // namespace

TEST(AutocastCpu, FastHalfKernelsMatchTheReference) {
  expect_fast_half_matches_reference(DType::bf16);
  expect_fast_half_matches_reference(DType::f16);
}

namespace {

// A small MLP or CNN with its SGD step, built identically into a fresh graph per precision
// (variables live with their graph, so the two runs do not share weights).
struct Model {
  Graph g;
  Tensor x, y, loss;
  Operation step;
  Executable exe;
};

void build_mlp(Model& md) {
  Graph& g = md.g;
  md.x = g.placeholder({16, 12}, f32, "x");
  md.y = g.placeholder({16, 4}, f32, "y");
  Tensor w1 = g.variable(TensorData::uniform({12, 32}, -0.5, 0.5, f32, 11), "w1");
  Tensor b1 = g.variable(TensorData::zeros({32}), "b1");
  Tensor w2 = g.variable(TensorData::uniform({32, 4}, -0.5, 0.5, f32, 12), "w2");
  Tensor logits = g.matmul(g.relu(g.add(g.matmul(md.x, w1), b1)), w2);
  md.loss = g.softmax_cross_entropy(logits, md.y);
  std::vector<Tensor> vars{w1, b1, w2};
  md.step = optim::sgd(g, vars, g.gradients(md.loss, vars), g.scalar(0.2));
}

void build_cnn(Model& md) {
  Graph& g = md.g;
  md.x = g.placeholder({4, 8, 8, 2}, f32, "x");
  md.y = g.placeholder({4, 3}, f32, "y");
  Tensor k = g.variable(TensorData::uniform({3, 3, 2, 6}, -0.5, 0.5, f32, 21), "k");
  Tensor w = g.variable(TensorData::uniform({6, 3}, -0.5, 0.5, f32, 22), "w");
  Tensor c = g.relu(g.conv2d(md.x, k, {.stride = {1, 1}, .padding = PaddingStyle::same}));
  // ResNet's stem pooling: 3x3, stride 2, padding 1 (bf16: max pooling and its gradient too).
  c = g.max_pool2d(c, {.kernel = {3, 3}, .stride = {2, 2}, .explicit_padding = {1, 1, 1, 1}});
  Tensor logits = g.matmul(g.reduce_mean(c, {1, 2}), w);
  md.loss = g.softmax_cross_entropy(logits, md.y);
  std::vector<Tensor> vars{k, w};
  md.step = optim::sgd(g, vars, g.gradients(md.loss, vars), g.scalar(1.0));
}

TensorData one_hot_labels(int64_t n, int64_t classes) {
  std::vector<double> v(static_cast<size_t>(n * classes), 0.0);
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * classes + (i * 7 + 3) % classes)] = 1.0;
  return TensorData::from_vector({n, classes}, f32, v);
}

// Losses of `steps` training steps under precision p.
std::vector<double> train(void (*build)(Model&), Precision p, int steps) {
  Model md;
  build(md);
  md.exe = md.g.compile({{md.x, md.x.type()}, {md.y, md.y.type()}}, {md.loss}, {md.step},
                        {.device = Device::cpu(), .precision = p});
  TensorData xs = TensorData::randn(md.x.type().shape, f32, 5);
  TensorData ys = one_hot_labels(md.y.type().shape[0], md.y.type().shape[1]);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(md.exe.run({xs, ys})[0].at(0));
  return losses;
}

void expect_bf16_trains_like_f32(void (*build)(Model&)) {
  const int steps = 8;
  std::vector<double> ref = train(build, Precision::f32, steps), half = train(build, Precision::bf16, steps);
  // bf16 keeps 8 bits of mantissa: the first loss agrees to ~1e-2, the curves stay close.
  EXPECT_NEAR(half[0], ref[0], 2e-2 * std::abs(ref[0]));
  for (int i = 0; i < steps; ++i)
    EXPECT_NEAR(half[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 5e-2 * std::abs(ref[0]));
  EXPECT_LT(half.back(), 0.8 * half.front());  // the loss falls under bf16
  EXPECT_NE(half[0], ref[0]);                  // and bf16 really was used
}

}  // namespace

TEST(AutocastCpu, MlpTrainingStepBf16MatchesF32) { expect_bf16_trains_like_f32(build_mlp); }

TEST(AutocastCpu, CnnTrainingStepBf16MatchesF32) { expect_bf16_trains_like_f32(build_cnn); }

TEST(AutocastCpu, F16AndTf32RunOnTheCpu) {
  std::vector<double> ref = train(build_mlp, Precision::f32, 1);
  EXPECT_EQ(train(build_mlp, Precision::tf32, 1)[0], ref[0]);  // tf32 is f32 on the CPU
  EXPECT_NEAR(train(build_mlp, Precision::f16, 1)[0], ref[0], 5e-3 * std::abs(ref[0]));
}

TEST(AutocastCpu, SavedExecutablesKeepTheirPrecision) {
  for (Precision p : {Precision::tf32, Precision::bf16}) {
    Graph g;
    Tensor x = g.placeholder({3, 16}, f32, "x");
    Tensor w = g.variable(TensorData::uniform({16, 5}, -1, 1, f32, 1), "w");
    Tensor y = g.matmul(x, w);
    Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu(), .precision = p});
    const std::string path = (std::filesystem::temp_directory_path() / "tgraph_autocast.tgx").string();
    e.save(path);
    Executable l = Executable::load(path);
    std::filesystem::remove(path);
    EXPECT_EQ(l.impl().precision, p);
    EXPECT_EQ(l.impl().module.graph.allow_tf32, p == Precision::tf32);
    TensorData in = TensorData::uniform({3, 16}, -1, 1, f32, 2);
    TensorData a = e.run({in})[0], b = l.run({in})[0];
    for (int64_t i = 0; i < a.num_elements(); ++i) EXPECT_EQ(a.at(i), b.at(i));
  }
}

// Attention computes in half as PyTorch's autocast runs scaled_dot_product_attention: q, k, v
// and an additive mask cast, a boolean mask left boolean; the result is cast back once, and the
// CPU's bf16 run stays within bf16 rounding of the f32 one.
TEST(PassAutocast, AttentionComputesInHalfWithEitherMask) {
  for (bool boolean : {false, true}) {
    SCOPED_TRACE(boolean ? "boolean mask" : "additive mask");
    Graph g;
    Tensor q = g.placeholder({2, 3, 8, 16}, f32, "q"), k = g.placeholder({2, 3, 12, 16}, f32, "k");
    Tensor v = g.placeholder({2, 3, 12, 16}, f32, "v");
    Tensor mask = g.placeholder({2, 1, 1, 12}, boolean ? DType::boolean : f32, "mask");
    Tensor y = g.scaled_dot_product_attention(q, k, v, mask);
    Module m = module_of(g, {y});
    EXPECT_TRUE(Autocast(DType::bf16).run(m));
    EXPECT_EQ(verify(m.graph), "");
    ASSERT_EQ(count(m, OpKind::Attention), 1);
    for (int32_t id : live_nodes(m)) {
      const Node& n = m.graph.nodes[static_cast<size_t>(id)];
      if (n.kind != OpKind::Attention) continue;
      for (size_t i = 0; i < 3; ++i) EXPECT_EQ(m.graph.type(n.inputs[i]).dtype, DType::bf16);
      EXPECT_EQ(m.graph.type(n.inputs[3]).dtype, boolean ? DType::boolean : DType::bf16);
      EXPECT_EQ(m.graph.type(n.outputs[0]).dtype, DType::bf16);
    }
    std::vector<TensorData> in{TensorData::uniform({2, 3, 8, 16}, -1, 1, f32, 1),
                               TensorData::uniform({2, 3, 12, 16}, -1, 1, f32, 2),
                               TensorData::uniform({2, 3, 12, 16}, -1, 1, f32, 3),
                               boolean ? TensorData::zeros({2, 1, 1, 12}, DType::boolean)
                                       : TensorData::uniform({2, 1, 1, 12}, -2, 2, f32, 4)};
    if (boolean)
      for (int64_t i = 0; i < 24; ++i) in[3].set(i, i % 5 != 0 ? 1.0 : 0.0);
    std::vector<std::pair<Tensor, TensorType>> feeds{{q, q.type()}, {k, k.type()}, {v, v.type()}, {mask, mask.type()}};
    TensorData want = g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(in)[0];
    TensorData got =
        g.compile(feeds, {y}, {}, {.device = Device::cpu(), .precision = Precision::bf16}).run(in)[0];
    ASSERT_EQ(got.dtype(), f32);
    double worst = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) worst = std::max(worst, std::abs(got.at(i) - want.at(i)));
    EXPECT_GT(worst, 0.0);  // it did compute in bf16
    EXPECT_LT(worst, 3e-2);
  }
}
