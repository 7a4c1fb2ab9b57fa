// Generated CUDA kernels compile with NVRTC for sm_90 (no GPU needed: runs everywhere the
// CUDA backend is built). GPU behaviour is tested in tests/gpu/.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/kernels_max_pool.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/reduce_stitch_kernel.h"
#include "test_util.h"
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
      const StridePattern general = StridePattern::general(3, static_cast<int>(s.group.inputs.size()));
      for (Indexing ix : {Indexing::flat, Indexing::strided, Indexing::strided32}) EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, ix, -1, &general), 9, 0).empty());
      // Strided kernels compiled for a broadcasting pattern: rank 1 to 3, inputs flat, moving
      // along some dims, or scalars.
      for (int rank : {1, 2, 3}) {
        StridePattern p;
        p.rank = rank;
        for (size_t k = 0; k < s.group.inputs.size(); ++k) {
          p.flat.push_back(k % 3 == 0);
          p.moves_along.push_back(k % 3 == 1 ? (1u << (rank - 1)) : 0u);
        }
        for (Indexing ix : {Indexing::strided, Indexing::strided32})
          EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, ix, -1, &p), 9, 0).empty()) << p.key();
        // Vector kernels (elementwise_vector_width): the inputs moving along the innermost dim
        // read as vectors, the others as one scalar per vector.
        if (rank == 3)
          for (int vec : {8, 2})
            for (Indexing ix : {Indexing::strided, Indexing::strided32}) {
              const std::string src = elementwise_source(m.graph, s.group, ix, -1, &p, vec);
              EXPECT_NE(src.find("tg_pack<"), std::string::npos);
              EXPECT_FALSE(nvrtc_compile(src, 9, 0).empty()) << p.key() << " x" << vec;
              // With the per-channel inputs loaded once a thread, before the loop.
              StridePattern h = p;
              h.hoist_inner = true;
              EXPECT_NE(h.key(), p.key());
              const std::string hsrc = elementwise_source(m.graph, s.group, ix, -1, &h, vec);
              const bool per_channel = std::find(p.moves_along.begin(), p.moves_along.end(), 1u << 2) != p.moves_along.end();
              const size_t loop = hsrc.find("for (long long t = t0;");
              ASSERT_NE(loop, std::string::npos);
              EXPECT_EQ(hsrc.find(" h1 = *(") < loop, per_channel) << hsrc;
              EXPECT_FALSE(nvrtc_compile(hsrc, 9, 0).empty()) << h.key() << " x" << vec;
            }
      }
      EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, Indexing::flat, -1, nullptr, 4), 9, 0).empty())
          << "flat x4";
    }
    EXPECT_GE(groups, 1);
  }
}

// Casts to and from the 8-bit floats (the prelude's tg_f8_to_f / tg_f_to_f8, their format
// arguments from core/float8.h) compile, flat and as vector kernels.
TEST(CudaCodegen, Float8CastKernelsCompile) {
  for (DType t : {f8e4m3, f8e5m2}) {
    Graph g;
    Tensor x = g.placeholder({8, 16}, f32), q = g.placeholder({8, 16}, t);
    Tensor narrowed = g.cast(x, t);
    Tensor y = g.add(g.cast(narrowed, f32), g.cast(q, f32));
    Module m;
    m.graph = g.impl();
    m.targets = {y.id(), narrowed.id()};
    FusionPlan plan = plan_fusion(m, 0);
    int groups = 0;
    for (const Step& s : plan.steps) {
      if (!s.fused()) continue;
      ++groups;
      const std::string src = elementwise_source(m.graph, s.group, Indexing::flat, -1, nullptr);
      EXPECT_NE(src.find("tg_f_to_f8("), std::string::npos);
      EXPECT_FALSE(nvrtc_compile(src, 9, 0).empty()) << dtype_name(t);
      EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, Indexing::flat, -1, nullptr, 4), 9, 0).empty());
    }
    EXPECT_GE(groups, 1);
  }
}

// The activation-gradient ops (their device helper included) compile for every float dtype.
// Kernels are keyed by their source: two groups doing the same thing to different values (every
// bottleneck block's batch norm) must generate the same source, so they compile once. Names that
// carried graph value ids made ResNet-50's training step compile 321 sources for 38 kernels.
TEST(CudaCodegen, EqualGroupsOnDifferentValuesHaveEqualSources) {
  Graph g;
  std::vector<Tensor> outs;
  for (int k = 0; k < 3; ++k) {  // the same chain three times, on values made in between
    Tensor x = g.placeholder({8, 16}, bf16), s = g.placeholder({16}, bf16);
    Tensor pad = g.exp(g.placeholder({4}, f32));  // shifts the ids of the next chain's values
    outs.push_back(pad);
    outs.push_back(g.relu(g.add(g.mul(x, s), g.scalar(1.0, bf16))));
  }
  Module m;
  m.graph = g.impl();
  for (const Tensor& t : outs) m.targets.push_back(t.id());
  std::vector<std::string> chains;
  for (const Step& st : plan_fusion(m, 0).steps) {
    if (!st.fused()) continue;
    bool relu = false;
    for (int32_t id : st.group.nodes) relu |= m.graph.nodes[static_cast<size_t>(id)].kind == OpKind::Relu;
    if (relu) chains.push_back(elementwise_source(m.graph, st.group, Indexing::flat, -1, nullptr, 8));
  }
  ASSERT_EQ(chains.size(), 3u);
  EXPECT_EQ(chains[0], chains[1]);
  EXPECT_EQ(chains[1], chains[2]);
  // and a different chain is a different source
  Graph h;
  Tensor x = h.placeholder({8, 16}, bf16), s = h.placeholder({16}, bf16);
  Tensor y = h.relu(h.sub(h.mul(x, s), h.scalar(1.0, bf16)));
  Module n;
  n.graph = h.impl();
  n.targets = {y.id()};
  for (const Step& st : plan_fusion(n, 0).steps)
    if (st.fused()) EXPECT_NE(elementwise_source(n.graph, st.group, Indexing::flat, -1, nullptr, 8), chains[0]);
}

TEST(CudaCodegen, ActivationGradientKernelsCompile) {
  for (DType t : {f32, f16, bf16, f64}) {
    Graph g;
    Tensor dy = g.placeholder({8, 3}, t), x = g.placeholder({8, 3}, t);
    Tensor z = g.add(g.gelu_tanh_grad(g.mul(dy, x), x), g.relu_grad(dy, g.relu(x)));
    Module m;
    m.graph = g.impl();
    m.targets = {z.id()};
    int compiled = 0;  // of the two ops
    for (const Step& s : plan_fusion(m, 0).steps) {
      if (!s.fused()) continue;
      ASSERT_TRUE(elementwise_supported(m.graph, s.group));
      EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, Indexing::flat, -1, nullptr), 9, 0).empty())
          << dtype_name(t);
      for (int32_t id : s.group.nodes) {
        const OpKind k = m.graph.nodes[static_cast<size_t>(id)].kind;
        compiled += k == OpKind::GeluTanhGrad || k == OpKind::ReluGrad;
      }
    }
    EXPECT_EQ(compiled, 2);
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
      std::string src = elementwise_source(m.graph, grp, Indexing::flat, pred.id());
      EXPECT_NE(src.find("cudaGraphSetConditional"), std::string::npos);
      EXPECT_FALSE(nvrtc_compile(src, 9, 0).empty()) << dtype_name(t);
    }
  }
}

// The strided32 kernels' division: exact for every n < 2^31 and divisor the dims can have.
TEST(CudaCodegen, FastDivisorIsExact) {
  std::mt19937 rng(7);
  std::vector<uint32_t> ds{1, 2, 3, 5, 7, 56, 255, 256, 3136, 200704, 802816, (1u << 31) - 1, 1u << 30, 641, 65537};
  for (int k = 0; k < 200; ++k) ds.push_back(1 + rng() % ((1u << 31) - 1));
  for (int k = 0; k < 200; ++k) ds.push_back(1 + rng() % 5000);
  for (uint32_t d : ds) {
    const FastDivisor f = fast_divisor(d);
    std::vector<uint32_t> ns{0, 1, d - 1, d, (1u << 31) - 1, (1u << 31) - 2};
    if (d < (1u << 30)) ns.push_back(2 * d - 1), ns.push_back(2 * d);
    for (int k = 0; k < 2000; ++k) ns.push_back(rng() % (1u << 31));
    for (uint32_t n : ns) ASSERT_EQ(fast_divide(n, f), n / d) << n << " / " << d;
  }
}

// Coalesced dims and the kernel's index arithmetic (emulated) find the element a plain
// broadcasting walk finds, for random shapes with broadcast inputs.
TEST(CudaCodegen, CoalescedStridesFindTheBroadcastElement) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> out(static_cast<size_t>(rank));
    for (auto& d : out) d = 1 + static_cast<int64_t>(rng() % 5);
    const int inputs = 1 + static_cast<int>(rng() % 3);
    std::vector<std::vector<int64_t>> shapes;
    ElementwiseArgs a{};
    a.rank = rank;
    a.n = 1;
    for (int d = 0; d < rank; ++d) a.dims[d] = out[static_cast<size_t>(d)], a.n *= out[static_cast<size_t>(d)];
    for (int k = 0; k < inputs; ++k) {
      // A suffix of the output's dims (rank may be lower), each kept or broadcast (1).
      const int r = 1 + static_cast<int>(rng() % static_cast<unsigned>(rank));
      std::vector<int64_t> s(out.end() - r, out.end());
      for (auto& d : s)
        if (rng() % 3 == 0) d = 1;
      long long stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const int sd = d - (rank - r);
        const int64_t dim = sd >= 0 ? s[static_cast<size_t>(sd)] : 1;
        a.strides[k][d] = (dim == 1 && out[static_cast<size_t>(d)] != 1) || sd < 0 ? 0 : stride;
        stride *= dim;
      }
      shapes.push_back(s);
    }
    ElementwiseArgs c = a;
    coalesce_dims(c, inputs);
    ASSERT_LE(c.rank, a.rank);
    for (int64_t i = 0; i < a.n; ++i) {
      uint32_t r = static_cast<uint32_t>(i);
      std::vector<int64_t> got(static_cast<size_t>(inputs), 0);
      for (int d = c.rank - 1; d >= 0; --d) {
        const uint32_t q = d > 0 ? fast_divide(r, fast_divisor(static_cast<uint32_t>(c.dims[d]))) : 0;
        const uint32_t cd = d > 0 ? r - q * static_cast<uint32_t>(c.dims[d]) : r;
        for (int k = 0; k < inputs; ++k) got[static_cast<size_t>(k)] += cd * c.strides[k][d];
        r = q;
      }
      // The plain walk: coordinates of i, clamped to 1-sized dims of each input.
      int64_t rem = i;
      std::vector<int64_t> coord(static_cast<size_t>(rank));
      for (int d = rank - 1; d >= 0; --d) coord[static_cast<size_t>(d)] = rem % out[static_cast<size_t>(d)], rem /= out[static_cast<size_t>(d)];
      for (int k = 0; k < inputs; ++k) {
        const auto& s = shapes[static_cast<size_t>(k)];
        int64_t want = 0;
        for (size_t sd = 0; sd < s.size(); ++sd) {
          const int64_t cd = s[sd] == 1 ? 0 : coord[static_cast<size_t>(rank) - s.size() + sd];
          want = want * s[sd] + cd;
        }
        ASSERT_EQ(got[static_cast<size_t>(k)], want) << "trial " << trial << " i " << i << " input " << k;
      }
    }
  }
  // The batch-norm case: a per-channel input over NHWC leaves two dims.
  ElementwiseArgs bn{};
  bn.rank = 4;
  const long long dims[4] = {64, 56, 56, 256};
  for (int d = 0; d < 4; ++d) bn.dims[d] = dims[d], bn.strides[0][d] = d == 3 ? 1 : 0;
  bn.strides[1][3] = 1, bn.strides[1][2] = 256, bn.strides[1][1] = 256 * 56, bn.strides[1][0] = 256 * 56 * 56;
  coalesce_dims(bn, 2);
  EXPECT_EQ(bn.rank, 2);
  EXPECT_EQ(bn.dims[0], 64 * 56 * 56);
  EXPECT_EQ(bn.dims[1], 256);
}

TEST(CudaCodegen, ReductionKernelsCompile) {
  const OpKind kinds[] = {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceVariance,
                          OpKind::ReduceLogSumExp, OpKind::ArgMax, OpKind::Softmax, OpKind::LogSoftmax};
  for (OpKind k : kinds)
    for (int lanes : {1, 32, 256}) {
      DType out = (k == OpKind::ArgMax) ? i32 : bf16;
      EXPECT_FALSE(nvrtc_compile(reduce_source(k, bf16, out, lanes), 9, 0).empty()) << op_name(k) << " " << lanes;
    }
  EXPECT_FALSE(nvrtc_compile(reduce_source(OpKind::ReduceAny, boolean, boolean, 32), 9, 0).empty());
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
// The stitched reductions of a batch norm in training, NHWC bf16 (reduce_stitch_kernel.cpp):
// the forward statistics (one operand) and the backward's two sums (two operands, x recomputed
// to x-hat) plan the vector column kernel at every rows-in-flight count, and compile.
TEST(CudaCodegen, StitchedBatchNormReductionsCompile) {
  for (bool backward : {false, true}) {
    Graph g;
    Tensor x = g.placeholder({8, 14, 14, 64}, bf16), dy = g.placeholder({8, 14, 14, 64}, bf16);
    Tensor mean = g.placeholder({64}, f32), rstd = g.placeholder({64}, f32);
    Module m;
    m.graph = g.impl();
    if (backward) {
      Tensor gr = g.mul(g.cast(dy, f32), g.cast(g.greater(x, g.scalar(0.0, bf16)), f32));
      Tensor xhat = g.mul(g.sub(g.cast(x, f32), mean), rstd);
      m.targets = {g.reduce_sum(gr, {0, 1, 2}).id(), g.reduce_sum(g.mul(gr, xhat), {0, 1, 2}).id()};
    } else {
      m.targets = {g.reduce_variance(g.cast(x, f32), {0, 1, 2}).id()};
    }
    m.graph = g.impl();
    FusionOptions opt;
    opt.stitch_reductions = true;
    const FusionPlan plan = plan_fusion(m, 0, opt);
    int steps = 0;
    for (const Step& s : plan.steps) {
      if (!s.reduce) continue;
      ++steps;
      EXPECT_GE(s.reduce->inputs.size(), backward ? 4u : 1u);  // dy, x, mean, rstd (and constants)
      std::vector<TensorType> types;
      for (int32_t v : s.reduce->inputs) types.push_back(m.graph.type(v));
      for (const char* stages : {"", "0", "2", "3"}) {
        WithSwitches sw({{"TGRAPH_RS_STAGES", stages}});
        const auto l = prepare_reduce_stitch(m.graph, *s.reduce, types, 132, 9);
        ASSERT_TRUE(l.has_value());
        EXPECT_EQ(l->vec, 8);
        const int want = *stages ? std::atoi(stages) : 4;  // 4 rows of 16 or 32 bytes a thread: 16 or 32 KB
        EXPECT_EQ(l->stages, want);
        EXPECT_EQ(l->source.find("cp.async") != std::string::npos, want > 0);
        EXPECT_NE(l->source.find("tg_rs_vpartial"), std::string::npos);
        EXPECT_FALSE(nvrtc_compile(l->source, 9, 0).empty()) << stages << " stages\n" << l->source;
      }
      EXPECT_EQ(prepare_reduce_stitch(m.graph, *s.reduce, types, 132, 7)->stages, 0) << "no cp.async before sm_80";
    }
    EXPECT_EQ(steps, 1) << (backward ? "backward" : "forward");
  }
}

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
    for (int lanes : {1, 32, 256}) {
      for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceProd, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::SumToLike})
        EXPECT_FALSE(nvrtc_compile(reduce_source(k, t, t, lanes), 9, 0).empty()) << op_name(k) << " " << dtype_name(t);
      for (OpKind k : {OpKind::ArgMax, OpKind::ArgMin})
        EXPECT_FALSE(nvrtc_compile(reduce_source(k, t, i32, lanes), 9, 0).empty()) << op_name(k) << " " << dtype_name(t);
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
      const StridePattern general = StridePattern::general(3, static_cast<int>(s.group.inputs.size()));
      for (Indexing ix : {Indexing::flat, Indexing::strided, Indexing::strided32})
        EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, ix, -1, &general), 9, 0).empty()) << dtype_name(t);
    }
    EXPECT_GE(groups, 1);
  }
}

// How many outputs a thread computes: the largest of 8, 4, 2 dividing the innermost dim, where
// every input read along it is contiguous there (other strides multiples of it) and every
// pointer is aligned to a vector of its dtype; inputs broadcast along it do not count.
TEST(CudaCodegen, VectorWidthFollowsShapesStridesAndAlignment) {
  alignas(256) static char buf[4096];
  auto args = [&](long long rows, long long inner, const std::vector<std::pair<long long, long long>>& strides) {
    ElementwiseArgs a{};
    a.rank = 2;
    a.dims[0] = rows;
    a.dims[1] = inner;
    a.n = rows * inner;
    for (size_t k = 0; k < strides.size(); ++k) {
      a.in[k] = buf + 256 * k;
      a.strides[k][0] = strides[k].first;
      a.strides[k][1] = strides[k].second;
    }
    a.out[0] = buf + 2048;
    return a;
  };
  const std::vector<DType> two_bf16{bf16, f32}, out_bf16{bf16};
  // NHWC activations with a per-channel f32 operand, C = 64, 12, 6, 7.
  EXPECT_EQ(elementwise_vector_width(args(100, 64, {{64, 1}, {0, 1}}), false, two_bf16, out_bf16), 8);
  EXPECT_EQ(elementwise_vector_width(args(100, 12, {{12, 1}, {0, 1}}), false, two_bf16, out_bf16), 4);
  EXPECT_EQ(elementwise_vector_width(args(100, 6, {{6, 1}, {0, 1}}), false, two_bf16, out_bf16), 2);
  EXPECT_EQ(elementwise_vector_width(args(100, 7, {{7, 1}, {0, 1}}), false, two_bf16, out_bf16), 1);
  // A per-row operand (stride 0 along the innermost dim) is one scalar per vector: any stride.
  EXPECT_EQ(elementwise_vector_width(args(100, 64, {{64, 1}, {3, 0}}), false, two_bf16, out_bf16), 8);
  // A row stride that is not a multiple of the vector limits it.
  EXPECT_EQ(elementwise_vector_width(args(100, 64, {{64, 1}, {12, 1}}), false, two_bf16, out_bf16), 4);
  // A misaligned input or output pointer: a narrower vector, or none.
  ElementwiseArgs a = args(100, 64, {{64, 1}, {0, 1}});
  a.in[0] = buf + 4;  // bf16: aligned to 2 elements
  EXPECT_EQ(elementwise_vector_width(a, false, two_bf16, out_bf16), 2);
  a.in[0] = buf;
  a.out[0] = buf + 2050;
  EXPECT_EQ(elementwise_vector_width(a, false, two_bf16, out_bf16), 1);
  // Flat: the element count decides; every input is read at i.
  ElementwiseArgs f = args(1, 1000, {{0, 1}});
  EXPECT_EQ(elementwise_vector_width(f, true, {f32}, {f32}), 8);
  f.n = 1002;
  EXPECT_EQ(elementwise_vector_width(f, true, {f32}, {f32}), 2);
}

// The broadcasting pattern a strided kernel is compiled for: flat inputs read at i, others only
// along the dims they move (a batch-norm shape after coalescing: [N*H*W, C]).
TEST(CudaCodegen, StridePatternOfCoalescedArgs) {
  ElementwiseArgs a{};
  a.rank = 2;
  a.dims[0] = 200704;
  a.dims[1] = 256;
  const long long strides[4][2] = {{256, 1}, {0, 1}, {1, 0}, {0, 0}};  // x, per channel, per row, scalar
  for (int k = 0; k < 4; ++k)
    for (int d = 0; d < 2; ++d) a.strides[k][d] = strides[k][d];
  const StridePattern p = StridePattern::of(a, 4);
  EXPECT_EQ(p.flat, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(p.moves_along, (std::vector<uint32_t>{3u, 2u, 1u, 0u}));
  EXPECT_EQ(p.key(), "2,f,2,1,0");
}
#endif
