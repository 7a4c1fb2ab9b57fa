// Batch normalisation with its training / inference switch as an if_else on a bool placeholder.
// The training branch normalises with the batch statistics and, under a control dependency,
// updates the running mean and variance with assign; the inference branch normalises with the
// running statistics and writes nothing. Gradients flow through the if_else (to W1, W2, gamma,
// beta), so one executable trains and a second one, fed is_training = false, evaluates.
//
// usage: batchnorm_if_else [--device cpu|cuda|best] [--steps N]
#include <tgraph/optim.h>
#include <tgraph/tgraph.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

using Ts = std::vector<tg::Tensor>;

namespace {

constexpr int64_t kBatch = 64, kIn = 4, kHidden = 8, kClasses = 2;
constexpr double kMomentum = 0.1, kEps = 1e-5;

// A batch of two-class data whose features have means and spreads far from 0 and 1, so the
// running statistics have somewhere to go. The label is the sign of a fixed linear score.
std::pair<tg::TensorData, tg::TensorData> make_batch(uint64_t seed) {
  const double mean[kIn] = {2.0, -1.0, 0.5, 3.0}, spread[kIn] = {1.0, 2.0, 0.5, 1.5};
  tg::TensorData x = tg::TensorData::randn({kBatch, kIn}, tg::f32, seed);
  tg::TensorData y = tg::TensorData::zeros({kBatch, kClasses}, tg::f32);
  for (int64_t i = 0; i < kBatch; ++i) {
    double score = 0;
    for (int64_t j = 0; j < kIn; ++j) {
      double v = mean[j] + spread[j] * x.at(i * kIn + j);
      x.set(i * kIn + j, v);
      score += (j % 2 ? -1.0 : 1.0) * (v - mean[j]) / spread[j];
    }
    y.set(i * kClasses + (score > 0 ? 1 : 0), 1.0);
  }
  return {x, y};
}

std::string row(const tg::TensorData& t) {
  std::string s;
  for (int64_t i = 0; i < std::min<int64_t>(t.num_elements(), 4); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%7.3f", i ? " " : "", t.at(i));
    s += buf;
  }
  return s + (t.num_elements() > 4 ? " ..." : "");
}

double max_abs_diff(const tg::TensorData& a, const tg::TensorData& b) {
  double d = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) d = std::max(d, std::abs(a.at(i) - b.at(i)));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "best";
  int steps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device"))
      device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoi(argv[i + 1]);
  }
  tg::Device dev = device == "cpu"    ? tg::Device::cpu()
                   : device == "cuda" ? tg::Device::cuda(0)
                                      : tg::Device::best();
  std::printf("batch norm with an if_else switch on %s\n", dev.describe().c_str());

  tg::Graph g;
  tg::Tensor x = g.placeholder({kBatch, kIn}, tg::f32, "x");
  tg::Tensor labels = g.placeholder({kBatch, kClasses}, tg::f32, "labels");
  tg::Tensor is_training = g.placeholder({}, tg::boolean, "is_training");
  tg::Tensor w1 = g.variable(tg::TensorData::randn({kIn, kHidden}, tg::f32, 1), "w1");
  tg::Tensor w2 = g.variable(tg::TensorData::randn({kHidden, kClasses}, tg::f32, 2), "w2");
  tg::Tensor gamma = g.variable(tg::TensorData::full({kHidden}, 1.0), "bn.gamma");
  tg::Tensor beta = g.variable(tg::TensorData::zeros({kHidden}), "bn.beta");
  tg::Tensor running_mean = g.variable(tg::TensorData::zeros({kHidden}), "bn.running_mean");
  tg::Tensor running_var = g.variable(tg::TensorData::full({kHidden}, 1.0), "bn.running_var");

  tg::Tensor h = g.matmul(x, w1);
  tg::Tensor normed = g.if_else(
      is_training,
      [&](tg::Graph& b) {
        tg::Tensor mean = b.reduce_mean(h, {0}), var = b.reduce_variance(h, {0});
        // Running statistics (PyTorch's rule: unbiased variance, momentum 0.1); no gradient.
        auto blend = [&](tg::Tensor run, tg::Tensor batch) {
          return b.add(b.mul(run, b.scalar(1 - kMomentum)),
                       b.mul(b.stop_gradient(batch), b.scalar(kMomentum)));
        };
        tg::Tensor unbiased = b.mul(var, b.scalar(double(kBatch) / (kBatch - 1)));
        std::vector<tg::Operation> updates{b.assign(running_mean, blend(running_mean, mean)),
                                           b.assign(running_var, blend(running_var, unbiased))};
        // The normalised output is ordered after the updates: both run whenever it does.
        return b.control_dependency(updates,
                                    [&] { return Ts{b.batch_norm(h, mean, var, gamma, beta, -1, kEps)}; });
      },
      [&](tg::Graph& b) { return Ts{b.batch_norm(h, running_mean, running_var, gamma, beta, -1, kEps)}; })[0];
  tg::Tensor logits = g.matmul(g.relu(normed), w2);
  tg::Tensor loss = g.softmax_cross_entropy(logits, labels);
  tg::Tensor correct = g.reduce_mean(g.cast(g.equal(g.argmax(logits, 1), g.argmax(labels, 1)), tg::f32));

  std::vector<tg::Tensor> params{w1, w2, gamma, beta};
  auto grads = g.gradients(loss, params);  // through the if_else: both branches differentiated
  tg::Operation step = tg::optim::sgd(g, params, grads, g.scalar(0.2), {.momentum = 0.9});

  const std::vector<std::pair<tg::Tensor, tg::TensorType>> feeds{
      {x, x.type()}, {labels, labels.type()}, {is_training, is_training.type()}};
  tg::Executable train = g.compile(feeds, {loss}, {step}, {.device = dev});
  tg::Executable eval = g.compile(feeds, {loss, correct}, {}, {.device = dev});

  std::printf("\ntraining (is_training = true): the running statistics move every step\n");
  const tg::TensorData on = tg::TensorData::scalar(1, tg::boolean),
                       off = tg::TensorData::scalar(0, tg::boolean);
  tg::TensorData mean0 = train.variable("bn.running_mean");
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < steps; ++s) {
    auto [bx, by] = make_batch(100 + static_cast<uint64_t>(s));
    last_loss = train.run({bx, by, on})[0].at(0);
    if (s == 0) first_loss = last_loss;
    if (s % 5 == 0 || s == steps - 1)
      std::printf("  step %2d  loss %.4f  running_mean [%s]  running_var [%s]\n", s, last_loss,
                  row(train.variable("bn.running_mean")).c_str(),
                  row(train.variable("bn.running_var")).c_str());
  }
  tg::TensorData mean1 = train.variable("bn.running_mean"), var1 = train.variable("bn.running_var");

  std::printf("\ninference (is_training = false): normalised with the running statistics\n");
  double acc = 0;
  for (int s = 0; s < 3; ++s) {
    auto [bx, by] = make_batch(900 + static_cast<uint64_t>(s));
    std::vector<tg::TensorData> r = eval.run({bx, by, off});
    acc += r[1].at(0) / 3;
    std::printf("  batch %d  loss %.4f  accuracy %.3f\n", s, r[0].at(0), r[1].at(0));
  }
  double moved_train = max_abs_diff(mean0, mean1);
  double moved_eval = std::max(max_abs_diff(mean1, eval.variable("bn.running_mean")),
                               max_abs_diff(var1, eval.variable("bn.running_var")));
  std::printf("  running_mean [%s]  running_var [%s]\n", row(eval.variable("bn.running_mean")).c_str(),
              row(eval.variable("bn.running_var")).c_str());

  bool ok = moved_train > 0.1 && moved_eval == 0.0 && last_loss < first_loss && acc > 0.75;
  std::printf(
      "\nrunning mean moved %.3f in training and %.3f in inference; loss %.3f -> %.3f; accuracy %.3f: %s\n",
      moved_train, moved_eval, first_loss, last_loss, acc, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
