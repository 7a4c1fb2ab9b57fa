// HalfStorage (passes/half_storage.h): under bf16 / f16 the activations and their gradients
// leave fused kernels in half. Checked on a convolution + batch norm + ReLU + residual training
// graph: structurally (the f32 bytes the planned steps hand to each other shrink, weight
// gradients and optimizer state stay f32) and by value (a bf16 training run follows the one
// with f32 activations and the f32 one).
#include "passes/half_storage.h"

#include <cstdlib>
#include <map>

#include "ir/verifier.h"
#include "module_util.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "test_util.h"
#include "tgraph/nn.h"
#include "tgraph/optim.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;

namespace {

struct Net {
  Graph g;
  Tensor x, y, loss;
  std::vector<Tensor> params;
  std::vector<Operation> ops;
};

// conv -> batch norm -> relu -> conv -> batch norm, + the input's projection, relu, mean, linear.
void build(Net& n) {
  Graph& g = n.g;
  n.x = g.placeholder({4, 8, 8, 3}, f32, "x");
  n.y = g.placeholder({4, 5}, f32, "y");
  nn::ResNetConfig c;
  c.num_classes = 5;
  c.base_width = 8;
  c.small_input = true;
  c.seed = 3;
  auto net = nn::resnet(g, false, {1, 1}, c);
  net->train();
  n.loss = g.softmax_cross_entropy(net->forward(g, n.x), n.y);
  n.params = net->parameters();
  n.ops = net->updates();
  n.ops.push_back(optim::sgd(g, n.params, g.gradients(n.loss, n.params), g.scalar(0.1), {.momentum = 0.9}));
}

std::map<std::string, std::string> f32_activations(bool half_storage) {
  if (half_storage) return {};
  return {{"TGRAPH_F32_ACTIVATIONS", "1"}};
}

Module pipeline(const Net& n, bool half_storage) {
  WithSwitches s(f32_activations(half_storage));
  Module m = passtest::module_of(n.g, {n.loss}, n.ops);
  m.feeds = {n.x.id(), n.y.id()};
  run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/true, Precision::bf16);
  return m;
}

// Bytes of each dtype that steps of the GPU-style plan write for later steps to read.
std::map<DType, int64_t> handed_over(const Module& m) {
  FusionPlan plan = plan_fusion(m, 0, FusionOptions{.stitch_reductions = true});
  std::vector<int32_t> reads = plan_reads(m, 0, plan);
  std::map<DType, int64_t> bytes;
  for (const Step& s : plan.steps)
    for (int32_t id : step_nodes(s))
      for (int32_t v : m.graph.nodes[static_cast<size_t>(id)].outputs) {
        const TensorType& t = m.graph.type(v);
        if (reads[static_cast<size_t>(v)] > 0 && t.shape.num_elements() >= 4 * 8 * 8 * 8)
          bytes[t.dtype] += t.shape.num_elements() * static_cast<int64_t>(dtype_size(t.dtype));
      }
  return bytes;
}

TEST(PassHalfStorage, ActivationsLeaveKernelsInHalf) {
  Net n;
  build(n);
  Module plain = pipeline(n, false), half = pipeline(n, true);
  EXPECT_EQ(verify(half.graph), "");
  std::map<DType, int64_t> before = handed_over(plain), after = handed_over(half);
  SCOPED_TRACE("f32 bytes " + std::to_string(before[DType::f32]) + " -> " + std::to_string(after[DType::f32]) +
               ", bf16 " + std::to_string(before[DType::bf16]) + " -> " + std::to_string(after[DType::bf16]));
  // The plan writes a value before its widening cast in both (narrow_widened_outputs: a
  // convolution's bf16 output, not its f32 view); what stays f32 without HalfStorage is what
  // the kernels compute in f32 (a batch norm's output), and that shrinks.
  EXPECT_LT(after[DType::f32], before[DType::f32]);
  // No more bytes in all (in this small net, the f32 value HalfStorage used to narrow, ReLU's
  // gradient, is not written at all once its readers recompute it: recompute_shared_producers).
  EXPECT_LE(after[DType::f32] + after[DType::bf16], before[DType::f32] + before[DType::bf16]);
  // Every cast back to f32 that the pass made has one reader, and nothing casts a weight
  // gradient to half: the optimizer's operands are what Autocast left.
  for (const Block& b : half.graph.blocks)
    for (int32_t id : b.nodes) {
      const Node& nd = half.graph.nodes[static_cast<size_t>(id)];
      if (nd.kind != OpKind::Cast || half.graph.type(nd.outputs[0]).dtype != bf16) continue;
      const int32_t p = half.graph.values[static_cast<size_t>(nd.inputs[0])].node;
      if (p >= 0) EXPECT_NE(half.graph.nodes[static_cast<size_t>(p)].kind, OpKind::Conv2dWeightGrad);
    }
}

std::vector<double> losses(Net& n, bool half_storage, int steps, Precision p = Precision::bf16) {
  Executable e = n.g.compile({{n.x, n.x.type()}, {n.y, n.y.type()}}, {n.loss}, n.ops,
                             {.device = Device::cpu(), .precision = p, .switches = f32_activations(half_storage)});
  TensorData xs = TensorData::randn(n.x.type().shape, f32, 9);
  std::vector<double> labels(20, 0.0);
  for (int i = 0; i < 4; ++i) labels[static_cast<size_t>(i * 5 + (3 * i + 1) % 5)] = 1.0;
  TensorData ys = TensorData::from_vector({4, 5}, f32, labels);
  std::vector<double> r;
  for (int i = 0; i < steps; ++i) r.push_back(e.run({xs, ys})[0].at(0));
  return r;
}

TEST(HalfStorageCpu, TrainingFollowsF32Activations) {
  const int steps = 6;
  Net a, b, c;
  build(a), build(b), build(c);
  std::vector<double> half = losses(a, true, steps), wide = losses(b, false, steps),
                      f32ref = losses(c, true, steps, Precision::f32);
  for (int i = 0; i < steps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    EXPECT_NEAR(half[static_cast<size_t>(i)], wide[static_cast<size_t>(i)], 3e-2 * std::abs(wide[0]));
    EXPECT_NEAR(half[static_cast<size_t>(i)], f32ref[static_cast<size_t>(i)], 5e-2 * std::abs(f32ref[0]));
  }
  EXPECT_LT(half.back(), half.front());
  EXPECT_NE(half, wide);  // the activations really were rounded to bf16
}

}  // namespace
