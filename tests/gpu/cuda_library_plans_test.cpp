// Library choices (backends/cuda/library_plans.h): the cuDNN and cuBLASLt algorithms a run
// chose are saved with the executable under this process's library signature and come back
// with a load; a convolution met at a new batch size reuses the algorithm chosen at another one
// and computes what the CPU computes; a first run makes its cuDNN calls (and a loaded one its
// saved matmuls) once ahead on warm-up threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/library_plans.h"
#include "backends/cuda/library_warmup.h"
#include "gpu_test_util.h"
#include "runtime/executable_impl.h"
#include "tgraph/graph.h"

using namespace tg;

namespace {

// conv (3x3, same padding) -> relu -> a matmul over the channels, batch and image size free.
struct Net {
  Graph g;
  Tensor x, y;
  std::vector<std::pair<Tensor, TensorType>> feeds;
  Net() {
    x = g.placeholder(Shape({-1, 12, 12, 8}), DType::f32, "x");
    Tensor w = g.constant(TensorData::uniform({3, 3, 8, 16}, -0.3, 0.3, DType::f32, 1));
    Tensor m = g.constant(TensorData::uniform({16, 24}, -0.3, 0.3, DType::f32, 2));
    ConvDesc d;
    d.padding = PaddingStyle::same;
    y = g.matmul(g.relu(g.conv2d(x, w, d)), m);
    feeds = {{x, TensorType(Shape({-1, 12, 12, 8}), DType::f32)}};
  }
};

int count_with(const std::map<std::string, std::string>& plans, const std::string& part) {
  int n = 0;
  for (const auto& [key, value] : plans) n += key.find(part) != std::string::npos;
  return n;
}

}  // namespace

TEST(CudaLibraryPlans, ChoicesTravelWithTheFileUnderThisProcesssSignature) {
  Net net;
  Executable e = net.g.compile(net.feeds, {net.y}, {}, {.device = Device::cuda(0)});
  Executable cpu = net.g.compile(net.feeds, {net.y}, {}, {.device = Device::cpu()});
  TensorData in = TensorData::uniform({4, 12, 12, 8}, -1, 1, DType::f32, 3);
  gputest::expect_close(e.run({in})[0], cpu.run({in})[0], 1e-4, "run");
  const std::string path = (std::filesystem::temp_directory_path() / "tgraph_library_plans.tgx").string();
  e.save(path);
  Executable l = Executable::load(path);
  const std::map<std::string, std::string> plans = gputest::library_plans_of(l);
  ASSERT_FALSE(plans.empty());
  const std::string sig = detail::library_signature(0) + "|";
  for (const auto& [key, value] : plans) EXPECT_EQ(key.compare(0, sig.size(), sig), 0) << key;
  EXPECT_GE(count_with(plans, "|conv|"), 1);
  EXPECT_GE(count_with(plans, "|lt|"), 1);
  // A choice that does not parse is ignored, not trusted: the load still runs right.
  detail::provide_library_plans({{sig + "conv|garbage", "x y z"}, {sig + "lt|1,2,", "1 zz"}}, 0);
  gputest::expect_close(l.run({in})[0], cpu.run({in})[0], 1e-4, "loaded");
  std::filesystem::remove(path);
}

TEST(CudaLibraryPlans, NewBatchSizesReuseTheConvolutionsAlgorithmAndMatchTheCpu) {
  Net net;
  Executable e = net.g.compile(net.feeds, {net.y}, {}, {.device = Device::cuda(0)});
  Executable cpu = net.g.compile(net.feeds, {net.y}, {}, {.device = Device::cpu()});
  for (int64_t b : {4, 1, 9, 4}) {
    TensorData in = TensorData::uniform({b, 12, 12, 8}, -1, 1, DType::f32, 10 + static_cast<uint64_t>(b));
    for (int run = 0; run < 2; ++run)
      gputest::expect_close(e.run({in})[0], cpu.run({in})[0], 1e-4,
                            "batch " + std::to_string(b) + " run " + std::to_string(run));
  }
}

TEST(CudaLibraryPlans, FirstRunsMakeTheirLibraryCallsAheadAndMatchTheCpu) {
  // conv a -> relu -> conv b (a's problem again: made once ahead) -> conv c (stride 2) -> matmul;
  // batch 3 of 14 x 10 images, which no other test uses (the whole GPU suite runs in one
  // process: a convolution another test ran is not cold; a saved matmul choice is handed over once).
  // An empty compile cache: choices an earlier run of this test filed would be taken instead of
  // the heuristics' and provisional ones.
  const gputest::FreshCacheDir cache("library-plans");
  auto build = [](Graph& g, int64_t batch) {
    Tensor x = g.placeholder(Shape({batch, 14, 10, 8}), DType::f32, "x");
    auto weights = [&](uint64_t seed) { return g.constant(TensorData::uniform({3, 3, 8, 8}, -0.3, 0.3, DType::f32, seed)); };
    ConvDesc d;
    d.padding = PaddingStyle::same;
    ConvDesc s2 = d;
    s2.stride = {2, 2};
    Tensor h = g.conv2d(g.relu(g.conv2d(g.relu(g.conv2d(x, weights(1), d)), weights(2), d)), weights(3), s2);
    return std::make_pair(x, g.matmul(h, g.constant(TensorData::uniform({8, 24}, -0.3, 0.3, DType::f32, 4))));
  };
  Graph g;
  auto [x, y] = build(g, 3);
  const std::vector<std::pair<Tensor, TensorType>> feeds = {{x, TensorType(Shape({3, 14, 10, 8}), DType::f32)}};
  Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
  Executable cpu = g.compile(feeds, {y}, {}, {.device = Device::cpu()});
  TensorData in = TensorData::uniform({3, 14, 10, 8}, -1, 1, DType::f32, 5);
  const TensorData want = cpu.run({in})[0];
  (void)detail::matmul_lt_saved_warm_calls(0);  // none left over from another test's load
  const long long before = detail::library_warmup_calls_made();
  auto made = [&] { return detail::library_warmup_calls_made() - before; };
  gputest::expect_close(e.run({in})[0], want, 1e-4, "first run");
  EXPECT_EQ(made(), 2) << "two distinct convolutions, each made once ahead";
  gputest::expect_close(e.run({in})[0], want, 1e-4, "second run");
  EXPECT_EQ(made(), 2) << "only a first run warms up";
  const std::string path = (std::filesystem::temp_directory_path() / "tgraph_library_warmup.tgx").string();
  e.save(path);
  Executable l = Executable::load(path);
  gputest::expect_close(l.run({in})[0], want, 1e-4, "loaded");
  // In this process the convolutions' algorithms have run (their kernels are loaded): only the
  // matmul the file handed over is made ahead. (A fresh process makes the convolutions too.)
  EXPECT_EQ(made(), 3) << "the loaded first run: the saved matmul";
  std::filesystem::remove(path);

  // Batch sizes of one executable: 12 (4x from 3) reuses batch 3's algorithms, nothing is made
  // ahead; 13 (4.3x from 3, the only batch the heuristics were asked at) and 60 (4.6x from 13)
  // ask the heuristics for their two convolutions on warm-up threads: after the first run, its
  // provisional choices taken (ProvisionalChoices), so counted once the second run has waited
  // for them (without provisional choices, ahead of the first run). Each run against the CPU.
  Graph gd;
  auto [xd, yd] = build(gd, -1);
  const std::vector<std::pair<Tensor, TensorType>> dfeeds = {{xd, TensorType(Shape({-1, 14, 10, 8}), DType::f32)}};
  Executable dyn = gd.compile(dfeeds, {yd}, {}, {.device = Device::cuda(0)});
  Executable dcpu = gd.compile(dfeeds, {yd}, {}, {.device = Device::cpu()});
  for (auto [b, calls] : std::vector<std::pair<int64_t, long long>>{{3, 3}, {12, 3}, {13, 5}, {60, 7}}) {
    TensorData ib = TensorData::uniform({b, 14, 10, 8}, -1, 1, DType::f32, 20 + static_cast<uint64_t>(b));
    const TensorData want_b = dcpu.run({ib})[0];
    gputest::expect_close(dyn.run({ib})[0], want_b, 1e-4, "batch " + std::to_string(b));
    gputest::expect_close(dyn.run({ib})[0], want_b, 1e-4, "batch " + std::to_string(b) + ", again");
    EXPECT_EQ(made(), calls) << "after batch " << b;
  }

  // Switched off, a first run makes its calls in turn (batch 1000: cold ones) and computes the same.
  setenv("TGRAPH_NO_LIBRARY_WARMUP", "1", 1);
  TensorData ik = TensorData::uniform({1000, 14, 10, 8}, -1, 1, DType::f32, 7);
  Executable off = gd.compile(dfeeds, {yd}, {}, {.device = Device::cuda(0)});
  gputest::expect_close(off.run({ik})[0], dcpu.run({ik})[0], 1e-4, "without the warm-up");
  unsetenv("TGRAPH_NO_LIBRARY_WARMUP");
  EXPECT_EQ(made(), 7);
}
