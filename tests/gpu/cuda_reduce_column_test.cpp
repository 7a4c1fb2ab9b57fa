// Reductions whose kept dims are the innermost ones (batch-norm statistics of NHWC activations,
// bias gradients, column sums) take the column kernels of reduce_kernels.cpp: against the CPU
// backend on random inputs, every kind they cover, float and integer dtypes, odd sizes (columns
// not a multiple of 32, few rows, many rows split over the grid), NaN and large-mean data.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpu/gpu_test_util.h"
#include "ops/op_def.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

using gputest::expect_close;
using tg::detail::op_name;
using tg::detail::OpKind;

std::vector<TensorData> run(const Device& d, OpKind k, const TensorData& x, const std::vector<int64_t>& axes,
                            bool keep) {
  Graph g;
  Tensor p = g.placeholder(x.shape(), x.dtype());
  Tensor y;
  switch (k) {
    case OpKind::ReduceSum: y = g.reduce_sum(p, axes, keep); break;
    case OpKind::ReduceMean: y = g.reduce_mean(p, axes, keep); break;
    case OpKind::ReduceMax: y = g.reduce_max(p, axes, keep); break;
    case OpKind::ReduceMin: y = g.reduce_min(p, axes, keep); break;
    case OpKind::ReduceProd: y = g.reduce_prod(p, axes, keep); break;
    default: y = g.reduce_variance(p, axes, keep); break;
  }
  Executable e = g.compile({{p, p.type()}}, {y}, {}, {.device = d});
  std::vector<TensorData> first = e.run({x});
  std::vector<TensorData> again = e.run({x});  // the captured replay
  first.push_back(again[0]);
  return first;
}

double tol(DType t) { return t == bf16 ? 2e-2 : t == f16 ? 2e-3 : t == f32 ? 1e-5 : 1e-12; }

}  // namespace

TEST(CudaReduceColumn, MatchesCpu) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {{{16, 7, 9, 256}, {0, 1, 2}},  // NHWC batch-norm statistics
                        {{3, 1, 5, 70}, {0, 2}},       // a size-1 dim among the reduced ones
                        {{4099, 33}, {0}},             // many rows, odd columns
                        {{2, 3, 40}, {0, 1}},          // few rows
                        {{64, 2, 3}, {0}}};            // kept dims [2,3] innermost
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (DType t : {f32, f16, bf16, f64})
      for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin,
                       OpKind::ReduceVariance, OpKind::ReduceProd}) {
        // Products of many values under- or overflow: near 1 for them.
        TensorData x = k == OpKind::ReduceProd ? TensorData::uniform(c.shape, 0.999, 1.001, t, seed++)
                                               : TensorData::uniform(c.shape, -2, 3, t, seed++);
        for (bool keep : {false, true}) {
          std::vector<TensorData> want = run(Device::cpu(), k, x, c.axes, keep),
                                  got = run(Device::cuda(0), k, x, c.axes, keep);
          const std::string what =
              std::string(op_name(k)) + " " + dtype_name(t) + " " + c.shape.str() + (keep ? " keep" : "");
          expect_close(got[0], want[0], tol(t), what);
          expect_close(got[1], want[0], tol(t), what + " (replay)");
        }
      }
}

TEST(CudaReduceColumn, IntegersNanAndLargeMean) {
  for (DType t : {i32, i8, i64}) {
    TensorData x = TensorData::uniform({300, 5, 37}, -100, 100, t, 77);
    for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::ReduceProd}) {
      std::vector<TensorData> want = run(Device::cpu(), k, x, {0, 1}, false),
                              got = run(Device::cuda(0), k, x, {0, 1}, false);
      expect_close(got[0], want[0], 0,
                   std::string(op_name(k)) + " " + dtype_name(t));  // exact (wrapping) arithmetic
    }
  }
  // A NaN in one column spreads to that column only; the variance of data with a mean 1e4 times
  // its spread stays accurate (shifted sums).
  TensorData x = TensorData::uniform({5000, 40}, -1, 1, f32, 78);
  x.set(1234 * 40 + 17, NAN);
  for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceVariance}) {
    std::vector<TensorData> want = run(Device::cpu(), k, x, {0}, false),
                            got = run(Device::cuda(0), k, x, {0}, false);
    EXPECT_TRUE(std::isnan(got[0].at(17))) << op_name(k);
    expect_close(got[0], want[0], 1e-5, std::string(op_name(k)) + " with a NaN");
  }
  TensorData big = TensorData::uniform({20000, 64}, 1e4 - 1, 1e4 + 1, f32, 79);
  std::vector<TensorData> want = run(Device::cpu(), OpKind::ReduceVariance, big, {0}, false),
                          got = run(Device::cuda(0), OpKind::ReduceVariance, big, {0}, false);
  expect_close(got[0], want[0], 1e-4, "variance, mean 1e4, spread 1");
}

// Reductions that keep x's innermost dim but not all dims after the reduced ones (a global
// average pool over H, W of NHWC; softmax and argmax over a middle axis) take a thread per
// output where there are outputs enough (reduce_kernels.cpp): every kind against the CPU.
TEST(CudaReduceColumn, InnerKeptMiddleAxesMatchTheCpu) {
  uint64_t seed = 500;
  for (DType t : {f32, bf16, f64})
    for (OpKind k : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax, OpKind::ReduceMin,
                     OpKind::ReduceVariance, OpKind::ReduceProd}) {
      TensorData x = k == OpKind::ReduceProd ? TensorData::uniform({32, 7, 7, 576}, 0.99, 1.01, t, seed++)
                                             : TensorData::uniform({32, 7, 7, 576}, -2, 3, t, seed++);
      for (bool keep : {false, true}) {
        std::vector<TensorData> want = run(Device::cpu(), k, x, {1, 2}, keep),
                                got = run(Device::cuda(0), k, x, {1, 2}, keep);
        const std::string what = std::string(op_name(k)) + " " + dtype_name(t) + (keep ? " keep" : "");
        expect_close(got[0], want[0], tol(t), what);
        expect_close(got[1], want[0], tol(t), what + " (replay)");
      }
    }
  TensorData x = TensorData::uniform({8, 50, 2048}, -3, 3, f32, 600);
  std::vector<TensorData> want, got;
  for (const Device& d : {Device::cpu(), Device::cuda(0)}) {
    Graph g;
    Tensor p = g.placeholder(x.shape(), f32);
    Executable e = g.compile({{p, p.type()}}, {g.softmax(p, 1), g.log_softmax(p, 1), g.argmax(p, 1)}, {}, {.device = d});
    (d == Device::cpu() ? want : got) = e.run({x});
  }
  expect_close(got[0], want[0], 1e-5, "softmax over axis 1 of [8, 50, 2048]");
  expect_close(got[1], want[1], 1e-5, "log_softmax over axis 1");
  expect_close(got[2], want[2], 0, "argmax over axis 1");
}

namespace {

// Mean and variance of one tensor over the same axes (what batch, layer and group norm
// decompose into) come from one stitched kernel (passes/reduce_stitch.h): column, warp-per-row,
// block-per-row and interleaved layouts, with and without kept dims, against the CPU.
TEST(CudaReduceColumn, StitchedMomentsMatchTheCpu) {
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {{{8, 7, 9, 64}, {0, 1, 2}},  // NHWC batch-norm statistics: column kernels
                        {{6, 300}, {1}},              // layer-norm rows: a warp per row
                        {{3, 5000}, {1}},             // long rows: a block per row
                        {{4, 6, 50}, {0, 2}}};        // neither layout: general offsets
  uint64_t seed = 300;
  for (const Case& c : cases)
    for (DType t : {f32, f16, bf16})
      for (bool keep : {true, false}) {
        TensorData x = TensorData::uniform(c.shape, -2, 3, t, seed++);
        auto build = [&](Graph& g, Tensor& p) {
          p = g.placeholder(x.shape(), t);
          Tensor mean = g.reduce_mean(p, c.axes, keep), var = g.reduce_variance(p, c.axes, keep);
          // A reader of both, as a normalisation has, and a second mean over other axes that
          // must stay unpaired.
          Tensor z = g.add(g.mul(mean, g.scalar(2.0, t)), var);
          return std::vector{mean, var, z, g.reduce_mean(p, {0})};
        };
        const std::string what = c.shape.str() + " " + dtype_name(t) + (keep ? " keep" : "");
        std::vector<TensorData> want, got;
        for (const Device& d : {Device::cpu(), Device::cuda(0)}) {
          Graph g;
          Tensor p;
          std::vector<Tensor> ys = build(g, p);
          Executable e = g.compile({{p, p.type()}}, ys, {}, {.device = d});
          std::vector<TensorData> r = e.run({x}), again = e.run({x});
          (d == Device::cpu() ? want : got) = r;
          if (d != Device::cpu()) {
            for (size_t i = 0; i < r.size(); ++i) expect_close(again[i], r[i], 0, what + " replay " + std::to_string(i));
            EXPECT_EQ(detail::cuda_graph_stats(e.impl()).stitched_reductions, 1) << what;
          }
        }
        for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], tol(t) * 4, what + " output " + std::to_string(i));
      }
}

// Stitches stay inside a block: a branch computing only the mean and the other only the
// variance of the same outer tensor are not stitched (on replay only one branch runs); each
// branch with both is stitched on its own, and a loop body's pair is computed on every trip.
TEST(CudaReduceColumn, StitchedMomentsStayInTheirBlock) {
  TensorData x = TensorData::uniform({16, 40}, -1, 2, f32, 401);
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<TensorData> want;
    for (const Device& d : {Device::cpu(), Device::cuda(0)}) {
      Graph g;
      Tensor p = g.placeholder({16, 40}, f32, "x"), flag = g.placeholder(Shape{}, boolean, "flag");
      auto r = g.if_else(
          flag,
          [&](Graph& s) {
            Tensor m = s.reduce_mean(p, {0});
            return std::vector{variant ? s.add(m, s.reduce_variance(p, {0})) : m};
          },
          [&](Graph& s) {
            Tensor v = s.reduce_variance(p, {0});
            return std::vector{variant ? s.sub(v, s.reduce_mean(p, {0})) : v};
          });
      // x -> (x - mean) / sqrt(var + 1) three times, the moments of the current value each trip.
      auto loop = g.for_loop(g.scalar(0, i32), g.scalar(3, i32), g.scalar(1, i32), {p},
                             [&](Graph& s, Tensor, std::vector<Tensor> v) {
                               Tensor m = s.reduce_mean(v[0], {0}, true), var = s.reduce_variance(v[0], {0}, true);
                               return std::vector{s.div(s.sub(v[0], m), s.sqrt(s.add(var, s.scalar(1.0))))};
                             });
      Executable e = g.compile({{p, p.type()}, {flag, flag.type()}}, {r[0], loop[0]}, {}, {.device = d});
      std::vector<TensorData> outs;
      for (bool f : {true, false, true, false}) {
        std::vector<TensorData> o = e.run({x, TensorData::scalar(f ? 1.0 : 0.0, boolean)});
        outs.insert(outs.end(), o.begin(), o.end());
      }
      if (d == Device::cpu()) {
        want = outs;
        continue;
      }
      for (size_t i = 0; i < want.size(); ++i)
        expect_close(outs[i], want[i], 1e-5, "variant " + std::to_string(variant) + " output " + std::to_string(i));
      detail::CudaGraphStats st = detail::cuda_graph_stats(e.impl());
      EXPECT_EQ(st.stitched_reductions, variant ? 3 : 1) << "the loop body's pair, and each branch's in variant 1";
      EXPECT_EQ(st.captures, 1) << st.error;
    }
  }
}

}  // namespace
