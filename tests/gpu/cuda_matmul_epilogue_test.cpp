// matmul + bias (+ relu / gelu_tanh) folded into the cuBLASLt epilogue (matmul_epilogue.h):
// against the CPU backend and against TGRAPH_NO_EPILOGUE=1, with the run still captured, and
// patterns that must not fold (the matmul result read elsewhere, a bias along the wrong axis,
// the erf form of gelu) still giving the right numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>

#include "backends/cuda/matmul_lt.h"
#include "runtime/executable_impl.h"
#include "tgraph/nn.h"
#include "tgraph/tgraph.h"
#include "cpp/test_util.h"
#include "gpu/gpu_test_util.h"

using namespace tg;

namespace {

using Build = std::function<std::vector<Tensor>(Graph&, std::vector<Tensor>&)>;

double tolerance(DType t) { return t == bf16 ? 3e-2 : t == f16 ? 4e-3 : 1e-4; }

using gputest::expect_close;

struct Outcome {
  std::vector<TensorData> out;
  long long epilogues = 0;  // matmuls launched with a bias epilogue
};

// Compiles `build` for `device` and runs it twice (the first run records and captures, the
// second replays); on CUDA checks the run was captured.
Outcome run(const Build& build, const std::vector<TensorData>& inputs, Device device, bool no_epilogue = false) {
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  std::vector<Tensor> outs = build(g, ph);
  Executable e = g.compile(feeds, outs, {}, CompileOptions{.device = device});
  // The executor matches epilogues when it first walks a block (the first run).
  long long before = detail::matmul_epilogue_launches();
  Outcome o{{}, 0};
  {
    WithSwitches s(no_epilogue ? std::map<std::string, std::string>{{"TGRAPH_NO_EPILOGUE", "1"}}
                               : std::map<std::string, std::string>{});
    o.out = e.run(inputs);
  }
  o.epilogues = detail::matmul_epilogue_launches() - before;
  std::vector<TensorData> again = e.run(inputs);
  if (device.kind == Device::Kind::cuda) {
    auto stats = detail::cuda_graph_stats(e.impl());
    EXPECT_TRUE(stats.error.empty()) << stats.error;
    EXPECT_EQ(stats.captures, 1) << stats.error;
    for (size_t i = 0; i < again.size(); ++i)
      expect_close(again[i], o.out[i], tolerance(again[i].dtype()), "replay output " + std::to_string(i));
  }
  return o;
}

// GPU (epilogue on and off) against the CPU; `folded`: 1 the epilogue must be used, 0 must not,
// -1 either (the fusion plan decides).
void check(const std::string& what, const Build& build, const std::vector<TensorData>& inputs, int folded) {
  SCOPED_TRACE(what);
  double tol = tolerance(inputs[0].dtype());
  Outcome want = run(build, inputs, Device::cpu());
  Outcome on = run(build, inputs, Device::cuda(0));
  Outcome off = run(build, inputs, Device::cuda(0), 1);
  if (folded >= 0) EXPECT_EQ(on.epilogues > 0, folded == 1);
  EXPECT_EQ(off.epilogues, 0);
  for (size_t i = 0; i < want.out.size(); ++i) {
    expect_close(on.out[i], want.out[i], tol, what + " (epilogue) output " + std::to_string(i));
    expect_close(off.out[i], want.out[i], tol, what + " (no epilogue) output " + std::to_string(i));
    expect_close(on.out[i], off.out[i], tol, what + " (epilogue vs none) output " + std::to_string(i));
  }
}

TensorData rnd(Shape s, DType t, uint64_t seed) { return TensorData::uniform(std::move(s), -1, 1, t, seed); }

// Random multiples of 1/2 in [-1, 1], plus `offset`. relu's kink makes a gradient jump where a
// pre-activation changes sign, and a folded epilogue rounds x w + b once where the unfused ops
// round x w first: with x and w from here and the bias offset by 1/8, every pre-activation is a
// multiple of 1/8 that is not one of 1/4 (never 0), x w is exact in f16 and bf16, and the
// signs, hence the gradients, agree between the paths.
TensorData grid(const Shape& s, DType t, uint64_t seed, double offset = 0) {
  std::vector<double> v = TensorData::uniform(s, -1, 1, DType::f64, seed).to_vector();
  for (double& x : v) x = std::round(x * 2) / 2 + offset;
  return TensorData::from_vector(s, t, v);
}

}  // namespace

TEST(CudaMatmulEpilogue, BiasReluGeluTanhAllFloatTypes) {
  for (DType t : {f32, f16, bf16}) {
    std::vector<TensorData> in{rnd({37, 64}, t, 1), rnd({64, 48}, t, 2), rnd({48}, t, 3)};
    std::string name = dtype_name(t);
    check("bias " + name, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }, in, 1);
    check("bias on the left " + name,
          [](Graph& g, auto& x) { return std::vector{g.add(x[2], g.matmul(x[0], x[1]))}; }, in, 1);
    check("relu " + name,
          [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; }, in, 1);
    check("gelu_tanh " + name,
          [](Graph& g, auto& x) { return std::vector{g.gelu_tanh(g.add(g.matmul(x[0], x[1]), x[2]))}; }, in, 1);
  }
}

TEST(CudaMatmulEpilogue, UnfusedStepsAndShapes) {
  // Fusion off: the add and the relu are separate steps and still fold.
  {
  WithSwitches off({{"TGRAPH_NO_FUSION", "1"}});
  check("relu, fusion off",
        [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; },
        {rnd({37, 64}, f32, 4), rnd({64, 48}, f32, 5), rnd({48}, f32, 6)}, 1);
  }
  check("bias [1,N], transposed w",
        [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1], false, true), x[2]))}; },
        {rnd({37, 64}, f16, 7), rnd({48, 64}, f16, 8), rnd({1, 48}, f16, 9)}, 1);
  check("batched, shared weight",
        [](Graph& g, auto& x) { return std::vector{g.gelu_tanh(g.add(g.matmul(x[0], x[1]), x[2]))}; },
        {rnd({3, 37, 64}, bf16, 10), rnd({64, 48}, bf16, 11), rnd({48}, bf16, 12)}, 1);
  check("batched weights, bias [1,1,N]",
        [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; },
        {rnd({3, 37, 64}, f32, 13), rnd({3, 64, 48}, f32, 14), rnd({1, 1, 48}, f32, 15)}, 1);
  // The activation's input also read elsewhere: at most the bias folds, the relu runs after it.
  check("sum also returned",
        [](Graph& g, auto& x) {
          Tensor s = g.add(g.matmul(x[0], x[1]), x[2]);
          return std::vector{g.relu(s), s};
        },
        {rnd({37, 64}, f32, 16), rnd({64, 48}, f32, 17), rnd({48}, f32, 18)}, -1);
}

TEST(CudaMatmulEpilogue, PatternsThatMustNotFold) {
  std::vector<TensorData> in{rnd({37, 64}, f32, 20), rnd({64, 48}, f32, 21), rnd({48}, f32, 22)};
  check("matmul result also returned",
        [](Graph& g, auto& x) {
          Tensor y = g.matmul(x[0], x[1]);
          return std::vector{g.relu(g.add(y, x[2])), y};
        },
        in, 0);
  check("matmul result also multiplied",
        [](Graph& g, auto& x) {
          Tensor y = g.matmul(x[0], x[1]);
          return std::vector{g.mul(g.add(y, x[2]), y)};
        },
        in, 0);
  check("bias along the rows",
        [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; },
        {rnd({37, 64}, f32, 23), rnd({64, 48}, f32, 24), rnd({37, 1}, f32, 25)}, 0);
  check("bias of the full shape",
        [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; },
        {rnd({37, 64}, f32, 26), rnd({64, 48}, f32, 27), rnd({37, 48}, f32, 28)}, 0);
  // gelu is the erf form; cuBLASLt's GELU epilogue is the tanh form.
  check("erf gelu",
        [](Graph& g, auto& x) { return std::vector{g.gelu(g.add(g.matmul(x[0], x[1]), x[2]))}; }, in, 0);
  // f64 has no epilogue path.
  check("f64 bias",
        [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; },
        {rnd({37, 64}, f64, 29), rnd({64, 48}, f64, 30), rnd({48}, f64, 31)}, 0);
}

namespace {

// One training step of a perceptron, act(x w1 + b1) w2 + b2 with `hidden` units, checked as
// check() does for f32, f16 and bf16; the epilogues `forward` and `backward` must each launch.
// x, w1 and b1 come from grid(): relu's gradients are then the same whichever path rounds.
void check_training(const std::string& what, bool relu, int64_t hidden, detail::MatmulShape::Epilogue forward,
                    detail::MatmulShape::Epilogue backward) {
  for (DType t : {f32, f16, bf16}) {
    std::vector<TensorData> in{grid({96, 40}, t, 30), rnd({96, 12}, t, 31), grid({40, hidden}, t, 32),
                               grid({hidden}, t, 33, 0.125), rnd({hidden, 12}, t, 34), rnd({12}, t, 35)};
    const long long fwd = detail::matmul_epilogue_launches(forward);
    const long long bwd = detail::matmul_epilogue_launches(backward);
    check(what + " " + dtype_name(t),
          [relu](Graph& g, auto& x) {
            Tensor pre = g.add(g.matmul(x[0], x[2]), x[3]);
            Tensor y = g.add(g.matmul(relu ? g.relu(pre) : g.gelu_tanh(pre), x[4]), x[5]);
            Tensor loss = g.reduce_mean(g.square(g.sub(y, x[1])));
            auto gr = g.gradients(loss, {x[0], x[2], x[3], x[4], x[5]});
            return std::vector{loss, gr[x[0]], gr[x[2]], gr[x[3]], gr[x[4]], gr[x[5]]};
          },
          in, 1);
    EXPECT_GT(detail::matmul_epilogue_launches(forward), fwd) << what << " " << dtype_name(t);
    EXPECT_GT(detail::matmul_epilogue_launches(backward), bwd) << what << " " << dtype_name(t);
  }
}

}  // namespace

// Training with gelu_tanh: the forward's gelu epilogue also stores the pre-activation
// (GELU_AUX_BIAS), and the backward's gelu_tanh_grad folds into the matmul that computes its
// incoming gradient (DGELU, reading that matrix): equal to the CPU's numbers and to the
// unfolded run's.
TEST(CudaMatmulEpilogue, GeluTanhTrainingFoldsTheForwardAuxAndTheBackwardDgelu) {
  using E = detail::MatmulShape::Epilogue;
  check_training("gelu_tanh MLP gradients", false, 56, E::gelu_tanh_aux_bias, E::dgelu_tanh);
}

// The same with relu, 128 hidden units and TGRAPH_DRELU=1 (opt-in: slower on the H200): the
// forward's relu epilogue also stores relu's bit mask (RELU_AUX_BIAS), and the backward's
// relu_grad folds into its matmul (DRELU, reading it).
TEST(CudaMatmulEpilogue, ReluTrainingFoldsTheForwardMaskAndTheBackwardDrelu) {
  using E = detail::MatmulShape::Epilogue;
  WithSwitches drelu({{"TGRAPH_DRELU", "1"}});
  check_training("relu MLP gradients", true, 128, E::relu_aux_bias, E::drelu);
}

// A gelu layer with two heads: its gradient is a sum, the gelu_tanh_grad joins a group that
// recomputes the pre-activation from the first matmul's result, so that matmul keeps writing it
// (the forward does not fold; tests/cpp/cuda_matmul_epilogue_match_test.cpp checks the plan).
TEST(CudaMatmulEpilogue, GeluLayerWithTwoHeads) {
  check("gelu_tanh, two heads",
        [](Graph& g, auto& x) {
          Tensor h = g.gelu_tanh(g.add(g.matmul(x[0], x[1]), x[2]));
          Tensor loss = g.add(g.reduce_mean(g.square(g.matmul(h, x[3]))), g.reduce_mean(g.matmul(h, x[4])));
          auto gr = g.gradients(loss, {x[0], x[1], x[2]});
          return std::vector{loss, gr[x[0]], gr[x[1]], gr[x[2]]};
        },
        {rnd({64, 32}, f32, 50), rnd({32, 48}, f32, 51), rnd({48}, f32, 52), rnd({48, 16}, f32, 53),
         rnd({48, 8}, f32, 54)},
        -1);
}

TEST(CudaMatmulEpilogue, LinearLayerOn3dInput) {
  // nn::Linear reshapes [2, 5, 32] to one 2-D GEMM and back before the bias add.
  for (DType t : {f32, f16, bf16}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    nn::Linear fc(g, "fc", 32, 16, {.dtype = t});
    Tensor x = g.placeholder({2, 5, 32}, t, "x");
    Tensor y = g.relu(fc.forward(g, x));
    TensorData in = rnd({2, 5, 32}, t, 40), bias = rnd({16}, t, 41);
    std::vector<TensorData> want, got;
    for (Device dev : {Device::cpu(), Device::cuda(0)}) {
      Executable e = g.compile({{x, x.type()}}, {y}, {}, CompileOptions{.device = dev});
      for (const std::string& name : e.variable_names())
        if (name.find("bias") != std::string::npos) e.set_variable(name, bias);
      long long before = detail::matmul_epilogue_launches();
      std::vector<TensorData> out = e.run({in});
      if (dev.kind == Device::Kind::cuda) {
        got = out;
        EXPECT_GT(detail::matmul_epilogue_launches(), before);
        e.run({in});
        EXPECT_TRUE(detail::cuda_graph_stats(e.impl()).error.empty()) << detail::cuda_graph_stats(e.impl()).error;
      } else {
        want = out;
      }
    }
    expect_close(got[0], want[0], tolerance(t), "linear + relu");
  }
}

// Training gradients of a two-layer perceptron: each bias gradient comes out of its weight-
// gradient matmul (cuBLASLt's bias-gradient epilogue), equal to the CPU's and to the unfolded run.
TEST(CudaMatmulEpilogue, BiasGradientsFromWeightGradientMatmuls) {
  for (DType t : {f32, f16, bf16}) {
    std::vector<TensorData> in{grid({96, 40}, t, 20), rnd({96, 12}, t, 21), grid({40, 56}, t, 22),
                               grid({56}, t, 23, 0.125), rnd({56, 12}, t, 24), rnd({12}, t, 25)};
    check(std::string("MLP gradients ") + dtype_name(t),
          [](Graph& g, auto& x) {
            Tensor h = g.relu(g.add(g.matmul(x[0], x[2]), x[3]));
            Tensor y = g.add(g.matmul(h, x[4]), x[5]);
            Tensor loss = g.reduce_mean(g.square(g.sub(y, x[1])));
            auto gr = g.gradients(loss, {x[2], x[3], x[4], x[5]});
            return std::vector{loss, gr[x[2]], gr[x[3]], gr[x[4]], gr[x[5]]};
          },
          in, 1);
  }
  // An odd number of rows and columns, and the gradient of a lone x^T dy with its column sums.
  check("x^T dy and sum(dy, 0), odd sizes",
        [](Graph& g, auto& x) {
          Tensor db = g.reduce_sum(x[1], {0});
          return std::vector{g.matmul(x[0], x[1], true, false), db};
        },
        {rnd({33, 17}, f32, 26), rnd({33, 9}, f32, 27)}, 1);
}
