// The contract of an op, checked over the whole op list (src/ops/op_list.h), so that adding an
// op without one of its parts fails here rather than in a user's model (docs/adding-an-op.md):
// - the reference interpreter evaluates it, or the executor runs it itself (sources, state,
//   control flow);
// - it has a gradient rule, or stands on the explicit no-gradient list with its reason
//   (no_gradient_reason, src/ops/gradients.cpp) — never both;
// - every elementwise op (the kElementwise trait) has a CUDA form: the fusion planner takes it
//   into a generated kernel and that kernel compiles with NVRTC (CUDA builds; no GPU needed);
// - every op has a unique name that maps back to it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "backends/cpu/reference.h"
#include "module_util.h"
#include "ops/builder.h"
#include "ops/op_def.h"
#include "ops/vjp.h"
#include "passes/fusion.h"
#include "tgraph/tgraph.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#endif

using namespace tg;
using namespace tg::detail;

namespace {

OpKind kind_at(int i) { return static_cast<OpKind>(i); }

// The op's descriptor, default-constructed (from the op list's fourth column).
Attr default_attr(OpKind k) {
  switch (k) {
#define X(e, name, family, desc) \
  case OpKind::e:                \
    return desc{};
#include "ops/op_list.h"
#undef X
    default:
      return NoDesc{};
  }
}

}  // namespace

TEST(OpContract, EveryOpHasANameThatMapsBack) {
  std::set<std::string> names;
  for (int i = 0; i < kNumOps; ++i) {
    const OpDef& d = op_def(kind_at(i));
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate name " << d.name;
    EXPECT_EQ(op_kind_from_name(d.name), kind_at(i)) << d.name;
    EXPECT_NE(d.family_infer, nullptr) << d.name << " has no inference rule";
  }
}

TEST(OpContract, EveryOpIsEvaluatedByTheReferenceOrTheExecutor) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind k = kind_at(i);
    EXPECT_TRUE(reference_evaluates(k) || executor_evaluates(k)) << op_name(k) << " has no reference implementation";
  }
}

TEST(OpContract, EveryOpHasAGradientRuleOrAReasonWhyNot) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind k = kind_at(i);
    const bool rule = vjp_rule(k) != nullptr, listed = no_gradient_reason(k) != nullptr;
    EXPECT_TRUE(rule || listed) << op_name(k) << ": write its vjp rule, or add it to no_gradient_reason with why";
    EXPECT_FALSE(rule && listed) << op_name(k) << " has a rule: take it off the no-gradient list";
  }
}

// One op of each elementwise family on operands of a dtype it takes.
TEST(OpContract, EveryElementwiseOpHasACudaForm) {
#ifndef TGRAPH_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  int checked = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const OpKind k = kind_at(i);
    const OpDef& d = op_def(k);
    if (!d.has(kElementwise)) continue;
    Graph g;
    auto in = [&](DType t) { return g.placeholder({4, 33}, t); };
    std::vector<Tensor> ins;
    Attr attr = default_attr(k);
    switch (d.family) {
      case Family::unary_logical: ins = {in(DType::boolean)}; break;
      case Family::unary_bitwise: ins = {in(DType::i32)}; break;
      case Family::binary_logical: ins = {in(DType::boolean), in(DType::boolean)}; break;
      case Family::binary_bitwise: ins = {in(DType::i32), in(DType::i32)}; break;
      case Family::binary: case Family::binary_float: case Family::compare: ins = {in(f32), in(f32)}; break;
      case Family::select: ins = {in(DType::boolean), in(f32), in(f32)}; break;
      case Family::clamp: ins = {in(f32), in(f32), in(f32)}; break;
      case Family::cast: case Family::bitcast: ins = {in(f32)}; attr = CastDesc{DType::i32}; break;
      default: ins = {in(f32)}; break;
    }
    Tensor y = make(g, k, ins, attr);
    // A second op after it, so the group is a kernel of its own even where the op alone is a view.
    Tensor z = is_float(y.dtype()) ? g.add(y, y) : y.dtype() == DType::boolean ? g.logical_not(y) : g.bitwise_not(y);
    detail::Module m = passtest::module_of(g, {z});
    FusionPlan plan = plan_fusion(m, 0);
    bool found = false;
    for (const Step& s : plan.steps) {
      if (!s.fused()) continue;
      bool has = false;
      for (int32_t id : s.group.nodes) has |= m.graph.nodes[static_cast<size_t>(id)].kind == k;
      if (!has) continue;
      found = true;
      EXPECT_TRUE(elementwise_supported(m.graph, s.group)) << op_name(k);
      EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, Indexing::flat, -1, nullptr), 9, 0).empty())
          << op_name(k);
    }
    EXPECT_TRUE(found || k == OpKind::Identity || k == OpKind::StopGradient) << op_name(k) << " joined no generated kernel";
    ++checked;
  }
  EXPECT_GT(checked, 60);
#endif
}
