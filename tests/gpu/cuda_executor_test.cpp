// The CUDA executor against the CPU backend on random inputs: fused and unfused elementwise
// chains in f32/f16/bf16, matmul through cuBLASLt, ops that fall back to the CPU, variables,
// control flow, dynamic shapes, and out-of-memory errors.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdlib>
#include <string>

#include <unistd.h>


#include "backends/cuda/nvrtc_compiler.h"
#include "runtime/size_classes.h"
#include "gpu/gpu_test_util.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

CompileOptions gpu(bool dynamic = false) { return {.device = Device::cuda(0), .disable_type_inference = dynamic}; }
CompileOptions cpu(bool dynamic = false) { return {.device = Device::cpu(), .disable_type_inference = dynamic}; }

double tolerance(DType t) { return t == bf16 ? 2e-2 : t == f16 ? 2e-3 : t == f64 ? 1e-12 : 2e-5; }

using gputest::expect_close;

// Builds the same graph twice, runs it on both devices, compares every target.
template <class Build>
void differential(const std::string& what, Build build, const std::vector<TensorData>& inputs, double tol,
                  bool dynamic = false) {
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs, dynamic);
  std::vector<Tensor> outs = build(g, ph);
  auto want = g.compile(feeds, outs, {}, cpu(dynamic)).run(inputs);
  auto got = g.compile(feeds, outs, {}, gpu(dynamic)).run(inputs);
  for (size_t i = 0; i < outs.size(); ++i) expect_close(got[i], want[i], tol, what + " output " + std::to_string(i));
}

TensorData rnd(Shape s, DType t, uint64_t seed, double lo = -2, double hi = 2) {
  return TensorData::uniform(std::move(s), lo, hi, t, seed);
}

}  // namespace

TEST(CudaExecutor, ElementwiseChainsAllFloatTypes) {
  for (DType t : {f32, f16, bf16, f64}) {
    differential(std::string("gelu chain ") + dtype_name(t),
                 [](Graph& g, auto& x) {
                   return std::vector{g.mul(g.gelu(g.add(g.mul(x[0], x[1]), x[2])), x[1]),
                                      g.sigmoid(g.tanh(x[0])), g.relu(g.sub(x[0], x[2]))};
                 },
                 {rnd({64, 33}, t, 1), rnd({64, 33}, t, 2), rnd({33}, t, 3)}, tolerance(t) * 4);
  }
}

// Vector kernels (elementwise_vector_width: 8, 4 or 2 outputs a thread) beside the scalar
// kernel: NHWC activations with per-channel, per-pixel and scalar operands for C = 64, 12, 6
// and 7, a flat chain, a comparison stored as bool, integers and f16.
TEST(CudaExecutor, VectorKernelsMatchTheCpu) {
  uint64_t seed = 70;
  for (int64_t c : {64, 12, 6, 7})
    for (DType t : {bf16, f32}) {
      differential("nhwc C=" + std::to_string(c) + " " + dtype_name(t),
                   [&](Graph& g, auto& x) {
                     Tensor y = g.add(g.mul(g.cast(x[0], f32), x[1]), g.mul(x[2], g.scalar(0.5)));
                     return std::vector{g.cast(g.relu(y), t), g.greater(y, x[1]), g.sub(x[0], g.cast(x[1], t))};
                   },
                   {rnd({3, 5, 4, c}, t, seed++), rnd({c}, f32, seed++), rnd({3, 5, 4, 1}, f32, seed++)},
                   tolerance(t) * 2);
    }
  differential("flat f16", [](Graph& g, auto& x) { return std::vector{g.tanh(g.mul(x[0], x[1]))}; },
               {rnd({1000}, f16, 80), rnd({1000}, f16, 81)}, tolerance(f16) * 2);
  differential("i32", [](Graph& g, auto& x) { return std::vector{g.add(g.mul(x[0], x[1]), x[1])}; },
               {TensorData::uniform({40, 16}, -100, 100, i32, 82), TensorData::uniform({16}, -100, 100, i32, 83)}, 0);
}

// Batch norm's normalisation over NHWC activations large enough that each thread of the
// vector kernel takes several steps of its grid-stride loop: per-channel operands loaded once a
// thread where 256 * 8 is a multiple of the channels (StridePattern::hoist_inner: C = 256,
// 2048), every step where it is not (C = 96), beside a per-pixel operand loaded every step.
TEST(CudaExecutor, PerChannelOperandsOverManyStepsMatchTheCpu) {
  uint64_t seed = 90;
  for (int64_t c : {256, 96, 2048}) {
    const int64_t pixels = 8 * 56 * 56 * 256 / c;  // ~6.4 M elements, ~3 steps a thread
    differential("bn apply C=" + std::to_string(c),
                 [](Graph& g, auto& x) {
                   Tensor xf = g.cast(x[0], f32);
                   Tensor y = g.add(g.mul(g.mul(g.sub(xf, x[1]), x[2]), x[3]), x[4]);
                   return std::vector{g.cast(g.relu(y), bf16), g.cast(g.mul(y, x[5]), bf16)};
                 },
                 {rnd({pixels, 1, 1, c}, bf16, seed++), rnd({c}, f32, seed++), rnd({c}, f32, seed++, 0.5, 2),
                  rnd({c}, f32, seed++), rnd({c}, f32, seed++), rnd({pixels, 1, 1, 1}, f32, seed++)},
                 tolerance(bf16) * 2);
  }
}

TEST(CudaExecutor, EveryGeneratedUnaryOp) {
  using Fn = Tensor (Graph::*)(Tensor);
  const std::pair<const char*, Fn> ops[] = {
      {"neg", &Graph::neg},     {"abs", &Graph::abs},       {"sign", &Graph::sign},   {"exp", &Graph::exp},
      {"exp2", &Graph::exp2},   {"expm1", &Graph::expm1},   {"square", &Graph::square}, {"sin", &Graph::sin},
      {"cos", &Graph::cos},     {"tan", &Graph::tan},       {"sinh", &Graph::sinh},   {"cosh", &Graph::cosh},
      {"tanh", &Graph::tanh},   {"atan", &Graph::atan},     {"asinh", &Graph::asinh}, {"erf", &Graph::erf},
      {"floor", &Graph::floor}, {"ceil", &Graph::ceil},     {"round", &Graph::round}, {"rint", &Graph::rint},
      {"trunc", &Graph::trunc}, {"sigmoid", &Graph::sigmoid}, {"relu", &Graph::relu}, {"gelu", &Graph::gelu},
      {"gelu_tanh", &Graph::gelu_tanh}, {"silu", &Graph::silu}, {"softplus", &Graph::softplus}};
  for (const auto& [name, fn] : ops) {
    differential(name, [fn = fn](Graph& g, auto& x) { return std::vector{(g.*fn)(x[0])}; }, {rnd({1000}, f32, 7, -3, 3)},
                 1e-5);
  }
  differential("log family", [](Graph& g, auto& x) {
    return std::vector{g.log(x[0]), g.log2(x[0]), g.log1p(x[0]), g.sqrt(x[0]), g.rsqrt(x[0]), g.reciprocal(x[0]),
                       g.acosh(g.add(x[0], g.scalar(1.0)))};
  }, {rnd({1000}, f32, 8, 0.1, 4)}, 1e-5);
  differential("binary", [](Graph& g, auto& x) {
    return std::vector{g.div(x[0], x[1]), g.pow(g.abs(x[0]), x[1]), g.minimum(x[0], x[1]), g.maximum_nan(x[0], x[1]),
                       g.atan2(x[0], x[1]), g.mod(x[0], x[1]), g.floor_mod(x[0], x[1]),
                       g.cast(g.less(x[0], x[1]), f32), g.select(g.greater(x[0], x[1]), x[0], x[1]),
                       g.clamp(x[0], g.scalar(-0.5), g.scalar(0.7)), g.leaky_relu(x[0], 0.1), g.elu(x[0], 0.5),
                       g.hard_sigmoid(x[0])};
  }, {rnd({500}, f32, 9), rnd({500}, f32, 10, 0.5, 2)}, 1e-5);
  differential("integers and casts", [](Graph& g, auto& x) {
    Tensor i = g.cast(g.mul(x[0], g.scalar(100.0)), i32);
    Tensor j = g.cast(g.add(g.mul(x[1], g.scalar(7.0)), g.scalar(1.0)), i32);
    return std::vector{g.div(i, j), g.mod(i, j), g.floor_mod(i, j), g.cast(i, i8), g.bitwise_xor(i, j),
                       g.cast(g.cast(x[0], f16), f32), g.logical_not(g.equal(i, j))};
  }, {rnd({300}, f32, 11), rnd({300}, f32, 12)}, 0);
}

TEST(CudaExecutor, FusionOffGivesTheSameNumbers) {
  auto build = [](Graph& g, auto& x) { return std::vector{g.mul(g.gelu(g.add(g.mul(x[0], x[1]), x[1])), x[0])}; };
  std::vector<TensorData> in{rnd({4096}, f32, 1), rnd({4096}, f32, 2)};
  Graph g;
  Tensor a = g.placeholder({4096}, f32), b = g.placeholder({4096}, f32);
  std::vector<Tensor> ab{a, b};
  Tensor y = build(g, ab)[0];
  auto fused = g.compile({{a, a.type()}, {b, b.type()}}, {y}, {}, gpu()).run(in);
  CompileOptions no_fusion = gpu();
  no_fusion.switches = {{"TGRAPH_NO_FUSION", "1"}};
  auto unfused = g.compile({{a, a.type()}, {b, b.type()}}, {y}, {}, no_fusion).run(in);
  // Equal up to FMA contraction inside the fused kernel (a few ulp).
  for (int64_t i = 0; i < 4096; ++i)
    ASSERT_NEAR(fused[0].at(i), unfused[0].at(i), 4e-7 * (1 + std::abs(unfused[0].at(i)))) << i;
}

// A bf16 chain in one kernel keeps float between its ops (docs/decisions.md: excess
// precision), so it lands nearer the exact result than the same ops rounded one by one;
// TGRAPH_ROUND_HALF_OPS=1 gives the unfused ops' bits exactly.
TEST(CudaExecutor, HalfChainsKeepFloatInsideAKernel) {
  const int64_t n = 4096;
  std::vector<TensorData> in{rnd({n}, bf16, 31), rnd({n}, bf16, 32), rnd({n}, bf16, 33)};
  Graph g;
  Tensor x = g.placeholder({n}, bf16), y = g.placeholder({n}, bf16), z = g.placeholder({n}, bf16);
  Tensor out = g.sub(g.mul(g.add(g.mul(x, y), z), x), g.mul(y, z));
  const std::vector<std::pair<Tensor, TensorType>> feeds{{x, x.type()}, {y, y.type()}, {z, z.type()}};
  CompileOptions rounded = gpu();
  rounded.switches = {{"TGRAPH_ROUND_HALF_OPS", "1"}};
  CompileOptions unfused = gpu();
  unfused.switches = {{"TGRAPH_NO_FUSION", "1"}};
  TensorData fast = g.compile(feeds, {out}, {}, gpu()).run(in)[0];
  TensorData per_op = g.compile(feeds, {out}, {}, rounded).run(in)[0];
  TensorData plain = g.compile(feeds, {out}, {}, unfused).run(in)[0];
  double err_fast = 0, err_plain = 0;
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(per_op.at(i), plain.at(i)) << i;
    const double a = in[0].at(i), b = in[1].at(i), c = in[2].at(i);
    const double exact = (a * b + c) * a - b * c;
    err_fast += std::abs(fast.at(i) - exact);
    err_plain += std::abs(plain.at(i) - exact);
    differ += fast.at(i) != plain.at(i);
    ASSERT_NEAR(fast.at(i), exact, 1e-2 * (1 + std::abs(exact))) << i;
  }
  EXPECT_GT(differ, 0);
  EXPECT_LT(err_fast, err_plain);
}

TEST(CudaExecutor, MatmulThroughCublasLt) {
  for (DType t : {f32, f16, bf16}) {
    double tol = t == f32 ? 1e-4 : t == f16 ? 5e-3 : 3e-2;
    differential("mm", [](Graph& g, auto& x) { return std::vector{g.matmul(x[0], x[1])}; },
                 {rnd({37, 64}, t, 1, -1, 1), rnd({64, 29}, t, 2, -1, 1)}, tol);
    differential("mm t", [](Graph& g, auto& x) { return std::vector{g.matmul(x[0], x[1], true, true)}; },
                 {rnd({64, 37}, t, 1, -1, 1), rnd({29, 64}, t, 2, -1, 1)}, tol);
    differential("batched", [](Graph& g, auto& x) { return std::vector{g.matmul(x[0], x[1])}; },
                 {rnd({3, 17, 32}, t, 3, -1, 1), rnd({32, 8}, t, 4, -1, 1)}, tol);
  }
}

TEST(CudaExecutor, FallbackOpsVariablesControlFlowDynamicShapes) {
  differential("softmax and reductions (CPU fallback)", [](Graph& g, auto& x) {
    return std::vector{g.softmax(x[0]), g.reduce_mean(g.exp(x[0]), {1}), g.reshape(x[0], {-1})};
  }, {rnd({8, 16}, f32, 5)}, 1e-5);
  differential("dynamic", [](Graph& g, auto& x) {
    return std::vector{g.add(g.matmul(x[0], x[1]), x[2])};
  }, {rnd({5, 8}, f32, 1), rnd({8, 3}, f32, 2), rnd({3}, f32, 3)}, 1e-5, true);

  Graph g;
  Tensor w = g.variable(TensorData::from_floats({2}, {1, 2}), "w");
  Operation step = g.assign(w, g.mul(w, g.scalar(3.0)));
  Executable e = g.compile({}, {}, {step}, gpu());
  e.run({});
  e.run({});
  EXPECT_EQ(e.variable("w").to_vector(), (std::vector<double>{9, 18}));
  e.set_variable("w", TensorData::from_floats({2}, {1, 1}));
  e.run({});
  EXPECT_EQ(e.variable("w").to_vector(), (std::vector<double>{3, 3}));

  Graph h;
  Tensor x = h.placeholder({2}, f32, "x");
  auto wl = h.while_loop(
      {x}, [](Graph& b, std::vector<Tensor> a) { return std::pair{b.less(b.reduce_sum(a[0]), b.scalar(100.0)), a}; },
      [](Graph& b, std::vector<Tensor> r) { return std::vector{b.mul(r[0], b.scalar(3.0))}; });
  auto r = h.compile({{x, x.type()}}, {wl[0]}, {}, gpu()).run({TensorData::from_floats({2}, {1, 2})});
  EXPECT_EQ(r[0].to_vector(), (std::vector<double>{81, 162}));
}

TEST(CudaExecutor, OutOfMemoryIsAnError) {
  Graph g;
  Tensor x = g.placeholder({4}, f32, "x");
  // 2^40 floats = 4 TiB: far beyond the device.
  Tensor big = g.broadcast_to(g.reshape(x, {4, 1}), {4, int64_t{1} << 38});
  Executable e = g.compile({{x, x.type()}}, {g.exp(big)}, {}, gpu());
  try {
    e.run({rnd({4}, f32, 1)});
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("out of memory"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("requested 4398046511104 bytes"), std::string::npos) << err.what();
  }
  // The device is still usable afterwards.
  auto ok = g.compile({{x, x.type()}}, {g.exp(x)}, {}, gpu()).run({TensorData::from_floats({4}, {0, 0, 0, 0})});
  EXPECT_EQ(ok[0].to_vector(), (std::vector<double>{1, 1, 1, 1}));
}

TEST(CudaExecutor, KernelsAreCachedOnDisk) {
  detail::background_jobs_wait();  // (sizes an earlier test's dynamic executable prepares ahead compile too)
  auto s0 = detail::nvrtc_stats();
  Graph g;
  Tensor x = g.placeholder({16}, f32, "x");
  Tensor y = g.add(g.exp(x), g.scalar(0.123456));
  g.compile({{x, x.type()}}, {y}, {}, gpu()).run({rnd({16}, f32, 1)});
  g.compile({{x, x.type()}}, {y}, {}, gpu()).run({rnd({16}, f32, 1)});
  auto s1 = detail::nvrtc_stats();
  EXPECT_EQ((s1.compiled + s1.disk_hits) - (s0.compiled + s0.disk_hits), 1);  // the second reuses it
  EXPECT_GE(s1.memory_hits - s0.memory_hits, 1);
}

// The first run announces its generated kernels before it launches any (Run::prefetch_kernels):
// they compile on worker threads, each once, and the run's values are those of the CPU.
TEST(CudaExecutor, FirstRunPrefetchesItsKernels) {
  // A kernel cache of its own, empty: no kernel is on disk yet (kernels are named by their
  // structure, so an earlier run of this test would have left them there).
  const char* before = std::getenv("TGRAPH_CACHE_DIR");
  const std::string saved = before ? before : "";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
      ("tgraph-prefetch-" + std::to_string(::getpid()) + "-" +
       std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  ::setenv("TGRAPH_CACHE_DIR", dir.c_str(), 1);
  detail::background_jobs_wait();  // (sizes an earlier test's dynamic executable prepares ahead compile too)
  auto s0 = detail::nvrtc_stats();
  Graph g;
  // four kernels at least: four reductions of four different inputs through four different
  // functions (equal chains would be one kernel; reductions of one input stitch into one)
  std::vector<Tensor> xs, outs;
  std::vector<std::pair<Tensor, TensorType>> feeds;
  std::vector<TensorData> vals;
  for (int k = 0; k < 4; ++k) {
    xs.push_back(g.placeholder({64, 32 + 8 * k}, f32, "x" + std::to_string(k)));
    feeds.push_back({xs[k], xs[k].type()});
    vals.push_back(rnd({64, 32 + 8 * k}, f32, 5 + k));
    Tensor t = g.mul(xs[k], g.scalar(0.01 * k + 0.1));
    Tensor f = k == 0 ? g.exp(t) : k == 1 ? g.tanh(t) : k == 2 ? g.sigmoid(t) : g.abs(t);
    outs.push_back(g.reduce_sum(g.mul(f, g.scalar(1.5 + k)), {1}));
  }
  auto got = g.compile(feeds, outs, {}, gpu()).run(vals);
  auto want = g.compile(feeds, outs, {}, {.device = Device::cpu()}).run(vals);
  TensorData xv = vals[0];
  auto s1 = detail::nvrtc_stats();
  EXPECT_GE(s1.prefetched - s0.prefetched, 4);  // one per output's kernel at least
  EXPECT_GE(s1.compiled - s0.compiled, s1.prefetched - s0.prefetched);
  for (size_t i = 0; i < got.size(); ++i)
    for (int64_t j = 0; j < got[i].num_elements(); ++j) EXPECT_NEAR(got[i].at(j), want[i].at(j), 1e-4 * std::abs(want[i].at(j)) + 1e-5);
  // Turned off, the same kind of graph (new constants) compiles at each launch only.
  CompileOptions no_prefetch = gpu();
  no_prefetch.switches = {{"TGRAPH_NO_KERNEL_PREFETCH", "1"}};
  Graph g2;
  Tensor x2 = g2.placeholder({64, 32}, f32, "x");
  Tensor y2 = g2.reduce_sum(g2.exp(g2.mul(x2, g2.scalar(0.5))), {1});
  auto off = g2.compile({{x2, x2.type()}}, {y2}, {}, no_prefetch).run({xv});
  auto s2 = detail::nvrtc_stats();
  EXPECT_EQ(s2.prefetched, s1.prefetched);
  EXPECT_GE(s2.compiled, s1.compiled + 1);
  if (before) ::setenv("TGRAPH_CACHE_DIR", saved.c_str(), 1);
  else ::unsetenv("TGRAPH_CACHE_DIR");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(CudaExecutor, ReductionsAndSoftmaxOnTheDevice) {
  for (DType t : {f32, f16, bf16}) {
    double tol = tolerance(t) * 10;
    differential(std::string("reductions ") + dtype_name(t), [](Graph& g, auto& x) {
      return std::vector{g.reduce_sum(x[0], {1}), g.reduce_mean(x[0], {0, 2}, true), g.reduce_max(x[0], {2}),
                         g.reduce_min(x[0]), g.reduce_variance(x[0], {1}), g.reduce_logsumexp(x[0], {-1}),
                         g.reduce_prod(g.add(g.mul(x[0], g.scalar(0.1, x[0].dtype())), g.scalar(1.0, x[0].dtype())), {2}),
                         g.argmax(x[0], 1), g.argmin(x[0], 2), g.softmax(x[0], 1), g.log_softmax(x[0], -1),
                         g.reduce_any(g.greater(x[0], g.scalar(1.9, x[0].dtype())), {1})};
    }, {rnd({6, 300, 7}, t, 21)}, tol);
  }
  differential("long reduction (block per output)", [](Graph& g, auto& x) {
    return std::vector{g.reduce_sum(x[0], {1}), g.softmax(x[0]), g.argmax(x[0], 1)};
  }, {rnd({3, 70000}, f32, 22)}, 1e-5);
  differential("dynamic sum_to_like gradient", [](Graph& g, auto& x) {
    auto gr = g.gradients(g.reduce_sum(g.mul(g.add(x[0], x[1]), x[0])), {x[1]});
    return std::vector{gr[x[1]]};
  }, {rnd({50, 8}, f32, 1), rnd({8}, f32, 2)}, 1e-5, true);
}

TEST(CudaExecutor, CapturedGraphReplaysWithNewInputs) {
  Graph g;
  Tensor x = g.placeholder({64, 32}, f32, "x");
  Tensor w = g.variable(TensorData::uniform({32, 16}, -1, 1, f32, 5), "w");
  Tensor y = g.softmax(g.gelu(g.matmul(x, w)));
  Executable gpu_exe = g.compile({{x, x.type()}}, {y}, {}, gpu());
  Executable cpu_exe = g.compile({{x, x.type()}}, {y}, {}, cpu());
  for (uint64_t seed = 1; seed <= 4; ++seed) {  // run 1 records and captures; 2.. replay
    TensorData in = rnd({64, 32}, f32, seed);
    expect_close(gpu_exe.run({in})[0], cpu_exe.run({in})[0], 1e-5, "replay " + std::to_string(seed));
  }
  auto stats = detail::cuda_graph_stats(gpu_exe.impl());
  EXPECT_EQ(stats.captures, 1) << stats.error;
  EXPECT_EQ(stats.replays, 3) << stats.error;
  // Changing a variable invalidates the captured graph.
  gpu_exe.set_variable("w", TensorData::uniform({32, 16}, -1, 1, f32, 9));
  TensorData in = rnd({64, 32}, f32, 7);
  expect_close(gpu_exe.run({in})[0], cpu_exe.run({in})[0], 1e-5, "after set_variable");
  // A graph of 1,000 unfused tiny ops is captured too.
  CompileOptions unfused = gpu();
  unfused.switches = {{"TGRAPH_NO_FUSION", "1"}};
  Graph h;
  Tensor a = h.placeholder({4}, f32);
  Tensor b = a;
  for (int i = 0; i < 1000; ++i) b = (i % 2) ? h.add(b, a) : h.mul(b, h.scalar(0.999));
  Executable e = h.compile({{a, a.type()}}, {b}, {}, unfused);
  for (int i = 0; i < 3; ++i) e.run({rnd({4}, f32, 3)});
  auto s2 = detail::cuda_graph_stats(e.impl());
  EXPECT_EQ(s2.replays, 2) << s2.error;
}

// A graph with dynamic dims (batch and sequence, one of them through a reshape's shape
// source) run dynamic (TGRAPH_NO_SPECIALIZE) is captured once per size and each size's instance
// replays when that size comes back; by default each size runs a copy compiled for it.
TEST(CudaExecutor, DynamicShapesCapturePerSize) {
  Graph g;
  Tensor x = g.placeholder({-1, -1, 16}, f32, "x");  // [B, S, 16]
  Tensor w = g.constant(TensorData::uniform({16, 16}, -0.5, 0.5, f32, 3));
  Tensor flat = g.reshape(x, {-1, 16});
  Tensor h = g.gelu(g.matmul(flat, w));
  Tensor back = g.reshape(h, {dim_from_source(0), dim_from_source(1), 16}, {x});
  Tensor y = g.softmax(g.add(back, x));
  CompileOptions dynamic = gpu(true);
  dynamic.switches = {{"TGRAPH_NO_SPECIALIZE", "1"}};
  Executable gpu_exe = g.compile({{x, x.type()}}, {y}, {}, dynamic);
  Executable per_size = g.compile({{x, x.type()}}, {y}, {}, gpu(true));
  Executable cpu_exe = g.compile({{x, x.type()}}, {y}, {}, cpu(true));
  const std::vector<std::pair<int64_t, int64_t>> sizes{{2, 8}, {3, 5}, {2, 8}, {3, 5}, {4, 7}, {2, 8}, {3, 5}, {4, 7}};
  uint64_t seed = 1;
  for (auto [b, s] : sizes) {
    TensorData in = rnd({b, s, 16}, f32, seed++);
    const TensorData want = cpu_exe.run({in})[0];
    const std::string what = "size " + std::to_string(b) + "x" + std::to_string(s);
    auto got = gpu_exe.run({in});
    ASSERT_EQ(got[0].shape(), (Shape{b, s, 16}));
    expect_close(got[0], want, 1e-5, what);
    expect_close(per_size.run({in})[0], want, 1e-5, what + ", compiled for the size");
  }
  {
    std::lock_guard<std::mutex> lock(per_size.impl().specialized_mu);
    EXPECT_EQ(per_size.impl().specialized.size(), 3u);
  }
  auto st = detail::cuda_graph_stats(gpu_exe.impl());
  EXPECT_EQ(st.uncaptured, 3) << st.error;  // each size's first run, op by op
  EXPECT_EQ(st.captures, 3) << st.error;    // each size once
  EXPECT_EQ(st.replays, 5) << st.error;     // every later run of a size seen before
  EXPECT_EQ(st.instances, 3) << st.error;
}

#include "tgraph/nn.h"
#include "tgraph/optim.h"

namespace {
// A tiny CNN training step (conv, batch norm, relu, pooling, linear, softmax cross-entropy,
// SGD with momentum) built identically in its own graph, so CPU and GPU runs start from the same weights.
struct TinyTrainer {
  Graph g;
  Executable exe;
  explicit TinyTrainer(Device dev) {
    nn::Conv2d conv(g, "c1", 3, 8, 3);
    nn::BatchNorm2d bn(g, "bn", 8);
    nn::Linear fc(g, "fc", 8, 4);
    bn.train();
    Tensor x = g.placeholder({6, 8, 8, 3}, f32, "x"), y = g.placeholder({6, 4}, f32, "y");
    Tensor h = g.relu(bn.forward(g, conv.forward(g, x)));
    h = g.max_pool2d(h, {.kernel = {2, 2}});
    Tensor logits = fc.forward(g, g.reduce_mean(h, {1, 2}));
    Tensor loss = g.softmax_cross_entropy(logits, y);
    std::vector<Tensor> params = conv.parameters();
    for (auto& p : bn.parameters()) params.push_back(p);
    for (auto& p : fc.parameters()) params.push_back(p);
    auto grads = g.gradients(loss, params);
    // SGD, not Adam: Adam's normalisation turns last-bit differences of near-zero gradients
    // into full-size steps, which would make the CPU/GPU comparison meaningless.
    Operation step = optim::sgd(g, params, grads, g.scalar(0.05), {.momentum = 0.9});
    std::vector<Operation> ops = bn.updates();
    ops.push_back(step);
    exe = g.compile({{x, x.type()}, {y, y.type()}}, {loss}, ops, {.device = dev});
  }
};
}  // namespace

TEST(CudaExecutor, TrainingStepsMatchTheCpu) {
  TinyTrainer cpu_t(Device::cpu()), gpu_t(Device::cuda(0));
  TensorData labels = TensorData::zeros({6, 4});
  for (int i = 0; i < 6; ++i) labels.set(i * 4 + i % 4, 1.0);
  for (int s = 0; s < 4; ++s) {
    TensorData x = rnd({6, 8, 8, 3}, f32, static_cast<uint64_t>(100 + s));
    double lc = cpu_t.exe.run({x, labels})[0].at(0), lg = gpu_t.exe.run({x, labels})[0].at(0);
    EXPECT_NEAR(lg, lc, 1e-3 * (1 + std::abs(lc))) << "step " << s;
  }
  for (const std::string& name : {"bn.running_mean", "c1.weight", "fc.weight"}) {
    TensorData a = cpu_t.exe.variable(name), b = gpu_t.exe.variable(name);
    expect_close(b, a, 2e-3, name);
  }
}

// ---- ops that used to fall back to the CPU -----------------------------------------------------

namespace {

// Distinct integers (a permutation of k*7 mod n, shifted), so argmax / argmin have no ties.
TensorData perm_ints(Shape s, DType t, int64_t shift) {
  TensorData d(std::move(s), t);
  const int64_t n = d.num_elements();
  for (int64_t i = 0; i < n; ++i) d.set(i, static_cast<double>((i * 7) % n + shift));
  return d;
}

}  // namespace

// Operands broadcast over only some batch dims are expanded on the device before cuBLASLt.
TEST(CudaExecutor, PartialBatchBroadcastMatmul) {
  for (DType t : {f32, f16, bf16, f64}) {
    double tol = t == f64 ? 1e-12 : tolerance(t) * 20;
    gputest::differential(std::string("partial batch broadcast ") + dtype_name(t), [](Graph& g, auto& x) {
      return std::vector{g.matmul(x[0], x[1]), g.matmul(x[2], x[3]), g.matmul(x[1], x[0], true, true),
                         g.matmul(x[4], x[3])};
    }, {rnd({2, 1, 3, 4}, t, 1, -1, 1), rnd({1, 5, 4, 6}, t, 2, -1, 1), rnd({2, 1, 4, 8}, t, 3, -1, 1),
        rnd({3, 8, 5}, t, 4, -1, 1), rnd({4, 2, 3, 2, 8}, t, 5, -1, 1)}, tol);
  }
}

// Integer reductions (exact, wrapping), argmax / argmin of every integer dtype, integer pow and
// bitcast run on the device.
TEST(CudaExecutor, IntegerReductionsPowAndBitcast) {
  for (DType t : {i8, i32, i64, u8}) {
    gputest::differential(std::string("integer reductions ") + dtype_name(t), [](Graph& g, auto& x) {
      return std::vector{g.reduce_sum(x[0]), g.reduce_sum(x[0], {1}), g.reduce_prod(x[0], {2}),
                         g.reduce_max(x[0], {0, 2}, true), g.reduce_min(x[0], {-1}), g.argmax(x[0], 1),
                         g.argmin(x[0], 2), g.sum_to_like(x[0], x[1]), g.reduce_sum(x[2], {1}),
                         g.argmax(x[2], 1), g.argmin(x[2], 1)};
    }, {perm_ints({4, 6, 5}, t, t == u8 ? 3 : -40), perm_ints({6, 1}, t, 1), perm_ints({2, 3000}, t, 0)}, 0);
  }
  // i64 beyond 2^53 (where doubles round) and wrap-around sums.
  TensorData big({3, 4}, i64);
  for (int64_t i = 0; i < 12; ++i) static_cast<int64_t*>(big.data())[i] = (int64_t{1} << 62) + 3 * i + 1;
  gputest::differential("i64 exact", [](Graph& g, auto& x) {
    return std::vector{g.reduce_sum(x[0], {1}), g.reduce_max(x[0], {0}), g.reduce_min(x[0]), g.argmax(x[0], 1),
                       g.reduce_prod(x[0], {0})};
  }, {big}, 0);
  for (DType t : {i8, i32, i64}) {
    TensorData a = TensorData::uniform({5, 17}, -4, 5, t, 11), b = TensorData::uniform({5, 17}, -1, 8, t, 12);
    gputest::differential(std::string("integer pow ") + dtype_name(t),
              [](Graph& g, auto& x) { return std::vector{g.pow(x[0], x[1])}; }, {a, b}, 0);
  }
  gputest::differential("bitcast", [](Graph& g, auto& x) {
    return std::vector{g.bitcast(x[0], i32), g.bitcast(g.bitcast(x[0], i32), f32), g.bitcast(x[1], f64),
                       g.bitcast(x[2], bf16)};
  }, {rnd({5, 17}, f32, 1), perm_ints({4, 3}, i64, 1000), rnd({6}, f16, 2)}, 0);
}

// group_norm and scaled_dot_product_attention are decomposed into device primitives for CUDA.
TEST(CudaExecutor, GroupNormAndAttentionOnTheDevice) {
  for (DType t : {f32, f16, bf16, f64}) {
    double tol = t == f64 ? 1e-10 : tolerance(t) * 20;
    TensorData bm = TensorData::uniform({5, 7}, 0, 2, f32, 3);
    for (int64_t j = 0; j < 7; ++j) bm.set(2 * 7 + j, 0.0);  // query 2 sees no key: 0
    TensorData mask({5, 7}, DType::boolean);
    for (int64_t i = 0; i < 35; ++i) mask.set(i, bm.at(i) >= 1 ? 1.0 : 0.0);
    gputest::differential(std::string("group_norm and attention ") + dtype_name(t), [](Graph& g, auto& x) {
      return std::vector{g.group_norm(x[0], x[1], x[2], 3), g.group_norm(x[3], x[1], x[2], 2, 1),
                         g.scaled_dot_product_attention(x[4], x[5], x[6]),
                         g.scaled_dot_product_attention(x[4], x[5], x[6], std::nullopt, {.causal = true}),
                         g.scaled_dot_product_attention(x[4], x[5], x[6], x[7]),
                         g.scaled_dot_product_attention(x[4], x[5], x[6], x[8], {.scale = 0.5}),
                         g.scaled_dot_product_attention(x[4], x[9], x[6])};
    }, {rnd({2, 4, 5, 6}, t, 1), rnd({6}, t, 2, 0.5, 1.5), rnd({6}, t, 3, -1, 1), rnd({2, 6, 3, 4}, t, 4),
        rnd({2, 3, 5, 8}, t, 5, -1, 1), rnd({2, 3, 7, 8}, t, 6, -1, 1), rnd({2, 3, 7, 6}, t, 7, -1, 1), mask,
        rnd({5, 7}, t, 8, -2, 0), rnd({3, 7, 8}, t, 9, -1, 1)}, tol);
  }
}

// The sweep's convolution and pooling configurations that cuDNN's symmetric padding does not
// express (asymmetric / same padding, ceil mode) run on the device.
TEST(CudaExecutor, PaddedConvolutionAndPoolingOnTheDevice) {
  const ConvDesc same{.padding = PaddingStyle::same};
  const ConvDesc same2{.stride = {2, 2}, .padding = PaddingStyle::same};
  const ConvDesc grouped{.stride = {2, 2}, .dilation = {1, 2}, .padding = PaddingStyle::explicit_,
                         .explicit_padding = {1, 0, 2, 1}, .data_layout = Layout::nchw,
                         .weights_layout = Layout::oihw, .groups = 2};
  const PoolDesc p3{.kernel = {3, 3}, .stride = {2, 2}, .padding = PaddingStyle::same, .data_layout = Layout::nchw};
  const PoolDesc ceiled{.kernel = {2, 2}, .stride = {2, 2}, .data_layout = Layout::nchw, .ceil_mode = true};
  for (DType t : {f32, f16, bf16}) {
    // x of the pooling: distinct integers (exact in every dtype), so no window has tied maxima.
    double tol = t == f32 ? 1e-4 : tolerance(t) * 50;
    gputest::differential(std::string("padded conv ") + dtype_name(t), [=](Graph& g, auto& x) {
      return std::vector{g.conv2d(x[0], x[1], same2), g.conv2d(x[2], x[3], grouped),
                         g.conv2d_data_grad(x[4], x[1], Shape{2, 7, 6, 3}, same2),
                         g.conv2d_weight_grad(x[4], x[0], Shape{3, 3, 3, 4}, same2), g.conv3d(x[5], x[6], same),
                         g.conv3d_data_grad(x[7], x[6], Shape{1, 4, 5, 6, 2}, same),
                         g.conv3d_weight_grad(x[7], x[5], Shape{2, 3, 2, 2, 3}, same),
                         g.max_pool2d(x[8], p3), g.max_pool2d(x[8], ceiled), g.max_pool2d_grad(x[9], x[8], p3)};
    }, {rnd({2, 7, 6, 3}, t, 1, -1, 1), rnd({3, 3, 3, 4}, t, 2, -1, 1), rnd({2, 4, 9, 8}, t, 3, -1, 1),
        rnd({6, 2, 3, 3}, t, 4, -1, 1), rnd({2, 4, 3, 4}, t, 5, -1, 1), rnd({1, 4, 5, 6, 2}, t, 6, -1, 1),
        rnd({2, 3, 2, 2, 3}, t, 7, -1, 1), rnd({1, 4, 5, 6, 3}, t, 8, -1, 1), perm_ints({2, 3, 9, 8}, t, -200),
        rnd({2, 3, 5, 4}, t, 10, -1, 1)}, tol);
  }
}
