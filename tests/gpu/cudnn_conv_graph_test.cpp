// Half-precision convolutions through cuDNN's graph API (backends/cuda/cudnn_conv_graph.cpp):
// each case asserts the graph API ran it (its execution counter moved) and compares it with the
// legacy calls (TGRAPH_CUDNN_LEGACY=1) and the CPU; one executable over batch sizes (a known
// engine reused, one taken provisionally and asked again after the run) against the CPU; and the
// engines travelling with a saved executable.
#include "backends/cuda/cudnn_conv_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/library_plans.h"
#include "cpp/test_util.h"
#include "gpu/direct_op_util.h"
#include "gpu/gpu_test_util.h"
#include "ir/graph_impl.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;
using tg::detail::Attr;
using tg::detail::OpKind;

namespace {

double tolerance(DType t) { return t == bf16 ? 3e-2 : 5e-3; }

// The largest |got - want| relative to the largest |want|.
double rel_error(const TensorData& got, const TensorData& want) {
  double scale = 1e-6, worst = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) scale = std::max(scale, std::abs(want.at(i)));
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double e = std::abs(got.at(i) - want.at(i));
    worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  }
  return worst / scale;
}

TensorData on_cpu(const std::function<Tensor(Graph&, const std::vector<Tensor>&)>& build,
                  const std::vector<TensorData>& inputs) {
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  Tensor y = build(g, ph);
  return g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(inputs)[0];
}

struct Case {
  std::string name;
  Shape x, w;
  ConvDesc d;
  bool nd3 = false;
};

using L = Layout;
using P = PaddingStyle;

}  // namespace

// Forward, data and weight gradients of ResNet-like and awkward convolutions, f16 and bf16: the
// graph API runs each (the counter moves by one per call), within the type's rounding of the CPU
// and of the legacy calls.
TEST(CudnnGraph, HalfConvolutionsRunThroughKeptPlansAndMatchTheLegacyCalls) {
  const std::vector<Case> cases = {
      {"3x3 pad 1 nhwc",
       {2, 14, 12, 16},
       {3, 3, 16, 32},
       gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::explicit_, {1, 1, 1, 1})},
      {"1x1 oihw nhwc", {2, 14, 12, 32}, {64, 32, 1, 1}, gputest::conv_desc(L::nhwc, L::oihw)},
      {"3x3 stride 2 nhwc",
       {2, 15, 14, 16},
       {3, 3, 16, 24},
       gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::explicit_, {1, 1, 1, 1})},
      {"stem 7x7 stride 2, 3 channels (padded to 8)",
       {2, 32, 30, 3},
       {7, 7, 3, 16},
       gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::explicit_, {3, 3, 3, 3})},
      {"nchw oihw valid", {2, 8, 9, 11}, {16, 8, 3, 3}, gputest::conv_desc(L::nchw, L::oihw)},
      {"grouped 2 nhwc",
       {2, 9, 11, 16},
       {3, 3, 8, 16},
       gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::explicit_, {1, 1, 1, 1}, 2)},
      {"dilation 2 nhwc",
       {2, 11, 12, 8},
       {3, 3, 8, 16},
       gputest::conv_desc(L::nhwc, L::hwio, {}, {2, 2}, P::explicit_, {2, 2, 2, 2})},
      {"same odd total stride 2 (x padded)",
       {2, 10, 10, 8},
       {3, 3, 8, 16},
       gputest::conv_desc(L::nhwc, L::hwio, {2, 2}, {}, P::same)},
      {"conv3d ndhwc",
       {2, 5, 8, 6, 8},
       {3, 3, 3, 8, 16},
       gputest::conv_desc(L::ndhwc, L::dhwio, {1, 2, 1}, {}, P::explicit_, {1, 1, 1, 1, 1, 1}),
       true},
  };
  for (const Case& c : cases)
    for (DType t : {f16, bf16}) {
      const ConvDesc d = c.d;
      Shape ys;
      {
        Graph g;
        Tensor x = g.placeholder(c.x, t), w = g.placeholder(c.w, t);
        ys = (c.nd3 ? g.conv3d(x, w, d) : g.conv2d(x, w, d)).shape();
      }
      const Shape xs = c.x, wsh = c.w;
      const OpKind fwd = c.nd3 ? OpKind::Conv3d : OpKind::Conv2d;
      const OpKind dgrad = c.nd3 ? OpKind::Conv3dDataGrad : OpKind::Conv2dDataGrad;
      const OpKind wgrad = c.nd3 ? OpKind::Conv3dWeightGrad : OpKind::Conv2dWeightGrad;
      struct Dir {
        const char* name;
        OpKind kind;
        Attr attr;
        std::vector<TensorData> in;
        Shape out;
        std::function<Tensor(Graph&, const std::vector<Tensor>&)> build;
      };
      const bool nd3 = c.nd3;
      const std::vector<Dir> dirs = {
          {"forward",
           fwd,
           Attr{d},
           {TensorData::uniform(xs, -1, 1, t, 1), TensorData::uniform(wsh, -1, 1, t, 2)},
           ys,
           [d, nd3](Graph& g, const std::vector<Tensor>& v) {
             return nd3 ? g.conv3d(v[0], v[1], d) : g.conv2d(v[0], v[1], d);
           }},
          {"data grad",
           dgrad,
           Attr{ConvGradDesc{d, xs.dims()}},
           {TensorData::uniform(ys, -1, 1, t, 3), TensorData::uniform(wsh, -1, 1, t, 4)},
           xs,
           [d, xs, nd3](Graph& g, const std::vector<Tensor>& v) {
             return nd3 ? g.conv3d_data_grad(v[0], v[1], xs, d) : g.conv2d_data_grad(v[0], v[1], xs, d);
           }},
          {"weight grad",
           wgrad,
           Attr{ConvGradDesc{d, wsh.dims()}},
           {TensorData::uniform(ys, -1, 1, t, 5), TensorData::uniform(xs, -1, 1, t, 6)},
           wsh,
           [d, wsh, nd3](Graph& g, const std::vector<Tensor>& v) {
             return nd3 ? g.conv3d_weight_grad(v[0], v[1], wsh, d) : g.conv2d_weight_grad(v[0], v[1], wsh, d);
           }},
      };
      for (const Dir& dir : dirs) {
        const std::string what = c.name + " " + dir.name + " " + dtype_name(t);
        SCOPED_TRACE(what);
        const TensorData want = on_cpu(dir.build, dir.in);
        TensorData graph_api, legacy;
        const int64_t before = detail::graph_conv_executions();
        ASSERT_TRUE(gputest::run_direct(detail::cudnn_conv, dir.kind, dir.attr, dir.in,
                                        TensorType{dir.out, t}, graph_api));
        EXPECT_EQ(detail::graph_conv_executions() - before, 1) << "the graph API did not run it";
        {
          WithSwitches legacy_calls({{"TGRAPH_CUDNN_LEGACY", "1"}});
          ASSERT_TRUE(gputest::run_direct(detail::cudnn_conv, dir.kind, dir.attr, dir.in,
                                          TensorType{dir.out, t}, legacy));
        }
        EXPECT_LE(rel_error(graph_api, want), tolerance(t)) << "against the CPU";
        EXPECT_LE(rel_error(graph_api, legacy), tolerance(t)) << "against the legacy calls";
        // Again: the kept plan.
        TensorData again;
        ASSERT_TRUE(gputest::run_direct(detail::cudnn_conv, dir.kind, dir.attr, dir.in,
                                        TensorType{dir.out, t}, again));
        EXPECT_EQ(rel_error(again, graph_api), 0.0) << "the kept plan gave other values";
      }
    }
}

// One f16 executable over batch sizes: 3 asks the heuristics; 12 (4x) builds 3's engines; 13
// (4.3x from 3) and 60 (4.6x from 13) take an engine provisionally in their first run and ask
// the heuristics after it; each run (the first, op by op, and the captured second) against the
// CPU.
TEST(CudnnGraph, OneExecutableAtEveryBatchSizeMatchesTheCpu) {
  const gputest::FreshCacheDir cache("conv-graph");
  Graph g;
  Tensor x = g.placeholder(Shape({-1, 10, 14, 8}), DType::f16, "x");
  auto weights = [&](uint64_t seed) {
    return g.constant(TensorData::uniform({3, 3, 8, 8}, -0.3, 0.3, DType::f16, seed));
  };
  ConvDesc same;
  same.padding = PaddingStyle::same;
  ConvDesc s2 = same;
  s2.stride = {2, 2};
  Tensor y =
      g.conv2d(g.relu(g.conv2d(g.relu(g.conv2d(x, weights(1), same)), weights(2), same)), weights(3), s2);
  const std::vector<std::pair<Tensor, TensorType>> feeds = {
      {x, TensorType(Shape({-1, 10, 14, 8}), DType::f16)}};
  Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
  Executable cpu = g.compile(feeds, {y}, {}, {.device = Device::cpu()});
  for (int64_t b : {3, 12, 13, 60, 1, 13}) {
    const TensorData in =
        TensorData::uniform({b, 10, 14, 8}, -1, 1, DType::f16, 40 + static_cast<uint64_t>(b));
    const TensorData want = cpu.run({in})[0];
    for (int run = 0; run < 3; ++run) {
      const int64_t before = detail::graph_conv_executions();
      const TensorData got = e.run({in})[0];
      EXPECT_LE(rel_error(got, want), 5e-3) << "batch " << b << " run " << run;
      if (run == 0 && b != 13) EXPECT_GE(detail::graph_conv_executions() - before, 3) << "batch " << b;
    }
  }
}

// The engines a run chose travel with a saved executable (kind "convg") under this process's
// signature; a load runs right with them, and a malformed one is ignored.
TEST(CudnnGraph, EnginesTravelWithTheFile) {
  Graph g;
  Tensor x = g.placeholder(Shape({2, 12, 12, 8}), DType::bf16, "x");
  ConvDesc same;
  same.padding = PaddingStyle::same;
  Tensor y =
      g.relu(g.conv2d(x, g.constant(TensorData::uniform({3, 3, 8, 16}, -0.3, 0.3, DType::bf16, 7)), same));
  const std::vector<std::pair<Tensor, TensorType>> feeds = {
      {x, TensorType(Shape({2, 12, 12, 8}), DType::bf16)}};
  Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
  Executable cpu = g.compile(feeds, {y}, {}, {.device = Device::cpu()});
  const TensorData in = TensorData::uniform({2, 12, 12, 8}, -1, 1, DType::bf16, 8);
  const TensorData want = cpu.run({in})[0];
  EXPECT_LE(rel_error(e.run({in})[0], want), 3e-2);
  const std::string path = (std::filesystem::temp_directory_path() / "tgraph_conv_graph.tgx").string();
  e.save(path);
  Executable l = Executable::load(path);
  const std::map<std::string, std::string> plans = gputest::library_plans_of(l);
  int convg = 0;
  for (const auto& [key, value] : plans)
    if (key.find("|convg|") != std::string::npos) {
      ++convg;
      EXPECT_EQ(value.rfind("g ", 0), 0u) << value;
    }
  EXPECT_GE(convg, 1);
  const std::string sig = detail::library_signature(0) + "|";
  detail::provide_library_plans({{sig + "convg|garbage|n2", "g x y"}, {sig + "convg|also|n2", "q 1 -"}}, 0);
  EXPECT_LE(rel_error(l.run({in})[0], want), 3e-2);
  std::filesystem::remove(path);
}

// The plans kept are bounded (the least recently used goes): with room for 2, three problems in
// turn keep 2, and each evicted one is built again and gives the same values.
TEST(CudnnGraph, PlansKeptAreBoundedAndAnEvictedOneIsBuiltAgain) {
  struct Restore {
    ~Restore() { detail::graph_conv_plans_kept(2048); }
  } restore;
  detail::graph_conv_plans_kept(2);
  const ConvDesc d = gputest::conv_desc(L::nhwc, L::hwio, {}, {}, P::explicit_, {1, 1, 1, 1});
  std::vector<TensorData> first;
  for (int round = 0; round < 2; ++round)
    for (int64_t c : {8, 16, 24}) {
      const std::vector<TensorData> in = {
          TensorData::uniform({1, 6, 7, c}, -1, 1, f16, 60 + static_cast<uint64_t>(c)),
          TensorData::uniform({3, 3, c, 8}, -1, 1, f16, 70 + static_cast<uint64_t>(c))};
      TensorData got;
      const int64_t before = detail::graph_conv_executions();
      ASSERT_TRUE(gputest::run_direct(detail::cudnn_conv, OpKind::Conv2d, Attr{d}, in,
                                      TensorType{Shape{1, 6, 7, 8}, f16}, got));
      EXPECT_EQ(detail::graph_conv_executions() - before, 1);
      EXPECT_LE(detail::graph_conv_plans_kept(), 2u);
      if (round == 0) {
        EXPECT_LE(
            rel_error(
                got,
                on_cpu([d](Graph& g, const std::vector<Tensor>& v) { return g.conv2d(v[0], v[1], d); }, in)),
            tolerance(f16));
        first.push_back(got);
      } else {
        EXPECT_EQ(rel_error(got, first[static_cast<size_t>(c / 8 - 1)]), 0.0) << "channels " << c;
      }
    }
}

// f32 compiled with TF32 allowed takes the graph API too (forward and both gradients of a
// training step's convolution); exact f32 keeps the legacy calls (FMA-only algorithms).
TEST(CudnnGraph, Tf32ConvolutionsTakeTheGraphApiExactF32DoesNot) {
  Graph g;
  Tensor x = g.placeholder(Shape({2, 12, 10, 16}), DType::f32, "x");
  Tensor w = g.placeholder(Shape({3, 3, 16, 16}), DType::f32, "w");
  ConvDesc same;
  same.padding = PaddingStyle::same;
  Tensor loss = g.reduce_sum(g.square(g.conv2d(x, w, same)));
  const auto grads = g.gradients(loss, {x, w});
  const Tensor dw = grads.at(w), dx = grads.at(x);
  const std::vector<std::pair<Tensor, TensorType>> feeds = {
      {x, TensorType(Shape({2, 12, 10, 16}), DType::f32)},
      {w, TensorType(Shape({3, 3, 16, 16}), DType::f32)}};
  const std::vector<TensorData> in = {TensorData::uniform({2, 12, 10, 16}, -1, 1, DType::f32, 12),
                                      TensorData::uniform({3, 3, 16, 16}, -0.3, 0.3, DType::f32, 11)};
  const std::vector<TensorData> want = g.compile(feeds, {dw, dx}, {}, {.device = Device::cpu()}).run(in);
  for (Precision p : {Precision::tf32, Precision::f32}) {
    Executable e = g.compile(feeds, {dw, dx}, {}, {.device = Device::cuda(0), .precision = p});
    const int64_t before = detail::graph_conv_executions();
    const std::vector<TensorData> got = e.run(in);
    const int64_t ran = detail::graph_conv_executions() - before;
    if (p == Precision::tf32) {
      EXPECT_GE(ran, 3) << "forward, data and weight gradients through the graph API";
      EXPECT_LE(rel_error(got[0], want[0]), 1e-2);
      EXPECT_LE(rel_error(got[1], want[1]), 1e-2);
    } else {
      EXPECT_EQ(ran, 0) << "exact f32 took the graph API";
      EXPECT_LE(rel_error(got[0], want[0]), 1e-5);
      EXPECT_LE(rel_error(got[1], want[1]), 1e-5);
    }
  }
}
