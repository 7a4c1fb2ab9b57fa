// Stencil stitching in the fusion plan (FusionOptions::stitch_stencils), checked structurally,
// and the generated stencil kernels compiling with NVRTC for sm_90 (no GPU needed). GPU
// behaviour is tested in tests/gpu/cuda_stencil_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>

#include "module_util.h"
#include "passes/fusion.h"
#include "test_util.h"
#include "tgraph/tgraph.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/cuda_stencil.h"
#include "backends/cuda/nvrtc_compiler.h"
#endif

using namespace tg;
using namespace tg::detail;

namespace {

using passtest::module_of;

std::vector<std::shared_ptr<const StencilStitch>> stitches(const FusionPlan& p) {
  return passtest::steps_with(p, &Step::stitch);
}

}  // namespace

TEST(StencilFusion, PrologueAndEpilogueAreStitched) {
  Graph g;
  Tensor x = g.placeholder({1, 1, 8, 9}, f32), a = g.placeholder({1, 1, 8, 9}, f32),
         w = g.placeholder({1, 1, 3, 3}, f32);
  Tensor y = g.stencil(g.add(g.mul(x, a), a), w);
  Tensor z = g.mul(g.relu(y), a);
  Module m = module_of(g, {z});
  EXPECT_TRUE(stitches(plan_fusion(m, 0)).empty());  // only when asked for
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true});
  auto st = stitches(p);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0]->stencil, g.impl().values[static_cast<size_t>(y.id())].node);
  EXPECT_EQ(st[0]->prologue.nodes.size(), 2u);
  EXPECT_EQ(st[0]->epilogue.nodes.size(), 2u);
  EXPECT_EQ(st[0]->inputs, (std::vector<int32_t>{x.id(), a.id(), w.id()}));
  EXPECT_EQ(st[0]->outputs, (std::vector<int32_t>{z.id()}));
  EXPECT_EQ(st[0]->pieces.size(), 3u);  // prologue group, stencil, epilogue group
  // The stitched step replaces its pieces; the placeholders stay lone steps.
  for (const Step& s : p.steps)
    EXPECT_TRUE(s.stitch ||
                (!s.fused() && g.impl().nodes[static_cast<size_t>(s.node)].kind == OpKind::Placeholder));
  WithSwitches off({{"TGRAPH_NO_FUSION", "1"}});
  EXPECT_TRUE(stitches(plan_fusion(m, 0, {.stitch_stencils = true})).empty());
}

TEST(StencilFusion, ChainsSplitAtBroadcastsAreJoined) {
  // plan_fusion closes a group where a broadcast of a scalar starts; the stitch joins them.
  Graph g;
  Tensor x = g.placeholder({1, 1, 8, 9}, f32);
  Tensor w = g.constant(TensorData::from_vector({1, 1, 3, 3}, f32, {0, 1, 0, 1, -4, 1, 0, 1, 0}));
  Tensor y = g.stencil(g.add(g.mul(x, g.scalar(0.5)), g.scalar(1.0)), w);
  Tensor z = g.mul(g.relu(y), g.scalar(2.0));
  Module m = module_of(g, {z});
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true});
  auto st = stitches(p);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0]->prologue.nodes.size(), 4u);  // broadcast, mul, broadcast, add
  EXPECT_EQ(st[0]->epilogue.nodes.size(), 3u);  // relu, broadcast, mul
  EXPECT_EQ(st[0]->outputs, (std::vector<int32_t>{z.id()}));
  for (const Step& s : p.steps) {
    const OpKind k = s.stitch ? OpKind::Stencil : g.impl().nodes[static_cast<size_t>(s.node)].kind;
    EXPECT_TRUE(k == OpKind::Stencil || k == OpKind::Placeholder || k == OpKind::Constant) << op_name(k);
  }
}

TEST(StencilFusion, ViewsAreAbsorbedAndSharedValuesKeptOut) {
  Graph g;
  Tensor x = g.placeholder({8, 9}, f32), w = g.placeholder({1, 1, 3, 3}, f32);
  Tensor s = g.exp(x);
  Tensor y = g.reshape(g.stencil(g.reshape(s, {1, 1, 8, 9}), w), {8, 9});
  Tensor z = g.tanh(y);
  {
    Module m = module_of(g, {z});
    auto st = stitches(plan_fusion(m, 0, {.stitch_stencils = true}));
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0]->source_views.size(), 1u);
    EXPECT_EQ(st[0]->result_views.size(), 1u);
    EXPECT_EQ(st[0]->outputs, (std::vector<int32_t>{z.id()}));
  }
  {  // the prologue's result is a target too: not stitched; the stencil result is stored as well
    Module m = module_of(g, {z, s, y});
    auto st = stitches(plan_fusion(m, 0, {.stitch_stencils = true}));
    ASSERT_EQ(st.size(), 1u);
    EXPECT_TRUE(st[0]->prologue.nodes.empty());
    EXPECT_EQ(st[0]->outputs, (std::vector<int32_t>{y.id(), z.id()}));
  }
  {  // a reader of the result before the epilogue: no epilogue
    Graph h;
    Tensor a = h.placeholder({1, 1, 8, 9}, f32), k = h.placeholder({1, 1, 3, 3}, f32);
    Tensor r = h.stencil(h.neg(a), k);
    Tensor t = h.reduce_sum(r);
    Tensor u = h.sigmoid(r);
    Module m = module_of(h, {t, u});
    auto st = stitches(plan_fusion(m, 0, {.stitch_stencils = true}));
    ASSERT_EQ(st.size(), 1u);
    EXPECT_EQ(st[0]->prologue.nodes.size(), 1u);
    EXPECT_TRUE(st[0]->epilogue.nodes.empty());
    EXPECT_EQ(st[0]->outputs, (std::vector<int32_t>{r.id()}));
  }
}

#ifdef TGRAPH_HAVE_CUDA
TEST(StencilFusion, KernelsCompileWithNvrtc) {
  const Reduction reds[] = {Reduction::sum,     Reduction::min,    Reduction::max,
                            Reduction::product, Reduction::argmin, Reduction::argmax};
  const Boundary bnds[] = {Boundary::zero,         Boundary::constant,  Boundary::clamp_to_edge,
                           Boundary::reflect,      Boundary::symmetric, Boundary::periodic,
                           Boundary::anti_periodic};
  int k = 0;
  for (Reduction r : reds)
    for (DType t : {f32, f16, bf16, f64}) {
      Graph g;
      Tensor x = g.placeholder({2, 1, 3, 20, 30}, t), w = g.placeholder({1, 2, 3, 3}, t);
      StencilDesc d;
      d.reduction = r;
      d.boundary = bnds[k++ % 7];
      d.strides = {1, 1, 2, 1};
      d.dilation_rates = {1, 1, 1, 2};
      Tensor y = g.stencil(x, w, d);
      GraphImpl& gi = g.impl();
      auto plan = plan_stencil_kernel(gi, lone_stencil(gi, gi.values[static_cast<size_t>(y.id())].node),
                                      {x.type(), w.type()});
      ASSERT_TRUE(plan.has_value()) << enum_name(r) << " " << dtype_name(t);
      EXPECT_GT(plan->blocks, 0);
      EXPECT_FALSE(nvrtc_compile(plan->source, 9, 0).empty()) << enum_name(r) << " " << dtype_name(t);
    }
  // Stitched, with constant weights (compiled in, zero taps skipped), views and a broadcast row;
  // the direct kernel (the default for sums).
  for (DType t : {f32, bf16}) {
    Graph g;
    Tensor x = g.placeholder({40, 50}, t), b = g.placeholder({50}, t);
    Tensor w = g.constant(TensorData::from_vector({1, 1, 3, 3}, t, {0, 1, 0, 1, -4, 1, 0, 1, 0}));
    Tensor y = g.reshape(g.stencil(g.reshape(g.add(g.exp(x), b), {1, 1, 40, 50}), w), {40, 50});
    Tensor z = g.mul(g.relu(y), b);
    Module m = module_of(g, {z});
    auto st = stitches(plan_fusion(m, 0, {.stitch_stencils = true}));
    ASSERT_EQ(st.size(), 1u);
    std::vector<TensorType> in;
    for (int32_t v : st[0]->inputs) in.push_back(m.graph.type(v));
    auto plan = plan_stencil_kernel(m.graph, *st[0], in);
    ASSERT_TRUE(plan.has_value());
    EXPECT_NE(plan->source.find("isfinite(zs)"), std::string::npos);  // zero taps skipped while finite
    EXPECT_TRUE(plan->direct);
    EXPECT_FALSE(nvrtc_compile(plan->source, 9, 0).empty());
  }
  {  // integer sources are not covered (the CPU runs them)
    Graph g;
    Tensor x = g.placeholder({1, 1, 5, 5}, i32), w = g.placeholder({1, 1, 3, 3}, i32);
    Tensor y = g.stencil(x, w);
    GraphImpl& gi = g.impl();
    EXPECT_FALSE(plan_stencil_kernel(gi, lone_stencil(gi, gi.values[static_cast<size_t>(y.id())].node),
                                     {x.type(), w.type()})
                     .has_value());
  }
}

TEST(StencilFusion, DirectKernelShapes) {
  // The 2-D and 3-D Laplacians get the direct kernel with vector loads and stores; odd widths
  // and argmax (i32 out) lose them; TGRAPH_STENCIL_CONFIG picks the shape or the tile kernel.
  std::vector<double> lap3(27, 0.0);
  lap3[4] = lap3[10] = lap3[12] = lap3[14] = lap3[16] = lap3[22] = 1;
  lap3[13] = -6;
  struct Case {
    Shape src, win;
    Reduction red;
    bool vin, vout;
  };
  const Case cases[] = {{{1, 1, 64, 128}, {1, 1, 3, 3}, Reduction::sum, true, true},
                        {{1, 16, 24, 64}, {1, 3, 3, 3}, Reduction::sum, true, true},
                        {{1, 1, 64, 129}, {1, 1, 3, 3}, Reduction::sum, false, false},
                        {{1, 1, 64, 128}, {1, 1, 3, 3}, Reduction::argmax, true, false}};
  for (const char* cfg : {"", "v=4,r=4,tx=32", "v=8,r=2,tx=16,mb=2", "v=1,r=3,tx=64,sd=2", "tile"}) {
    WithSwitches config(*cfg ? std::map<std::string, std::string>{{"TGRAPH_STENCIL_CONFIG", cfg}}
                             : std::map<std::string, std::string>{});
    for (const Case& c : cases) {
      Graph g;
      Tensor x = g.placeholder(c.src, f32);
      std::vector<double> w(static_cast<size_t>(c.win.num_elements()), 0.5);
      if (c.win[1] == 3) w = lap3;
      StencilDesc d;
      d.reduction = c.red;
      Tensor y = g.stencil(x, g.constant(TensorData::from_vector(c.win, f32, w)), d);
      GraphImpl& gi = g.impl();
      auto plan = plan_stencil_kernel(gi, lone_stencil(gi, gi.values[static_cast<size_t>(y.id())].node),
                                      {x.type(), TensorType(c.win, f32)});
      ASSERT_TRUE(plan.has_value()) << cfg;
      // No setting: the direct kernel for sums, the tile kernel for compare reductions.
      const bool tile = std::string(cfg) == "tile" || (!*cfg && c.red != Reduction::sum),
                 v1 = std::string(cfg).find("v=1") == 0;
      EXPECT_EQ(plan->direct, !tile) << cfg;
      EXPECT_EQ(plan->args.vec_in != 0, !tile && !v1 && c.vin) << cfg << " " << c.src.str();
      EXPECT_EQ(plan->args.vec_out != 0, !tile && !v1 && c.vout) << cfg << " " << c.src.str();
      EXPECT_FALSE(nvrtc_compile(plan->source, 9, 0).empty()) << cfg << " " << c.src.str();
    }
  }
}
#endif
