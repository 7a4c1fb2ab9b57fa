// cuDNN convolution and pooling (backends/cuda/cudnn_conv.cpp, cudnn_pool.cpp) against the CPU
// backend on random inputs; max pooling, which runs in our kernels (cuda_max_pool.cpp), beside
// average pooling in the same cases. Each case is run two ways:
//   - directly through cudnn_conv / cudnn_pool / cuda_max_pool, asserting that it covers it (returns true)
//     or declines it (returns false, the cases it must not take), so a silent fallback cannot
//     pass for coverage;
//   - through the CUDA executor (Graph::compile for Device::cuda(0)).
// Tolerances are relative to the largest |value| of the CPU result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_context.h"
#include "ir/graph_impl.h"
#include "cpp/test_util.h"
#include "gpu/direct_op_util.h"
#include "gpu/gpu_test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;
using tg::detail::Attr;
using tg::detail::OpKind;

namespace {

CompileOptions gpu() { return {.device = Device::cuda(0)}; }
CompileOptions cpu() { return {.device = Device::cpu()}; }

double tolerance(DType t) { return t == bf16 ? 3e-2 : t == f16 ? 5e-3 : 1e-4; }

TensorData rnd(Shape s, DType t, uint64_t seed) { return TensorData::uniform(std::move(s), -1, 1, t, seed); }

// Values k/128, |k| <= 125 (exact in f16 and bf16), distinct among any 251 consecutive flat
// indices, so no pooling window below has tied maxima: which tied maximum gets the gradient
// is not something to compare.
TensorData distinct(Shape s, DType t) {
  TensorData d(std::move(s), t);
  for (int64_t i = 0; i < d.num_elements(); ++i) d.set(i, static_cast<double>((i * 37) % 251 - 125) / 128.0);
  return d;
}

void expect_close(const TensorData& got, const TensorData& want, double tol, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  double scale = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) scale = std::max(scale, std::abs(want.at(i)));
  scale = std::max(scale, 1e-6);
  double worst = 0;
  int64_t worst_at = -1;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double w = want.at(i), g = got.at(i);
    if (std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << what << " at " << i;
      continue;
    }
    double e = std::isnan(g) ? INFINITY : std::abs(g - w);
    if (e > worst) worst = e, worst_at = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst error at " << worst_at << " (got "
                                << (worst_at >= 0 ? got.at(worst_at) : 0.0) << ", want "
                                << (worst_at >= 0 ? want.at(worst_at) : 0.0) << ", max |want| " << scale << ")";
}

using Build = std::function<Tensor(Graph&, const std::vector<Tensor>&)>;

// The CPU result of the single-op graph `build` on `inputs`.
TensorData run_graph(const Build& build, const std::vector<TensorData>& inputs, const CompileOptions& opts) {
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  Tensor y = build(g, ph);
  return g.compile(feeds, {y}, {}, opts).run(inputs)[0];
}

// Runs the op directly through cudnn_conv / cudnn_pool; returns whether it covered it and,
// if so, its result in `got`.
bool run_direct(OpKind kind, const Attr& attr, const std::vector<TensorData>& inputs, const TensorType& out_type,
                TensorData& got) {
  const bool conv = kind != OpKind::MaxPool2d && kind != OpKind::AvgPool2d && kind != OpKind::MaxPool2dGrad &&
                    kind != OpKind::AvgPool2dGrad;
  const bool max = kind == OpKind::MaxPool2d || kind == OpKind::MaxPool2dGrad;
  return gputest::run_direct(conv ? detail::cudnn_conv : max ? detail::cuda_max_pool : detail::cudnn_pool, kind, attr,
                             inputs, out_type, got);
}

// One case: direct cuDNN call (covered or declined as expected) and the executor, both
// against the CPU backend.
void check(const std::string& what, OpKind kind, const Attr& attr, const Build& build,
           const std::vector<TensorData>& inputs, bool covered = true) {
  SCOPED_TRACE(what);
  DType t = inputs[0].dtype();
  TensorData want = run_graph(build, inputs, cpu());
  TensorData got;
  bool took = run_direct(kind, attr, inputs, want.type(), got);
  EXPECT_EQ(took, covered) << what << (covered ? ": cuDNN declined a case it should cover"
                                               : ": cuDNN took a case it must decline");
  if (took) expect_close(got, want, tolerance(t), what + " (direct)");
  TensorData via_executor = run_graph(build, inputs, gpu());
  expect_close(via_executor, want, tolerance(t), what + " (executor)");
}

// ---- convolution ------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  Shape x, w;  // forward conv's input and weights
  ConvDesc d;
  bool covered = true;
};


using L = Layout;
using P = PaddingStyle;

std::vector<ConvCase> conv_cases() {
  return {
      {"nhwc hwio pad 1", {2, 9, 11, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::explicit_, {1, 1, 1, 1})},
      {"nchw oihw valid", {2, 6, 9, 11}, {8, 6, 3, 3}, gputest::conv_desc(L::nchw, L::oihw)},
      {"nhwc oihw", {2, 9, 11, 6}, {8, 6, 3, 2}, gputest::conv_desc(L::nhwc, L::oihw, {}, {}, P::explicit_, {1, 1, 0, 0})},
      // A 1x1 oihw filter is already in cuDNN's KRSC order for NHWC data: read and written in place.
      {"nhwc oihw 1x1", {2, 9, 11, 16}, {8, 16, 1, 1}, gputest::conv_desc(L::nhwc, L::oihw)},
      {"nhwc oihw 1x1 stride 2", {2, 9, 11, 16}, {24, 16, 1, 1}, gputest::conv_desc(L::nhwc, L::oihw, {2, 2})},
      {"nchw hwio", {2, 6, 9, 11}, {2, 3, 6, 8}, gputest::conv_desc(L::nchw, L::hwio, {}, {}, P::explicit_, {0, 0, 1, 1})},
      {"groups 2 nhwc", {2, 9, 11, 6}, {3, 3, 3, 8}, gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::explicit_, {1, 1, 1, 1}, 2)},
      {"groups 2 nchw", {2, 6, 9, 11}, {8, 3, 3, 3}, gputest::conv_desc(L::nchw, L::oihw, {}, {}, P::valid, {}, 2)},
      {"depthwise x2", {2, 9, 11, 6}, {3, 3, 1, 12}, gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::same, {}, 6)},
      {"depthwise nchw", {2, 6, 9, 11}, {6, 1, 3, 3}, gputest::conv_desc(L::nchw, L::oihw, {}, {}, P::explicit_, {1, 1, 1, 1}, 6)},
      {"stride 2", {2, 10, 11, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::explicit_, {1, 1, 1, 1})},
      {"stride 2,1 nchw", {2, 6, 10, 11}, {8, 6, 3, 3}, gputest::conv_desc(L::nchw, L::oihw, {2, 1})},
      {"dilation 2", {2, 11, 12, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {}, {2, 2}, P::explicit_, {2, 2, 2, 2})},
      {"dilation 2 stride 2 nchw", {2, 6, 13, 12}, {8, 6, 3, 3}, gputest::conv_desc(L::nchw, L::oihw, {2, 2}, {2, 1})},
      {"same even total", {2, 9, 11, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::same)},
      {"same stride 2 even total", {2, 11, 11, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::same)},
      // same_lower with an odd total puts the odd unit before: cuDNN with that padding on both
      // sides gives the same output extent and values.
      {"same_lower odd total", {2, 10, 10, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::same_lower)},
      {"explicit asymmetric harmless", {2, 10, 10, 6}, {3, 3, 6, 8},
       gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::explicit_, {1, 0, 1, 0})},
      // The odd unit after changes the output extent: x is padded explicitly.
      {"same odd total (padded)", {2, 10, 10, 6}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::same)},
      {"explicit asymmetric (padded)", {2, 9, 9, 6}, {3, 3, 6, 8},
       gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::explicit_, {1, 0, 0, 1})},
      {"same even kernel (padded)", {2, 7, 6, 6}, {2, 2, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::same)},
      {"grouped dilated asymmetric nchw (padded)", {2, 4, 9, 8}, {6, 2, 3, 3},
       gputest::conv_desc(L::nchw, L::oihw, {2, 2}, {1, 2}, P::explicit_, {1, 0, 2, 1}, 2)},
  };
}

}  // namespace

TEST(Cudnn, Conv2dForward) {
  for (const ConvCase& c : conv_cases()) {
    for (DType t : {f32, f16, bf16}) {
      if (t != f32 && !c.covered) continue;
      ConvDesc d = c.d;
      check(c.name + " conv2d " + dtype_name(t), OpKind::Conv2d, Attr{d},
            [d](Graph& g, const std::vector<Tensor>& x) { return g.conv2d(x[0], x[1], d); },
            {rnd(c.x, t, 1), rnd(c.w, t, 2)}, c.covered);
    }
  }
}

TEST(Cudnn, Conv2dDataAndWeightGrads) {
  for (const ConvCase& c : conv_cases()) {
    for (DType t : {f32, f16, bf16}) {
      if (t != f32 && !c.covered) continue;
      ConvDesc d = c.d;
      Shape y;
      {
        Graph g;
        y = g.conv2d(g.placeholder(c.x, t), g.placeholder(c.w, t), d).shape();
      }
      Shape xs = c.x, ws = c.w;
      check(c.name + " data grad " + dtype_name(t), OpKind::Conv2dDataGrad, Attr{ConvGradDesc{d, xs.dims()}},
            [d, xs](Graph& g, const std::vector<Tensor>& x) { return g.conv2d_data_grad(x[0], x[1], xs, d); },
            {rnd(y, t, 3), rnd(c.w, t, 4)}, c.covered);
      check(c.name + " weight grad " + dtype_name(t), OpKind::Conv2dWeightGrad, Attr{ConvGradDesc{d, ws.dims()}},
            [d, ws](Graph& g, const std::vector<Tensor>& x) { return g.conv2d_weight_grad(x[0], x[1], ws, d); },
            {rnd(y, t, 5), rnd(c.x, t, 6)}, c.covered);
    }
  }
}

// Input channels below 8 in NHWC f16 / bf16 (an image's 3) are padded with zeros to 8 for
// cuDNN's tensor-core kernels (forward and weight gradient): ResNet-50's stem shape at batch 2,
// both weight layouts, against the CPU, and against the unpadded path
// (TGRAPH_CUDNN_NO_CHANNEL_PAD=1). The padded weight gradient is sliced back to 3 channels.
TEST(Cudnn, StemChannelsPaddedToEight) {
  for (Layout wl : {L::hwio, L::oihw})
    for (DType t : {bf16, f16}) {
      const Shape xs{2, 32, 30, 3}, ws = wl == L::hwio ? Shape{7, 7, 3, 16} : Shape{16, 3, 7, 7};
      const ConvDesc d = gputest::conv_desc(L::nhwc, wl, {2, 2}, {}, P::explicit_, {3, 3, 3, 3});
      Shape y;
      {
        Graph g;
        y = g.conv2d(g.placeholder(xs, t), g.placeholder(ws, t), d).shape();
      }
      const std::string tn = std::string(wl == L::hwio ? " hwio " : " oihw ") + dtype_name(t);
      const std::vector<TensorData> fw{rnd(xs, t, 21), rnd(ws, t, 22)}, wg{rnd(y, t, 23), rnd(xs, t, 24)};
      const Build conv = [d](Graph& g, const std::vector<Tensor>& x) { return g.conv2d(x[0], x[1], d); };
      const Build wgrad = [d, ws](Graph& g, const std::vector<Tensor>& x) {
        return g.conv2d_weight_grad(x[0], x[1], ws, d);
      };
      check("stem conv2d" + tn, OpKind::Conv2d, Attr{d}, conv, fw);
      check("stem weight grad" + tn, OpKind::Conv2dWeightGrad, Attr{ConvGradDesc{d, ws.dims()}}, wgrad, wg);
      TensorData padded_fw, padded_wg, plain_fw, plain_wg;
      ASSERT_TRUE(run_direct(OpKind::Conv2d, Attr{d}, fw, TensorType{run_graph(conv, fw, cpu()).shape(), t}, padded_fw));
      ASSERT_TRUE(run_direct(OpKind::Conv2dWeightGrad, Attr{ConvGradDesc{d, ws.dims()}}, wg, TensorType{ws, t},
                             padded_wg));
      {
      WithSwitches no_pad({{"TGRAPH_CUDNN_NO_CHANNEL_PAD", "1"}});
      ASSERT_TRUE(run_direct(OpKind::Conv2d, Attr{d}, fw, padded_fw.type(), plain_fw));
      ASSERT_TRUE(run_direct(OpKind::Conv2dWeightGrad, Attr{ConvGradDesc{d, ws.dims()}}, wg, padded_wg.type(),
                             plain_wg));
      }
      expect_close(padded_fw, plain_fw, tolerance(t), "stem conv2d padded vs plain" + tn);
      expect_close(padded_wg, plain_wg, tolerance(t), "stem weight grad padded vs plain" + tn);
    }
}

// f64 computes in double (DOUBLE_CONFIG) in the NCHW layout, padded explicitly too.
TEST(Cudnn, Conv2dF64Nchw) {
  for (const ConvDesc& d : {gputest::conv_desc(L::nchw, L::oihw, {}, {}, P::explicit_, {1, 1, 1, 1}),
                            gputest::conv_desc(L::nchw, L::oihw, {2, 2}, {}, P::same),
                            gputest::conv_desc(L::nchw, L::oihw, {2, 2}, {1, 2}, P::explicit_, {1, 0, 2, 1}, 2)}) {
    const Shape xs{2, 4, 9, 8}, ws{6, 4 / d.groups, 3, 3};
    Shape y;
    {
      Graph g;
      y = g.conv2d(g.placeholder(xs, f64), g.placeholder(ws, f64), d).shape();
    }
    const std::string n = "f64 groups " + std::to_string(d.groups) + " stride " + std::to_string(d.stride.empty() ? 1 : d.stride[0]);
    check(n + " conv2d", OpKind::Conv2d, Attr{d},
          [d](Graph& g, const std::vector<Tensor>& x) { return g.conv2d(x[0], x[1], d); },
          {rnd(xs, f64, 1), rnd(ws, f64, 2)});
    check(n + " data grad", OpKind::Conv2dDataGrad, Attr{ConvGradDesc{d, xs.dims()}},
          [d, xs](Graph& g, const std::vector<Tensor>& x) { return g.conv2d_data_grad(x[0], x[1], xs, d); },
          {rnd(y, f64, 3), rnd(ws, f64, 4)});
    check(n + " weight grad", OpKind::Conv2dWeightGrad, Attr{ConvGradDesc{d, ws.dims()}},
          [d, ws](Graph& g, const std::vector<Tensor>& x) { return g.conv2d_weight_grad(x[0], x[1], ws, d); },
          {rnd(y, f64, 5), rnd(xs, f64, 6)});
  }
}

TEST(Cudnn, ConvTranspose2d) {
  struct Case {
    std::string name;
    Shape x, w;
    ConvDesc d;
  };
  ConvDesc op1 = gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::explicit_, {1, 1, 1, 1});
  op1.output_padding = {1, 1};
  std::vector<Case> cases{
      // hwio for conv_transpose: [kh, kw, C_out/groups, C_in].
      {"nhwc hwio stride 2", {2, 5, 6, 8}, {3, 3, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::explicit_, {1, 1, 1, 1})},
      {"nhwc hwio output_padding 1", {2, 5, 6, 8}, {3, 3, 6, 8}, op1},
      // oihw for conv_transpose: [C_in, C_out/groups, kh, kw].
      {"nchw oihw groups 2", {2, 8, 5, 6}, {8, 3, 3, 3}, gputest::conv_desc(L::nchw, L::oihw, {1, 1}, {}, P::valid, {}, 2)},
      {"nhwc oihw dilation 2", {2, 5, 6, 8}, {8, 6, 3, 3}, gputest::conv_desc(L::nhwc, L::oihw, {}, {2, 2})},
      {"same stride 2", {2, 5, 6, 8}, {4, 4, 6, 8}, gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::same)},
  };
  for (const Case& c : cases)
    for (DType t : {f32, f16, bf16}) {
      ConvDesc d = c.d;
      check(c.name + " conv_transpose2d " + dtype_name(t), OpKind::ConvTranspose2d, Attr{d},
            [d](Graph& g, const std::vector<Tensor>& x) { return g.conv_transpose2d(x[0], x[1], d); },
            {rnd(c.x, t, 7), rnd(c.w, t, 8)});
    }
}

TEST(Cudnn, Conv3dAndItsGrads) {
  for (auto [data, weights, pad] : {std::tuple{L::ndhwc, L::dhwio, P::explicit_}, std::tuple{L::ncdhw, L::oidhw, P::explicit_},
                                    std::tuple{L::ndhwc, L::dhwio, P::same}}) {
    bool last = data == L::ndhwc;
    // same with even kernel extents (3, 3, 2) puts the odd unit after: padded explicitly.
    ConvDesc d = pad == P::same ? gputest::conv_desc(data, weights, {}, {}, P::same)
                                : gputest::conv_desc(data, weights, {1, 2, 1}, {}, P::explicit_, {1, 1, 1, 1, 0, 0});
    Shape x = last ? Shape{2, 5, 8, 6, 4} : Shape{2, 4, 5, 8, 6};
    Shape w = last ? Shape{3, 3, 2, 4, 6} : Shape{6, 4, 3, 3, 2};
    std::string n = std::string(last ? "ndhwc" : "ncdhw") + (pad == P::same ? " same" : "");
    check(n + " conv3d", OpKind::Conv3d, Attr{d},
          [d](Graph& g, const std::vector<Tensor>& v) { return g.conv3d(v[0], v[1], d); }, {rnd(x, f32, 1), rnd(w, f32, 2)});
    Shape y;
    {
      Graph g;
      y = g.conv3d(g.placeholder(x, f32), g.placeholder(w, f32), d).shape();
    }
    check(n + " conv3d data grad", OpKind::Conv3dDataGrad, Attr{ConvGradDesc{d, x.dims()}},
          [d, x](Graph& g, const std::vector<Tensor>& v) { return g.conv3d_data_grad(v[0], v[1], x, d); },
          {rnd(y, f32, 3), rnd(w, f32, 4)});
    check(n + " conv3d weight grad", OpKind::Conv3dWeightGrad, Attr{ConvGradDesc{d, w.dims()}},
          [d, w](Graph& g, const std::vector<Tensor>& v) { return g.conv3d_weight_grad(v[0], v[1], w, d); },
          {rnd(y, f32, 5), rnd(x, f32, 6)});
  }
}

// ---- pooling ----------------------------------------------------------------------------------

namespace {

struct PoolCase {
  std::string name;
  Shape x;
  PoolDesc d;
  bool covered = true;  // by cuDNN: avg_pool2d and its gradient (max pooling: our kernels, every case)
};

PoolDesc pdesc(Layout l, std::vector<int64_t> k, std::vector<int64_t> stride = {}, PaddingStyle p = P::explicit_,
               std::vector<int64_t> pad = {}, bool include_pad = false, bool ceil = false,
               std::vector<int64_t> dil = {}) {
  PoolDesc d;
  d.data_layout = l;
  d.kernel = std::move(k);
  d.stride = std::move(stride);
  d.padding = p;
  d.explicit_padding = std::move(pad);
  d.count_include_pad = include_pad;
  d.ceil_mode = ceil;
  d.dilation = std::move(dil);
  return d;
}

std::vector<PoolCase> pool_cases() {
  return {
      {"nhwc k2 default stride", {2, 8, 10, 5}, pdesc(L::nhwc, {2, 2})},
      {"nchw k3 s2 pad 1", {2, 5, 9, 11}, pdesc(L::nchw, {3, 3}, {2, 2}, P::explicit_, {1, 1, 1, 1})},
      {"nhwc k3 s2 pad 1 include pad", {2, 9, 11, 5}, pdesc(L::nhwc, {3, 3}, {2, 2}, P::explicit_, {1, 1, 1, 1}, true)},
      {"nchw k3 s1 same", {2, 5, 9, 11}, pdesc(L::nchw, {3, 3}, {1, 1}, P::same)},
      {"nhwc k2x3 s1x2 valid", {2, 7, 10, 5}, pdesc(L::nhwc, {2, 3}, {1, 2}, P::valid)},
      // ceil_mode that adds no partial window is the floor computation.
      {"ceil mode without partial window", {2, 8, 10, 5}, pdesc(L::nhwc, {2, 2}, {}, P::explicit_, {}, false, true)},
      // Declined.
      {"dilation 2 (declined)", {2, 9, 11, 5}, pdesc(L::nhwc, {2, 2}, {1, 1}, P::explicit_, {}, false, false, {2, 2}),
       false},
      // Average pooling declines (its divisor counts taps).
      {"ceil mode partial window (avg declined)", {2, 9, 11, 5},
       pdesc(L::nhwc, {2, 2}, {}, P::explicit_, {}, false, true), false},
      {"ceil mode partial window nchw (avg declined)", {2, 3, 9, 8},
       pdesc(L::nchw, {2, 2}, {2, 2}, P::explicit_, {}, false, true), false},
      {"asymmetric padding (avg declined)", {2, 9, 9, 5}, pdesc(L::nhwc, {3, 3}, {1, 1}, P::explicit_, {1, 0, 1, 0}),
       false},
      {"same stride 2 after > before (avg declined)", {2, 3, 9, 8}, pdesc(L::nchw, {3, 3}, {2, 2}, P::same), false},
  };
}

}  // namespace

TEST(Cudnn, PoolingAndGrads) {
  for (const PoolCase& c : pool_cases()) {
    for (DType t : {f32, f16, bf16, f64}) {
      if (t != f32 && !c.covered) continue;
      PoolDesc d = c.d;
      Shape y;
      {
        Graph g;
        y = g.max_pool2d(g.placeholder(c.x, t), d).shape();
      }
      std::string tn = dtype_name(t);
      check(c.name + " max_pool2d " + tn, OpKind::MaxPool2d, Attr{d},
            [d](Graph& g, const std::vector<Tensor>& x) { return g.max_pool2d(x[0], d); }, {rnd(c.x, t, 1)});
      check(c.name + " avg_pool2d " + tn, OpKind::AvgPool2d, Attr{d},
            [d](Graph& g, const std::vector<Tensor>& x) { return g.avg_pool2d(x[0], d); }, {rnd(c.x, t, 2)}, c.covered);
      check(c.name + " max_pool2d_grad " + tn, OpKind::MaxPool2dGrad, Attr{d},
            [d](Graph& g, const std::vector<Tensor>& x) { return g.max_pool2d_grad(x[0], x[1], d); },
            {rnd(y, t, 3), distinct(c.x, t)});
      check(c.name + " avg_pool2d_grad " + tn, OpKind::AvgPool2dGrad, Attr{d},
            [d](Graph& g, const std::vector<Tensor>& x) { return g.avg_pool2d_grad(x[0], x[1], d); },
            {rnd(y, t, 5), rnd(c.x, t, 6)}, c.covered);
    }
  }
  // Asymmetric padding [1, 0] whose output extent cuDNN's symmetric padding 1 reproduces:
  // every window ends inside [-1, in + 0), so all are covered, include pad too.
  PoolDesc a = pdesc(L::nhwc, {3, 3}, {2, 2}, P::explicit_, {1, 0, 1, 0}, true);
  for (bool include : {true, false}) {
    a.count_include_pad = include;
    check(std::string("asymmetric harmless avg, include pad ") + (include ? "on" : "off"), OpKind::AvgPool2d,
          Attr{a}, [a](Graph& g, const std::vector<Tensor>& x) { return g.avg_pool2d(x[0], a); },
          {rnd({2, 10, 10, 5}, f32, 9)});
  }
  check("asymmetric harmless max", OpKind::MaxPool2d, Attr{a},
        [a](Graph& g, const std::vector<Tensor>& x) { return g.max_pool2d(x[0], a); }, {rnd({2, 10, 10, 5}, f32, 9)});
  // ceil_mode with padding [1, 0] on 9: 5 windows (as cuDNN's floor with padding 1), the last
  // [7, 10) reaching past in + 0 = 9. count_include_pad divides it by 2 taps per dim, cuDNN by
  // 3: declined; without count_include_pad, and for max, covered.
  PoolDesc c = pdesc(L::nhwc, {3, 3}, {2, 2}, P::explicit_, {1, 0, 1, 0}, true, true);
  check("ceil mode include pad past the padding avg (declined)", OpKind::AvgPool2d, Attr{c},
        [c](Graph& g, const std::vector<Tensor>& x) { return g.avg_pool2d(x[0], c); }, {rnd({2, 9, 9, 5}, f32, 9)},
        false);
  check("ceil mode past the padding max", OpKind::MaxPool2d, Attr{c},
        [c](Graph& g, const std::vector<Tensor>& x) { return g.max_pool2d(x[0], c); }, {rnd({2, 9, 9, 5}, f32, 9)});
  c.count_include_pad = false;
  check("ceil mode past the padding avg, exclude pad", OpKind::AvgPool2d, Attr{c},
        [c](Graph& g, const std::vector<Tensor>& x) { return g.avg_pool2d(x[0], c); }, {rnd({2, 9, 9, 5}, f32, 9)});
  Shape yc;
  {
    Graph g;
    yc = g.avg_pool2d(g.placeholder({2, 9, 9, 5}, f32), c).shape();
  }
  check("ceil mode past the padding avg grad, exclude pad", OpKind::AvgPool2dGrad, Attr{c},
        [c](Graph& g, const std::vector<Tensor>& x) { return g.avg_pool2d_grad(x[0], x[1], c); },
        {rnd(yc, f32, 12), rnd({2, 9, 9, 5}, f32, 13)});
  check("ceil mode past the padding max grad", OpKind::MaxPool2dGrad, Attr{c},
        [c](Graph& g, const std::vector<Tensor>& x) { return g.max_pool2d_grad(x[0], x[1], c); },
        {rnd(yc, f32, 14), distinct({2, 9, 9, 5}, f32)});
  // Integers: max_pool2d of i32 (our kernel).
  PoolDesc k2 = pdesc(L::nhwc, {2, 2});
  TensorData xi = TensorData::uniform({2, 8, 8, 3}, -100, 100, i32, 10);
  check("i32 max_pool2d", OpKind::MaxPool2d, Attr{k2},
        [k2](Graph& g, const std::vector<Tensor>& x) { return g.max_pool2d(x[0], k2); }, {xi});
}

TEST(Cudnn, MaxPoolPaddingIsNotACandidateAndNanWins) {
  // All-negative input: a padded zero must never be the max.
  PoolDesc d = pdesc(L::nchw, {3, 3}, {2, 2}, P::explicit_, {1, 1, 1, 1});
  TensorData x = TensorData::uniform({1, 2, 7, 7}, -3, -1, f32, 11);
  x.set(5, NAN);
  check("negative input with padding, one NaN", OpKind::MaxPool2d, Attr{d},
        [d](Graph& g, const std::vector<Tensor>& v) { return g.max_pool2d(v[0], d); }, {x});
}
