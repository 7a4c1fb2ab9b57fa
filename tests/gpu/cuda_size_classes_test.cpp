// A dynamic executable's neighbouring size classes prepared ahead (runtime/size_classes.h):
// after its first run at 16 x 4 x 32, the batch-1 copy's kernels (another broadcasting, so other
// sources) are compiled on the background thread, and the first run at batch 1 compiles none of
// them; with TGRAPH_NO_SIZE_PREFETCH=1 it does. Values match the CPU.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gpu/gpu_test_util.h"
#include "runtime/executable_impl.h"
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

// Attention nodes kept whole in a compiled copy's blocks (0: decomposed).
int whole_attention(const detail::ExecutableImpl& e) {
  int n = 0;
  for (const auto& b : e.module.graph.blocks)
    for (int32_t id : b.nodes) n += e.module.graph.nodes[static_cast<size_t>(id)].kind == detail::OpKind::Attention;
  return n;
}

}  // namespace

// A padding mask [b, 1, 1, L] (BERT's, when an attention_mask is passed): the batch-1 copy
// compiled ahead would need cuDNN's answer for the mask's form at that size, not asked on the
// background thread, so the compile ahead is given up — not compiled with the attention
// decomposed (a tg::Error there was swallowed by the rewrite, session 37) and then taken by the
// batch-1 run for good. The batch-1 copy keeps its attention whole and matches the CPU.
TEST(CudaSizeClasses, APaddingMaskedAttentionIsNotCompiledAheadDecomposed) {
  detail::background_jobs_wait();
  gputest::FreshCacheDir cache("sizes");
  gputest::MaskedAttention a;
  Executable& cpu = a.cpu;
  Executable& e = a.gpu;
  const int64_t L = 56;  // a length no other test's plans have
  auto inputs = [&](int64_t b, uint64_t seed) { return gputest::MaskedAttention::inputs(b, L, seed); };
  const auto sixteen = inputs(16, 10);
  gputest::expect_close(e.run(sixteen)[0], cpu.run(sixteen)[0], 4e-3, "batch 16");
  detail::background_jobs_wait();  // the neighbouring classes' compiles ahead, batch 1 among them
  const auto one = inputs(1, 20);
  std::vector<TensorType> types;
  for (const TensorData& t : one) types.push_back(t.type());
  auto copy = e.impl().specialized_for(types, nullptr);
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(whole_attention(*copy), 1) << "the batch-1 copy runs the attention decomposed";
  gputest::expect_close(e.run(one)[0], cpu.run(one)[0], 4e-3, "batch 1");
  detail::background_jobs_wait();
}

// Sizes computed in the graph (sized_op: a padding up to a multiple of 4, a nearest upsampling
// by 2, a flatten of a product, a range over a dim): each size's copy turns them into the plain
// ops, whose kernels run and are captured at that size like any other. Values match the CPU, on
// each size's first (uncaptured) and second (captured) runs.
TEST(CudaSizeClasses, SizesComputedInTheGraphRunPerSize) {
  Graph g;
  Tensor x = g.placeholder({-1, 3, -1, -1}, DType::f32, "x");
  auto one = [&](int64_t v) { return g.constant(TensorData::from_vector(Shape{1}, DType::i64, {double(v)})); };
  auto dim = [&](Tensor t, int64_t i) { return g.slice(g.shape_of(t), {i}, {i + 1}); };
  Tensor up = g.floor_mod(g.sub(one(4), g.floor_mod(dim(x, 2), one(4))), one(4));
  Tensor padded = g.pad_sized(g.exp(x), g.concat({one(0), one(0), one(0), one(0), one(0), one(0), up, one(0)}, 0));
  ResizeDesc r;
  r.mode = ResizeMode::nearest;
  r.data_layout = Layout::nchw;
  Tensor big = g.resize_sized(padded, g.mul(g.slice(g.shape_of(padded), {2}, {4}), one(2)), r);
  Tensor flat = g.reshape_sized(big, g.concat({dim(big, 0), g.mul(g.mul(dim(big, 1), dim(big, 2)), dim(big, 3))}, 0));
  Tensor rows = g.arange_sized(g.scalar(0.0, DType::i64), g.reshape(g.cast(dim(x, 2), DType::i64), {}),
                               g.scalar(1.0, DType::i64), DType::f32);
  std::vector<std::pair<Tensor, TensorType>> feeds{{x, x.type()}};
  Executable gpu = g.compile(feeds, {flat, rows}, {}, {.device = Device::cuda(0)});
  Executable cpu = g.compile(feeds, {flat, rows}, {}, {.device = Device::cpu()});
  uint64_t seed = 3;
  for (Shape s : {Shape({2, 3, 5, 7}), Shape({1, 3, 8, 4}), Shape({3, 3, 2, 9})}) {
    TensorData in = TensorData::uniform(s, -1, 1, DType::f32, seed++);
    auto want = cpu.run({in});
    for (int k = 0; k < 2; ++k) {
      auto got = gpu.run({in});
      gputest::expect_close(got[0], want[0], 1e-5, "flat " + s.str());
      gputest::expect_close(got[1], want[1], 0, "rows " + s.str());
    }
  }
}
