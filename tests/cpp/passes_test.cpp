// Each pass on a small graph, checked structurally before and after.
#include <cmath>
#include <limits>
#include <cstdlib>
#include <filesystem>

#include "passes/algebraic_simplify.h"
#include "passes/constant_folding.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/decompose.h"
#include "passes/fold_batch_norm.h"
#include "passes/fold_memo.h"
#include "ir/verifier.h"
#include "runtime/executable_impl.h"
#include "passes/pipeline.h"
#include "passes/rewrite.h"
#include "test_util.h"
#include "tgraph/tgraph.h"
#include "module_util.h"

using namespace tg;
using namespace tg::detail;

namespace {
using passtest::module_of;
int count(const Module& m, OpKind k) {
  int c = 0;
  for (const Block& b : m.graph.blocks)
    for (int32_t id : b.nodes) c += m.graph.nodes[static_cast<size_t>(id)].kind == k;
  return c;
}
const Node& producer(const Module& m, int32_t v) {
  return m.graph.nodes[static_cast<size_t>(m.graph.values[static_cast<size_t>(v)].node)];
}
}  // namespace

TEST(PassDce, RemovesUnusedKeepsTargets) {
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x");
  Tensor y = g.exp(x);
  g.log(x);  // dead
  Module m = module_of(g, {y});
  EXPECT_EQ(count(m, OpKind::Log), 1);
  EXPECT_TRUE(DeadCodeElimination().run(m));
  EXPECT_EQ(count(m, OpKind::Log), 0);
  EXPECT_EQ(count(m, OpKind::Exp), 1);
  EXPECT_FALSE(DeadCodeElimination().run(m));
}

TEST(PassDce, AssignNothingDependsOnIsRemoved) {
  Graph g;
  Tensor v = g.variable(TensorData::randn({2}), "v");
  g.assign(v, g.neg(v));
  Tensor y = g.exp(v);
  Module m = module_of(g, {y});
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::Assign), 0);
  EXPECT_EQ(count(m, OpKind::Neg), 0);
}

TEST(PassDce, AssignATargetDependsOnIsKept) {
  Graph g;
  Tensor v = g.variable(TensorData::randn({2}), "v");
  Operation up = g.assign(v, g.neg(v));
  Tensor y = g.control_dependency({up}, [&] { return std::vector{g.exp(v)}; })[0];
  Module m = module_of(g, {y});
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::Assign), 1);
  EXPECT_EQ(count(m, OpKind::Neg), 1);
  // ... and as a target operation with no tensor target at all.
  Module m2 = module_of(g, {}, {up});
  DeadCodeElimination().run(m2);
  EXPECT_EQ(count(m2, OpKind::Assign), 1);
  EXPECT_EQ(count(m2, OpKind::Exp), 0);
}

TEST(PassDce, SideEffectsInsideLiveRegionsStay) {
  Graph g;
  Tensor v = g.variable(TensorData::zeros({1}), "v");
  auto r = g.for_loop(g.scalar(3, i32), {g.scalar(0.0)}, [&](Graph& b, Tensor, std::vector<Tensor> a) {
    b.assign(v, b.add(v, b.scalar(1.0)));  // nothing reads it inside the body
    return std::vector{b.add(a[0], b.scalar(1.0))};
  });
  Module m = module_of(g, {r[0]});
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::Assign), 1);
}

namespace {
// The live for_loop / while_loop nodes of a module.
std::vector<const Node*> loops(const Module& m, OpKind k) {
  std::vector<const Node*> out;
  for (const Block& b : m.graph.blocks)
    for (int32_t id : b.nodes)
      if (m.graph.nodes[static_cast<size_t>(id)].kind == k) out.push_back(&m.graph.nodes[static_cast<size_t>(id)]);
  return out;
}
const Block& region(const Module& m, const Node& n, size_t r) {
  return m.graph.blocks[static_cast<size_t>(n.regions[r])];
}
// Runs `targets` on the CPU, compiled with and without the optimisation passes.
std::pair<std::vector<TensorData>, std::vector<TensorData>> both_ways(Graph& g, const std::vector<std::pair<Tensor, TensorData>>& feeds,
                                                                      const std::vector<Tensor>& targets) {
  std::vector<std::pair<Tensor, TensorType>> ft;
  std::vector<TensorData> in;
  for (auto& [t, d] : feeds) {
    ft.emplace_back(t, t.type());
    in.push_back(d);
  }
  CompileOptions opt, plain;
  opt.device = plain.device = Device::cpu();
  plain.optimize = false;
  return {g.compile(ft, targets, {}, opt).run(in), g.compile(ft, targets, {}, plain).run(in)};
}
void expect_same(const std::vector<TensorData>& a, const std::vector<TensorData>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].num_elements(), b[i].num_elements());
    for (int64_t e = 0; e < a[i].num_elements(); ++e) EXPECT_NEAR(a[i].at(e), b[i].at(e), 1e-6) << i << "," << e;
  }
}
}  // namespace

TEST(PassDce, UnusedLoopCarriedValuesAreRemoved) {
  // x is returned; acc reads x but nothing reads acc; p and q feed only each other.
  Graph g;
  Tensor x0 = g.placeholder({3}, f32, "x0");
  auto r = g.for_loop(g.scalar(4, i32), {x0, g.scalar(0.0), g.scalar(1.0), g.scalar(2.0)},
                      [&](Graph& b, Tensor i, std::vector<Tensor> a) {
                        Tensor x = b.add(b.mul(a[0], b.scalar(0.5)), b.cast(i, f32));
                        Tensor acc = b.add(a[1], b.reduce_sum(b.exp(a[0])));
                        return std::vector{x, acc, b.add(a[2], a[3]), b.sin(a[2])};
                      });
  Module m = module_of(g, {r[0]});
  const Node& loop = producer(m, r[0].id());
  ASSERT_EQ(loop.outputs.size(), 4u);
  EXPECT_TRUE(DeadCodeElimination().run(m));
  EXPECT_EQ(verify(m.graph), "");
  ASSERT_EQ(loop.outputs.size(), 1u);
  EXPECT_EQ(loop.outputs[0], r[0].id());
  EXPECT_EQ(loop.inputs.size(), 4u);  // lower, upper, step, x0
  EXPECT_EQ(loop.inputs[3], x0.id());
  EXPECT_EQ(region(m, loop, 0).params.size(), 2u);
  EXPECT_EQ(region(m, loop, 0).results.size(), 1u);
  EXPECT_EQ(count(m, OpKind::Exp), 0);
  EXPECT_EQ(count(m, OpKind::Sin), 0);
  EXPECT_FALSE(DeadCodeElimination().run(m));
  auto [opt, plain] = both_ways(g, {{x0, TensorData::from_floats({3}, {0.5f, -1.0f, 2.0f})}}, {r[0]});
  expect_same(opt, plain);
}

TEST(PassDce, LoopCarriedValuesThatAreNeededStay) {
  Graph g;
  Tensor v = g.variable(TensorData::zeros({}), "v");
  Tensor u = g.variable(TensorData::zeros({}), "u");
  auto body = [&](Graph& b, Tensor i, std::vector<Tensor> a) {
    // a[0] reads a[1]; a[2]'s output is returned; a[3] is written to a variable, a[4] too but
    // inside an if_else that returns nothing.
    b.assign(v, a[3]);
    b.if_else(b.equal(i, b.scalar(1, i32)), [&](Graph& c) {
      c.assign(u, a[4]);
      return std::vector<Tensor>{};
    });
    return std::vector{b.add(a[0], a[1]), b.mul(a[1], b.scalar(2.0)), b.sin(a[2]), b.add(a[3], b.scalar(1.0)),
                       b.mul(a[4], b.scalar(3.0))};
  };
  auto r = g.for_loop(g.scalar(3, i32), {g.scalar(1.0), g.scalar(0.5), g.scalar(0.3), g.scalar(0.0), g.scalar(1.0)},
                      body);
  Module m = module_of(g, {r[0], r[2]});
  DeadCodeElimination().run(m);
  EXPECT_EQ(verify(m.graph), "");
  const Node& loop = producer(m, r[0].id());
  EXPECT_EQ(loop.outputs.size(), 5u);
  EXPECT_EQ(count(m, OpKind::Assign), 2);
  auto [opt, plain] = both_ways(g, {}, {r[0], r[2]});
  expect_same(opt, plain);
}

TEST(PassDce, WhileLoopDropsUnusedCarriedValues) {
  // Carries (i, x, acc); only x is returned. acc goes; i stays (the predicate reads it).
  Graph g;
  Tensor x0 = g.placeholder({2}, f32, "x0");
  auto r = g.while_loop(
      {g.scalar(0, i32), x0, g.scalar(0.0)},
      [&](Graph& b, std::vector<Tensor> a) { return std::pair{b.less(a[0], b.scalar(5, i32)), a}; },
      [&](Graph& b, std::vector<Tensor> a) {
        return std::vector{b.add(a[0], b.scalar(1, i32)), b.mul(a[1], b.scalar(1.5)),
                           b.add(a[2], b.reduce_sum(b.exp(a[1])))};
      });
  Module m = module_of(g, {r[1]});
  EXPECT_TRUE(DeadCodeElimination().run(m));
  EXPECT_EQ(verify(m.graph), "");
  const Node& loop = producer(m, r[1].id());
  EXPECT_EQ(loop.inputs.size(), 2u);
  ASSERT_EQ(loop.outputs.size(), 2u);
  EXPECT_EQ(loop.outputs[1], r[1].id());
  EXPECT_EQ(region(m, loop, 0).params.size(), 2u);
  EXPECT_EQ(region(m, loop, 0).results.size(), 3u);  // predicate, i, x
  EXPECT_EQ(region(m, loop, 1).params.size(), 2u);
  EXPECT_EQ(region(m, loop, 1).results.size(), 2u);
  EXPECT_EQ(count(m, OpKind::Exp), 0);
  auto [opt, plain] = both_ways(g, {{x0, TensorData::from_floats({2}, {0.25f, -2.0f})}}, {r[1]});
  expect_same(opt, plain);
}

TEST(PassDce, ForwardOnlyExecutableDropsTheGradientTape) {
  Graph g;
  Tensor h0 = g.placeholder({2, 3}, DType::f64, "h0");
  Tensor w = g.placeholder({3, 3}, DType::f64, "w");
  Tensor h = g.for_loop(g.scalar(4, i32), {h0}, [&](Graph& b, Tensor, std::vector<Tensor> s) {
    return std::vector{b.tanh(b.matmul(s[0], w))};
  })[0];
  auto grads = g.gradients(g.reduce_sum(h), {w});
  ASSERT_EQ(h.op().num_outputs(), 2);  // h and its tape
  std::vector<std::pair<Tensor, TensorType>> feeds{{h0, h0.type()}, {w, w.type()}};
  std::vector<TensorData> in{TensorData::uniform({2, 3}, -1, 1, DType::f64, 1),
                             TensorData::uniform({3, 3}, -1, 1, DType::f64, 2)};
  CompileOptions opt;
  opt.device = Device::cpu();
  Executable fwd = g.compile(feeds, {h}, {}, opt);
  const Module& fm = fwd.impl().module;
  auto fl = loops(fm, OpKind::ForLoop);
  ASSERT_EQ(fl.size(), 1u);
  EXPECT_EQ(fl[0]->outputs.size(), 1u);
  EXPECT_EQ(count(fm, OpKind::Scatter), 0);
  EXPECT_EQ(count(fm, OpKind::WhileLoop), 0);  // nor the loop that sizes the tape
  // Training keeps the tape and the same forward values.
  Executable train = g.compile(feeds, {h, grads.at(w)}, {}, opt);
  bool taped = false;
  for (const Node* n : loops(train.impl().module, OpKind::ForLoop)) taped |= n->outputs.size() == 2;
  EXPECT_TRUE(taped);
  expect_same(fwd.run(in), {train.run(in)[0]});
}

TEST(PassConstantFolding, FoldsConstantSubgraphs) {
  Graph g;
  Tensor x = g.placeholder({2}, f32, "x");
  Tensor c = g.mul(g.constant(TensorData::from_floats({2}, {1.5f, 2.0f})), g.constant(TensorData::from_floats({2}, {2.0f, 3.0f})));
  Tensor y = g.add(x, c);
  Module m = module_of(g, {y});
  EXPECT_TRUE(ConstantFolding().run(m));
  const Node& folded = producer(m, m.graph.nodes[static_cast<size_t>(y.op().id())].inputs[1]);
  ASSERT_EQ(folded.kind, OpKind::Constant);
  EXPECT_EQ(folded.data.to_vector(), (std::vector<double>{3.0, 6.0}));
  EXPECT_EQ(count(m, OpKind::Add), 1);  // depends on a placeholder: not folded
}

// A weight over the size limit: its transpose and its cast to half fold (each replaces the
// one constant it reads), with the reference's values; a transpose of a constant read twice
// would copy it, so it waits for run time.
TEST(PassConstantFolding, FoldsLargeWeightsTransposedAndCastOnce) {
  const int64_t R = 1100, C = 1000;  // over kMaxElements
  ASSERT_GT(R * C, ConstantFolding::kMaxElements);
  TensorData w = TensorData::uniform({R, C}, -1, 1, f32, 3);
  for (DType half : {DType::f16, DType::bf16}) {
    Graph g;
    Tensor x = g.placeholder({4, R}, f32, "x");
    Tensor y = g.matmul(g.cast(x, half), g.cast(g.transpose(g.constant(w), {1, 0}), half), false, true);
    Module m = module_of(g, {y});
    EXPECT_TRUE(ConstantFolding().run(m));
    DeadCodeElimination().run(m);
    EXPECT_EQ(count(m, OpKind::Transpose), 0);
    EXPECT_EQ(count(m, OpKind::Cast), 1);  // x's
    const Node& folded = producer(m, m.graph.nodes[static_cast<size_t>(y.op().id())].inputs[1]);
    ASSERT_EQ(folded.kind, OpKind::Constant);
    ASSERT_EQ(folded.data.type(), TensorType(Shape{C, R}, half));
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{777}, R * C - 1}) {
      const int64_t r = i / R, c = i % R;  // folded[r][c] = w[c][r]
      TensorData one = TensorData::zeros({1}, half);
      one.set(0, w.at(c * C + r));
      EXPECT_EQ(folded.data.at(i), one.at(0)) << i;
    }
  }
  Graph g;
  Tensor c = g.constant(w);
  Tensor y = g.add(g.transpose(c, {1, 0}), g.transpose(c, {1, 0}));
  Module m = module_of(g, {y, c});
  ConstantFolding().run(m);
  EXPECT_EQ(count(m, OpKind::Transpose), 2);
}

// Two compiles of one source graph (a dynamic executable's per-size copies) share the weight
// they fold: the second finds the first's result by the buffer it reads, while both live; a
// weight with other values (another buffer) folds anew.
TEST(PassConstantFolding, CopiesOfOneGraphShareTheirFoldedWeights) {
  const int64_t R = 1100, C = 1000;
  TensorData w = TensorData::uniform({R, C}, -1, 1, f32, 5);
  Graph g;
  Tensor x = g.placeholder({4, C}, DType::f16, "x");
  Tensor y = g.matmul(x, g.cast(g.transpose(g.constant(w), {1, 0}), DType::f16));
  auto folded = [&](Module& m) -> const TensorData& {
    ConstantFolding().run(m);
    DeadCodeElimination().run(m);  // the transposed f32 weight, read only by the cast, goes
    ConstantFolding().run(m);
    DeadCodeElimination().run(m);
    const Node& c = producer(m, m.graph.nodes[static_cast<size_t>(y.op().id())].inputs[1]);
    EXPECT_EQ(c.kind, OpKind::Constant);
    return c.data;
  };
  Module a = module_of(g, {y}), b = module_of(g, {y});
  const TensorData& fa = folded(a);
  const TensorData& fb = folded(b);
  EXPECT_EQ(fa.data(), fb.data()) << "the second copy folded the weight again";
  EXPECT_EQ(fa.to_vector(), fb.to_vector());
  Graph h;
  Tensor xh = h.placeholder({4, C}, DType::f16, "x");
  Tensor yh = h.matmul(xh, h.cast(h.transpose(h.constant(w.clone()), {1, 0}), DType::f16));
  Module c = module_of(h, {yh});
  ConstantFolding().run(c);
  ConstantFolding().run(c);
  const Node& fc = producer(c, c.graph.nodes[static_cast<size_t>(yh.op().id())].inputs[1]);
  EXPECT_NE(fc.data.data(), fa.data());
  EXPECT_EQ(fc.data.to_vector(), fa.to_vector());
}

// A weight's transpose that a matmul reads is not folded into a transposed copy: it becomes the
// matmul's transpose flag and the matmul reads the weight's own bytes (a Linear's x @ W^T). A
// transpose read by anything else still folds.
TEST(PassConstantFolding, WeightTransposeReadByAMatmulBecomesItsFlag) {
  TensorData w = TensorData::uniform({24, 16}, -1, 1, f32, 5);
  Graph g;
  Tensor x = g.placeholder({4, 16}, f32, "x");
  Tensor wc = g.constant(w);
  Tensor y = g.matmul(x, g.transpose(wc, {1, 0}));
  Tensor z = g.transpose(wc, {1, 0});  // read by no matmul: folded
  Module m = module_of(g, {y, z});
  for (int i = 0; i < 3; ++i) {
    DeadCodeElimination().run(m);
    ConstantFolding().run(m);
    AlgebraicSimplify().run(m);
  }
  DeadCodeElimination().run(m);
  const Node& mm = m.graph.nodes[static_cast<size_t>(y.op().id())];
  ASSERT_EQ(mm.kind, OpKind::MatMul);
  EXPECT_TRUE(std::get<MatmulDesc>(mm.attr).transpose_b);
  const Node& weight = producer(m, mm.inputs[1]);
  ASSERT_EQ(weight.kind, OpKind::Constant);
  EXPECT_EQ(weight.data.data(), w.data()) << "the matmul reads a copy of the weight";
  const Node& other = m.graph.nodes[static_cast<size_t>(z.op().id())];
  EXPECT_EQ(other.kind, OpKind::Constant);
  EXPECT_EQ(other.data.shape(), (Shape{16, 24}));
  // And the result is the reference's.
  Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu()});
  TensorData in = TensorData::randn({4, 16}, f32, 3);
  Executable r = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu(), .optimize = false});
  const auto got = e.run({in})[0].to_vector(), want = r.run({in})[0].to_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
}

// rewrite_nodes moves the uses of a rewritten node's outputs lazily (at each visit, and every
// node's at the end): a later node's rewrite still sees the earlier rewrites' values, and the
// readers, control dependencies and targets of every rewritten node end on its replacement.
TEST(PassRewrite, LaterNodesSeeEarlierRewritesAndUsesMove) {
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x");
  Tensor a = g.exp(x);
  Tensor b = g.exp(a);
  Tensor c = g.add(a, b);
  Tensor d = g.control_dependency({b.op()}, [&] { return std::vector<Tensor>{g.neg(x)}; })[0];
  Module m = module_of(g, {c, d, b});
  int visits = 0, saw_rewritten = 0;
  EXPECT_TRUE(rewrite_nodes(m, [&](Graph& h, const Node& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    if (n.kind != OpKind::Exp) return {};
    ++visits;
    // exp(v) as exp(v + 0): the replacement's exp reads an add.
    const Node* p = h.impl().producer(in[0].id());
    if (p && p->kind == OpKind::Exp && h.impl().producer(p->inputs[0])->kind == OpKind::Add) ++saw_rewritten;
    return {h.exp(h.add(in[0], h.scalar(0.0, f32)))};
  }));
  EXPECT_EQ(visits, 2);
  EXPECT_EQ(saw_rewritten, 1) << "the second exp's rewrite did not read the first's replacement";
  EXPECT_EQ(verify(m.graph), "");
  const GraphImpl& G = m.graph;
  const Node& sum = *G.producer(m.targets[0]);
  ASSERT_EQ(sum.kind, OpKind::Add);
  for (int32_t v : sum.inputs) {
    EXPECT_NE(v, a.id());
    EXPECT_NE(v, b.id());
    EXPECT_EQ(G.producer(G.producer(v)->inputs[0])->kind, OpKind::Add);
  }
  EXPECT_NE(m.targets[2], b.id());
  EXPECT_EQ(m.targets[2], sum.inputs[1]);
  const Node& neg = *G.producer(m.targets[1]);
  ASSERT_EQ(neg.control_deps.size(), 1u);
  EXPECT_EQ(neg.control_deps[0], G.values[static_cast<size_t>(m.targets[2])].node);
  // And the values: exp(x) + exp(exp(x)), through the rewritten graph.
  Graph r;
  r.impl() = G;
  TensorData in = TensorData::uniform({3}, -1, 1, f32, 4);
  const auto got = r.run({{Tensor(&r.impl(), x.id()), in}}, {Tensor(&r.impl(), m.targets[0])})[0].to_vector();
  const auto xs = in.to_vector();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], std::exp(xs[i]) + std::exp(std::exp(xs[i])), 1e-4);

  // A rewrite that throws what is not a tg::Error (a copy compiled ahead given up) stops the
  // pass, not only that node, and leaves the graph whole: the first exp's rewrite moved its uses.
  Module stopped = module_of(g, {c});
  int seen = 0;
  EXPECT_THROW(rewrite_nodes(stopped,
                             [&](Graph& h, const Node& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
                               if (n.kind != OpKind::Exp) return {};
                               if (seen++ == 1) {
                                 h.neg(in[0]);  // built, then dropped with the throw
                                 throw std::runtime_error("given up");
                               }
                               return {h.exp(h.add(in[0], h.scalar(0.0, f32)))};
                             }),
               std::runtime_error);
  EXPECT_EQ(verify(stopped.graph), "");
  const Node& second = *stopped.graph.producer(b.id());
  ASSERT_EQ(second.kind, OpKind::Exp);
  EXPECT_NE(second.inputs[0], a.id()) << "the first rewrite's uses did not move";
}

// A rewrite handing back the node's own outputs swapped (or one for another) is not taken: the
// lazy moves of its uses would chase each other for ever. The node stays, and the pass ends.
TEST(PassRewrite, ARewriteThatSwapsANodesOwnOutputsIsNotTaken) {
  Graph g;
  Tensor x = g.placeholder({4}, f32, "x");
  std::vector<Tensor> halves = g.split(x, {2, 2}, 0);
  Tensor y = g.sub(g.exp(halves[0]), halves[1]);
  Module m = module_of(g, {y});
  int split_visits = 0;
  EXPECT_FALSE(rewrite_nodes(m, [&](Graph& h, const Node& n, const std::vector<Tensor>&) -> std::vector<Tensor> {
    if (n.kind != OpKind::Split) return {};
    ++split_visits;
    return {Tensor(&h.impl(), n.outputs[1]), Tensor(&h.impl(), n.outputs[0])};
  }));
  EXPECT_EQ(split_visits, 1);
  EXPECT_EQ(verify(m.graph), "");
  Graph r;
  r.impl() = m.graph;
  TensorData in = TensorData::uniform({4}, -1, 1, f32, 5);
  const auto got = r.run({{Tensor(&r.impl(), x.id()), in}}, {Tensor(&r.impl(), m.targets[0])})[0].to_vector();
  const auto xs = in.to_vector();
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(got[i], std::exp(xs[i]) - xs[i + 2], 1e-5);
}

TEST(PassCse, MergesEqualPureOpsOnly) {
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x");
  Tensor a = g.exp(x), b = g.exp(x), c = g.reduce_sum(x, {0}), d = g.reduce_sum(x, {0}, true);
  auto st = g.random_state(1);
  (void)st;
  Tensor y = g.add(a, b);
  Module m = module_of(g, {y, c, d});
  EXPECT_TRUE(CommonSubexpressionElimination().run(m));
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::Exp), 1);
  const Node& add = m.graph.nodes[static_cast<size_t>(y.op().id())];
  EXPECT_EQ(add.inputs[0], add.inputs[1]);
  EXPECT_EQ(count(m, OpKind::ReduceSum), 2);  // different attributes stay apart
}

// A commutative op (the kCommutative trait) merges with its operands in either order; a
// subtraction and a minimum do not (min(+0, -0) is +0, min(-0, +0) is -0).
TEST(PassCse, CommutativeOpsMergeInEitherOrder) {
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x"), z = g.placeholder({3}, f32, "z");
  Tensor s1 = g.add(x, z), s2 = g.add(z, x), p1 = g.mul(z, x), p2 = g.mul(x, z);
  Tensor d1 = g.sub(x, z), d2 = g.sub(z, x), m1 = g.minimum(x, z), m2 = g.minimum(z, x);
  Module m = module_of(g, {s1, s2, p1, p2, d1, d2, m1, m2});
  EXPECT_TRUE(CommonSubexpressionElimination().run(m));
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::Add), 1);
  EXPECT_EQ(count(m, OpKind::Mul), 1);
  EXPECT_EQ(count(m, OpKind::Sub), 2);
  EXPECT_EQ(count(m, OpKind::Minimum), 2);
}

// Large constants are hashed from a sample of their words: equal ones still merge, and ones
// that differ only outside the sample stay apart (the full comparison decides).
TEST(PassCse, LargeConstantsCompareEveryByte) {
  Graph g;
  TensorData big = TensorData::uniform({300000}, -1, 1, f32, 5);
  TensorData copy = big.clone(), other = big.clone();
  other.set(3, 42.0);  // words 1 and 149998 of 150,000: the sample (every 18th word) skips both
  other.set(299997, 7.0);
  Tensor x = g.placeholder({300000}, f32, "x");
  Tensor a = g.add(x, g.constant(big)), b = g.add(x, g.constant(copy)), c = g.add(x, g.constant(other));
  Module m = module_of(g, {a, b, c});
  EXPECT_TRUE(CommonSubexpressionElimination().run(m));
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::Constant), 2);
  EXPECT_EQ(m.targets[0], m.targets[1]);
  EXPECT_NE(m.targets[0], m.targets[2]);
}

TEST(PassSimplify, IdentitiesGoAway) {
  Graph g;
  Tensor x = g.placeholder({2, 3}, f32, "x");
  Tensor y1 = g.mul(x, g.scalar(1.0));
  Tensor y2 = g.add(g.scalar(0.0), x);
  Tensor y3 = g.transpose(g.transpose(x, {1, 0}), {1, 0});
  Tensor y4 = g.cast(x, f32);
  Tensor y5 = g.reshape(g.reshape(x, {6}), {3, 2});
  Tensor y6 = g.mul(x, g.scalar(2.0));  // not an identity
  Module m = module_of(g, {y1, y2, y3, y4, y5, y6});
  EXPECT_TRUE(AlgebraicSimplify().run(m));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m.targets[static_cast<size_t>(i)], x.id()) << "target " << i;
  const Node& r = producer(m, m.targets[4]);
  EXPECT_EQ(r.kind, OpKind::Reshape);
  EXPECT_EQ(r.inputs[0], x.id());
  EXPECT_EQ(producer(m, m.targets[5]).kind, OpKind::Mul);
}

TEST(PassSimplify, MatmulReadsTransposedOperandsItself) {
  Graph g;
  Tensor a = g.placeholder({4, 3}, f32, "a"), w = g.placeholder({5, 3}, f32, "w");
  Tensor b = g.placeholder({2, 3, 4}, f32, "b"), c = g.placeholder({2, 3, 5}, f32, "c");
  Tensor d = g.placeholder({3, 5, 4}, f32, "d");
  Tensor y1 = g.matmul(a, g.transpose(w, {1, 0}));                                   // x @ w.t(): a Linear
  Tensor y2 = g.matmul(g.transpose(b, {0, 2, 1}), g.transpose(c, {0, 2, 1}), false, true);  // [2,4,5]
  Tensor y3 = g.matmul(g.transpose(b, {1, 0, 2}), d, false, true);  // not the last two dims: stays
  Module m = module_of(g, {y1, y2, y3});
  EXPECT_TRUE(AlgebraicSimplify().run(m));
  const Node& m1 = producer(m, m.targets[0]);
  EXPECT_EQ(m1.inputs[1], w.id());
  EXPECT_TRUE(std::get<MatmulDesc>(m1.attr).transpose_b);
  const Node& m2 = producer(m, m.targets[1]);
  EXPECT_EQ(m2.inputs[0], b.id());
  EXPECT_EQ(m2.inputs[1], c.id());
  EXPECT_TRUE(std::get<MatmulDesc>(m2.attr).transpose_a);
  EXPECT_FALSE(std::get<MatmulDesc>(m2.attr).transpose_b);  // transposed twice
  EXPECT_EQ(producer(m, producer(m, m.targets[2]).inputs[0]).kind, OpKind::Transpose);
  // and the numbers: the simplified graph against the reference on random inputs
  Graph h;
  Tensor ha = h.placeholder({4, 3}, f32, "a"), hw = h.placeholder({5, 3}, f32, "w");
  Tensor hy = h.matmul(ha, h.transpose(hw, {1, 0}));
  TensorData av = TensorData::randn({4, 3}, f32, 1), wv = TensorData::randn({5, 3}, f32, 2);
  Executable exe = h.compile({{ha, ha.type()}, {hw, hw.type()}}, {hy}, {}, {.device = Device::cpu()});
  TensorData got = exe.run({av, wv})[0];
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 3; ++k) s += av.at(i * 3 + k) * wv.at(j * 3 + k);
      EXPECT_NEAR(got.at(i * 5 + j), s, 1e-5);
    }
}

TEST(PassPipeline, DumpWritesEveryPass) {
  auto dir = std::filesystem::temp_directory_path() / "tgraph_dump_test";
  std::filesystem::remove_all(dir);
  WithSwitches dump({{"TGRAPH_DUMP", dir.string()}});
  Graph g;
  Tensor x = g.placeholder({2}, f32, "x");
  Tensor y = g.add(g.exp(x), g.exp(x));
  g.log(x);
  Module m = module_of(g, {y});
  run_pipeline(m, true);
  EXPECT_TRUE(std::filesystem::exists(dir / "00-input.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "01-dce.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir / "01-dce.dot"));
  EXPECT_TRUE(std::filesystem::exists(dir / "02-cse.txt"));
  std::filesystem::remove_all(dir);
}

TEST(PassDecompose, CompositesBecomePrimitivesWithTheSameValues) {
  Graph g;
  Tensor x = g.placeholder({4, 3, 3, 5}, f32, "x");
  Tensor gamma = g.constant(TensorData::uniform({5}, 0.5, 1.5, f32, 1));
  Tensor beta = g.constant(TensorData::uniform({5}, -1, 1, f32, 2));
  auto bn = g.batch_norm_training(x, gamma, beta);
  Tensor labels = g.softmax(g.placeholder({4, 5}, f32, "l"));
  Tensor ce = g.softmax_cross_entropy(g.reduce_mean(bn[0], {1, 2}), labels);
  Tensor ln = g.layer_norm(x, g.constant(TensorData::uniform({5}, 0.5, 1.5, f32, 3)), beta);
  Module m = module_of(g, {bn[0], bn[1], bn[2], ce, ln});
  EXPECT_TRUE(DecomposeComposites().run(m));
  DeadCodeElimination().run(m);
  EXPECT_EQ(count(m, OpKind::BatchNormTraining), 0);
  EXPECT_EQ(count(m, OpKind::SoftmaxCrossEntropy), 0);
  EXPECT_EQ(count(m, OpKind::LayerNorm), 0);
  EXPECT_EQ(detail::verify(m.graph), "");
  // Same numbers as the composites (run through the CPU executor on both graphs).
  TensorData xv = TensorData::randn({4, 3, 3, 5}, f32, 7);
  auto exe = g.compile({{x, x.type()}}, {bn[0], bn[1], bn[2], ln}, {}, {.device = Device::cpu()});
  auto ref = exe.run({xv});
  Module dm = module_of(g, {bn[0], bn[1], bn[2], ln});
  dm.feeds = {x.id()};
  DecomposeComposites().run(dm);
  DeadCodeElimination().run(dm);
  auto impl = std::make_shared<ExecutableImpl>();
  impl->device = Device::cpu();
  impl->store = variable_store_of(g.impl());
  impl->module = dm;
  impl->feed_names = {"x"};
  impl->feed_types = {x.type()};
  auto got = Executable(impl).run({xv});
  for (size_t k = 0; k < ref.size(); ++k)
    for (int64_t i = 0; i < ref[k].num_elements(); ++i)
      ASSERT_NEAR(got[k].at(i), ref[k].at(i), 1e-5 * (1 + std::abs(ref[k].at(i)))) << "output " << k << " at " << i;
}

// group_norm and scaled_dot_product_attention (every mask kind, a fully masked row, a
// batch-broadcast k) decompose into primitives that compute what the composites do.
TEST(PassDecompose, GroupNormAndAttentionKeepTheirValues) {
  Graph g;
  Tensor x = g.placeholder({2, 4, 5, 6}, f32, "x"), xc = g.placeholder({2, 6, 3, 4}, f32, "xc");
  Tensor q = g.placeholder({2, 3, 5, 8}, f32, "q"), k = g.placeholder({2, 3, 7, 8}, f32, "k");
  Tensor v = g.placeholder({2, 3, 7, 6}, f32, "v"), kb = g.placeholder({3, 7, 8}, f32, "kb");
  Tensor gamma = g.constant(TensorData::uniform({6}, 0.5, 1.5, f32, 1));
  Tensor beta = g.constant(TensorData::uniform({6}, -1, 1, f32, 2));
  TensorData bm = TensorData::uniform({5, 7}, 0, 2, f32, 3);
  for (int64_t j = 0; j < 7; ++j) bm.set(2 * 7 + j, 0.0);  // query 2 sees no key
  Tensor bmask = g.cast(g.floor(g.constant(bm)), DType::boolean);
  Tensor fmask = g.constant(TensorData::uniform({5, 7}, -2, 0, f32, 4));
  std::vector<Tensor> outs{g.group_norm(x, gamma, beta, 3), g.group_norm(xc, gamma, beta, 2, 1),
                           g.scaled_dot_product_attention(q, k, v),
                           g.scaled_dot_product_attention(q, k, v, std::nullopt, {.causal = true}),
                           g.scaled_dot_product_attention(q, k, v, bmask),
                           g.scaled_dot_product_attention(q, k, v, fmask, {.scale = 0.5}),
                           g.scaled_dot_product_attention(q, kb, v)};
  std::vector<Tensor> feeds{x, xc, q, k, v, kb};
  std::vector<std::pair<Tensor, TensorType>> ft;
  std::vector<TensorData> in;
  for (size_t i = 0; i < feeds.size(); ++i) {
    ft.emplace_back(feeds[i], feeds[i].type());
    in.push_back(TensorData::randn(feeds[i].shape(), f32, 10 + i));
  }
  auto ref = g.compile(ft, outs, {}, {.device = Device::cpu()}).run(in);
  Module dm = module_of(g, outs);
  for (const Tensor& f : feeds) dm.feeds.push_back(f.id());
  EXPECT_TRUE(DecomposeComposites().run(dm));
  DeadCodeElimination().run(dm);
  EXPECT_EQ(count(dm, OpKind::GroupNorm), 0);
  EXPECT_EQ(count(dm, OpKind::Attention), 0);
  EXPECT_EQ(detail::verify(dm.graph), "");
  auto impl = std::make_shared<ExecutableImpl>();
  impl->device = Device::cpu();
  impl->store = variable_store_of(g.impl());
  impl->module = dm;
  impl->feed_names = {"x", "xc", "q", "k", "v", "kb"};
  for (const Tensor& f : feeds) impl->feed_types.push_back(f.type());
  auto got = Executable(impl).run(in);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t o = 0; o < ref.size(); ++o) {
    ASSERT_EQ(got[o].type(), ref[o].type()) << "output " << o;
    for (int64_t i = 0; i < ref[o].num_elements(); ++i)
      ASSERT_NEAR(got[o].at(i), ref[o].at(i), 1e-5 * (1 + std::abs(ref[o].at(i)))) << "output " << o << " at " << i;
  }
}

TEST(PassDecompose, LeavesOtherOpsAlone) {
  Graph g;
  Tensor v = g.variable(TensorData::zeros({2}), "v");
  Operation a = g.assign(v, g.add(v, g.scalar(1.0)));
  Tensor y = g.exp(v);
  Module m = module_of(g, {y}, {a});
  EXPECT_FALSE(DecomposeComposites().run(m));
  EXPECT_EQ(count(m, OpKind::Assign), 1);
  EXPECT_EQ(count(m, OpKind::Exp), 1);
}

// Inference batch norm folded into the convolution before it (fold_batch_norm.cpp): the same
// values as the graph compiled without optimisation, in both layouts and with groups; the
// batch norm gone from the optimized module. Not folded: a convolution result read twice, or
// filters that are not constants.
TEST(PassFoldBatchNorm, FoldsIntoConstantFiltersAndKeepsValues) {
  for (bool nhwc : {true, false}) {
    const int64_t C = 6, G = 2;
    ConvDesc d;
    d.padding = PaddingStyle::same;
    d.groups = G;
    d.data_layout = nhwc ? Layout::nhwc : Layout::nchw;
    d.weights_layout = nhwc ? Layout::hwio : Layout::oihw;
    const Shape xs = nhwc ? Shape{2, 5, 5, 4} : Shape{2, 4, 5, 5};
    const Shape ws = nhwc ? Shape{3, 3, 2, C} : Shape{C, 2, 3, 3};
    auto stat = [&](uint64_t seed, double lo, double hi) { return TensorData::uniform({C}, lo, hi, f32, seed); };
    Graph g;
    Tensor x = g.placeholder(xs, f32, "x");
    Tensor conv = g.conv2d(x, g.constant(TensorData::uniform(ws, -1, 1, f32, 3)), d);
    Tensor y = g.relu(g.batch_norm(conv, g.constant(stat(4, -0.5, 0.5)), g.constant(stat(5, 0.5, 2.0)),
                                   g.constant(stat(6, 0.5, 1.5)), g.constant(stat(7, -0.5, 0.5)), nhwc ? 3 : 1, 1e-3));
    TensorData in = TensorData::uniform(xs, -2, 2, f32, 8);
    std::vector<TensorData> folded, plain;
    {
      Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu()});
      EXPECT_EQ(count(e.impl().module, OpKind::BatchNorm), 0) << (nhwc ? "nhwc" : "nchw");
      folded = e.run({in});
    }
    {
      Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu(), .optimize = false});
      EXPECT_EQ(count(e.impl().module, OpKind::BatchNorm), 1);
      plain = e.run({in});
    }
    ASSERT_EQ(folded[0].shape(), plain[0].shape());
    for (int64_t i = 0; i < plain[0].num_elements(); ++i)
      EXPECT_NEAR(folded[0].at(i), plain[0].at(i), 1e-5 * std::max(1.0, std::fabs(plain[0].at(i)))) << i;
  }
  // Read twice (the convolution's own result is a target too), or filters fed: kept.
  Graph g;
  Tensor x = g.placeholder({1, 4, 4, 3}, f32, "x"), wf = g.placeholder({1, 1, 3, 3}, f32, "w");
  ConvDesc d;
  auto c3 = [&](uint64_t s) { return g.constant(TensorData::uniform({3}, 0.5, 1.5, f32, s)); };
  Tensor a = g.conv2d(x, g.constant(TensorData::uniform({1, 1, 3, 3}, -1, 1, f32, 1)), d);
  Tensor bn_a = g.batch_norm(a, c3(2), c3(3), c3(4), c3(5), 3);
  Tensor b = g.conv2d(x, wf, d);
  Tensor bn_b = g.batch_norm(b, c3(6), c3(7), c3(8), c3(9), 3);
  Executable e = g.compile({{x, x.type()}, {wf, wf.type()}}, {a, bn_a, bn_b}, {}, {.device = Device::cpu()});
  EXPECT_EQ(count(e.impl().module, OpKind::BatchNorm), 2);
}

// A dynamic executable's copies per size fold the same filters again: the folded filters are
// remembered by the filters' buffer and the batch norm's parameters (fold_memo.h), so two
// folds of one graph share them, and other parameters over the same filters fold their own.
TEST(PassFoldBatchNorm, FoldsOfOneGraphShareTheFoldedFilters) {
  const TensorData filters = TensorData::uniform({3, 3, 4, 5}, -1, 1, f32, 11);
  auto folded = [&](uint64_t seed) {
    Graph g;
    Tensor x = g.placeholder({2, 6, 6, 4}, f32, "x");
    ConvDesc d;
    d.padding = PaddingStyle::same;
    auto stat = [&](uint64_t s, double lo, double hi) { return g.constant(TensorData::uniform({5}, lo, hi, f32, s)); };
    Tensor y = g.batch_norm(g.conv2d(x, g.constant(filters), d), stat(seed, -0.5, 0.5), stat(seed + 1, 0.5, 2.0),
                            stat(seed + 2, 0.5, 1.5), stat(seed + 3, -0.5, 0.5), 3, 1e-3);
    Module m = module_of(g, {y});
    EXPECT_TRUE(FoldBatchNorm().run(m));
    const GraphImpl& gi = m.graph;
    for (const Node& n : gi.nodes)
      if (n.kind == OpKind::Conv2d) {
        const Node& w = gi.nodes[static_cast<size_t>(gi.values[static_cast<size_t>(n.inputs[1])].node)];
        if (w.kind == OpKind::Constant && w.data.storage() != filters.storage()) return w.data;
      }
    return TensorData();
  };
  const TensorData a = folded(20), b = folded(20), c = folded(30);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(a.storage(), b.storage());
  EXPECT_NE(a.storage(), c.storage());
  // Each holds its own parameters' scale: filters * gamma / sqrt(var + eps) per output channel.
  for (uint64_t seed : {20, 30}) {
    const TensorData& got = seed == 20 ? a : c;
    const TensorData var = TensorData::uniform({5}, 0.5, 2.0, f32, seed + 1),
                     gamma = TensorData::uniform({5}, 0.5, 1.5, f32, seed + 2);
    for (int64_t i = 0; i < filters.num_elements(); ++i)
      EXPECT_NEAR(got.at(i), filters.at(i) * gamma.at(i % 5) / std::sqrt(var.at(i % 5) + 1e-3), 1e-5) << seed << " " << i;
  }
}

// Filters with no elements (no output channels, or no input channels) fold to filters with
// none, no crash.
TEST(PassFoldBatchNorm, EmptyFiltersFold) {
  for (int64_t out : {0, 3}) {
    const int64_t in = out == 0 ? 2 : 0;
    Graph g;
    Tensor x = g.placeholder({1, 4, 4, in}, f32, "x");
    ConvDesc d;
    d.padding = PaddingStyle::same;
    auto c = [&](uint64_t s) { return g.constant(TensorData::uniform({out}, 0.5, 1.5, f32, s)); };
    Tensor y = g.batch_norm(g.conv2d(x, g.constant(TensorData::zeros({3, 3, in, out})), d), c(1), c(2), c(3), c(4), 3);
    Module m = module_of(g, {y});
    EXPECT_TRUE(FoldBatchNorm().run(m)) << out;
  }
}

// A fold whose result a compile leaves dead (cast and transposed after it) is redone by the next
// copy unless something holds it: FoldKeep, which a dynamic executable's source holds
// (runtime/specialize.cpp), keeps it for the copies.
TEST(PassFoldBatchNorm, AKeptFoldServesTheNextCopyAfterItsFirstReaderIsGone) {
  const TensorData filters = TensorData::uniform({3, 3, 4, 5}, -1, 1, f32, 41);
  Graph g;
  Tensor x = g.placeholder({2, 6, 6, 4}, f32, "x");
  ConvDesc d;
  d.padding = PaddingStyle::same;
  auto stat = [&](uint64_t s, double lo, double hi) { return g.constant(TensorData::uniform({5}, lo, hi, f32, s)); };
  Tensor y = g.batch_norm(g.conv2d(x, g.constant(filters), d), stat(42, -0.5, 0.5), stat(43, 0.5, 2.0),
                          stat(44, 0.5, 1.5), stat(45, -0.5, 0.5), 3, 1e-3);
  auto folded = [&] {  // one copy's folded filters, the copy then gone
    Module m = module_of(g, {y});
    EXPECT_TRUE(FoldBatchNorm().run(m));
    for (const Node& n : m.graph.nodes)
      if (n.kind == OpKind::Conv2d) {  // the new convolution (the old one reads `filters`)
        const TensorData& w = m.graph.nodes[static_cast<size_t>(m.graph.values[static_cast<size_t>(n.inputs[1])].node)].data;
        if (w.storage() != filters.storage()) return std::weak_ptr<std::byte>(w.storage());
      }
    ADD_FAILURE() << "no folded filters";
    return std::weak_ptr<std::byte>();
  };
  {
    FoldKeep keep;
    const std::weak_ptr<std::byte> first = folded();
    ASSERT_FALSE(first.expired());  // held by `keep` alone
    EXPECT_EQ(folded().lock(), first.lock());
  }
  const std::weak_ptr<std::byte> unkept = folded();
  EXPECT_TRUE(unkept.expired());  // nothing held it: the next copy folds again
  // A dynamic executable's source holds its compile's folds; a static one keeps none.
  Tensor xd = g.placeholder({-1, 6, 6, 4}, f32, "xd");
  Tensor yd = g.batch_norm(g.conv2d(xd, g.constant(filters), d), stat(46, -0.5, 0.5), stat(47, 0.5, 2.0),
                           stat(48, 0.5, 1.5), stat(49, -0.5, 0.5), 3, 1e-3);
  Executable e = g.compile({{xd, xd.type()}}, {yd}, {}, {.device = Device::cpu()});
  ASSERT_TRUE(e.impl().specialize);
  EXPECT_FALSE(e.impl().specialize->folds.empty());
}

// Half filters fold too (a model in f16 or bf16, as torch's .half() makes it): each folded
// filter is the exact filter times gamma / sqrt(var + eps) computed in double and rounded once
// to the filters' type, and the compiled values stay within the type's rounding of the
// unoptimised graph's (the batch norm in half, decomposed there).
TEST(PassFoldBatchNorm, HalfFiltersFoldWithOneRounding) {
  for (DType half : {DType::f16, DType::bf16}) {
    const int64_t C = 5;
    ConvDesc d;
    d.padding = PaddingStyle::same;
    auto cast = [&](const TensorData& t) { return t.cast(half); };
    const TensorData filters = cast(TensorData::uniform({3, 3, 4, C}, -1, 1, f32, 51));
    const TensorData mean = cast(TensorData::uniform({C}, -0.5, 0.5, f32, 52)),
                     var = cast(TensorData::uniform({C}, 0.5, 2.0, f32, 53)),
                     gamma = cast(TensorData::uniform({C}, 0.5, 1.5, f32, 54)),
                     beta = cast(TensorData::uniform({C}, -0.5, 0.5, f32, 55));
    Graph g;
    Tensor x = g.placeholder({2, 6, 6, 4}, half, "x");
    Tensor y = g.batch_norm(g.conv2d(x, g.constant(filters), d), g.constant(mean), g.constant(var),
                            g.constant(gamma), g.constant(beta), 3, 1e-3);
    Module m = module_of(g, {y});
    ASSERT_TRUE(FoldBatchNorm().run(m)) << dtype_name(half);
    const TensorData* got = nullptr;
    for (const Node& n : m.graph.nodes)
      if (n.kind == OpKind::Conv2d) {
        const Node& w = m.graph.nodes[static_cast<size_t>(m.graph.values[static_cast<size_t>(n.inputs[1])].node)];
        if (w.kind == OpKind::Constant && w.data.storage() != filters.storage()) got = &w.data;
      }
    ASSERT_NE(got, nullptr);
    ASSERT_EQ(got->dtype(), half);
    for (int64_t i = 0; i < filters.num_elements(); ++i) {
      const double want = filters.at(i) * gamma.at(i % C) / std::sqrt(var.at(i % C) + 1e-3);
      TensorData one = TensorData::zeros({1}, half);
      one.set(0, want);  // rounded once to the type
      ASSERT_EQ(got->at(i), one.at(0)) << dtype_name(half) << " at " << i;
    }
    const TensorData in = cast(TensorData::uniform({2, 6, 6, 4}, -2, 2, f32, 56));
    Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu()});
    EXPECT_EQ(count(e.impl().module, OpKind::BatchNorm), 0);
    Executable plain = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu(), .optimize = false});
    const TensorData a = e.run({in})[0], b = plain.run({in})[0];
    const double tol = half == DType::f16 ? 1e-2 : 6e-2;
    double largest = 0;
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      EXPECT_NEAR(a.at(i), b.at(i), tol * std::max(1.0, std::fabs(b.at(i)))) << dtype_name(half) << " at " << i;
      largest = std::max(largest, std::fabs(b.at(i)));
    }
    EXPECT_GT(largest, 1.0);  // (values of some size: the comparison means something)
  }
}

// The exact GELU spelled in arithmetic (torch.onnx's x * (1 + erf(x / sqrt 2)) * 0.5, Hugging
// Face's x * 0.5 * (1 + erf(x * (1 / sqrt 2)))) becomes one gelu op, with the same values; a
// near miss (another constant) stays arithmetic.
TEST(PassAlgebraicSimplify, ErfArithmeticIsGelu) {
  Graph g;
  Tensor x = g.placeholder({4, 33}, f32, "x");
  Tensor onnx = g.mul(g.mul(x, g.add(g.erf(g.div(x, g.scalar(1.4142135381698608))), g.scalar(1.0))), g.scalar(0.5));
  Tensor hf = g.mul(g.mul(x, g.scalar(0.5)), g.add(g.scalar(1.0), g.erf(g.mul(x, g.scalar(0.7071067811865476)))));
  Tensor miss = g.mul(g.mul(x, g.scalar(0.5)), g.add(g.scalar(1.0), g.erf(g.div(x, g.scalar(1.5)))));
  TensorData in = TensorData::uniform({4, 33}, -4, 4, f32, 3);
  Executable e = g.compile({{x, x.type()}}, {onnx, hf, miss}, {}, {.device = Device::cpu()});
  EXPECT_EQ(count(e.impl().module, OpKind::Gelu), 1);  // both spellings: gelu(x), then one by CSE
  EXPECT_EQ(count(e.impl().module, OpKind::Erf), 1);
  Executable plain = g.compile({{x, x.type()}}, {onnx, hf, miss}, {}, {.device = Device::cpu(), .optimize = false});
  auto a = e.run({in}), b = plain.run({in});
  for (size_t o = 0; o < 3; ++o)
    for (int64_t i = 0; i < in.num_elements(); ++i) EXPECT_NEAR(a[o].at(i), b[o].at(i), 1e-6) << o << " " << i;
}

// A strided slice that keeps every element is its input (torch.export's x[:, 0] begins with
// slice(x, 0, 0, INT64_MAX)), with static or dynamic dims; any other slice stays.
TEST(PassAlgebraicSimplify, SlicesThatKeepEverythingGo) {
  Graph g;
  Tensor x = g.placeholder({-1, -1, 8}, f32, "x");
  auto slice = [&](Tensor t, std::vector<int64_t> b, std::vector<int64_t> e, std::vector<int64_t> s, int64_t bm = 0,
                   int64_t em = 0, int64_t sq = 0) { return g.strided_slice(t, slice_desc(b, e, s, bm, em, sq)); };
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor whole = slice(x, {0}, {kMax}, {1});                       // slice(x, 0, 0, INT64_MAX)
  Tensor masked = slice(whole, {5, 0, 0}, {0, 0, 8}, {1, 1, 1}, 3, 3);  // x[:, :, 0:8]
  Tensor first = slice(masked, {0, 0}, {kMax, 1}, {1, 1}, 0, 0, 2);  // x[:, 0]: stays
  Tensor tail = slice(x, {0, 1}, {kMax, kMax}, {1, 1});            // x[:, 1:]: stays
  Tensor odd = slice(x, {0}, {kMax}, {2});                         // x[::2]: stays
  Tensor y = g.add(g.reduce_sum(first), g.add(g.reduce_sum(tail), g.reduce_sum(odd)));
  CompileOptions dyn{.device = Device::cpu(), .disable_type_inference = true};
  dyn.switches = {{"TGRAPH_NO_SPECIALIZE", "1"}};
  Executable e = g.compile({{x, x.type()}}, {y}, {}, dyn);
  EXPECT_EQ(count(e.impl().module, OpKind::StridedSlice), 3);
  Executable plain = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu(), .disable_type_inference = true,
                                                          .optimize = false});
  EXPECT_EQ(count(plain.impl().module, OpKind::StridedSlice), 5);
  TensorData in = TensorData::uniform({3, 5, 8}, -1, 1, f32, 4);
  EXPECT_NEAR(e.run({in})[0].at(0), plain.run({in})[0].at(0), 1e-4);
  // Static dims: an end at the dim's size keeps it whole too.
  Graph h;
  Tensor xs = h.placeholder({3, 5}, f32, "x");
  Tensor ys = h.exp(h.strided_slice(xs, slice_desc({0, 0}, {3, 5}, {1, 1})));
  Executable es = h.compile({{xs, xs.type()}}, {ys}, {}, {.device = Device::cpu()});
  EXPECT_EQ(count(es.impl().module, OpKind::StridedSlice), 0);
}

// Autocast's f32 heads transposed and then cast to half: the cast moves before the transpose
// and the reshape (values unchanged), and a half value cast to f32 and back is itself.
TEST(PassAlgebraicSimplify, NarrowingCastsMoveBeforeLayoutOps) {
  Graph g;
  Tensor x = g.placeholder({2, 6, 8}, f32, "x");
  Tensor h = g.placeholder({2, 3, 6, 4}, DType::f16, "h");
  Tensor t = g.cast(g.transpose(g.reshape(g.add(x, x), {2, 6, 2, 4}), {0, 2, 1, 3}), DType::f16);
  Tensor back = g.cast(g.cast(h, f32), DType::f16);
  Tensor keep = g.transpose(x, {0, 2, 1});  // read twice: stays f32
  Tensor k2 = g.add(g.cast(keep, DType::f16), g.cast(g.neg(keep), DType::f16));
  Module m = module_of(g, {t, back, k2});
  std::vector<TensorData> in{TensorData::uniform({2, 6, 8}, -2, 2, f32, 1), TensorData::uniform({2, 3, 6, 4}, -2, 2, DType::f16, 2)};
  auto before = g.compile({{x, x.type()}, {h, h.type()}}, {t, back, k2}, {}, {.device = Device::cpu(), .optimize = false}).run(in);
  for (int i = 0; i < 3; ++i) AlgebraicSimplify().run(m);
  DeadCodeElimination().run(m);
  EXPECT_EQ(verify(m.graph), "");
  const Node& tp = producer(m, m.targets[0]);
  ASSERT_EQ(tp.kind, OpKind::Transpose);
  EXPECT_EQ(m.graph.type(tp.inputs[0]).dtype, DType::f16);  // transposed in half
  EXPECT_EQ(producer(m, tp.inputs[0]).kind, OpKind::Reshape);
  EXPECT_EQ(m.targets[1], h.id());
  int f32_transposes = 0;
  for (int32_t id : m.graph.blocks[0].nodes) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    f32_transposes += n.kind == OpKind::Transpose && m.graph.type(n.outputs[0]).dtype == f32;
  }
  EXPECT_EQ(f32_transposes, 1);  // `keep`
  auto after = g.compile({{x, x.type()}, {h, h.type()}}, {t, back, k2}, {}, {.device = Device::cpu()}).run(in);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i].to_vector(), before[i].to_vector()) << i;
}

// A mask computed from positions alone (Hugging Face's ge(arange(L), 0) when no attention_mask
// is passed, its scalar broadcast by the builder) folds to a constant, no larger than the
// constants it reads, and a select on a condition known throughout becomes its branch; a
// broadcast scalar times a broadcast scalar stays unmaterialised.
TEST(PassConstantFolding, MasksFromPositionsFoldAndTheirSelectsGo) {
  Graph g;
  Tensor x = g.placeholder({1, 1, 40, 40}, f32, "x");
  Tensor pos = g.reshape(g.arange(0, 40, 1), {1, 1, 40, 1});
  Tensor all = g.broadcast_to(g.greater_equal(pos, g.scalar(0.0)), {1, 1, 40, 40});
  Tensor some = g.broadcast_to(g.greater_equal(pos, g.scalar(20.0)), {1, 1, 40, 40});
  Tensor y = g.select(all, x, g.scalar(-1.0));   // every position: x
  Tensor z = g.select(some, x, g.scalar(-1.0));  // half of them: stays a select
  Tensor big = g.mul(g.broadcast_to(g.scalar(2.0), {300, 300}), g.broadcast_to(g.scalar(3.0), {300, 300}));
  Executable e = g.compile({{x, x.type()}}, {y, z, big}, {}, {.device = Device::cpu()});
  const Module& m = e.impl().module;
  EXPECT_EQ(m.targets[0], x.id());
  EXPECT_EQ(count(m, OpKind::Select), 1);
  EXPECT_EQ(count(m, OpKind::Arange), 0);
  int64_t largest = 0;
  for (int32_t id : m.graph.blocks[0].nodes) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::Constant) largest = std::max(largest, n.data.num_elements());
  }
  EXPECT_LE(largest, 40);  // the mask's [1, 1, 40, 1]; the 300 x 300 product not materialised
  TensorData in = TensorData::uniform({1, 1, 40, 40}, -2, 2, f32, 4);
  auto got = e.run({in});
  auto want = g.compile({{x, x.type()}}, {y, z, big}, {}, {.device = Device::cpu(), .optimize = false}).run({in});
  for (size_t o = 0; o < 3; ++o) EXPECT_EQ(got[o].to_vector(), want[o].to_vector()) << o;
}
