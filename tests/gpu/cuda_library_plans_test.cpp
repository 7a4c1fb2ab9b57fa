// Library choices (backends/cuda/library_plans.h): the cuDNN and cuBLASLt algorithms a run
// chose are saved with the executable under this process's library signature and come back
// with a load; a convolution met at a new batch size reuses the algorithm chosen at another one
// and computes what the CPU computes.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/library_plans.h"
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
  std::map<std::string, std::string> plans;
  {
    std::lock_guard<std::mutex> lock(l.impl().device_code->mu);
    plans = l.impl().device_code->plans;
  }
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
