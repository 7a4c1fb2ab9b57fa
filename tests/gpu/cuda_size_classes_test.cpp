// A dynamic executable's neighbouring size classes prepared ahead (runtime/size_classes.h):
// after its first run at 16 x 4 x 32, the batch-1 copy's kernels (another broadcasting, so other
// sources) are compiled on the background thread, and the first run at batch 1 compiles none of
// them; with TGRAPH_NO_SIZE_PREFETCH=1 it does. Values match the CPU.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gpu/gpu_test_util.h"
#include "runtime/size_classes.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

// f(a) * m + 0.5 over a [b, 4, s] and a mask-like m [b, 1, s] (f: exp or tanh, so the two tests'
// kernels differ): at b = 1 the dims coalesce otherwise than at b > 1, so the group's kernel is
// another source.
struct Case {
  Graph g;
  Executable gpu, cpu;
  Case(bool tanh, const std::map<std::string, std::string>& switches) {
    Tensor a = g.placeholder({-1, 4, -1}, DType::f32, "a");
    Tensor m = g.placeholder({-1, 1, -1}, DType::f32, "m");
    Tensor y = g.add(g.mul(tanh ? g.tanh(a) : g.exp(a), m), g.scalar(0.5));
    std::vector<std::pair<Tensor, TensorType>> feeds{{a, a.type()}, {m, m.type()}};
    gpu = g.compile(feeds, {y}, {}, {.device = Device::cuda(0), .disable_type_inference = true, .switches = switches});
    cpu = g.compile(feeds, {y}, {}, {.device = Device::cpu(), .disable_type_inference = true});
  }
  // Runs at batch b; returns the kernels NVRTC compiled for this run (the executable's own
  // count: the background thread's compiles of other sizes go on meanwhile, counted there).
  int run(int64_t b, uint64_t seed) {
    std::vector<TensorData> in{TensorData::uniform({b, 4, 32}, -1, 1, DType::f32, seed),
                               TensorData::uniform({b, 1, 32}, 0, 1, DType::f32, seed + 1)};
    const int before = gpu.run_stats().kernels_compiled;
    auto got = gpu.run(in);
    gputest::expect_close(got[0], cpu.run(in)[0], 1e-5, "batch " + std::to_string(b));
    return gpu.run_stats().kernels_compiled - before;
  }
};

TEST(CudaSizeClasses, ABatchOfOneFindsItsKernelsPreparedAhead) {
  detail::background_jobs_wait();  // (before the environment changes under other threads)
  gputest::FreshCacheDir cache("sizes");  // empty: a prefetch does not compile what is on disk
  Case on(false, {});
  EXPECT_GE(on.run(16, 1), 1);  // the first size compiles its kernel
  detail::background_jobs_wait();  // the batch-1 copy's kernels queued...
  EXPECT_EQ(on.run(1, 3), 0) << "the batch-1 run compiled a kernel";  // ...and taken
  EXPECT_EQ(on.run(7, 5), 0);  // a batch of several: the first size's kernel
  detail::background_jobs_wait();  // (before the cache directory goes)
}

TEST(CudaSizeClasses, OffTheBatchOfOneCompilesItsOwn) {
  detail::background_jobs_wait();  // (before the environment changes under other threads)
  gputest::FreshCacheDir cache("sizes");  // empty: a prefetch does not compile what is on disk
  Case off(true, {{"TGRAPH_NO_SIZE_PREFETCH", "1"}});
  EXPECT_GE(off.run(16, 7), 1);
  detail::background_jobs_wait();
  EXPECT_GE(off.run(1, 9), 1) << "batch 1 shares batch 16's kernel: the test shows nothing";
  detail::background_jobs_wait();
}

}  // namespace
