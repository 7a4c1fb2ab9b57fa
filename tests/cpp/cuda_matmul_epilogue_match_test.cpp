// Which matmul + bias (+ activation) patterns the CUDA executor folds into the cuBLASLt epilogue
// (matmul_epilogue.h), on the plans of optimised modules. No GPU needed; the numbers are tested
// in tests/gpu/cuda_matmul_epilogue_test.cpp.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "backends/cuda/matmul_epilogue.h"
#include "passes/pipeline.h"
#include "test_util.h"
#include "tgraph/nn.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;
using E = MatmulShape::Epilogue;

namespace {

// The epilogues matched in the optimised module of `build` (placeholders of `shapes`, dtype t).
std::vector<E> matches(const std::vector<Shape>& shapes, DType t,
                       const std::function<std::vector<Tensor>(Graph&, std::vector<Tensor>&)>& build) {
  Graph g;
  std::vector<Tensor> x;
  for (const Shape& s : shapes) x.push_back(g.placeholder(s, t));
  std::vector<Tensor> outs = build(g, x);
  Module m;
  m.graph = g.impl();
  for (const Tensor& p : x) m.feeds.push_back(p.id());
  for (const Tensor& o : outs) m.targets.push_back(o.id());
  run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/true);
  FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
  std::vector<E> r;
  for (const EpilogueMatch& e : match_epilogues(m, plan))
    if (e.kind != E::none) r.push_back(e.kind);
  return r;
}

const std::vector<Shape> kLinear{{37, 64}, {64, 48}, {48}};

// The optimised module, CUDA plan and epilogue matches of one training step of a two-layer
// perceptron: act(x w1 + b1) w2 + b2 with `hidden` units, squared-error loss, the gradients of
// the weights and biases.
struct MlpPlan {
  Module m;
  FusionPlan plan;
  std::vector<EpilogueMatch> eps;
  std::vector<E> kinds;  // the kinds matched, in plan order

  MlpPlan(int64_t hidden, DType t, bool relu, int64_t out = 16) {
    Graph g;
    Tensor x = g.placeholder({64, 32}, t), lbl = g.placeholder({64, out}, t);
    Tensor w1 = g.variable(TensorData::uniform({32, hidden}, -1, 1, t, 1), "w1");
    Tensor b1 = g.variable(TensorData::uniform({hidden}, -1, 1, t, 2), "b1");
    Tensor w2 = g.variable(TensorData::uniform({hidden, out}, -1, 1, t, 3), "w2");
    Tensor b2 = g.variable(TensorData::uniform({out}, -1, 1, t, 4), "b2");
    Tensor pre = g.add(g.matmul(x, w1), b1);
    Tensor y = g.add(g.matmul(relu ? g.relu(pre) : g.gelu_tanh(pre), w2), b2);
    Tensor loss = g.reduce_mean(g.square(g.sub(y, lbl)));
    auto gr = g.gradients(loss, {w1, b1, w2, b2});
    m.graph = g.impl();
    m.feeds = {x.id(), lbl.id()};
    m.targets = {loss.id(), gr[w1].id(), gr[b1].id(), gr[w2].id(), gr[b2].id()};
    run_pipeline(m, true, true);
    plan = plan_fusion(m, 0, cuda_fusion_options());
    eps = match_epilogues(m, plan);
    for (const EpilogueMatch& e : eps)
      if (e.kind != E::none) kinds.push_back(e.kind);
  }
  std::vector<E> sorted_kinds() const {
    std::vector<E> k = kinds;
    std::sort(k.begin(), k.end());
    return k;
  }
};

}  // namespace

TEST(CudaMatmulEpilogueMatch, BiasAndActivationsFold) {
  for (DType t : {f32, f16, bf16}) {
    EXPECT_EQ(matches(kLinear, t, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }),
              std::vector<E>{E::bias});
    EXPECT_EQ(matches(kLinear, t, [](Graph& g, auto& x) { return std::vector{g.add(x[2], g.matmul(x[0], x[1]))}; }),
              std::vector<E>{E::bias});
    EXPECT_EQ(matches(kLinear, t,
                      [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; }),
              std::vector<E>{E::relu_bias});
    EXPECT_EQ(matches(kLinear, t,
                      [](Graph& g, auto& x) { return std::vector{g.gelu_tanh(g.add(g.matmul(x[0], x[1]), x[2]))}; }),
              std::vector<E>{E::gelu_tanh_bias});
  }
  EXPECT_EQ(matches({{3, 37, 64}, {64, 48}, {1, 1, 48}}, f32,
                    [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; }),
            std::vector<E>{E::relu_bias});
  EXPECT_EQ(matches({{37, 64}, {48, 64}, {1, 48}}, f16,
                    [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1], false, true), x[2])}; }),
            std::vector<E>{E::bias});
  // nn::Linear on [.., in]: a reshape of the 2-D result sits between the matmul and the add.
  EXPECT_EQ(matches({{2, 5, 32}}, f32,
                    [](Graph& g, auto& x) {
                      nn::Linear fc(g, "fc", 32, 16);
                      return std::vector{g.gelu_tanh(fc.forward(g, x[0]))};
                    }),
            std::vector<E>{E::gelu_tanh_bias});
  std::vector<E> unfused, off;
  {
    WithSwitches s({{"TGRAPH_NO_FUSION", "1"}});
    unfused = matches(kLinear, f32,
                      [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; });
  }
  EXPECT_EQ(unfused, std::vector<E>{E::relu_bias});
  {
    WithSwitches s({{"TGRAPH_NO_EPILOGUE", "1"}});
    off = matches(kLinear, f32, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; });
  }
  EXPECT_TRUE(off.empty());
}

TEST(CudaMatmulEpilogueMatch, OthersDoNotFold) {
  auto none = [](const std::vector<Shape>& shapes, DType t, auto build) {
    return matches(shapes, t, build).empty();
  };
  EXPECT_TRUE(none(kLinear, f32, [](Graph& g, auto& x) {
    Tensor y = g.matmul(x[0], x[1]);
    return std::vector{g.add(y, x[2]), y};
  }));
  EXPECT_TRUE(none(kLinear, f32, [](Graph& g, auto& x) {
    Tensor y = g.matmul(x[0], x[1]);
    return std::vector{g.mul(g.add(y, x[2]), y)};
  }));
  EXPECT_TRUE(none({{37, 64}, {64, 48}, {37, 1}}, f32,
                   [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }));
  EXPECT_TRUE(none({{37, 64}, {64, 48}, {37, 48}}, f32,
                   [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }));
  EXPECT_TRUE(none(kLinear, f32,
                   [](Graph& g, auto& x) { return std::vector{g.gelu(g.add(g.matmul(x[0], x[1]), x[2]))}; }));
  EXPECT_TRUE(none(kLinear, f64, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }));
  // [add, mul] in one group: the sum is not left alone.
  EXPECT_TRUE(none(kLinear, f32, [](Graph& g, auto& x) {
    return std::vector{g.mul(g.add(g.matmul(x[0], x[1]), x[2]), x[2])};
  }));
}

// The gradients of a two-layer perceptron: both bias gradients fold into their weight-gradient
// matmuls (the plan reduces dy before the matmul; the reduction and the reshape after it move).
TEST(CudaMatmulEpilogueMatch, BiasGradientsFoldIntoWeightGradients) {
  for (DType t : {f32, bf16}) {
    MlpPlan p(48, t, /*relu=*/true, 10);
    const Module& m = p.m;
    const FusionPlan& plan = p.plan;
    const std::vector<EpilogueMatch>& eps = p.eps;
    for (size_t i = 0; i < eps.size(); ++i) {
      if (eps[i].kind != E::bias_grad) continue;
      // The folded reduction reads the matmul's second operand; views of its result move too.
      const Node& mm = m.graph.nodes[static_cast<size_t>(plan.steps[i].node)];
      const Node& r = m.graph.nodes[static_cast<size_t>(plan.steps[eps[i].grad_step].node)];
      EXPECT_EQ(r.kind, OpKind::ReduceSum);
      EXPECT_EQ(r.inputs[0], mm.inputs[1]);
      EXPECT_EQ(eps[i].grad, r.outputs[0]);
      EXPECT_EQ(eps[i].moved.size(), 2u);  // the reduction and its reshape to [n]
      for (size_t k : eps[i].moved) EXPECT_TRUE(eps[k].runs_at_matmul);
    }
    // The forward's add + relu folds too (relu's gradient reads its result, not the sum).
    EXPECT_EQ(p.kinds, (std::vector<E>{E::relu_bias, E::bias_grad, E::bias_grad})) << dtype_name(t);
  }
  // Not when a step between the reduction and the matmul reads the bias gradient (here the
  // matmul's own operand depends on it).
  Graph g;
  Tensor x = g.placeholder({16, 8}, f32), dy = g.placeholder({16, 4}, f32);
  Tensor db = g.reduce_sum(dy, {0});
  Tensor used = g.exp(db);
  Tensor dw = g.matmul(g.mul(x, g.reduce_max(db)), dy, true, false);
  Module m;
  m.graph = g.impl();
  m.feeds = {x.id(), dy.id()};
  m.targets = {used.id(), dw.id()};
  run_pipeline(m, true, true);
  FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
  for (const EpilogueMatch& e : match_epilogues(m, plan)) EXPECT_NE(e.kind, E::bias_grad);
  // Nor when a step between must run after the reduction (a control dependency on it); the
  // same graph without the dependency folds.
  for (bool dep : {false, true}) {
    Graph h;
    Tensor hx = h.placeholder({16, 8}, f32), hdy = h.placeholder({16, 4}, f32);
    Tensor hdb = h.reduce_sum(hdy, {0});
    auto make = [&] { return std::vector{h.exp(hx)}; };
    Tensor after = dep ? h.control_dependency({hdb.op()}, make)[0] : make()[0];
    Tensor hdw = h.matmul(h.mul(hx, after), hdy, true, false);
    Module hm;
    hm.graph = h.impl();
    hm.feeds = {hx.id(), hdy.id()};
    hm.targets = {hdb.id(), hdw.id()};
    run_pipeline(hm, true, true);
    FusionPlan hp = plan_fusion(hm, 0, cuda_fusion_options());
    int folded = 0;
    for (const EpilogueMatch& e : match_epilogues(hm, hp)) folded += e.kind == E::bias_grad;
    EXPECT_EQ(folded, dep ? 0 : 1) << (dep ? "with" : "without") << " the control dependency";
  }
}

// A two-layer perceptron with gelu_tanh, trained: the forward stores the pre-activation as the
// aux matrix of its gelu epilogue, the backward's gelu_tanh_grad folds into the matmul computing
// its incoming gradient (reading that matrix), and both bias gradients fold as before.
TEST(CudaMatmulEpilogueMatch, GeluGradientFoldsWithTheForwardsAuxMatrix) {
  for (DType t : {f32, bf16}) {
    MlpPlan p(48, t, /*relu=*/false);
    const Module& m = p.m;
    const FusionPlan& plan = p.plan;
    const std::vector<EpilogueMatch>& eps = p.eps;
    EXPECT_EQ(p.sorted_kinds(), (std::vector<E>{E::gelu_tanh_aux_bias, E::bias_grad, E::bias_grad, E::dgelu_tanh}))
        << dtype_name(t);
    int32_t written = -1, read = -2;
    for (size_t i = 0; i < eps.size(); ++i) {
      if (eps[i].kind == E::gelu_tanh_aux_bias) written = eps[i].aux;
      if (eps[i].kind != E::dgelu_tanh) continue;
      read = eps[i].aux;
      // The last step it computes is the pinned gelu_tanh_grad, reading this matmul's result.
      EXPECT_EQ(eps[i].computed, eps[i].moved.size());
      const Step& s = plan.steps[eps[i].moved.back()];
      for (size_t k : eps[i].moved) EXPECT_TRUE(eps[k].runs_at_matmul);
      ASSERT_TRUE(s.pinned);
      const Node& n = m.graph.nodes[static_cast<size_t>(s.node)];
      EXPECT_EQ(n.kind, OpKind::GeluTanhGrad);
      EXPECT_EQ(n.outputs[0], eps[i].output);
      EXPECT_EQ(m.graph.producer(n.inputs[0]), &m.graph.nodes[static_cast<size_t>(plan.steps[i].node)]);
    }
    EXPECT_EQ(written, read);  // the backward reads the pre-activation the forward's epilogue wrote
  }
  // relu's gradient reads its result, so the forward folds whole in training too. With
  // TGRAPH_DRELU=1 and a hidden size a multiple of 128 it also stores relu's bit mask, and the
  // backward's relu_grad folds (DRELU).
  const std::vector<E> relu_fold{E::relu_bias, E::bias_grad, E::bias_grad};
  EXPECT_EQ(MlpPlan(48, f32, true).sorted_kinds(), relu_fold);
  EXPECT_EQ(MlpPlan(128, f32, true).sorted_kinds(), relu_fold);
  {
  WithSwitches drelu({{"TGRAPH_DRELU", "1"}});
  EXPECT_EQ(MlpPlan(48, f32, true).sorted_kinds(), relu_fold);
  for (DType t : {f32, bf16}) {
    MlpPlan p(128, t, /*relu=*/true);
    EXPECT_EQ(p.sorted_kinds(), (std::vector<E>{E::relu_aux_bias, E::bias_grad, E::bias_grad, E::drelu})) << dtype_name(t);
    int32_t stored = -1, read = -2;
    for (const EpilogueMatch& e : p.eps) {
      if (e.kind == E::relu_aux_bias) stored = e.aux;
      if (e.kind == E::drelu) read = e.aux;
    }
    EXPECT_EQ(stored, read);  // the mask of the same relu result
    EXPECT_EQ(p.m.graph.producer(stored)->kind, OpKind::Relu);
  }
  }
  // A hidden size cuBLASLt's aux matrix cannot take (not a multiple of 8): the gelu stays a kernel.
  EXPECT_EQ(MlpPlan(44, f32, false).sorted_kinds(), (std::vector<E>{E::bias_grad, E::bias_grad}));
  WithSwitches no_epilogue({{"TGRAPH_NO_EPILOGUE", "1"}});
  MlpPlan off(48, f32, false);
  EXPECT_TRUE(off.kinds.empty());
  for (const Step& s : off.plan.steps) EXPECT_FALSE(s.pinned);
}

// Values that steps read after the epilogues are applied but nothing writes any more: a matmul
// result an epilogue replaced (its call then writes the epilogue's output), or a value of a step
// the epilogue computes other than what it writes (output, aux matrix, bias gradient).
int orphan_reads(const Module& m, const FusionPlan& plan, const std::vector<EpilogueMatch>& eps) {
  int bad = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const EpilogueMatch& e = eps[i];
    if (e.kind == E::none) continue;
    std::vector<size_t> replaced;
    for (size_t j = i + 1; j <= i + e.steps; ++j) replaced.push_back(j);
    replaced.insert(replaced.end(), e.moved.begin(), e.moved.begin() + static_cast<std::ptrdiff_t>(e.computed));
    std::vector<int32_t> lost;
    if (e.kind != E::bias_grad) lost.push_back(m.graph.nodes[static_cast<size_t>(plan.steps[i].node)].outputs[0]);
    for (size_t j : replaced) {
      const Step& s = plan.steps[j];
      const std::vector<int32_t> made =
          s.fused() ? s.group.outputs : m.graph.nodes[static_cast<size_t>(s.node)].outputs;
      for (int32_t v : made)
        if (v != e.output && v != e.aux && v != e.grad) lost.push_back(v);
    }
    for (size_t k = i + 1; k < plan.steps.size(); ++k) {
      if (std::find(replaced.begin(), replaced.end(), k) != replaced.end()) continue;
      for (int32_t v : step_inputs(m.graph, plan.steps[k]))
        bad += std::find(lost.begin(), lost.end(), v) != lost.end();
    }
  }
  return bad;
}

// gelu layers whose gradient is summed from two paths (two heads; a residual around the second
// matmul): the backward's gelu_tanh_grad is not pinned, its group recomputes the pre-activation
// from the first matmul's result, so the forward must not fold (it would not write that result).
TEST(CudaMatmulEpilogueMatch, NoFoldWhenALaterGroupRecomputesFromTheResult) {
  for (bool residual : {false, true}) {
    SCOPED_TRACE(residual ? "residual" : "two heads");
    Graph g;
    Tensor x = g.placeholder({64, 32}, f32), l1 = g.placeholder({64, 48}, f32), l2 = g.placeholder({64, 8}, f32);
    Tensor w1 = g.variable(TensorData::uniform({32, 48}, -1, 1, f32, 1), "w1");
    Tensor b1 = g.variable(TensorData::uniform({48}, -1, 1, f32, 2), "b1");
    Tensor w2 = g.variable(TensorData::uniform({48, 48}, -1, 1, f32, 3), "w2");
    Tensor w3 = g.variable(TensorData::uniform({48, 8}, -1, 1, f32, 4), "w3");
    Tensor h = g.gelu_tanh(g.add(g.matmul(x, w1), b1));
    Tensor y1 = residual ? g.add(g.matmul(h, w2), h) : g.matmul(h, w2);
    Tensor loss = g.reduce_mean(g.square(g.sub(y1, l1)));
    if (!residual) loss = g.add(loss, g.reduce_mean(g.square(g.sub(g.matmul(h, w3), l2))));
    auto gr = g.gradients(loss, {w1, b1, w2});
    Module m;
    m.graph = g.impl();
    m.feeds = {x.id(), l1.id(), l2.id()};
    m.targets = {loss.id(), gr[w1].id(), gr[b1].id(), gr[w2].id()};
    run_pipeline(m, true, true);
    FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
    EXPECT_EQ(orphan_reads(m, plan, match_epilogues(m, plan)), 0);
  }
  // And the perceptrons above stay clean, and graphs around them: a mask after the activation
  // (its gradient's dy is a product, not a matmul result), and a forward whose activation feeds a
  // matmul and a reduction (a stitched reduction may recompute it).
  for (bool relu : {false, true}) {
    MlpPlan p(128, f32, relu);
    EXPECT_EQ(orphan_reads(p.m, p.plan, p.eps), 0);
  }
  for (int act = 0; act < 3; ++act) {
    for (bool masked : {false, true}) {
      Graph g;
      Tensor x = g.placeholder({64, 32}, f32), mask = g.placeholder({64, 48}, f32), l = g.placeholder({64, 16}, f32);
      Tensor w1 = g.variable(TensorData::uniform({32, 48}, -1, 1, f32, 1), "w1");
      Tensor b1 = g.variable(TensorData::uniform({48}, -1, 1, f32, 2), "b1");
      Tensor w2 = g.variable(TensorData::uniform({48, 16}, -1, 1, f32, 3), "w2");
      Tensor pre = g.add(g.matmul(x, w1), b1);
      Tensor h = act == 0 ? g.gelu_tanh(pre) : act == 1 ? g.relu(pre) : pre;
      if (masked) h = g.mul(h, mask);
      Tensor y = g.matmul(h, w2);
      Tensor loss = g.add(g.reduce_mean(g.square(g.sub(y, l))), g.reduce_mean(g.square(h)));
      auto gr = g.gradients(loss, {w1, b1, w2});
      Module m;
      m.graph = g.impl();
      m.feeds = {x.id(), mask.id(), l.id()};
      m.targets = {loss.id(), gr[w1].id(), gr[b1].id(), gr[w2].id(), y.id()};
      run_pipeline(m, true, true);
      FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
      EXPECT_EQ(orphan_reads(m, plan, match_epilogues(m, plan)), 0) << act << " " << masked;
    }
  }
}
#endif
