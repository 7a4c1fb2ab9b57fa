// The model library: layers, training on tiny problems, BatchNorm statistics, model builders.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "tgraph/executable.h"
#include "tgraph/graph.h"
#include "tgraph/nn.h"
#include "tgraph/optim.h"

using namespace tg;

namespace {

CompileOptions cpu() { return CompileOptions{.device = Device::cpu()}; }

// Labels of a fixed random teacher: one-hot argmax of x W_t.
TensorData teacher_labels(const TensorData& x, int64_t classes, uint64_t seed) {
  int64_t n = x.shape()[0], d = x.num_elements() / n;
  TensorData wt = TensorData::randn({d, classes}, f32, seed);
  TensorData y = TensorData::zeros({n, classes});
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    double bv = -1e300;
    for (int64_t c = 0; c < classes; ++c) {
      double s = 0;
      for (int64_t j = 0; j < d; ++j) s += x.at(i * d + j) * wt.at(j * classes + c);
      if (s > bv) bv = s, best = c;
    }
    y.set(i * classes + best, 1.0);
  }
  return y;
}

std::vector<double> train_losses(Graph& g, nn::Module& model, Shape xshape, int64_t classes, int steps, bool adam) {
  Tensor x = g.placeholder(xshape, f32, "x");
  Tensor labels = g.placeholder({xshape[0], classes}, f32, "labels");
  model.train();
  Tensor loss = g.softmax_cross_entropy(model.forward(g, x), labels);
  auto params = model.parameters();
  auto grads = g.gradients(loss, params);
  Tensor lr = g.scalar(adam ? 0.02 : 0.1);
  std::vector<Operation> targets = model.updates();
  targets.push_back(adam ? optim::adam(g, params, grads, lr) : optim::sgd(g, params, grads, lr, {.momentum = 0.9}));
  Executable exe = g.compile({{x, TensorType(xshape, f32)}, {labels, TensorType({xshape[0], classes}, f32)}}, {loss},
                             targets, cpu());
  TensorData xd = TensorData::randn(xshape, f32, 11);
  TensorData yd = teacher_labels(xd, classes, 12);
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) out.push_back(exe.run({xd, yd})[0].at(0));
  return out;
}

}  // namespace

TEST(NN, InitialisersAreSeededAndScaled) {
  TensorData a = nn::init_value({64, 64}, nn::Init::he_normal, 64, 64, 5);
  TensorData b = nn::init_value({64, 64}, nn::Init::he_normal, 64, 64, 5);
  TensorData c = nn::init_value({64, 64}, nn::Init::he_normal, 64, 64, 6);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_NE(a.to_vector(), c.to_vector());
  double ss = 0;
  for (double v : a.to_vector()) ss += v * v;
  EXPECT_NEAR(std::sqrt(ss / 4096), std::sqrt(2.0 / 64), 0.02);
  TensorData u = nn::init_value({1000}, nn::Init::glorot_uniform, 10, 14, 1);
  for (double v : u.to_vector()) EXPECT_LE(std::abs(v), 0.5 + 1e-7);
}

TEST(NN, LinearAndNamesAndParameters) {
  Graph g;
  nn::Sequential net("mlp");
  net.add(std::make_shared<nn::Linear>(g, net.next_name(), 4, 8));
  net.add("relu", [](Graph& gg, Tensor x) { return gg.relu(x); });
  net.add(std::make_shared<nn::Linear>(g, net.next_name(), 8, 3));
  auto ps = net.parameters();
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0].shape(), Shape({4, 8}));
  EXPECT_EQ(ps[0].name(), "%mlp.0.weight");
  EXPECT_EQ(ps[3].name(), "%mlp.2.bias");
  Tensor x = g.placeholder({-1, 5, 4}, f32, "x");
  EXPECT_EQ(net.forward(g, x).shape(), Shape({-1, 5, 3}));
}

TEST(NN, TinyMlpLossFalls) {
  Graph g;
  nn::Sequential net("mlp");
  net.add(std::make_shared<nn::Linear>(g, "mlp.0", 6, 16));
  net.add("relu", [](Graph& gg, Tensor x) { return gg.relu(x); });
  net.add(std::make_shared<nn::Linear>(g, "mlp.2", 16, 3));
  auto losses = train_losses(g, net, {32, 6}, 3, 40, false);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << losses.front() << " -> " << losses.back();
}

TEST(NN, TinyCnnLossFalls) {
  Graph g;
  nn::Sequential net("cnn");
  net.add(std::make_shared<nn::Conv2d>(g, "cnn.conv", 1, 4, 3));
  net.add(std::make_shared<nn::BatchNorm2d>(g, "cnn.bn", 4));
  net.add("relu", [](Graph& gg, Tensor x) { return gg.relu(x); });
  net.add("flatten", [](Graph& gg, Tensor x) { return gg.flatten(x, 1); });
  net.add(std::make_shared<nn::Linear>(g, "cnn.fc", 6 * 6 * 4, 2));
  auto losses = train_losses(g, net, {8, 6, 6, 1}, 2, 25, true);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << losses.front() << " -> " << losses.back();
}

namespace {

// BatchNorm on a fixed batch: returns the running mean after one run.
std::vector<double> bn_running_mean_after(int how, bool dynamic_batch = false) {
  Graph g;
  nn::BatchNorm2d bn(g, "bn", 3);
  Shape xs = dynamic_batch ? Shape{-1, 2, 2, 3} : Shape{4, 2, 2, 3};
  Tensor x = g.placeholder(xs, f32, "x");
  bn.train();
  Tensor y = bn.forward(g, x);
  Tensor loss = g.reduce_sum(g.square(y));
  std::vector<Operation> targets;
  if (how == 1) targets = bn.updates();
  if (how == 2) loss = g.control_dependency(bn.updates(), [&] { return std::vector{g.identity(loss)}; })[0];
  CompileOptions o = cpu();
  o.disable_type_inference = dynamic_batch;
  Executable exe = g.compile({{x, TensorType(xs, f32)}}, {loss}, targets, o);
  TensorData xd = TensorData::randn({4, 2, 2, 3}, f32, 3);
  exe.run({xd});
  std::vector<double> out = exe.variable("bn.running_mean").to_vector();
  // The running variance is unbiased: (1 - 0.1) * 1 + 0.1 * var * n / (n - 1), n = 16.
  for (int64_t c = 0; c < 3 && how != 0; ++c) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 16; ++i) m += xd.at(i * 3 + c) / 16;
    for (int64_t i = 0; i < 16; ++i) v += (xd.at(i * 3 + c) - m) * (xd.at(i * 3 + c) - m) / 15;
    EXPECT_NEAR(exe.variable("bn.running_var").at(c), 0.9 + 0.1 * v, 1e-5) << "channel " << c;
  }
  return out;
}

}  // namespace

TEST(NN, BatchNormRunningMeanUpdatesOnlyWhenAssignsRun) {
  TensorData xd = TensorData::randn({4, 2, 2, 3}, f32, 3);
  std::vector<double> want(3, 0.0);
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t c = 0; c < 3; ++c) want[c] += xd.at(i * 3 + c) / 16 * 0.1;  // momentum 0.1 from 0
  for (int how : {1, 2, 3}) {
    auto got = bn_running_mean_after(how == 3 ? 1 : how, how == 3);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(got[c], want[c], 1e-5) << "how " << how << " channel " << c;
  }
  for (double v : bn_running_mean_after(0)) EXPECT_EQ(v, 0.0);
}

TEST(NN, BatchNormRunTimeTrainingFlag) {
  Graph g;
  nn::BatchNorm2d bn(g, "bn", 2);
  Tensor x = g.placeholder({3, 1, 2, 2}, f32, "x");
  Tensor flag = g.placeholder({}, DType::boolean, "is_training");
  bn.set_mode({.flag = flag});
  Tensor y = bn.forward(g, x);
  Executable exe = g.compile({{x, TensorType({3, 1, 2, 2}, f32)}, {flag, TensorType({}, DType::boolean)}}, {y},
                             bn.updates(), cpu());
  TensorData xd = TensorData::randn({3, 1, 2, 2}, f32, 9);
  // Inference: running statistics (0, 1) -> y = x / sqrt(1 + eps); nothing is updated.
  TensorData y0 = exe.run({xd, TensorData::scalar(0, DType::boolean)})[0];
  for (int64_t i = 0; i < 12; ++i) EXPECT_NEAR(y0.at(i), xd.at(i) / std::sqrt(1 + 1e-5), 1e-5);
  EXPECT_EQ(exe.variable("bn.running_mean").to_vector(), std::vector<double>({0.0, 0.0}));
  // Training: batch statistics (per-channel mean 0 of y) and the running mean moves.
  TensorData y1 = exe.run({xd, TensorData::scalar(1, DType::boolean)})[0];
  double m0 = 0;
  for (int64_t i = 0; i < 6; ++i) m0 += y1.at(2 * i);
  EXPECT_NEAR(m0, 0.0, 1e-5);
  EXPECT_NE(exe.variable("bn.running_mean").at(0), 0.0);
  // Gradients go through the run-time switch.
  auto grads = g.gradients(g.reduce_sum(g.mul(y, y)), bn.parameters());
  EXPECT_EQ(grads.size(), 2u);
}

TEST(NN, LayerNormEmbeddingDropout) {
  Graph g;
  nn::Embedding emb(g, "emb", 10, 4);
  nn::LayerNorm ln(g, "ln", 4);
  nn::Dropout drop(g, "drop", 0.5, 1);
  Tensor ids = g.placeholder({2, 3}, DType::i32, "ids");
  Tensor e = emb.forward(g, ids);
  EXPECT_EQ(e.shape(), Shape({2, 3, 4}));
  Tensor n = ln.forward(g, e);
  drop.train();
  Tensor d = drop.forward(g, n);
  Executable exe = g.compile({{ids, TensorType({2, 3}, DType::i32)}}, {e, n, d}, drop.updates(), cpu());
  TensorData idv = TensorData::from_vector({2, 3}, DType::i32, {0, 3, 9, 3, 1, 2});
  auto r = exe.run({idv});
  TensorData table = exe.variable("emb.weight");
  for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(r[0].at(4 + j), table.at(3 * 4 + j));
  double mean = 0;
  for (int64_t j = 0; j < 4; ++j) mean += r[1].at(j);
  EXPECT_NEAR(mean, 0.0, 1e-5);
  int zeros = 0;
  for (int64_t i = 0; i < 24; ++i) {
    if (r[2].at(i) == 0) ++zeros;
    else EXPECT_NEAR(r[2].at(i), 2 * r[1].at(i), 1e-5);
  }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, 24);
  // The random state advanced, so the next mask differs.
  auto r2 = exe.run({idv});
  EXPECT_NE(r2[2].to_vector(), r[2].to_vector());
  EXPECT_TG_ERROR(emb.forward(g, g.placeholder({2}, f32)), "[Embedding]");
}

TEST(NN, ResNet18TinyBuildsRunsAndDifferentiates) {
  Graph g;
  auto net = nn::resnet18(g, {.num_classes = 10, .in_channels = 1, .base_width = 4, .small_input = true});
  Tensor x = g.placeholder({-1, 8, 8, 1}, f32, "x");
  net->eval();
  Tensor logits = net->forward(g, x);
  EXPECT_EQ(logits.shape(), Shape({-1, 10}));
  EXPECT_EQ(net->parameters().size(), 62u);  // 20 convs + 20 BN (gamma, beta) + fc (w, b)
  auto r = g.compile({{x, TensorType({-1, 8, 8, 1}, f32)}}, {logits}, {}, cpu())
               .run({TensorData::randn({2, 8, 8, 1}, f32, 1)});
  EXPECT_EQ(r[0].shape(), Shape({2, 10}));
  for (double v : r[0].to_vector()) EXPECT_TRUE(std::isfinite(v));
  // Training graph with static batch: every op on the path has a gradient rule.
  Tensor xt = g.placeholder({2, 8, 8, 1}, f32, "xt");
  net->train();
  Tensor loss = g.reduce_mean(net->forward(g, xt));
  auto grads = g.gradients(loss, net->parameters());
  EXPECT_EQ(grads.size(), net->parameters().size());
  EXPECT_EQ(net->updates().size(), 40u);  // running mean and variance of 20 BatchNorms
}

TEST(NN, ResNet50TinyInfersShapes) {
  Graph g;
  auto net = nn::resnet50(g, {.num_classes = 7, .in_channels = 3, .base_width = 2});
  Tensor x = g.placeholder({1, 32, 32, 3}, f32, "x");
  net->eval();
  EXPECT_EQ(net->forward(g, x).shape(), Shape({1, 7}));
  EXPECT_EQ(net->parameters().size(), 161u);  // 53 convs, 53 BN x2, fc x2
}

TEST(NN, BertTinyBuildsRunsAndDifferentiates) {
  Graph g;
  nn::BertConfig c{.layers = 2, .hidden = 8, .heads = 2, .intermediate = 16, .vocab = 20, .max_positions = 16};
  auto bert = nn::bert_base(g, c);
  Tensor ids = g.placeholder({2, 5}, DType::i32, "ids");
  Tensor mask = g.placeholder({2, 5}, DType::boolean, "mask");
  Tensor out = bert->forward(g, ids, Tensor(), mask);
  EXPECT_EQ(out.shape(), Shape({2, 5, 8}));
  auto r = g.compile({{ids, TensorType({2, 5}, DType::i32)}, {mask, TensorType({2, 5}, DType::boolean)}}, {out}, {},
                     cpu())
               .run({TensorData::from_vector({2, 5}, DType::i32, {1, 2, 3, 4, 5, 6, 7, 8, 0, 0}),
                     TensorData::from_vector({2, 5}, DType::boolean, {1, 1, 1, 1, 1, 1, 1, 1, 0, 0})});
  for (int64_t t = 0; t < 10; ++t) {  // every token's output is layer-normalised
    double m = 0;
    for (int64_t j = 0; j < 8; ++j) m += r[0].at(t * 8 + j);
    EXPECT_NEAR(m / 8, 0.0, 1e-4);
  }
  auto grads = g.gradients(g.reduce_mean(bert->forward(g, ids)), bert->parameters());
  EXPECT_EQ(grads.size(), bert->parameters().size());
  EXPECT_TG_ERROR(nn::bert_base(g, {.hidden = 10, .heads = 3}), "[bert]");
}
