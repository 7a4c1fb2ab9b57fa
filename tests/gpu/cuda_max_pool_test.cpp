// max_pool2d, max_pool2d_with_indices and max_pool2d_grad on the CUDA device (our kernels,
// src/backends/cuda/cuda_max_pool.cpp) against the CPU backend: padding styles, ceil_mode,
// dilation, strides above and below the window, both layouts, channel counts that take the
// vector path (a multiple of 16 bytes of the dtype in NHWC) and those that do not, every float
// dtype and an integer one. Inputs are quantised to a few levels with many zeros (as after a
// ReLU), so windows hold ties: the first maximum in row-major order must win, in the values,
// the indices and which element receives the gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "backends/cuda/cuda_ops.h"
#include "gpu/direct_op_util.h"
#include "gpu/gpu_test_util.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;
using tg::detail::OpKind;

namespace {

double tolerance(DType t) { return t == bf16 ? 8e-3 : t == f16 ? 1e-3 : t == f64 ? 1e-12 : 2e-6; }

// Values in {-1, -0.5, 0, 0.5, ..., 2}, zero for about a third: ties in most windows.
TensorData tied(const Shape& s, DType t, uint64_t seed) {
  TensorData u = TensorData::uniform(s, -1, 2, f64, seed);
  TensorData q(s, t);
  for (int64_t i = 0; i < u.num_elements(); ++i) {
    const double v = std::round(u.at(i) * 2) / 2;
    q.set(i, v < 0 && i % 3 ? 0.0 : v);
  }
  return q;
}

struct Case {
  std::string name;
  int64_t n, h, w;
  PoolDesc d;
};

PoolDesc explicit_pool(std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> pad, bool ceil_mode,
                       std::vector<int64_t> dil = {}) {
  return {.kernel = std::move(k),
          .stride = std::move(s),
          .dilation = std::move(dil),
          .padding = PaddingStyle::explicit_,
          .explicit_padding = std::move(pad),
          .ceil_mode = ceil_mode};
}

const Case kCases[] = {
    {"resnet stem 3x3/2 pad 1", 2, 12, 10, explicit_pool({3, 3}, {2, 2}, {1, 1, 1, 1}, false)},
    {"2x2/2", 2, 8, 6, explicit_pool({2, 2}, {2, 2}, {}, false)},
    {"ceil mode past x", 2, 9, 11, explicit_pool({2, 2}, {2, 2}, {}, true)},
    {"asymmetric padding stride < window", 1, 7, 6, explicit_pool({3, 3}, {1, 1}, {0, 2, 1, 0}, false)},
    {"stride > window", 2, 11, 13, explicit_pool({2, 3}, {4, 3}, {0, 1, 0, 2}, false)},
    {"dilation", 2, 9, 10, explicit_pool({2, 3}, {1, 2}, {1, 1, 2, 3}, true, {2, 2})},
    {"same stride 2", 2, 8, 10, {.kernel = {3, 3}, .stride = {2, 2}, .padding = PaddingStyle::same}},
};

// max_pool2d, max_pool2d_with_indices and (float dtypes) max_pool2d_grad: direct calls (the
// kernel must cover the case and write every element), then the executor, captured.
void check(const std::string& what, const Shape& xs, const PoolDesc& d, DType t, bool nan = false) {
  SCOPED_TRACE(what);
  const uint64_t seed = std::hash<std::string>{}(what);
  TensorData x = tied(xs, t, seed);
  if (nan) x.set(x.num_elements() / 3, std::nan(""));
  Graph g0;
  const Shape ys = g0.max_pool2d(g0.placeholder(xs, t), d).shape();
  const bool grad = is_float(t);
  const TensorData dy = TensorData::uniform(ys, -2, 2, grad ? t : f32, seed + 1);
  Graph g;
  Tensor px = g.placeholder(xs, t, "x");
  auto [yi, idx] = g.max_pool2d_with_indices(px, d);
  std::vector<Tensor> outs{g.max_pool2d(px, d), yi, idx};
  std::vector<std::pair<Tensor, TensorType>> feeds{{px, px.type()}};
  std::vector<TensorData> inputs{x};
  if (grad) {
    Tensor pdy = g.placeholder(ys, dy.dtype(), "dy");
    outs.push_back(g.max_pool2d_grad(pdy, px, d));
    feeds.push_back({pdy, pdy.type()}), inputs.push_back(dy);
  }
  const std::vector<TensorData> want =
      g.compile(feeds, outs, {}, {.device = Device::cpu(), .optimize = false}).run(inputs);
  const double tol = tolerance(t);

  TensorData got;
  ASSERT_TRUE(gputest::run_direct(detail::cuda_max_pool, OpKind::MaxPool2d, d, {x}, want[0].type(), got));
  gputest::expect_close(got, want[0], 0, what + " max_pool2d (direct)");
  if (grad) {
    ASSERT_TRUE(gputest::run_direct(detail::cuda_max_pool, OpKind::MaxPool2dGrad, d, {dy, x}, want[3].type(), got));
    gputest::expect_close(got, want[3], tol, what + " max_pool2d_grad (direct)");
  }
  Executable exe = g.compile(feeds, outs, {}, {.device = Device::cuda(0), .optimize = false});
  for (int run = 0; run < 2; ++run) {
    const std::vector<TensorData> out = exe.run(inputs);
    ASSERT_EQ(out.size(), want.size());
    for (size_t i = 0; i < out.size(); ++i)
      gputest::expect_close(out[i], want[i], i == 3 ? tol : 0, what + " output " + std::to_string(i));
  }
  const auto stats = detail::cuda_graph_stats(exe.impl());
  EXPECT_EQ(stats.error, "") << what << ": an op fell back to the CPU or broke capture";
  EXPECT_EQ(stats.captures, 1) << what;
}

}  // namespace

TEST(CudaMaxPool, MatchesCpu) {
  for (const Case& k : kCases)
    for (Layout l : {Layout::nhwc, Layout::nchw})
      for (int64_t c : {16, 5})  // 16: the vector path of every dtype in NHWC; 5: one channel a thread
        for (DType t : {f32, f16, bf16, f64, i32}) {
          PoolDesc d = k.d;
          d.data_layout = l;
          const Shape xs = l == Layout::nhwc ? Shape{k.n, k.h, k.w, c} : Shape{k.n, c, k.h, k.w};
          check(k.name + (l == Layout::nhwc ? " nhwc C" : " nchw C") + std::to_string(c) + " " + dtype_name(t), xs, d,
                t);
        }
}

// A NaN wins its windows (and keeps them), and receives their gradient.
TEST(CudaMaxPool, NanWins) {
  PoolDesc d = explicit_pool({3, 3}, {2, 2}, {1, 1, 1, 1}, false);
  d.data_layout = Layout::nhwc;
  for (DType t : {f32, bf16}) check(std::string("nan nhwc ") + dtype_name(t), Shape{2, 9, 8, 16}, d, t, true);
}

// The stem of ResNet-50 at batch 4, more elements than one grid of the grid-stride loop covers.
TEST(CudaMaxPool, ResNetStem) {
  PoolDesc d = explicit_pool({3, 3}, {2, 2}, {1, 1, 1, 1}, false);
  d.data_layout = Layout::nhwc;
  check("stem bf16", Shape{4, 112, 112, 64}, d, bf16);
}
