// tgraph's own matmul kernel (kernels_matmul.cu), which computes a first run's matmuls while
// their cuBLASLt kernels are not loaded (matmul_lt.cpp, under TGRAPH_INTERIM_MATMUL: `loaded`
// for a loaded executable's saved algorithms, `1` everywhere; off by default): every operand
// form and forward epilogue against a host product in double, then the executor's use of it — a
// first run stands in and is not captured, the next captures with cuBLASLt (nothing stands in)
// and matches the CPU; by default, and under `loaded` for a compiled executable, nothing does.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/kernels_matmul.h"
#include "backends/cuda/matmul_lt.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"
#include "gpu/gpu_test_util.h"

using namespace tg;
using detail::MatmulKernelArgs;

namespace {

using Epi = MatmulKernelArgs::Epilogue;

struct Form {
  long long m, n, k, batch;
  bool ta, tb;
  bool shared_b;  // one b for every batch (stride 0)
  Epi epilogue;
};

// Device copy of `t`'s bytes (freed by the caller).
void* upload(const TensorData& t) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(t.nbytes(), 1)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, t.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

double activate(double v, Epi e) {
  if (e == Epi::relu_bias) return v > 0 ? v : 0;
  if (e == Epi::gelu_tanh_bias) return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  return v;
}

TEST(CudaMatmulStandIn, KernelMatchesAHostProductForEveryForm) {
  const std::vector<Form> forms{
      {1, 1, 1, 1, false, false, false, Epi::none},        {64, 64, 16, 1, false, false, false, Epi::none},
      {37, 70, 33, 1, false, false, false, Epi::bias},     {37, 70, 33, 1, true, false, false, Epi::relu_bias},
      {37, 70, 33, 1, false, true, false, Epi::gelu_tanh_bias}, {65, 129, 300, 1, true, true, false, Epi::bias},
      {5, 9, 17, 3, false, false, false, Epi::none},       {5, 9, 17, 3, true, true, true, Epi::relu_bias},
      {128, 96, 768, 2, false, true, false, Epi::gelu_tanh_bias}, {3, 4, 0, 2, false, false, false, Epi::bias}};
  const std::vector<std::pair<DType, MatmulKernelArgs::Type>> types{{DType::f16, MatmulKernelArgs::Type::f16},
                                                                     {DType::bf16, MatmulKernelArgs::Type::bf16},
                                                                     {DType::f32, MatmulKernelArgs::Type::f32},
                                                                     {DType::f64, MatmulKernelArgs::Type::f64}};
  uint64_t seed = 100;
  for (const auto& [dtype, type] : types)
    for (const Form& f : forms) {
      const std::string what = std::string(dtype_name(dtype)) + " m" + std::to_string(f.m) + " n" + std::to_string(f.n) +
                               " k" + std::to_string(f.k) + " b" + std::to_string(f.batch) + (f.ta ? " ta" : "") +
                               (f.tb ? " tb" : "") + (f.shared_b ? " shared b" : "") + " epilogue " +
                               std::to_string(static_cast<int>(f.epilogue));
      SCOPED_TRACE(what);
      const long long nb = f.shared_b ? 1 : f.batch;
      TensorData a = TensorData::uniform({f.batch, f.m * f.k}, -1, 1, dtype, ++seed);
      TensorData b = TensorData::uniform({nb, f.k * f.n}, -1, 1, dtype, ++seed);
      TensorData bias = TensorData::uniform({f.n}, -1, 1, dtype, ++seed);
      TensorData c(Shape({f.batch, f.m, f.n}), dtype);
      void *da = upload(a), *db = upload(b), *dbias = upload(bias), *dc = nullptr;
      ASSERT_EQ(cudaMalloc(&dc, c.nbytes()), cudaSuccess);
      MatmulKernelArgs args;
      args.type = type, args.epilogue = f.epilogue;
      args.a = da, args.b = db, args.bias = dbias, args.c = dc;
      args.m = f.m, args.n = f.n, args.k = f.k, args.batch = f.batch;
      args.stride_a = f.m * f.k, args.stride_b = f.shared_b ? 0 : f.k * f.n;
      args.ta = f.ta, args.tb = f.tb;
      ASSERT_EQ(detail::launch_matmul(args, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(c.data(), dc, c.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      for (void* p : {da, db, dbias, dc}) cudaFree(p);
      // Rounded once from an exact product: half a unit in the last place of the output, and
      // the f32 accumulation's error over k terms.
      const double ulp = dtype == DType::f16 ? 1e-3 : dtype == DType::bf16 ? 8e-3 : dtype == DType::f32 ? 1e-6 : 1e-13;
      for (long long bi = 0; bi < f.batch; ++bi)
        for (long long i = 0; i < f.m; ++i)
          for (long long j = 0; j < f.n; ++j) {
            double want = 0, mag = 0;
            for (long long kk = 0; kk < f.k; ++kk) {
              const double x = a.at(bi * f.m * f.k + (f.ta ? kk * f.m + i : i * f.k + kk));
              const double y = b.at((f.shared_b ? 0 : bi) * f.k * f.n + (f.tb ? j * f.k + kk : kk * f.n + j));
              want += x * y;
              mag += std::abs(x * y);
            }
            if (f.epilogue != Epi::none) want = activate(want + bias.at(j), f.epilogue);
            const double got = c.at((bi * f.m + i) * f.n + j);
            ASSERT_NEAR(got, want, ulp * (1 + std::abs(want)) + 1e-6 * mag) << "at " << bi << "," << i << "," << j;
          }
    }
}

// A graph of matmuls at shapes no other test uses (so their cuBLASLt plans are new to the
// process): the first run computes them with tgraph's kernel and is not captured; the second
// loads nothing more, is captured with cuBLASLt and replayed; every run matches the CPU.
TEST(CudaMatmulStandIn, AFirstRunStandsInAndTheNextIsCapturedWithCublasLt) {
  for (const char* name : {"TGRAPH_NO_LIBRARY_WARMUP", "TGRAPH_NO_PROVISIONAL_CHOICES"})
    if (const char* v = std::getenv(name); v && std::string(v) == "1") GTEST_SKIP() << name << " is set";
  const std::map<std::string, std::string> on{{"TGRAPH_INTERIM_MATMUL", "1"}};
  for (DType t : {DType::f16, DType::bf16, DType::f32}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = t == DType::f16 ? 4e-3 : t == DType::bf16 ? 3e-2 : 1e-4;
    const int64_t rows = t == DType::f16 ? 83 : t == DType::bf16 ? 85 : 87;  // each dtype's own plans
    std::vector<TensorData> inputs{TensorData::uniform({rows, 136}, -1, 1, t, 11),
                                   TensorData::uniform({136, 200}, -0.2, 0.2, t, 12),
                                   TensorData::uniform({200}, -1, 1, t, 13),
                                   TensorData::uniform({200, 72}, -0.2, 0.2, t, 14)};
    Graph g;
    auto [ph, feeds] = gputest::placeholders_for(g, inputs);
    Tensor h = g.relu(g.add(g.matmul(ph[0], ph[1]), ph[2]));  // matmul + bias + relu: the epilogue form
    Tensor y = g.matmul(h, ph[3]);
    auto want = g.compile(feeds, {y, h}, {}, {.device = Device::cpu()}).run(inputs);
    Executable e = g.compile(feeds, {y, h}, {}, {.device = Device::cuda(0), .switches = on});
    const long long before = detail::matmul_stand_ins();
    auto first = e.run(inputs);
    EXPECT_EQ(detail::matmul_stand_ins() - before, 2) << "the first run's two matmuls did not stand in";
    EXPECT_EQ(detail::cuda_graph_stats(e.impl()).captures, 0) << "a run with stand-ins was captured";
    for (size_t i = 0; i < 2; ++i) gputest::expect_close(first[i], want[i], tol, "first run output " + std::to_string(i));
    for (int run = 1; run < 3; ++run) {
      auto got = e.run(inputs);
      for (size_t i = 0; i < 2; ++i)
        gputest::expect_close(got[i], want[i], tol, "run " + std::to_string(run) + " output " + std::to_string(i));
    }
    EXPECT_EQ(detail::matmul_stand_ins() - before, 2) << "a later run stood in";
    const auto stats = detail::cuda_graph_stats(e.impl());
    EXPECT_EQ(stats.captures, 1) << stats.error;
    EXPECT_EQ(stats.replays, 2) << stats.error;
  }
}

// By default (and under TGRAPH_INTERIM_MATMUL=loaded for an executable not loaded from a file)
// the first run loads cuBLASLt's kernels at the matmuls' turn.
TEST(CudaMatmulStandIn, OffByDefaultAndForACompiledExecutableUnderLoaded) {
  // Each case its own row count: a plan new to the process.
  for (const auto& [rows, switches] : std::vector<std::pair<int64_t, std::map<std::string, std::string>>>{
           {91, {}}, {93, {{"TGRAPH_INTERIM_MATMUL", "loaded"}}}}) {
    std::vector<TensorData> inputs{TensorData::uniform({rows, 40}, -1, 1, DType::f16, 21),
                                   TensorData::uniform({40, 56}, -1, 1, DType::f16, 22)};
    Graph g;
    auto [ph, feeds] = gputest::placeholders_for(g, inputs);
    Tensor y = g.matmul(ph[0], ph[1]);
    auto want = g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(inputs);
    const long long before = detail::matmul_stand_ins();
    Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0), .switches = switches});
    gputest::expect_close(e.run(inputs)[0], want[0], 4e-3, "first run, rows " + std::to_string(rows));
    EXPECT_EQ(detail::matmul_stand_ins(), before) << rows;
    EXPECT_EQ(detail::cuda_graph_stats(e.impl()).captures, 1) << rows;  // captured at once, as before
  }
}

}  // namespace
