// Optimizers against hand-computed references, gradient clipping, loss scaling.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "tgraph/executable.h"
#include "tgraph/graph.h"
#include "tgraph/optim.h"

using namespace tg;

namespace {

CompileOptions cpu() { return CompileOptions{.device = Device::cpu()}; }

// A graph with loss = sum(w * x): the gradient of w is x, so steps are easy to compute by hand.
struct Linear3 {
  Graph g;
  Tensor w = g.variable(TensorData::from_floats({3}, {1.0f, -2.0f, 0.5f}), "w");
  Tensor x = g.placeholder({3}, f32, "x");
  Tensor lr = g.placeholder({}, f32, "lr");
  Tensor loss = g.reduce_sum(g.mul(w, x));
  optim::GradMap grads = g.gradients(loss, {w});
};

const std::vector<std::vector<double>> kGrads = {{0.5, -1.0, 2.0}, {-0.25, 3.0, 1.0}};
const std::vector<double> kLr = {0.1, 0.05};

void expect_near(const TensorData& t, const std::vector<double>& want, double tol) {
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.at(static_cast<int64_t>(i)), want[i], tol) << "element " << i;
}

void sgd_case(double momentum, bool nesterov, double wd) {
  Linear3 m;
  Operation step = optim::sgd(m.g, {m.w}, m.grads, m.lr, {.momentum = momentum, .nesterov = nesterov, .weight_decay = wd});
  Executable exe = m.g.compile({{m.x, TensorType({3}, f32)}, {m.lr, TensorType({}, f32)}}, {m.loss}, {step}, cpu());
  std::vector<double> w = {1.0, -2.0, 0.5}, buf = {0, 0, 0};
  for (int s = 0; s < 2; ++s) {
    exe.run({TensorData::from_vector({3}, f32, kGrads[s]), TensorData::scalar(kLr[s])});
    for (size_t i = 0; i < 3; ++i) {
      double d = kGrads[s][i] + wd * w[i];
      if (momentum != 0) {
        buf[i] = momentum * buf[i] + d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      w[i] -= kLr[s] * d;
    }
    expect_near(exe.variable("w"), w, 1e-6);
    if (momentum != 0) expect_near(exe.variable("w/momentum"), buf, 1e-6);
  }
}

}  // namespace

TEST(Optim, SgdPlain) { sgd_case(0.0, false, 0.0); }
TEST(Optim, SgdMomentum) { sgd_case(0.9, false, 0.0); }
TEST(Optim, SgdNesterovWeightDecay) { sgd_case(0.9, true, 0.1); }

TEST(Optim, AdamMatchesHandComputation) {
  for (bool decoupled : {false, true}) {
    Linear3 m;
    optim::AdamOptions o{.beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 0.05};
    o.name = decoupled ? "adamw" : "adam";
    Operation step = decoupled ? optim::adamw(m.g, {m.w}, m.grads, m.lr, o) : optim::adam(m.g, {m.w}, m.grads, m.lr, o);
    Executable exe = m.g.compile({{m.x, TensorType({3}, f32)}, {m.lr, TensorType({}, f32)}}, {m.loss}, {step}, cpu());
    std::vector<double> w = {1.0, -2.0, 0.5}, mm(3, 0.0), vv(3, 0.0);
    for (int s = 0; s < 2; ++s) {
      exe.run({TensorData::from_vector({3}, f32, kGrads[s]), TensorData::scalar(kLr[s])});
      double t = s + 1, lr = kLr[s];
      for (size_t i = 0; i < 3; ++i) {
        double d = kGrads[s][i] + (decoupled ? 0.0 : o.weight_decay * w[i]);
        if (decoupled) w[i] *= 1 - lr * o.weight_decay;
        mm[i] = o.beta1 * mm[i] + (1 - o.beta1) * d;
        vv[i] = o.beta2 * vv[i] + (1 - o.beta2) * d * d;
        double mhat = mm[i] / (1 - std::pow(o.beta1, t)), vhat = vv[i] / (1 - std::pow(o.beta2, t));
        w[i] -= lr * mhat / (std::sqrt(vhat) + o.epsilon);
      }
      expect_near(exe.variable("w"), w, 2e-6);
      expect_near(exe.variable("w/adam_m"), mm, 1e-6);
      expect_near(exe.variable("w/adam_v"), vv, 1e-6);
      EXPECT_EQ(exe.variable(o.name + "/step").at(0), t);
    }
  }
}

TEST(Optim, UpdatesOnlyRunAsTargets) {
  Linear3 m;
  Operation step = optim::sgd(m.g, {m.w}, m.grads, m.lr);
  Executable no_step = m.g.compile({{m.x, TensorType({3}, f32)}, {m.lr, TensorType({}, f32)}}, {m.loss}, {}, cpu());
  no_step.run({TensorData::from_vector({3}, f32, kGrads[0]), TensorData::scalar(0.1)});
  expect_near(no_step.variable("w"), {1.0, -2.0, 0.5}, 0);
  (void)step;
}

TEST(Optim, ClipByGlobalNorm) {
  Graph g;
  Tensor a = g.variable(TensorData::from_floats({2}, {3.0f, 0.0f}), "a");
  Tensor b = g.variable(TensorData::from_floats({1}, {4.0f}), "b");
  optim::GradMap grads{{a, g.identity(a)}, {b, g.identity(b)}};  // global norm 5
  Tensor norm;
  optim::GradMap clipped = optim::clip_by_global_norm(g, grads, 2.5, &norm);
  optim::GradMap loose = optim::clip_by_global_norm(g, grads, 10.0);
  auto r = g.run({}, {norm, clipped[a], clipped[b], loose[a]});
  EXPECT_NEAR(r[0].at(0), 5.0, 1e-6);
  expect_near(r[1], {1.5, 0.0}, 1e-6);
  expect_near(r[2], {2.0}, 1e-6);
  expect_near(r[3], {3.0, 0.0}, 1e-6);
  EXPECT_TG_ERROR(optim::clip_by_global_norm(g, grads, 0.0), "[clip_by_global_norm]");
}

TEST(Optim, ErrorsNameTheProblem) {
  Linear3 m;
  Tensor other = m.g.variable(TensorData::zeros({2}), "other");
  EXPECT_TG_ERROR(optim::sgd(m.g, {other}, m.grads, m.lr), "[sgd]", "other");
  EXPECT_TG_ERROR(optim::adam(m.g, {m.w}, m.grads, m.x), "[adam]", "lr");
  EXPECT_TG_ERROR(optim::sgd(m.g, {m.w}, m.grads, m.lr, {.nesterov = true}), "[sgd]", "nesterov");
}

TEST(Optim, Schedules) {
  EXPECT_NEAR(optim::cosine_lr(0, 100, 1.0, 10), 0.1, 1e-12);
  EXPECT_NEAR(optim::cosine_lr(10, 110, 1.0, 10), 1.0, 1e-12);
  EXPECT_NEAR(optim::cosine_lr(60, 110, 1.0, 10), 0.5, 1e-12);
  EXPECT_NEAR(optim::cosine_lr(110, 110, 1.0, 10), 0.0, 1e-12);
  EXPECT_NEAR(optim::step_lr(25, 10, 1.0, 0.5), 0.25, 1e-12);
}

TEST(Optim, DynamicLossScalingSkipsNonFiniteSteps) {
  Graph g;
  Tensor w = g.variable(TensorData::from_floats({2}, {1.0f, 2.0f}), "w");
  Tensor x = g.placeholder({2}, f32, "x");
  Tensor loss = g.reduce_sum(g.mul(w, x));
  optim::ScaledGradients sg = optim::scaled_gradients(g, loss, {w}, {.initial_scale = 8.0, .growth_interval = 2});
  Operation step = optim::sgd(g, {w}, sg.grads, g.scalar(1.0), {.apply_if = sg.finite});
  Executable exe = g.compile({{x, TensorType({2}, f32)}}, {loss}, {step, sg.update}, cpu());
  exe.run({TensorData::from_floats({2}, {0.5f, 0.25f})});
  expect_near(exe.variable("w"), {0.5, 1.75}, 1e-6);  // unscaled gradient applied
  EXPECT_EQ(exe.variable("loss_scale/scale").at(0), 8.0);
  exe.run({TensorData::from_floats({2}, {INFINITY, 0.25f})});
  expect_near(exe.variable("w"), {0.5, 1.75}, 1e-6);  // skipped
  EXPECT_EQ(exe.variable("loss_scale/scale").at(0), 4.0);
  exe.run({TensorData::from_floats({2}, {0.0f, 0.0f})});
  exe.run({TensorData::from_floats({2}, {0.0f, 0.0f})});
  EXPECT_EQ(exe.variable("loss_scale/scale").at(0), 8.0);  // grown after 2 finite steps
}
