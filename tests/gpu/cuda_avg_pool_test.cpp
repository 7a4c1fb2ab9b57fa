// avg_pool2d and avg_pool2d_grad on the CUDA device (src/backends/cuda/cuda_avg_pool.cpp)
// against the CPU backend on random inputs, for the cases cuDNN's pooling declines and our
// kernels take: ceil_mode windows past the input, asymmetric padding, strides above and below
// the window, dilation, count_include_pad on and off, both layouts, every float dtype.
//
// Each case runs two ways:
//   - directly: cudnn_pool must decline it (so the kernels are what is tested) and
//     cuda_avg_pool must cover it, writing every element of a NaN-filled output;
//   - through the executor, twice: the run must have been captured into a CUDA graph without
//     error, which an op falling back to the CPU (a copy to the host) rules out.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_context.h"
#include "gpu/direct_op_util.h"
#include "gpu/gpu_test_util.h"
#include "ir/graph_impl.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;
using tg::detail::OpKind;

namespace {

const DType kFloats[] = {f32, f16, bf16, f64};

double tolerance(DType t) { return t == bf16 ? 8e-3 : t == f16 ? 1e-3 : t == f64 ? 1e-12 : 2e-6; }

// A 2-D pooling case: x as (N, H, W, C) whatever the layout, and the descriptor without its
// layout and count_include_pad (the test runs each case with every combination).
struct Case {
  std::string name;
  int64_t n, h, w, c;
  PoolDesc d;
  bool cudnn_declines = true;  // false: a case cuDNN covers, run to check the dispatch order
};

Shape x_shape(const Case& k, Layout l) {
  return l == Layout::nhwc ? Shape{k.n, k.h, k.w, k.c} : Shape{k.n, k.c, k.h, k.w};
}

Shape pooled_shape(const Shape& x, const PoolDesc& d) {
  Graph g;
  return g.avg_pool2d(g.placeholder(x, f32), d).shape();
}

// avg_pool2d(x) and avg_pool2d_grad(dy, x) under d: direct calls, then the executor (static or
// dynamic shapes) against the CPU backend.
void check(const std::string& what, const Shape& xs, const PoolDesc& d, DType t, bool cudnn_declines,
           bool dynamic = false) {
  SCOPED_TRACE(what);
  const Shape ys = pooled_shape(xs, d);
  const uint64_t seed = std::hash<std::string>{}(what);
  const TensorData x = TensorData::uniform(xs, -2, 2, t, seed),
                   dy = TensorData::uniform(ys, -2, 2, t, seed + 1);
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, {x, dy}, dynamic);
  const std::vector<Tensor> outs{g.avg_pool2d(ph[0], d), g.avg_pool2d_grad(ph[1], ph[0], d)};
  const CompileOptions cpu{.device = Device::cpu(), .disable_type_inference = dynamic, .optimize = false};
  const CompileOptions gpu{.device = Device::cuda(0), .disable_type_inference = dynamic, .optimize = false};
  const std::vector<TensorData> want = g.compile(feeds, outs, {}, cpu).run({x, dy});
  ASSERT_EQ(want.size(), 2u);
  const double tol = tolerance(t);

  const struct {
    OpKind kind;
    std::vector<TensorData> in;
    const TensorData& want;
  } ops[] = {{OpKind::AvgPool2d, {x}, want[0]}, {OpKind::AvgPool2dGrad, {dy, x}, want[1]}};
  for (const auto& o : ops) {
    const std::string op = o.kind == OpKind::AvgPool2d ? "avg_pool2d" : "avg_pool2d_grad";
    TensorData got;
    if (cudnn_declines)
      EXPECT_FALSE(gputest::run_direct(detail::cudnn_pool, o.kind, d, o.in, o.want.type(), got))
          << what << " " << op << ": cuDNN took the case, so it does not test our kernel";
    ASSERT_TRUE(gputest::run_direct(detail::cuda_avg_pool, o.kind, d, o.in, o.want.type(), got)) << what << " " << op;
    gputest::expect_close(got, o.want, tol, what + " " + op + " (direct)");
  }

  Executable exe = g.compile(feeds, outs, {}, gpu);
  for (int run = 0; run < 2; ++run) {
    const std::vector<TensorData> got = exe.run({x, dy});
    ASSERT_EQ(got.size(), 2u);
    gputest::expect_close(got[0], want[0], tol, what + " avg_pool2d, run " + std::to_string(run));
    gputest::expect_close(got[1], want[1], tol, what + " avg_pool2d_grad, run " + std::to_string(run));
  }
  const auto stats = detail::cuda_graph_stats(exe.impl());
  EXPECT_EQ(stats.error, "") << what << ": an op fell back to the CPU or broke capture";
  if (!dynamic) EXPECT_EQ(stats.captures, 1) << what;
}

PoolDesc explicit_pool(std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> pad,
                       bool ceil_mode, std::vector<int64_t> dil = {}) {
  return {.kernel = std::move(k),
          .stride = std::move(s),
          .dilation = std::move(dil),
          .padding = PaddingStyle::explicit_,
          .explicit_padding = std::move(pad),
          .ceil_mode = ceil_mode};
}

const Case kCases[] = {
    // H 9, W 11: the last window of each dim starts inside x and reaches past it.
    {"ceil mode past x", 2, 9, 11, 5, explicit_pool({2, 2}, {2, 2}, {}, true)},
    // The last window also reaches past the padding after (1), which count_include_pad skips.
    {"ceil mode past the padding", 2, 10, 8, 3, explicit_pool({3, 3}, {2, 2}, {1, 1, 1, 1}, true)},
    // H: 0 before, 2 after; W: 1 before, 0 after; stride 1 < window 3.
    {"asymmetric padding stride < window", 2, 7, 6, 4, explicit_pool({3, 3}, {1, 1}, {0, 2, 1, 0}, false)},
    // Stride 3 > window 2: taps skipped between windows; ceil mode with asymmetric padding.
    {"stride > window ceil", 2, 9, 10, 3, explicit_pool({2, 2}, {3, 3}, {1, 0, 0, 1}, true)},
    {"stride > window floor, rectangular", 1, 11, 13, 6, explicit_pool({2, 3}, {4, 3}, {0, 1, 0, 2}, false)},
    // Dilation 2 (cuDNN pooling has none): windows whose taps straddle x's edge.
    {"dilation", 2, 9, 10, 3, explicit_pool({2, 3}, {1, 2}, {1, 1, 2, 3}, true, {2, 2})},
    // TensorFlow's same with stride 2 on even sizes: the odd padding unit goes after.
    {"same stride 2", 2, 8, 10, 3, {.kernel = {3, 3}, .stride = {2, 2}, .padding = PaddingStyle::same}},
    // A plain 2x2 / 2 pooling cuDNN covers: the dispatcher must still use it.
    {"cudnn covered", 2, 8, 6, 4, explicit_pool({2, 2}, {2, 2}, {}, false), false},
};

}  // namespace

TEST(CudaAvgPool, MatchesCpu) {
  for (const Case& k : kCases)
    for (Layout l : {Layout::nhwc, Layout::nchw})
      for (bool include : {false, true})
        for (DType t : kFloats) {
          PoolDesc d = k.d;
          d.data_layout = l;
          d.count_include_pad = include;
          check(k.name + (l == Layout::nhwc ? " nhwc" : " nchw") +
                    (include ? " include_pad " : " exclude_pad ") + dtype_name(t),
                x_shape(k, l), d, t, k.cudnn_declines);
        }
}

TEST(CudaAvgPool, DynamicShapes) {
  PoolDesc d = explicit_pool({3, 3}, {2, 2}, {1, 0, 0, 1}, true);
  d.count_include_pad = true;
  check("dynamic ceil mode asymmetric nhwc", Shape{2, 9, 10, 3}, d, f32, true, true);
  d.data_layout = Layout::nchw;
  check("dynamic ceil mode asymmetric nchw", Shape{2, 3, 9, 10}, d, f16, true, true);
}

// More elements than one grid of the grid-stride loop covers.
TEST(CudaAvgPool, Large) {
  PoolDesc d = explicit_pool({3, 3}, {2, 2}, {0, 1, 1, 0}, true);
  d.count_include_pad = true;
  check("large nhwc", Shape{4, 65, 63, 160}, d, f32, true);
}
