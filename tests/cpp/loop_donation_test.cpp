// Loop-carried buffer donation (passes/loop_donation.h): which loop results may be computed
// straight into their state buffers. Checked structurally here; the CUDA backend's use of it
// (results equal to the CPU's, the bench body run without a control kernel) is tested in
// tests/gpu/cuda_control_flow_test.cpp.
#include "passes/loop_donation.h"

#include <gtest/gtest.h>

#include "module_util.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;

namespace {

using passtest::module_of;

struct Loop {
  Module m;
  const Node* node = nullptr;
  std::vector<FusionPlan> plans;
};

// The module of `out` and its one loop node, with the fusion plan of each region.
Loop loop_of(const Graph& g, const std::vector<Tensor>& out) {
  Loop l{module_of(g, out)};
  for (const Node& n : l.m.graph.nodes)
    if (n.kind == OpKind::WhileLoop || n.kind == OpKind::ForLoop) l.node = &n;
  for (int32_t b : l.node->regions) l.plans.push_back(plan_fusion(l.m, b));
  return l;
}

LoopDonation while_donation(const Loop& l, bool allow = true) {
  // The captured trip is after; before (the CUDA backend rotates MPSGraph's loop).
  return plan_loop_donation(l.m.graph, {l.node->regions[1], l.node->regions[0]}, {&l.plans[1], &l.plans[0]},
                            0, 1, allow);
}

const Block& region(const Loop& l, size_t k) {
  return l.m.graph.blocks[static_cast<size_t>(l.node->regions[k])];
}

// A while_loop whose last carried value is an i32 counter that runs while it is below n.
std::vector<Tensor> counted_while(Graph& g, std::vector<Tensor> init, Tensor n,
                                  const Graph::WhileAfter& after) {
  return g.while_loop(
      std::move(init),
      [&](Graph& s, std::vector<Tensor> v) {
        return std::pair{s.less(v.back(), n), v};
      },
      after);
}

}  // namespace

TEST(LoopDonation, SmallBodyIsComputedInPlaceAndSetsTheCondition) {
  Graph g;
  Tensor x = g.placeholder({1024}, f32), n = g.placeholder(Shape{}, i32);
  auto r = counted_while(g, {x, g.scalar(0, i32)}, n, [&](Graph& s, std::vector<Tensor> v) {
    return std::vector{s.add(s.mul(v[0], s.scalar(0.5)), s.scalar(1.0)), s.add(v[1], s.scalar(1, i32))};
  });
  Loop l = loop_of(g, r);
  LoopDonation d = while_donation(l);
  const Block &before = region(l, 0), &after = region(l, 1);
  EXPECT_EQ(d.into, after.results);  // both new values, through before's pass-through params
  EXPECT_EQ(d.predicate, before.results[0]);
  ASSERT_EQ(d.old.size(), 2u);
  EXPECT_EQ(d.old[0], (std::vector<int32_t>{after.params[0]}));
  // Refused (a variable is assigned, or steps move): copies as before, the predicate still found.
  LoopDonation off = while_donation(l, false);
  EXPECT_EQ(off.into, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(off.predicate, before.results[0]);
}

TEST(LoopDonation, OldContentsCopiedElsewhereBlockIt) {
  // (a, b) -> (a + 1, a): the end of the trip copies the old a into b, so a + 1 may not
  // overwrite a first.
  Graph g;
  Tensor x = g.placeholder({16}, f32), n = g.placeholder(Shape{}, i32);
  auto r = counted_while(g, {x, x, g.scalar(0, i32)}, n, [&](Graph& s, std::vector<Tensor> v) {
    return std::vector{s.add(v[0], s.scalar(1.0)), v[0], s.add(v[2], s.scalar(1, i32))};
  });
  Loop l = loop_of(g, r);
  LoopDonation d = while_donation(l);
  EXPECT_EQ(d.into[0], -1);
  EXPECT_EQ(d.into[1], -1);  // a pass-through is a copy (or nothing at all) anyway
  EXPECT_EQ(d.into[2], region(l, 1).results[2]);
}

TEST(LoopDonation, LaterReadsOfTheOldContentsBlockIt) {
  for (bool through_view : {false, true}) {
    Graph g;
    Tensor x = g.placeholder({4, 8}, f32), n = g.placeholder(Shape{}, i32);
    auto r = counted_while(g, {x, g.scalar(0, i32)}, n, [&](Graph& s, std::vector<Tensor> v) {
      Tensor view = s.reshape(v[0], {32});
      Tensor y = s.mul(v[0], s.scalar(2.0));  // would be written in place, but a concat of
      // y (so it runs after y's kernel) reads the old x too
      Tensor later = through_view ? s.reduce_sum(s.concat({s.reshape(y, {32}), view}, 0))
                                  : s.reduce_sum(s.concat({y, v[0]}, 0));
      return std::vector{y, s.add(v[1], s.cast(later, i32))};
    });
    Loop l = loop_of(g, r);
    LoopDonation d = while_donation(l);
    EXPECT_EQ(d.into[0], -1) << "a concat after y reads the old x" << (through_view ? " through a view" : "");
    EXPECT_EQ(d.into[1], region(l, 1).results[1]);
  }
}

TEST(LoopDonation, ReadsBeforeTheProducerAndDuplicatesAreFine) {
  Graph g;
  Tensor x = g.placeholder({8}, f32), n = g.placeholder(Shape{}, i32);
  auto r = counted_while(g, {x, x, g.scalar(0, i32)}, n, [&](Graph& s, std::vector<Tensor> v) {
    Tensor total = s.reduce_sum(v[0], {0}, true);  // reads x before it is overwritten
    Tensor y = s.sub(v[0], total);
    return std::vector{y, y, s.add(v[2], s.scalar(1, i32))};
  });
  Loop l = loop_of(g, r);
  LoopDonation d = while_donation(l);
  const Block& after = region(l, 1);
  EXPECT_EQ(d.into[0], after.results[0]);
  EXPECT_EQ(d.into[1], -1);  // the same value: copied from state 0 at the end of the trip
}

TEST(LoopDonation, ForLoopStateFollowsTheIndex) {
  Graph g;
  Tensor x = g.placeholder({8}, f32);
  auto r = g.for_loop(g.scalar(5, i32), {x}, [&](Graph& s, Tensor i, std::vector<Tensor> v) {
    return std::vector{s.add(v[0], s.cast(i, f32))};
  });
  Loop l = loop_of(g, r);
  LoopDonation d = plan_loop_donation(l.m.graph, {l.node->regions[0]}, {&l.plans[0]}, 1, 0, true);
  const Block& body = region(l, 0);
  EXPECT_EQ(d.into, body.results);
  EXPECT_EQ(d.old[0], (std::vector<int32_t>{body.params[1]}));
  EXPECT_EQ(d.predicate, -1);
}
