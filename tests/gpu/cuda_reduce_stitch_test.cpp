// Stitched reductions (passes/reduce_stitch.h, backends/cuda/reduce_stitch_kernel.h) against the
// CPU backend on random inputs: prologue operands of every access kind in every layout (column,
// a warp or a block per row, interleaved dims), every reduction kind, f32 / f16 / bf16; batch
// and layer norm training gradients; the same numbers with the stitching turned off.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "gpu/gpu_test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

using gputest::expect_close;

double tol(DType t) { return t == bf16 ? 3e-2 : t == f16 ? 4e-3 : 2e-5; }

// Compiles for the CPU and CUDA (with TGRAPH_NO_REDUCE_FUSION=1 when `unstitched`), runs CUDA
// twice (the second a replay), compares with the CPU; returns the stitched steps that ran.
// `round_half`: the CUDA kernels round every f16 / bf16 op as the CPU's fused loops do
// (TGRAPH_ROUND_HALF_OPS), for graphs whose result hangs on that rounding.
template <class Build>
int compare(const std::string& what, Build build, const std::vector<TensorData>& inputs, double tolerance,
            bool unstitched = false, bool round_half = false) {
  SCOPED_TRACE(what);
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  std::vector<Tensor> outs = build(g, ph);
  std::vector<TensorData> want = g.compile(feeds, outs, {}, {.device = Device::cpu()}).run(inputs);
  CompileOptions opts{.device = Device::cuda(0)};
  if (unstitched) opts.switches["TGRAPH_NO_REDUCE_FUSION"] = "1";
  if (round_half) opts.switches["TGRAPH_ROUND_HALF_OPS"] = "1";
  Executable e = g.compile(feeds, outs, {}, opts);
  std::vector<TensorData> got = e.run(inputs), again = e.run(inputs);
  for (size_t i = 0; i < outs.size(); ++i) {
    expect_close(got[i], want[i], tolerance, what + " output " + std::to_string(i));
    expect_close(again[i], got[i], 0, what + " replay output " + std::to_string(i));
  }
  const detail::CudaGraphStats st = detail::cuda_graph_stats(e.impl());
  EXPECT_EQ(st.captures, 1) << st.error;
  return st.stitched_reductions;
}

}  // namespace

// e = (x * f + k) - r * s + b: f full size, k per output, r per reduced element, s a scalar, b
// broadcast along some kept and some reduced dims (rank 3); every reduction kind of e at once.
TEST(CudaReduceStitch, PrologueOperandsInEveryLayout) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    Shape per_out, per_red, partial;
  };
  const Case cases[] = {
      {{40, 3, 70}, {0, 1}, {70}, {40, 3, 1}, {40, 1, 70}},   // column: kept dim innermost
      {{30, 2, 100}, {2}, {30, 2, 1}, {100}, {1, 2, 100}},   // a warp per row
      {{3, 2, 2100}, {1, 2}, {3, 1, 1}, {2, 2100}, {3, 1, 2100}},  // a block per row
      {{5, 6, 7}, {0, 2}, {6, 1}, {5, 1, 7}, {5, 6, 1}},     // interleaved dims
      {{6, 16, 9, 10}, {0, 2, 3}, {16, 1, 1}, {6, 1, 9, 10}, {1, 16, 9, 1}},  // NCHW statistics: runs of 90
      {{8, 6, 40, 40}, {0, 2, 3}, {6, 1, 1}, {8, 1, 40, 40}, {8, 6, 1, 1}},   // the same, rows in 6 slices
      {{5, 20000}, {1}, {5, 1}, {20000}, {1, 20000}},        // 5 rows in slices
  };
  uint64_t seed = 900;
  for (const Case& c : cases)
    for (DType t : {f32, f16, bf16}) {
      std::vector<TensorData> in = {TensorData::uniform(c.shape, -2, 2, t, seed++),
                                    TensorData::uniform(c.shape, 0.5, 1.5, t, seed++),
                                    TensorData::uniform(c.per_out, -3, 3, t, seed++),
                                    TensorData::uniform(c.per_red, -1, 1, t, seed++),
                                    TensorData::uniform(c.partial, -1, 1, t, seed++)};
      const std::string what = c.shape.str() + " " + dtype_name(t);
      auto build = [&](Graph& g, const std::vector<Tensor>& p) {
        Tensor e = g.add(g.sub(g.add(g.mul(p[0], p[1]), p[2]), g.mul(p[3], g.scalar(0.75, t))), p[4]);
        Tensor small = g.add(g.scalar(1.0, t), g.mul(g.tanh(e), g.scalar(0.01, t)));
        return std::vector{g.reduce_sum(e, c.axes),      g.reduce_mean(e, c.axes, true), g.reduce_max(e, c.axes),
                           g.reduce_min(e, c.axes),      g.reduce_variance(e, c.axes),   g.reduce_prod(small, c.axes),
                           g.reduce_sum(p[0], c.axes)};
      };
      // Sums over thousands of half-precision terms: the CPU adds in its own order. The
      // product of thousands of `small`s hangs on each being rounded to the half type first
      // (1 + 0.01 tanh(e) in bf16 moves in steps of 1/128), as the CPU rounds it: the kernels
      // round every op here too, instead of keeping float between ops (docs/decisions.md).
      const double tl = tol(t) * (t == f32 ? 1 : 2);
      EXPECT_GE(compare(what, build, in, tl, false, true), 1) << what;
      EXPECT_EQ(compare(what + " unstitched", build, in, tl, true, true), 0) << what;
    }
}

// The vector column kernel (tg_rs_vpartial: 8, 4 or 2 columns per thread, float sums per
// thread) and columns in batches (kept dims before and after the reduced ones: global average
// pooling of NHWC), beside the scalar kernel (9 columns): sum, mean, max, min and variance of a
// prologue with per-column, per-row and scalar operands, values around 1000 for the variance's
// shift, and enough rows that every thread sums dozens of them.
TEST(CudaReduceStitch, VectorColumnsAndBatchedColumns) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
    Shape per_out, per_red;
  };
  const Case cases[] = {
      {{6, 5, 7, 24}, {0, 1, 2}, {24}, {6, 5, 7, 1}},       // 8 columns a thread
      {{6, 5, 7, 10}, {0, 1, 2}, {10}, {6, 5, 7, 1}},       // 2
      {{6, 5, 7, 9}, {0, 1, 2}, {9}, {6, 5, 7, 1}},         // scalar
      {{32, 28, 28, 64}, {0, 1, 2}, {64}, {32, 28, 28, 1}},  // 25,088 rows
      {{8, 7, 7, 64}, {1, 2}, {8, 1, 1, 64}, {7, 7, 1}},     // a batch of 8 x 64 columns
      {{3, 50, 20}, {1}, {3, 1, 20}, {50, 1}},               // a batch of 3 x 20
  };
  uint64_t seed = 1100;
  for (const Case& c : cases)
    for (DType t : {f32, bf16}) {
      std::vector<TensorData> in = {TensorData::uniform(c.shape, 999, 1001, t, seed++),
                                    TensorData::uniform(c.per_out, -3, 3, t, seed++),
                                    TensorData::uniform(c.per_red, -1, 1, t, seed++)};
      const std::string what = c.shape.str() + " over " + std::to_string(c.axes.size()) + " dims " + dtype_name(t);
      auto build = [&](Graph& g, const std::vector<Tensor>& p) {
        Tensor e = g.add(g.mul(p[0], g.scalar(0.5, t)), g.mul(p[1], p[2]));
        return std::vector{g.reduce_sum(e, c.axes), g.reduce_mean(e, c.axes), g.reduce_max(e, c.axes),
                           g.reduce_min(e, c.axes), g.reduce_variance(p[0], c.axes), g.reduce_mean(p[0], c.axes)};
      };
      // Relative to values of 500 (bf16: each element rounded to 2 in 500 before summing).
      EXPECT_GE(compare(what, build, in, t == f32 ? 2e-5 : 2e-2), 1) << what;
    }
}

// Batch-norm training, forward and backward (dx, dgamma, dbeta of sum(y * dy)), NHWC: two
// stitched steps (the statistics with dbeta; dgamma and the backward's means with xhat recomputed).
TEST(CudaReduceStitch, BatchNormTrainingMatchesTheCpu) {
  uint64_t seed = 950;
  for (const Shape& s : {Shape{4, 7, 9, 40}, Shape{2, 3, 5, 300}})
    for (DType t : {f32, bf16}) {
      std::vector<TensorData> in = {TensorData::uniform(s, -1, 3, t, seed++), TensorData::uniform(s, -1, 1, t, seed++),
                                    TensorData::uniform({s.dim(-1)}, 0.5, 1.5, t, seed++),
                                    TensorData::uniform({s.dim(-1)}, -1, 1, t, seed++)};
      auto build = [&](Graph& g, const std::vector<Tensor>& p) {
        std::vector<Tensor> bn = g.batch_norm_training(p[0], p[2], p[3], -1, 1e-5);
        auto gr = g.gradients(g.reduce_sum(g.mul(bn[0], p[1])), {p[0], p[2], p[3]});
        return std::vector{bn[0], bn[1], bn[2], gr[p[0]], gr[p[2]], gr[p[3]]};
      };
      const std::string what = s.str() + " " + dtype_name(t);
      EXPECT_GE(compare(what, build, in, t == f32 ? 1e-4 : 6e-2), 2) << what;
    }
}

// ReLU's gradient computed by both its readers (recompute_shared_producers): the batch norm
// backward's sums (in the stitch's prologue) and its dx, from dy and relu's saved output.
TEST(CudaReduceStitch, SharedReluGradientRecomputedByItsReaders) {
  uint64_t seed = 970;
  for (DType t : {f32, bf16}) {
    const Shape s{8, 7, 7, 64};
    std::vector<TensorData> in = {TensorData::uniform(s, -1, 3, t, seed++), TensorData::uniform(s, -1, 1, t, seed++),
                                  TensorData::uniform(s, -1, 1, t, seed++), TensorData::uniform({64}, 0.5, 1.5, t, seed++)};
    auto build = [&](Graph& g, const std::vector<Tensor>& p) {
      const std::vector<int64_t> axes{0, 1, 2};
      Tensor xc = g.sub(p[0], g.reduce_mean(p[0], axes, true));
      Tensor d = g.select(g.greater(p[1], g.scalar(0.0, t)), p[2], g.scalar(0.0, t));
      Tensor s1 = g.reduce_sum(d, axes, true), s2 = g.reduce_sum(g.mul(d, xc), axes, true);
      Tensor dx = g.mul(g.sub(g.sub(d, g.mul(s1, g.scalar(1.0 / 392, t))), g.mul(xc, g.mul(s2, g.scalar(0.003, t)))), p[3]);
      return std::vector{dx, s1, s2};
    };
    EXPECT_GE(compare(std::string("relu gradient ") + dtype_name(t), build, in, t == f32 ? 1e-4 : 6e-2), 1);
  }
}

// Layer norm's backward: row statistics (a warp per row) and the gamma / beta gradients over the
// rows (column sums), with the prologue recomputing xhat.
TEST(CudaReduceStitch, LayerNormTrainingMatchesTheCpu) {
  std::vector<TensorData> in = {TensorData::uniform({96, 384}, -2, 2, f32, 990),
                                TensorData::uniform({96, 384}, -1, 1, f32, 991),
                                TensorData::uniform({384}, 0.5, 1.5, f32, 992), TensorData::uniform({384}, -1, 1, f32, 993)};
  auto build = [&](Graph& g, const std::vector<Tensor>& p) {
    Tensor y = g.layer_norm(p[0], p[2], p[3], -1, 1e-5);
    auto gr = g.gradients(g.reduce_sum(g.mul(y, p[1])), {p[0], p[2], p[3]});
    return std::vector{y, gr[p[0]], gr[p[2]], gr[p[3]]};
  };
  EXPECT_GE(compare("layer norm", build, in, 1e-4), 1);
}

// sum_to_like in a stitch: on the kernel path (its `like` passed along, never loaded) and when
// the kernel does not take the step (the only reduced dim has size 1: the pieces run, and the
// group computing `like` must have run too).
TEST(CudaReduceStitch, SumToLikeOnBothPaths) {
  uint64_t seed = 1200;
  for (const auto& [shape, like_shape] : std::vector<std::pair<Shape, Shape>>{{{96, 40}, {1, 40}}, {{64, 1}, {64, 1}}}) {
    std::vector<TensorData> in = {TensorData::uniform(shape, -1, 1, f32, seed++), TensorData::uniform(shape, -1, 1, f32, seed++),
                                  TensorData::uniform(like_shape, -1, 1, f32, seed++)};
    auto build = [&](Graph& g, const std::vector<Tensor>& p) {
      Tensor e = g.mul(p[0], p[1]);
      return std::vector{g.sum_to_like(e, g.exp(p[2])), g.reduce_max(e, {0}, true)};
    };
    compare(shape.str(), build, in, 2e-5);
  }
}

// The autocast form of a batch norm's backward (bf16 activations, f32 arithmetic): the
// gradient's f32 view is cast where it is read (passes/fusion_narrow.cpp) by the two sums and
// the dx group, against the CPU.
TEST(CudaReduceStitch, NarrowedGradientMatchesTheCpu) {
  const Shape s{8, 6, 10, 48};
  uint64_t seed = 990;
  std::vector<TensorData> in = {TensorData::uniform(s, -1, 1, bf16, seed++), TensorData::uniform(s, -1, 1, bf16, seed++),
                                TensorData::uniform(s, -1, 1, bf16, seed++), TensorData::uniform(s, -1, 3, bf16, seed++),
                                TensorData::uniform({48}, 0.5, 1.5, f32, seed++)};
  auto build = [&](Graph& g, const std::vector<Tensor>& p) {
    Tensor d = g.select(g.less_equal(p[0], g.scalar(0.0, bf16)), g.scalar(0.0, bf16), g.add(p[1], p[2]));
    Tensor df = g.cast(d, f32), xf = g.cast(p[3], f32);
    Tensor s1 = g.reduce_sum(df, {0, 1, 2}), s2 = g.reduce_sum(g.mul(df, xf), {0, 1, 2});
    Tensor dx = g.cast(g.mul(g.sub(g.mul(df, p[4]), g.mul(s1, g.scalar(1.0 / 480))), g.sub(xf, g.mul(s2, g.scalar(1e-3)))), bf16);
    return std::vector{dx, s1, s2};
  };
  EXPECT_GE(compare("narrowed", build, in, 6e-2), 1);
}
