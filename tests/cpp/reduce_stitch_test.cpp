// Reduction stitching and producer recomputation in the fusion plan
// (FusionOptions::stitch_reductions), checked structurally, and the generated kernels compiling
// with NVRTC for sm_90 (no GPU needed). GPU behaviour: tests/gpu/cuda_reduce_stitch_test.cpp.
#include <gtest/gtest.h>

#include <set>

#include "module_util.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "passes/reduce_stitch.h"
#include "tgraph/tgraph.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/plan_traffic.h"
#include "runtime/executable_impl.h"
#include "tgraph/nn.h"
#include "tgraph/optim.h"
#include "backends/cuda/reduce_stitch_kernel.h"
#endif

using namespace tg;
using namespace tg::detail;

namespace {

using passtest::module_of;

bool contains_value(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<std::shared_ptr<const ReduceStitch>> reduce_steps(const FusionPlan& p) {
  return passtest::steps_with(p, &Step::reduce);
}

// Values of `elements` elements the plan's steps compute (group outputs and lone ops' results;
// the fed placeholders aside).
int full_size_writes(const GraphImpl& g, const FusionPlan& p, int64_t elements) {
  int n = 0;
  for (const Step& s : p.steps) {
    std::vector<int32_t> outs;
    if (s.is_group()) outs = s.group.outputs;
    else if (!s.fused() && g.nodes[static_cast<size_t>(s.node)].kind != OpKind::Placeholder)
      outs = g.nodes[static_cast<size_t>(s.node)].outputs;
    for (int32_t v : outs) n += g.type(v).shape.is_static() && g.type(v).shape.num_elements() == elements;
  }
  return n;
}

// Batch-norm training forward and the gradients of sum(y * dy), as the CUDA backend plans them.
struct BatchNorm {
  Graph g;
  Tensor x, dy, gamma, beta;
  std::vector<Tensor> outs;
  Module m;
  explicit BatchNorm(const Shape& s) {
    x = g.placeholder(s, f32);
    dy = g.placeholder(s, f32);
    gamma = g.placeholder({s.dim(-1)}, f32);
    beta = g.placeholder({s.dim(-1)}, f32);
    std::vector<Tensor> t = g.batch_norm_training(x, gamma, beta, -1, 1e-5);
    auto gr = g.gradients(g.reduce_sum(g.mul(t[0], dy)), {x, gamma, beta});
    outs = {gr[x], gr[gamma], gr[beta], t[1], t[2]};
    m = module_of(g, outs);
    for (Tensor f : {x, dy, gamma, beta}) m.feeds.push_back(f.id());
    reinfer(m.graph);
    run_pipeline(m, true, true);
  }
};

}  // namespace

// The backward reads x and dy twice in all: once for every statistic and sum (two stitched
// steps, each one pass), once for dx; nothing else of their size is written.
TEST(ReduceStitch, BatchNormBackwardReadsXAndDyTwice) {
  BatchNorm bn({4, 6, 5, 16});
  EXPECT_TRUE(reduce_steps(plan_fusion(bn.m, 0, {.stitch_stencils = true})).empty());  // only when asked for
  FusionPlan p = plan_fusion(bn.m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  const GraphImpl& g = bn.m.graph;
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 2u);
  // Forward statistics and dbeta: no prologue, x and dy read directly; rsqrt(var + eps) (and
  // the views of the results it reads through) computed where the results are stored.
  EXPECT_TRUE(rs[0]->prologue.nodes.empty());
  EXPECT_EQ(rs[0]->reductions.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(rs[0]->inputs.begin(), rs[0]->inputs.begin() + 2),
            (std::vector<int32_t>{bn.x.id(), bn.dy.id()}));
  // broadcast(eps), add, rsqrt (SinkBroadcasts adds eps on the per-channel shape: one
  // broadcast fewer than before it)
  EXPECT_EQ(rs[0]->epilogue.nodes.size(), 3u);
  EXPECT_EQ(rs[0]->views.size(), 2u);
  EXPECT_EQ(rs[0]->outputs.size(), 3u + rs[0]->epilogue.outputs.size());
  // The backward's other sum, sum(dy * xhat) (dgamma; the means dx needs are gamma times the
  // two sums, not reductions of their own): xhat and the product recomputed from x and dy.
  EXPECT_FALSE(rs[1]->prologue.nodes.empty());
  EXPECT_EQ(rs[1]->reductions.size(), 1u);
  int full_inputs = 0;
  for (int32_t v : rs[1]->inputs) full_inputs += g.type(v).shape.num_elements() == 4 * 6 * 5 * 16;
  EXPECT_EQ(full_inputs, 2);
  ASSERT_GE(rs[1]->pieces.size(), 2u);  // the prologue group, the reduction, then the epilogue
  EXPECT_TRUE(rs[1]->pieces[0].is_group());
  EXPECT_EQ(rs[1]->pieces[1].node, rs[1]->reductions[0]);
  // dx is the only full-size value written.
  EXPECT_EQ(full_size_writes(g, p, 4 * 6 * 5 * 16), 1);
  // unstitched: 5 (the gradient no longer adds the zero terms of the unused batch mean and
  // variance outputs: 7 before, 6 with them gone; two sums where there were four: 5)
  EXPECT_EQ(full_size_writes(g, plan_fusion(bn.m, 0, {.stitch_stencils = true}), 4 * 6 * 5 * 16), 5);
}

// Every per-channel computation that follows a batch norm's statistics or sums joins the
// stitch that computes them, as one epilogue: rsqrt(var + eps), the running statistics'
// updates, SGD's updates of gamma and beta. None is a kernel of its own over C elements.
TEST(ReduceStitch, PerChannelFollowUpsJoinOneEpilogue) {
  Graph g;
  const Shape s{4, 6, 5, 16};
  Tensor x = g.placeholder(s, f32), dy = g.placeholder(s, f32);
  Tensor gamma = g.placeholder({16}, f32), beta = g.placeholder({16}, f32);
  Tensor rm = g.placeholder({16}, f32), rv = g.placeholder({16}, f32);
  std::vector<Tensor> t = g.batch_norm_training(x, gamma, beta, -1, 1e-5);
  auto gr = g.gradients(g.reduce_sum(g.mul(t[0], dy)), {x, gamma, beta});
  auto decay = [&](Tensor r, Tensor v) { return g.add(g.mul(r, g.scalar(0.9)), g.mul(v, g.scalar(0.1))); };
  auto sgd = [&](Tensor p, Tensor d) { return g.sub(p, g.mul(d, g.scalar(0.01))); };
  std::vector<Tensor> outs{gr[x], sgd(gamma, gr[gamma]), sgd(beta, gr[beta]), decay(rm, t[1]), decay(rv, t[2])};
  Module m = module_of(g, outs);
  for (Tensor f : {x, dy, gamma, beta, rm, rv}) m.feeds.push_back(f.id());
  reinfer(m.graph);
  run_pipeline(m, true, true);
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  const GraphImpl& gi = m.graph;
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 2u);
  for (const Step& st : p.steps) {
    if (!st.is_group()) continue;
    bool per_channel = true;
    for (int32_t v : st.group.outputs) per_channel &= gi.type(v).shape.num_elements() == 16;
    EXPECT_FALSE(per_channel) << "a group of " << st.group.nodes.size() << " ops over the 16 channels ran alone";
  }
  // The updates are the stitches' outputs (here the fusion made them one group, which reads
  // both stitches' results: it joins the backward's).
  for (size_t k = 1; k < outs.size(); ++k)
    EXPECT_TRUE(contains_value(rs[0]->outputs, outs[k].id()) || contains_value(rs[1]->outputs, outs[k].id())) << k;
  EXPECT_FALSE(rs[0]->epilogue.nodes.empty());  // rsqrt(var + eps)
#ifdef TGRAPH_HAVE_CUDA
  for (const auto& r : rs) {
    std::vector<TensorType> types;
    for (int32_t v : r->inputs) types.push_back(gi.type(v));
    auto l = prepare_reduce_stitch(gi, *r, types, 132);
    ASSERT_TRUE(l.has_value());
    EXPECT_FALSE(nvrtc_compile(l->source, 9, 0).empty());
  }
#endif
}

// A producer's value that something else still reads is recomputed only where that saves a
// read: d = (exp(x) - y) + a already reads x, so it computes a itself. b = a + y would read x
// instead of a (no gain, and a is written anyway for the transpose): it joins a's group
// instead (absorb_consumers), which computes both and writes a once.
TEST(ReduceStitch, RecomputeOnlyWhereItSavesReads) {
  Graph g;
  Tensor x = g.placeholder({8, 32}, f32), y = g.placeholder({8, 32}, f32);
  Tensor a = g.mul(g.exp(x), g.scalar(2.0));
  Tensor t = g.transpose(a, {1, 0});
  Tensor b = g.add(a, y);
  Tensor d = g.add(g.sub(g.exp(x), y), a);
  Module m = module_of(g, {t, b, d});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  auto reads_of_step_making = [&](int32_t v) {
    for (const Step& s : p.steps) {
      const std::vector<int32_t> outs =
          s.is_group() ? s.group.outputs : m.graph.nodes[static_cast<size_t>(step_nodes(s).back())].outputs;
      if (std::find(outs.begin(), outs.end(), v) != outs.end()) return step_inputs(m.graph, s);
    }
    return std::vector<int32_t>{};
  };
  auto has = [](const std::vector<int32_t>& r, Tensor v) { return std::find(r.begin(), r.end(), v.id()) != r.end(); };
  EXPECT_FALSE(has(reads_of_step_making(b.id()), a));
  EXPECT_EQ(reads_of_step_making(b.id()), reads_of_step_making(a.id()));  // one group makes both
  EXPECT_FALSE(has(reads_of_step_making(d.id()), a));
  EXPECT_TRUE(has(reads_of_step_making(d.id()), x));
  EXPECT_TRUE(has(reads_of_step_making(t.id()), a));  // a is still written
}

// A batch norm's backward as torch's decomposition under bf16 autocast hands it over (the
// tgraph_train path): the activations arrive in bf16, are cast to f32 for the arithmetic, and
// small per-channel ops sit between the full-size chains. The plan computes the f32 values
// where they are read (a pass over bf16 costs half the bytes of one over f32) and writes
// nothing of full size but dx, in bf16; the sums read the bf16 activations.
TEST(ReduceStitch, AutocastBatchNormBackwardWritesNoFullSizeF32) {
  const Shape s{4, 6, 5, 16};
  Graph g;
  Tensor conv = g.placeholder(s, bf16), y = g.placeholder(s, bf16), gy = g.placeholder(s, bf16);
  Tensor mean = g.placeholder({16}, f32), rstd = g.placeholder({16}, f32), gamma = g.placeholder({16}, f32);
  auto chan = [&](Tensor v) { return g.reshape(v, {1, 1, 1, 16}); };
  const std::vector<int64_t> nhw{0, 1, 2};
  Tensor where = g.select(g.less_equal(y, g.scalar(0, bf16)), g.scalar(0, bf16), gy);  // relu's backward
  Tensor dy = g.cast(where, f32);
  Tensor xf = g.cast(conv, f32);
  Tensor m4 = chan(mean);
  Tensor sum1 = g.reduce_sum(dy, nhw);
  Tensor sum2 = g.reduce_sum(g.mul(dy, g.sub(xf, m4)), nhw);
  Tensor k1 = chan(g.mul(sum1, g.scalar(1.0 / 480)));
  Tensor k2 = chan(g.mul(g.mul(sum2, g.scalar(1.0 / 480)), g.mul(rstd, rstd)));
  Tensor k3 = chan(g.mul(rstd, gamma));
  Tensor dx = g.mul(g.sub(g.sub(dy, g.mul(g.sub(xf, m4), k2)), k1), k3);
  Tensor dgamma = g.mul(sum2, rstd);
  Tensor dx_bf16 = g.cast(dx, bf16);
  Module m = module_of(g, {dx_bf16, dgamma, sum1});
  for (Tensor f : {conv, y, gy, mean, rstd, gamma}) m.feeds.push_back(f.id());
  run_pipeline(m, true, true);
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  const GraphImpl& mg = m.graph;
  int f32_writes = 0, writes = 0;
  for (const Step& st : p.steps) {
    std::vector<int32_t> outs;
    if (st.is_group()) outs = st.group.outputs;
    else if (st.reduce) outs = st.reduce->outputs;
    else if (!st.fused() && mg.nodes[static_cast<size_t>(st.node)].kind != OpKind::Placeholder)
      outs = mg.nodes[static_cast<size_t>(st.node)].outputs;
    for (int32_t v : outs) {
      if (!(mg.type(v).shape == s)) continue;
      ++writes;
      f32_writes += mg.type(v).dtype == DType::f32;
    }
  }
  EXPECT_EQ(f32_writes, 0);
  EXPECT_EQ(writes, 1);  // dx
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 1u);  // both sums in one pass
  EXPECT_EQ(rs[0]->reductions.size(), 2u);
  for (int32_t v : rs[0]->inputs)
    if (mg.type(v).shape == s) EXPECT_EQ(mg.type(v).dtype, DType::bf16);
}

// The same backward where dz (relu's gradient of the residual's summed gradients) is also read
// by the shortcut: the group computing dz writes it anyway, so the stitched sums read dz, not
// the summed gradient and relu's output to recompute it (which had also made that group write
// the sum: one write and two reads more of the activations' size per block through tgraph_train).
TEST(ReduceStitch, SumsReadWhatTheirProducerWritesAnyway) {
  const Shape s{4, 6, 5, 16};
  Graph g;
  Tensor conv = g.placeholder(s, bf16), y = g.placeholder(s, bf16);
  Tensor g1 = g.placeholder(s, bf16), g2 = g.placeholder(s, bf16), other = g.placeholder(s, bf16);
  Tensor mean = g.placeholder({1, 1, 1, 16}, f32), k2 = g.placeholder({1, 1, 1, 16}, f32);
  const std::vector<int64_t> nhw{0, 1, 2};
  Tensor sum = g.add(g1, g2);
  Tensor dz = g.select(g.less_equal(y, g.scalar(0, bf16)), g.scalar(0, bf16), sum);
  Tensor dy = g.cast(dz, f32), xc = g.sub(g.cast(conv, f32), mean);
  Tensor s1 = g.reduce_sum(dy, nhw, true), s2 = g.reduce_sum(g.mul(dy, xc), nhw, true);
  Tensor dx = g.cast(g.mul(g.sub(g.sub(dy, s1), g.mul(xc, s2)), k2), bf16);
  Tensor shortcut = g.add(dz, other);  // the residual's gradient goes on to the block before
  Module m = module_of(g, {dx, shortcut, s1, s2});
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_TRUE(contains_value(rs[0]->inputs, dz.id()));
  EXPECT_FALSE(contains_value(rs[0]->inputs, g1.id()));
  EXPECT_FALSE(contains_value(rs[0]->inputs, y.id()));
  for (const Step& st : p.steps)
    if (st.is_group()) EXPECT_FALSE(contains_value(st.group.outputs, sum.id())) << "the summed gradient is written";
}

// Small elementwise work on placeholders, constants and variables (a batch norm's per-channel
// casts of gamma and beta, num_batches_tracked + 1) runs as one group per shape at the first of its
// steps, not one launch each where its readers sit; every step still reads only what earlier
// steps made.
TEST(ReduceStitch, SmallWorkOnSourcesRunsAsOneGroupPerShape) {
  Graph g;
  const Shape s{4, 6, 5, 16};
  const int layers = 5;
  Tensor x = g.placeholder(s, bf16);
  std::vector<Tensor> outs, counters;
  Tensor y = x;
  for (int l = 0; l < layers; ++l) {
    Tensor gamma = g.variable(TensorData::uniform({16}, 0.5, 1.5, f32, 40 + l), "gamma" + std::to_string(l));
    Tensor beta = g.placeholder({16}, f32), n = g.placeholder({}, i64);
    Tensor gb = g.cast(gamma, bf16), bb = g.cast(beta, bf16);
    y = g.relu(g.add(g.mul(g.tanh(y), gb), bb));  // full-size work reading them by broadcast
    y = g.transpose(g.transpose(y, {0, 2, 1, 3}), {0, 2, 1, 3});  // not elementwise: groups close here
    counters.push_back(g.add(n, g.scalar(1, i64)));
  }
  outs.push_back(y);
  outs.insert(outs.end(), counters.begin(), counters.end());
  Module m = module_of(g, outs);
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  const GraphImpl& gi = m.graph;
  int batched_scalars = 0, batched_channels = 0;
  for (const Step& st : p.steps) {
    if (!st.is_group()) continue;
    const Shape& gs = group_shape(gi, st.group);
    if (gs.rank() == 0) batched_scalars += static_cast<int>(st.group.outputs.size());
    if (gs == Shape{16}) batched_channels += static_cast<int>(st.group.outputs.size());
  }
  EXPECT_EQ(batched_scalars, layers);       // the counters: one group
  EXPECT_EQ(batched_channels, 2 * layers);  // the casts: one group
  int scalar_groups = 0;
  for (const Step& st : p.steps) scalar_groups += st.is_group() && group_shape(gi, st.group).rank() == 0;
  EXPECT_EQ(scalar_groups, 1);
  // Run order: every value a step reads is made by an earlier step (placeholders, constants and
  // variables are steps too: a variable's device copy is taken at its step).
  std::set<int32_t> made;
  for (const Step& st : p.steps) {
    for (int32_t v : step_inputs(gi, st)) EXPECT_TRUE(made.count(v)) << "a step reads v" << v << " before it is made";
    for (int32_t id : step_nodes(st))
      for (int32_t v : gi.nodes[static_cast<size_t>(id)].outputs) made.insert(v);
  }
}

// A group writing two values a later group reads (an autocast batch norm's dy and xhat, read
// by dx) is not recomputed whole (dy would read three tensors for one), but xhat alone is
// (x for xhat: a tie in bytes, and its write goes away). A tie where another later group reads
// the value too recomputes when every reader can (fusion_recompute.cpp).
TEST(ReduceStitch, OneOfAGroupsOutputsIsRecomputedAlone) {
  const Shape s{4, 6, 5, 16};
  Graph g;
  Tensor x = g.placeholder(s, bf16), y = g.placeholder(s, bf16);
  Tensor g1 = g.placeholder(s, bf16), g2 = g.placeholder(s, bf16);
  Tensor mean = g.placeholder({1, 1, 1, 16}, f32), inv = g.placeholder({1, 1, 1, 16}, f32);
  const std::vector<int64_t> nhw{0, 1, 2};
  auto f = [&](Tensor t) { return g.cast(t, f32); };
  // dy from the residual's two gradients and relu's mask, as the step computes it
  Tensor dy = g.select(g.less_equal(y, g.scalar(0.0, bf16)), g.scalar(0.0, bf16), g.add(g1, g2));
  Tensor xhat = g.cast(g.mul(g.sub(f(x), mean), inv), bf16);
  Tensor prod = g.cast(g.mul(f(dy), f(xhat)), bf16);
  Tensor sum = g.reduce_sum(f(prod), nhw, true);
  Tensor dx = g.cast(g.mul(g.sub(f(dy), g.mul(f(xhat), sum)), inv), bf16);
  Module m = module_of(g, {dx, sum});
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  EXPECT_EQ(full_size_writes(m.graph, p, s.num_elements()), 2);  // dy (three reads to recompute) and dx; not xhat
  for (const Step& st : p.steps) EXPECT_FALSE(contains_value(step_inputs(m.graph, st), xhat.id()));
}

// A group that needs a wide value another group computed from a narrow one it also writes (an
// autocast graph's dy: select in bf16, then cast to f32) reads the narrow one and casts it,
// rather than the f32 copy (or the three tensors the whole chain started from): dy is never
// written, nor read back.
TEST(ReduceStitch, RecomputeReadsTheNarrowValueTheProducerWrites) {
  Graph g;
  const Shape s{64, 32};
  Tensor g1 = g.placeholder(s, bf16), g2 = g.placeholder(s, bf16), y = g.placeholder(s, bf16);
  Tensor z = g.placeholder(s, f32);
  Tensor wh = g.select(g.less_equal(y, g.scalar(0, bf16)), g.scalar(0, bf16), g.add(g1, g2));
  Tensor dy = g.cast(wh, f32);
  Tensor r = g.reduce_max(dy, {1});  // not elementwise: the group computing dy closes here
  Tensor out = g.mul(dy, z);
  Tensor t = g.transpose(wh, {1, 0});  // wh is written for it anyway
  Module m = module_of(g, {r, out, t});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  for (const Step& st : p.steps) {
    EXPECT_FALSE(contains_value(step_inputs(m.graph, st), dy.id()));
    if (st.is_group()) EXPECT_FALSE(contains_value(st.group.outputs, dy.id()));
  }
}

// A group whose output every reader now computes itself loses the members only that output
// needed, and their operands: the cast that loaded y for c is not left reading y for nothing.
TEST(ReduceStitch, DroppedOutputsTakeTheirMembersAlong) {
  Graph g;
  const Shape s{64, 32};
  // x made by a transpose, not a source: batch_source_steps leaves a's group where it is
  Tensor x = g.transpose(g.placeholder({32, 64}, f32), {1, 0}), y = g.placeholder(s, bf16), z = g.placeholder(s, f32);
  Tensor a = g.exp(x);
  Tensor yf = g.cast(y, f32);  // a loader: joins a's group
  Tensor r = g.reduce_max(a, {1});
  Tensor t = g.transpose(a, {1, 0});
  Tensor out = g.mul(yf, z);  // recomputes yf from y (half the bytes)
  Module m = module_of(g, {r, t, out});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  bool found = false;
  for (const Step& st : p.steps) {
    std::vector<int32_t> outs = st.is_group() ? st.group.outputs : std::vector<int32_t>{};
    if (!contains_value(outs, a.id())) continue;
    found = true;
    EXPECT_FALSE(contains_value(step_inputs(m.graph, st), y.id()));
    EXPECT_FALSE(contains_value(outs, yf.id()));
  }
  EXPECT_TRUE(found);
}

// An autocast batch norm's backward: the gradient d (bf16, from the residual sum and relu's
// mask) is read in f32 by two sums and the dx group (recomputing d would read three bf16
// tensors, more than its f32 view). The group computing d writes d itself,
// not its f32 view; every reader casts it (narrow_widened_outputs), so no f32 value of the
// activations' size is written, and each reader of the view reads d.
TEST(ReduceStitch, WidenedOutputsAreWrittenNarrow) {
  Graph g;
  const Shape s{64, 32};
  Tensor y = g.placeholder(s, bf16), g1 = g.placeholder(s, bf16), g2 = g.placeholder(s, bf16);
  Tensor xb = g.placeholder(s, bf16), w = g.placeholder({32, 16}, bf16);
  Tensor sum = g.add(g1, g2);
  Tensor d = g.select(g.less_equal(y, g.scalar(0.0, bf16)), g.scalar(0.0, bf16), sum);
  Tensor df = g.cast(d, f32), xf = g.cast(xb, f32);
  Tensor s1 = g.reduce_sum(df, {0}), s2 = g.reduce_sum(g.mul(df, xf), {0});
  Tensor dx = g.cast(g.mul(g.sub(df, g.mul(s1, g.scalar(1.0 / 64))), g.sub(xf, s2)), bf16);
  Module m = module_of(g, {dx, s1, s2, g.matmul(xb, w)});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  const GraphImpl& gi = m.graph;
  for (const Step& st : p.steps) {
    EXPECT_FALSE(contains_value(step_inputs(gi, st), df.id()));
    if (st.is_group()) EXPECT_FALSE(contains_value(st.group.outputs, df.id()));
  }
  int f32_writes = 0;
  for (const Step& st : p.steps)
    if (st.is_group())
      for (int32_t v : st.group.outputs) f32_writes += gi.type(v).dtype == f32 && gi.type(v).shape == s;
  EXPECT_EQ(f32_writes, 0);
  bool narrowed = false;
  for (const std::string& d_ : p.decisions) narrowed |= d_.find("widening cast") != std::string::npos;
  EXPECT_TRUE(narrowed);
  // A widened value that a library op reads (a matmul) stays written.
  Graph h;
  Tensor a = h.placeholder({16, 16}, bf16);
  Tensor af = h.cast(h.exp(a), f32);
  Module hm = module_of(h, {h.matmul(af, h.placeholder({16, 16}, f32)), h.add(af, h.scalar(1.0f))});
  FusionPlan hp = plan_fusion(hm, 0, {.stitch_reductions = true});
  bool written = false;
  for (const Step& st : hp.steps)
    if (st.is_group()) written |= contains_value(st.group.outputs, af.id());
  EXPECT_TRUE(written);
}

// A reduce_sum of a weight gradient's dy stays its own step (the CUDA backend folds it into the
// matmul as the bias-gradient epilogue); a lone reduction with no prologue is left alone.
TEST(ReduceStitch, BiasGradientAndLoneReductionsStayAlone) {
  Graph g;
  Tensor x = g.placeholder({64, 32}, f32), dy = g.placeholder({64, 16}, f32), z = g.placeholder({64, 16}, f32);
  Tensor gd = g.mul(dy, g.relu(z));
  Tensor dw = g.matmul(x, gd, true, false);
  Tensor db = g.reduce_sum(gd, {0});
  Tensor lone = g.reduce_max(z, {1});
  Module m = module_of(g, {dw, db, lone});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  EXPECT_TRUE(reduce_steps(p).empty());
}

// Siblings join the first reduction's step when their inputs are ready there, or else when
// the step can move down to them (nothing in between reads its results): s2, made after a
// matmul, joins s1 and s3 there. Different geometries never share a step.
TEST(ReduceStitch, SiblingsJoinWhereTheirInputsAreReady) {
  Graph g;
  Tensor x = g.placeholder({32, 8}, f32);
  Tensor s1 = g.reduce_sum(g.square(x), {0});
  Tensor late = g.matmul(x, g.placeholder({8, 8}, f32));  // not elementwise: made after s1
  Tensor s2 = g.reduce_sum(g.add(late, x), {0});
  Tensor s3 = g.reduce_max(g.exp(x), {0});
  Tensor s4 = g.reduce_sum(g.exp(x), {1});  // another geometry
  Module m = module_of(g, {s1, s2, s3, s4});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0]->reductions.size(), 3u);  // s1, s2 and s3, after the matmul
  EXPECT_EQ(rs[1]->reductions.size(), 1u);  // s4 (with its prologue)
  const Node& matmul = m.graph.nodes[static_cast<size_t>(m.graph.values[static_cast<size_t>(late.id())].node)];
  size_t at_matmul = 0, at_stitch = 0;
  for (size_t k = 0; k < p.steps.size(); ++k) {
    if (!p.steps[k].fused() && &m.graph.nodes[static_cast<size_t>(p.steps[k].node)] == &matmul) at_matmul = k;
    if (p.steps[k].reduce == rs[0]) at_stitch = k;
  }
  EXPECT_LT(at_matmul, at_stitch);
}

// A step that reads the first reduction's result keeps the stitch where it is: a sibling
// made after that step gets a stitch of its own.
TEST(ReduceStitch, SiblingsDoNotMoveAStitchPastItsReaders) {
  Graph g;
  Tensor x = g.placeholder({32, 8}, f32);
  Tensor s1 = g.reduce_sum(g.square(x), {0});
  Tensor late = g.matmul(g.mul(x, s1), g.placeholder({8, 8}, f32));  // reads s1
  Tensor s2 = g.reduce_sum(g.add(late, x), {0});
  Tensor s3 = g.reduce_max(g.exp(x), {0});
  Module m = module_of(g, {s1, s2, s3});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[0]->reductions.size(), 2u);  // s1 and s3
  EXPECT_EQ(rs[1]->reductions.size(), 1u);  // s2
}

#ifdef TGRAPH_HAVE_CUDA
// The generated kernels compile for every layout: column (batch norm), row (a warp, a block per
// output) and interleaved dims.
TEST(ReduceStitch, GeneratedKernelsCompile) {
  BatchNorm bn({4, 6, 5, 16});
  FusionPlan p = plan_fusion(bn.m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  int compiled = 0, nchw = 0;
  auto compile = [&](const GraphImpl& g, const ReduceStitch& s) {
    std::vector<TensorType> types;
    for (int32_t v : s.inputs) types.push_back(g.type(v));
    auto l = prepare_reduce_stitch(g, s, types, 132);
    ASSERT_TRUE(l.has_value());
    EXPECT_FALSE(nvrtc_compile(l->source, 9, 0).empty());
    // Columns of a multiple of 2 (here 16 and 50) get the vector kernel too; NCHW statistics
    // ([8, 6, 40, 40] over 0, 2, 3: 6 rows of 12,800) are found by runs of H x W and sliced.
    if (l->column) {
      EXPECT_GT(l->vec, 1);
      EXPECT_NE(l->source.find("tg_rs_vpartial"), std::string::npos);
    }
    if (l->args.outer == 6 && l->args.inner == 12800) {
      ++nchw;
      EXPECT_TRUE(l->runs);
      EXPECT_EQ(l->args.rrank, 2);
      EXPECT_GT(l->row_split, 1);
      EXPECT_NE(l->source.find("tg_rs_rpartial"), std::string::npos);
    }
    ++compiled;
  };
  for (auto& s : reduce_steps(p)) compile(bn.m.graph, *s);
  // Rows, a block per row, interleaved dims, and a batch of columns ([4, 6, 50] over dim 1).
  for (const auto& [shape, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{6, 300}, {1}}, {{3, 5000}, {1}}, {{4, 6, 50}, {0, 2}}, {{4, 6, 50}, {1}}, {{8, 6, 40, 40}, {0, 2, 3}}}) {
    Graph g;
    Tensor x = g.placeholder(shape, bf16), w = g.placeholder({shape.dim(-1)}, bf16);
    Tensor e = g.mul(g.sub(x, w), g.scalar(0.5, bf16));
    Module m = module_of(g, {g.reduce_variance(e, axes), g.reduce_mean(e, axes), g.reduce_min(e, axes)});
    for (auto& s : reduce_steps(plan_fusion(m, 0, {.stitch_reductions = true}))) compile(m.graph, *s);
  }
  EXPECT_EQ(compiled, 7);
  EXPECT_EQ(nchw, 1);
}

// Every float dtype, prologue operands of each access (full, per output, per reduced element,
// scalar, broadcast along a kept and a reduced dim) and an epilogue reading a result through a
// view, a per-output operand and a scalar: the source compiles, and names the epilogue's store.
TEST(ReduceStitch, KernelsWithEveryOperandKindCompile) {
  for (DType t : {f16, bf16, f32, f64}) {
    Graph g;
    Tensor x = g.placeholder({12, 5, 40}, t), per_out = g.placeholder({40}, t), per_red = g.placeholder({12, 5, 1}, t),
           partial = g.placeholder({12, 1, 40}, t);
    // Each reduction's input is read by it alone, so each takes its cone as its prologue.
    Tensor e1 = g.mul(g.sub(x, per_out), per_red), e2 = g.add(g.mul(x, partial), g.scalar(0.5, t));
    Tensor var = g.reduce_variance(e1, {0, 1}), mx = g.reduce_max(e2, {0, 1}, true);
    Tensor z = g.add(g.rsqrt(g.add(g.reshape(mx, {40}), g.scalar(2.0, t))), g.mul(var, per_out));
    Module m = module_of(g, {var, z});
    auto rs = reduce_steps(plan_fusion(m, 0, {.stitch_reductions = true}));
    ASSERT_EQ(rs.size(), 1u) << dtype_name(t);
    EXPECT_FALSE(rs[0]->prologue.nodes.empty());
    EXPECT_FALSE(rs[0]->epilogue.nodes.empty()) << dtype_name(t);
    std::vector<TensorType> types;
    for (int32_t v : rs[0]->inputs) types.push_back(m.graph.type(v));
    auto l = prepare_reduce_stitch(m.graph, *rs[0], types, 132);
    ASSERT_TRUE(l.has_value()) << dtype_name(t);
    EXPECT_TRUE(l->column);
    EXPECT_EQ(l->output_types.size(), rs[0]->outputs.size());
    EXPECT_NE(l->source.find("tg_boff"), std::string::npos);  // the partial operand
    EXPECT_FALSE(nvrtc_compile(l->source, 9, 0).empty()) << dtype_name(t);
  }
}
#endif

// A sum_to_like reads its `like` for the shape only; the stitch still counts it as read, so the
// group computing it is kept (the step's pieces need it when the kernel does not take the step),
// and a sibling joins only where its `like` is ready. Too many operands stop the joining.
TEST(ReduceStitch, SumToLikeKeepsItsLikeAndOperandsAreCapped) {
  Graph g;
  Tensor a = g.placeholder({64, 1}, f32), b = g.placeholder({64, 1}, f32), w = g.placeholder({64, 1}, f32);
  Tensor like = g.exp(w);
  Tensor y = g.sum_to_like(g.mul(a, b), like);
  Module m = module_of(g, {y});
  FusionPlan p = plan_fusion(m, 0, {.stitch_reductions = true});
  auto rs = reduce_steps(p);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_NE(std::find(rs[0]->inputs.begin(), rs[0]->inputs.end(), like.id()), rs[0]->inputs.end());
  bool like_made = false;
  for (const Step& s : p.steps)
    if (!s.reduce)
      for (int32_t id : step_nodes(s)) like_made |= m.graph.nodes[static_cast<size_t>(id)].outputs[0] == like.id();
  EXPECT_TRUE(like_made);

  // Seven sums over one geometry, each of a*b*c + d with operands of its own: 28 operands in
  // all, so no single step takes them all.
  Graph h;
  std::vector<Tensor> sums;
  for (int k = 0; k < 7; ++k) {
    Tensor o[4];
    for (Tensor& t : o) t = h.placeholder({16, 8}, f32);
    sums.push_back(h.reduce_sum(h.add(h.mul(h.mul(o[0], o[1]), o[2]), o[3]), {0}));
  }
  Module hm = module_of(h, sums);
  FusionPlan hp = plan_fusion(hm, 0, {.stitch_reductions = true});
  size_t reductions = 0;
  for (auto& s : reduce_steps(hp)) {
    EXPECT_LE(s->inputs.size(), static_cast<size_t>(kMaxFusedOperands));
    reductions += s->reductions.size();
  }
  EXPECT_EQ(reductions, 7u);
  EXPECT_GE(reduce_steps(hp).size(), 2u);
}

#ifdef TGRAPH_HAVE_CUDA
// Every stitched kernel of a ResNet-18 training step (batch norms, their epilogues with the
// running statistics and SGD with momentum, the loss) compiles: the plan's shapes of kernels
// that no small test builds (epilogue groups sharing recomputed members once emitted a value
// twice, found on the GPU).
TEST(ReduceStitch, ResNetTrainingStepKernelsCompile) {
  Graph g;
  Tensor x = g.placeholder({2, 32, 32, 3}, f32, "images");
  Tensor labels = g.placeholder({2, 1000}, f32, "labels");
  auto net = nn::resnet18(g, nn::ResNetConfig{});
  net->train();
  Tensor loss = g.softmax_cross_entropy(net->forward(g, x), labels);
  std::vector<Tensor> params = net->parameters();
  optim::GradMap grads = g.gradients(loss, params);
  std::vector<Operation> ops = net->updates();
  ops.push_back(optim::sgd(g, params, grads, g.scalar(0.01), {.momentum = 0.9}));
  Module m;
  prepare_module(m, g.impl(), {{x, x.type()}, {labels, labels.type()}}, {loss}, ops,
                 {.device = Device::cuda(0), .precision = Precision::bf16});
  const std::vector<std::string> errors = cuda_plan_compile_errors(m);
  EXPECT_TRUE(errors.empty()) << errors.size() << " failed, the first: " << errors.front();
}
#endif

// ReLU's gradient in front of a batch norm's backward, as a training backward graph gets it
// (relu's output y saved by the forward): the backward's sums and its dx each compute
// select(y > 0, g, 0) from g and y themselves (recompute_shared_producers), so dx is the only
// full-size value written and no reader reads more than x, g and y.
TEST(ReduceStitch, ReluGradientIsRecomputedByBothItsReaders) {
  const Shape s{4, 6, 5, 16};
  Graph g;
  Tensor x = g.placeholder(s, f32), y = g.placeholder(s, f32), dy = g.placeholder(s, f32);
  Tensor gamma = g.placeholder({16}, f32);
  const std::vector<int64_t> axes{0, 1, 2};
  Tensor xc = g.sub(x, g.reduce_mean(x, axes, true));
  Tensor d = g.select(g.greater(y, g.scalar(0.0)), dy, g.scalar(0.0));
  Tensor s1 = g.reduce_sum(d, axes, true), s2 = g.reduce_sum(g.mul(d, xc), axes, true);
  Tensor dx = g.mul(g.sub(g.sub(d, g.mul(s1, g.scalar(1.0 / 120))), g.mul(xc, g.mul(s2, g.scalar(0.01)))), gamma);
  Module m = module_of(g, {dx, s1, s2});
  for (Tensor f : {x, y, dy, gamma}) m.feeds.push_back(f.id());
  reinfer(m.graph);
  run_pipeline(m, true, true);
  FusionPlan p = plan_fusion(m, 0, {.stitch_stencils = true, .stitch_reductions = true});
  bool recomputed = false;
  for (const std::string& dec : p.decisions) recomputed |= dec.find("recomputed by its") != std::string::npos;
  EXPECT_TRUE(recomputed);
  EXPECT_EQ(full_size_writes(m.graph, p, s.num_elements()), 1);  // dx
  for (const Step& st : p.steps) {
    int full = 0;
    for (int32_t v : step_inputs(m.graph, st)) full += m.graph.type(v).shape.num_elements() == s.num_elements();
    EXPECT_LE(full, 3);  // x, y and dy at most
  }
}
