// Printers: golden text output and a dot smoke structure check.
#include "ir/verifier.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

TEST(IrPrint, GoldenText) {
  Graph g;
  Tensor x = g.placeholder({2, 3}, f32, "x");
  Tensor s = g.reduce_sum(g.exp(x), {1}, true);
  (void)s;
  EXPECT_EQ(g.str(),
            "graph {\n"
            "  %x = placeholder() {name=\"x\"} : [2,3] f32  // ^0\n"
            "  %1 = exp(%x) : [2,3] f32  // ^1\n"
            "  %2 = reduce_sum(%1) {axes=[1], keep_dims=true} : [2,1] f32  // ^2\n"
            "}\n");
}

TEST(IrPrint, RegionsAndControlDeps) {
  Graph g;
  Tensor v = g.variable(TensorData::zeros({2}), "v");
  Operation a = g.assign(v, g.add(v, g.scalar(1.0)));
  g.control_dependency({a}, [&] { return std::vector{g.read_variable(v)}; });
  Tensor p = g.placeholder({}, boolean, "p");
  g.if_else(p, [&](Graph& b) { return std::vector{b.neg(v)}; }, [&](Graph&) { return std::vector{v}; });
  std::string t = g.str();
  EXPECT_NE(t.find("assign(%v, %"), std::string::npos) << t;
  EXPECT_NE(t.find("read_variable(%v) after(^" + std::to_string(a.id()) + ")"), std::string::npos) << t;
  EXPECT_NE(t.find("then() {"), std::string::npos) << t;
  EXPECT_NE(t.find("    return %v"), std::string::npos) << t;
  std::string d = g.dot();
  EXPECT_EQ(d.rfind("digraph tgraph {", 0), 0u);
  EXPECT_NE(d.find("style=dashed"), std::string::npos);
  EXPECT_NE(d.find("subgraph cluster_"), std::string::npos);
  EXPECT_EQ(d.back(), '\n');
}

TEST(IrVerify, CatchesBrokenGraphs) {
  Graph g;
  Tensor x = g.placeholder({2}, f32, "x");
  Tensor y = g.exp(x);
  EXPECT_EQ(detail::verify(g.impl()), "");
  auto& impl = g.impl();
  impl.values[static_cast<size_t>(y.id())].type = TensorType({3}, f32);
  EXPECT_NE(detail::verify(impl).find("infers as [2] f32"), std::string::npos);
  impl.values[static_cast<size_t>(y.id())].type = TensorType({2}, f32);
  std::swap(impl.blocks[0].nodes[0], impl.blocks[0].nodes[1]);
  EXPECT_NE(detail::verify(impl).find("before it is defined"), std::string::npos);
  EXPECT_TG_ERROR(detail::verify_or_throw(impl, "test"), "[verify] after pass test");
}

TEST(IrOps, OpListIsConsistent) {
  for (int i = 0; i < detail::kNumOps; ++i) {
    auto k = static_cast<detail::OpKind>(i);
    EXPECT_EQ(detail::op_kind_from_name(detail::op_name(k)), k);
    EXPECT_NE(detail::op_def(k).family_infer, nullptr);
  }
  EXPECT_TRUE(detail::op_def(detail::OpKind::Add).has(detail::kElementwise));
  EXPECT_TRUE(detail::op_def(detail::OpKind::Add).has(detail::kCommutative));
  EXPECT_TRUE(detail::op_def(detail::OpKind::Assign).has(detail::kSideEffects));
  EXPECT_TRUE(detail::op_def(detail::OpKind::WhileLoop).has(detail::kHasRegions));
  EXPECT_FALSE(detail::op_def(detail::OpKind::MatMul).has(detail::kElementwise));
  EXPECT_TG_ERROR(detail::op_kind_from_name("nope"), "[ops] unknown op 'nope'");
}
