// CompileOptions::precision on the GPU against the CPU in f32, on random inputs: f32 is exact
// fp32 (no TF32 anywhere), tf32 is within TF32's error, bf16 / f16 autocast within half
// precision's; and a bf16 training step on the device lowers the loss.
// Errors are relative to the largest |value| of the CPU result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "tgraph/optim.h"
#include "gpu/gpu_test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

using Build = std::function<Tensor(Graph&, const std::vector<Tensor>&)>;

TensorData rnd(Shape s, uint64_t seed) { return TensorData::uniform(std::move(s), -1, 1, f32, seed); }

TensorData run_graph(const Build& build, const std::vector<TensorData>& inputs, Device dev, Precision p) {
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  Tensor y = build(g, ph);
  return g.compile(feeds, {y}, {}, {.device = dev, .precision = p}).run(inputs)[0];
}

// Largest |got - want| over the largest |want|.
double rel_error(const TensorData& got, const TensorData& want) {
  EXPECT_EQ(got.type(), want.type());
  double scale = 1e-30, worst = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) scale = std::max(scale, std::abs(want.at(i)));
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double e = std::abs(got.at(i) - want.at(i));
    worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  }
  return worst / scale;
}

double tolerance(Precision p) {
  switch (p) {
    case Precision::f32: return 1e-5;
    case Precision::tf32: return 2e-3;
    case Precision::bf16: return 1e-2;
    case Precision::f16: return 3e-3;
  }
  return 0;
}

const char* name(Precision p) {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::f16: return "f16";
  }
  return "?";
}

// The op on the GPU in every precision against the CPU in f32; returns the errors.
std::vector<double> check_all(const std::string& what, const Build& build,
                              const std::vector<TensorData>& inputs) {
  TensorData want = run_graph(build, inputs, Device::cpu(), Precision::f32);
  std::vector<double> errors;
  for (Precision p : {Precision::f32, Precision::tf32, Precision::bf16, Precision::f16}) {
    double e = rel_error(run_graph(build, inputs, Device::cuda(0), p), want);
    EXPECT_LE(e, tolerance(p)) << what << " in " << name(p);
    errors.push_back(e);
  }
  return errors;
}

ConvDesc same3() { return {.stride = {1, 1}, .padding = PaddingStyle::same}; }

}  // namespace

TEST(CudaPrecision, Matmul) {
  std::vector<double> e =
      check_all("matmul", [](Graph& g, const std::vector<Tensor>& in) { return g.matmul(in[0], in[1]); },
                {rnd({96, 512}, 1), rnd({512, 80}, 2)});
  // With k = 512, TF32's 10-bit mantissa shows: tf32 really took the tensor-core path, f32 did not.
  EXPECT_GT(e[1], 10 * e[0]) << "tf32 error " << e[1] << " vs f32 " << e[0];
  check_all("batched matmul, b transposed",
            [](Graph& g, const std::vector<Tensor>& in) { return g.matmul(in[0], in[1], false, true); },
            {rnd({3, 40, 256}, 3), rnd({3, 24, 256}, 4)});
  check_all("matmul, a transposed",
            [](Graph& g, const std::vector<Tensor>& in) { return g.matmul(in[0], in[1], true, false); },
            {rnd({128, 33}, 5), rnd({128, 17}, 6)});
}

TEST(CudaPrecision, ConvolutionForwardAndGradients) {
  TensorData x = rnd({4, 12, 12, 32}, 7), w = rnd({3, 3, 32, 48}, 8), dy = rnd({4, 12, 12, 48}, 9);
  check_all("conv2d", [](Graph& g, const std::vector<Tensor>& in) { return g.conv2d(in[0], in[1], same3()); },
            {x, w});
  check_all("conv2d_data_grad",
            [](Graph& g, const std::vector<Tensor>& in) {
              return g.conv2d_data_grad(in[0], in[1], Shape({4, 12, 12, 32}), same3());
            },
            {dy, w});
  check_all("conv2d_weight_grad",
            [](Graph& g, const std::vector<Tensor>& in) {
              return g.conv2d_weight_grad(in[0], in[1], Shape({3, 3, 32, 48}), same3());
            },
            {dy, x});
  check_all("conv_transpose2d",
            [](Graph& g, const std::vector<Tensor>& in) {
              return g.conv_transpose2d(in[0], in[1], {.stride = {2, 2}});
            },
            {rnd({2, 8, 8, 16}, 10), rnd({2, 2, 24, 16}, 11)});
}

namespace {

struct Cnn {
  Graph g;
  Tensor x, y, loss;
  Operation step;
  explicit Cnn(int64_t batch) {
    x = g.placeholder({batch, 12, 12, 3}, f32, "x");
    y = g.placeholder({batch, 5}, f32, "y");
    Tensor k1 = g.variable(TensorData::uniform({3, 3, 3, 16}, -0.4, 0.4, f32, 31), "k1");
    Tensor k2 = g.variable(TensorData::uniform({3, 3, 16, 16}, -0.2, 0.2, f32, 32), "k2");
    Tensor w = g.variable(TensorData::uniform({12 * 12 * 16, 5}, -0.03, 0.03, f32, 33), "w");
    Tensor b = g.variable(TensorData::zeros({5}), "b");
    Tensor h = g.relu(g.conv2d(x, k1, same3()));
    h = g.relu(g.add(h, g.conv2d(h, k2, same3())));
    Tensor logits = g.add(g.matmul(g.reshape(h, {batch, 12 * 12 * 16}), w), b);
    loss = g.softmax_cross_entropy(logits, y);
    std::vector<Tensor> vars{k1, k2, w, b};
    step = optim::sgd(g, vars, g.gradients(loss, vars), g.scalar(0.2));
  }
};

std::vector<double> train(Device dev, Precision p, int steps) {
  const int64_t batch = 16;
  Cnn net(batch);
  Executable exe = net.g.compile({{net.x, net.x.type()}, {net.y, net.y.type()}}, {net.loss}, {net.step},
                                 {.device = dev, .precision = p});
  TensorData xs = TensorData::uniform(net.x.type().shape, -1, 1, f32, 40);
  std::vector<double> labels(static_cast<size_t>(batch * 5), 0.0);
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i * 5 + (i * 3) % 5)] = 1.0;
  TensorData ys = TensorData::from_vector({batch, 5}, f32, labels);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(exe.run({xs, ys})[0].at(0));
  return losses;
}

}  // namespace

TEST(CudaPrecision, Bf16TrainingStepLowersTheLoss) {
  const int steps = 10;
  std::vector<double> ref = train(Device::cpu(), Precision::f32, steps);
  std::vector<double> half = train(Device::cuda(0), Precision::bf16, steps);
  EXPECT_NEAR(half[0], ref[0], 2e-2 * ref[0]);
  EXPECT_LT(half.back(), 0.8 * half.front());
  for (int i = 0; i < steps; ++i)
    EXPECT_NEAR(half[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 5e-2 * ref[0]) << "step " << i;
}

TEST(CudaPrecision, F32TrainingOnTheGpuMatchesTheCpu) {
  std::vector<double> ref = train(Device::cpu(), Precision::f32, 3),
                      got = train(Device::cuda(0), Precision::f32, 3);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-4 * ref[0]) << "step " << i;
}
