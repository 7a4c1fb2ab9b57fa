// Generated CUDA kernels compile with NVRTC for sm_90 (no GPU needed: runs everywhere the
// CUDA backend is built). GPU behaviour is tested in tests/gpu/.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernels_pool_indices.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "passes/fusion.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;

TEST(CudaCodegen, FusedElementwiseKernelsCompile) {
  for (DType t : {f32, f16, bf16, f64}) {
    Graph g;
    Tensor x = g.placeholder({8, 3}, t), y = g.placeholder({3}, t);
    Tensor i = g.cast(g.mul(x, g.scalar(10.0, t)), i32);
    Tensor z = g.select(g.greater(x, y), g.gelu(g.add(g.mul(x, y), y)), g.softplus(g.neg(x)));
    Tensor w = g.add(g.cast(g.floor_mod(i, g.scalar(3, i32)), t), g.clamp(z, g.scalar(-1.0, t), g.scalar(1.0, t)));
    Module m;
    m.graph = g.impl();
    m.targets = {w.id()};
    FusionPlan plan = plan_fusion(m, 0);
    int groups = 0;
    for (const Step& s : plan.steps) {
      if (!s.fused()) continue;
      ++groups;
      ASSERT_TRUE(elementwise_supported(m.graph, s.group));
      for (bool flat : {true, false}) EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, flat), 9, 0).empty());
    }
    EXPECT_GE(groups, 1);
  }
}

// A loop's predicate kernel that sets the conditional node itself (loop_donation.h): the
// device-runtime builtin it calls resolves without the device runtime library, for a bool
// predicate and a half-precision one (compared in its compute type).
TEST(CudaCodegen, PredicateKernelsThatSetTheConditionCompile) {
  for (DType t : {f32, f16, bf16}) {
    Graph g;
    Tensor i = g.placeholder(Shape{}, i32), x = g.placeholder(Shape{}, t);
    Tensor go = g.logical_and(g.less(g.add(i, g.scalar(1, i32)), g.scalar(9, i32)), g.greater(x, g.scalar(0.0, t)));
    Tensor half = g.mul(x, g.scalar(0.5, t));
    for (Tensor pred : {go, half}) {
      Module m;
      m.graph = g.impl();
      m.targets = {pred.id()};
      // The group computing pred (a lone op runs as a group of one, as in the backend).
      FusionGroup grp;
      for (const Step& s : plan_fusion(m, 0).steps)
        if (s.fused() && std::find(s.group.outputs.begin(), s.group.outputs.end(), pred.id()) != s.group.outputs.end())
          grp = s.group;
      if (grp.nodes.empty()) {
        const int32_t id = m.graph.values[static_cast<size_t>(pred.id())].node;
        grp = FusionGroup{{id}, m.graph.nodes[static_cast<size_t>(id)].inputs, {pred.id()}};
      }
      ASSERT_TRUE(elementwise_supported(m.graph, grp));
      std::string src = elementwise_source(m.graph, grp, true, pred.id());
      EXPECT_NE(src.find("cudaGraphSetConditional"), std::string::npos);
      EXPECT_FALSE(nvrtc_compile(src, 9, 0).empty()) << dtype_name(t);
    }
  }
}

TEST(CudaCodegen, ReductionKernelsCompile) {
  const OpKind kinds[] = {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceVariance,
                          OpKind::ReduceLogSumExp, OpKind::ArgMax, OpKind::Softmax, OpKind::LogSoftmax};
  for (OpKind k : kinds)
    for (bool block : {false, true}) {
      DType out = (k == OpKind::ArgMax) ? i32 : bf16;
      EXPECT_FALSE(nvrtc_compile(reduce_source(k, bf16, out, block), 9, 0).empty()) << op_name(k);
    }
  EXPECT_FALSE(nvrtc_compile(reduce_source(OpKind::ReduceAny, boolean, boolean, false), 9, 0).empty());
}

// The column-reduction kernels (kept dims innermost): every recipe kind and the variance, float
// and integer dtypes.
TEST(CudaCodegen, ColumnReductionKernelsCompile) {
  for (DType t : {f32, f16, bf16, f64})
    for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::ReduceProd,
                     OpKind::ReduceVariance, OpKind::SumToLike}) {
      const std::string src = column_source(k, t, t);
      EXPECT_NE(src.find("tg_col_partial"), std::string::npos);
      EXPECT_NE(src.find("tg_col_final"), std::string::npos);
      EXPECT_FALSE(nvrtc_compile(src, 9, 0).empty()) << op_name(k) << " " << dtype_name(t);
    }
  for (DType t : {i8, i32, i64})
    for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceProd, OpKind::ReduceMax, OpKind::ReduceMin})
      EXPECT_FALSE(nvrtc_compile(column_source(k, t, t), 9, 0).empty()) << op_name(k) << " " << dtype_name(t);
  EXPECT_FALSE(nvrtc_compile(column_source(OpKind::ReduceAny, boolean, boolean), 9, 0).empty());
}

// The pooling kernels' layout arithmetic (PoolGeometry::coords / index, shared by the max-pool
// and avg-pool kernels): every element's coordinates map back to its index, row-major in
// (n, h, w, c) for nhwc and (n, c, h, w) for nchw.
TEST(CudaCodegen, PoolGeometryCoordinatesRoundTrip) {
  for (bool last : {true, false}) {
    PoolGeometry g{};
    g.n = 2, g.c = 3, g.channels_last = last;
    const long long hh = 4, ww = 5;
    for (long long f = 0; f < g.n * g.c * hh * ww; ++f) {
      long long n, c, h, w;
      g.coords(f, hh, ww, n, c, h, w);
      ASSERT_EQ(g.index(n, c, h, w, hh, ww), f);
      const long long want = last ? ((n * hh + h) * ww + w) * g.c + c : ((n * g.c + c) * hh + h) * ww + w;
      ASSERT_EQ(f, want);
    }
  }
}

// Integer reductions accumulate exactly in long long (sum / prod wrap); argmax / argmin compare
// integers exactly, every integer dtype.
TEST(CudaCodegen, IntegerReductionKernelsCompile) {
  for (DType t : {i8, i32, i64, u8})
    for (bool block : {false, true}) {
      for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceProd, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::SumToLike})
        EXPECT_FALSE(nvrtc_compile(reduce_source(k, t, t, block), 9, 0).empty()) << op_name(k) << " " << dtype_name(t);
      for (OpKind k : {OpKind::ArgMax, OpKind::ArgMin})
        EXPECT_FALSE(nvrtc_compile(reduce_source(k, t, i32, block), 9, 0).empty()) << op_name(k) << " " << dtype_name(t);
    }
}

// Integer pow (exact, by squaring) is a generated elementwise kernel.
TEST(CudaCodegen, IntegerPowKernelCompiles) {
  for (DType t : {i8, i32, i64, u8}) {
    Graph g;
    Tensor x = g.placeholder({8, 3}, t), y = g.placeholder({3}, t);
    Tensor z = g.pow(x, y);
    Module m;
    m.graph = g.impl();
    m.targets = {z.id()};
    FusionPlan plan = plan_fusion(m, 0);
    int groups = 0;
    for (const Step& s : plan.steps) {
      if (!s.fused()) continue;
      ++groups;
      ASSERT_TRUE(elementwise_supported(m.graph, s.group)) << dtype_name(t);
      for (bool flat : {true, false})
        EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, flat), 9, 0).empty()) << dtype_name(t);
    }
    EXPECT_GE(groups, 1);
  }
}
#endif
