// scaled_dot_product_attention on CUDA as cuDNN's fused kernel (backends/cuda/cudnn_attention.cpp,
// attention_lowering.cpp), against the CPU reference: every mask form the lowering rewrites,
// causal, rank 3, a query with every key masked; and that the node really ran whole (or was
// decomposed where the kernel does not apply). The same cases through tgraph's own kernel
// (kernels_attention.cu, TGRAPH_OWN_ATTENTION=1), and the tiered path: a cold shape's first
// calls run that kernel while cuDNN's plan is built on a thread.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "gpu_test_util.h"
#include "runtime/executable_impl.h"
#include "tgraph/graph.h"

using namespace tg;

namespace {

// Attention nodes left whole in the compiled program (0: decomposed); the blocks' nodes only
// (a rewritten node stays in the node list, unreachable).
int whole_attention(const Executable& e) {
  const auto& g = e.impl().module.graph;
  int n = 0;
  for (const auto& b : g.blocks)
    for (int32_t id : b.nodes) n += g.nodes[static_cast<size_t>(id)].kind == detail::OpKind::Attention;
  return n;
}

using gputest::half_data;

struct Case {
  std::string name;
  Shape q, k, v;
  bool causal = false;
  int mask = 0;  // 0 none, 1 additive [B,1,1,Lk] with -inf padding, 2 boolean [B,1,Lq,Lk] with a row all false
};

// Which kernel runs the kept node: cuDNN's (its plan built at compile time, as before the
// tiered path) or tgraph's own.
const std::map<std::string, std::string> kCudnn{{"TGRAPH_NO_INTERIM_ATTENTION", "1"}};
const std::map<std::string, std::string> kOwn{{"TGRAPH_OWN_ATTENTION", "1"}};

void run_case(const Case& c, DType t, double tol, const std::map<std::string, std::string>& switches = kCudnn) {
  SCOPED_TRACE(c.name + " " + dtype_name(t) + (switches.count("TGRAPH_OWN_ATTENTION") ? " (own kernel)" : ""));
  std::vector<TensorData> inputs{half_data(c.q, t, 1), half_data(c.k, t, 2), half_data(c.v, t, 3)};
  const int64_t Lq = c.q.dim(-2), Lk = c.k.dim(-2);
  if (c.mask == 1) {
    const int64_t B = c.q[0];
    TensorData m = TensorData::uniform({B, 1, 1, Lk}, -2, 2, t, 4);
    for (int64_t b = 0; b < B; ++b)  // the last b*5 keys of batch b are padding
      for (int64_t j = Lk - 5 * b; j < Lk; ++j) m.set(b * Lk + j, -std::numeric_limits<double>::infinity());
    inputs.push_back(m);
  } else if (c.mask == 2) {
    const int64_t B = c.q[0];
    TensorData r = TensorData::uniform({B, 1, Lq, Lk}, 0, 1, DType::f32, 5);
    TensorData m = TensorData::zeros(r.shape(), DType::boolean);
    for (int64_t i = 0; i < r.num_elements(); ++i) m.set(i, r.at(i) < 0.7 ? 1.0 : 0.0);
    for (int64_t j = 0; j < Lk; ++j) m.set(3 * Lk + j, 0.0);  // batch 0, query 3 sees no key
    inputs.push_back(m);
  }
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  std::optional<Tensor> mask;
  if (ph.size() > 3) mask = ph[3];
  Tensor y = g.scaled_dot_product_attention(ph[0], ph[1], ph[2], mask, AttentionDesc{0.0, c.causal});
  auto want = g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(inputs);
  Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0), .switches = switches});
  EXPECT_EQ(whole_attention(e), 1) << "attention was decomposed";
  const long long own_before = detail::cudnn_attention_own_calls();
  for (int run = 0; run < 2; ++run) {  // the second replays the captured graph
    TensorData got = e.run(inputs)[0];
    gputest::expect_close(got, want[0], tol, "run " + std::to_string(run));
    if (c.mask == 2)  // the query with no key gives 0
      for (int64_t d = 0; d < c.v.dim(-1); ++d) ASSERT_EQ(got.at(3 * c.v.dim(-1) + d), 0.0);
  }
  auto stats = detail::cuda_graph_stats(e.impl());
  EXPECT_EQ(stats.replays, 1) << stats.error;
  // Which kernel ran: tgraph's (the first run and the capture) or never.
  if (switches.count("TGRAPH_OWN_ATTENTION"))
    EXPECT_GE(detail::cudnn_attention_own_calls() - own_before, 1) << "tgraph's kernel did not run";
  else if (!std::getenv("TGRAPH_OWN_ATTENTION"))
    EXPECT_EQ(detail::cudnn_attention_own_calls(), own_before) << "tgraph's kernel ran where cuDNN's should";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"bhsd", {2, 3, 64, 64}, {2, 3, 64, 64}, {2, 3, 64, 64}},
      {"uneven lengths, padding bias", {3, 2, 40, 64}, {3, 2, 72, 64}, {3, 2, 72, 64}, false, 1},
      {"boolean mask with an empty row", {2, 4, 24, 32}, {2, 4, 56, 32}, {2, 4, 56, 32}, false, 2},
      {"causal", {2, 2, 48, 128}, {2, 2, 48, 128}, {2, 2, 48, 128}, true},
      {"rank 3, value dim apart", {6, 32, 64}, {6, 48, 64}, {6, 48, 32}},
  };
  return all;
}

// Shapes that reach the own kernel's edges: head dims not a multiple of its 32-dim chunks (8,
// 40), its largest (256), a value dim of its own, one query, lengths not a multiple of its
// 32-key tiles, causal with more queries than keys, many heads.
const std::vector<Case>& own_kernel_cases() {
  static const std::vector<Case> all{
      {"head dim 40, one query, padding bias", {3, 2, 1, 40}, {3, 2, 33, 40}, {3, 2, 33, 40}, false, 1},
      {"head dim 256, causal, more queries than keys", {1, 2, 70, 256}, {1, 2, 50, 256}, {1, 2, 50, 256}, true},
      {"head dim 8, value dim 24, 16 heads", {2, 16, 33, 8}, {2, 16, 65, 8}, {2, 16, 65, 24}},
      {"head dim 96, 100 keys, boolean mask", {2, 3, 65, 96}, {2, 3, 100, 96}, {2, 3, 100, 96}, false, 2},
  };
  return all;
}

bool tiered_path_switched_off() {
  for (const char* name : {"TGRAPH_NO_LIBRARY_WARMUP", "TGRAPH_NO_INTERIM_ATTENTION", "TGRAPH_OWN_ATTENTION"})
    if (const char* v = std::getenv(name); v && *v && std::string(v) != "0") return true;
  return false;
}

}  // namespace

TEST(CudaAttention, FusedKernelMatchesTheReferenceInHalf) {
  for (const Case& c : cases()) run_case(c, DType::f16, 4e-3);
}

TEST(CudaAttention, FusedKernelMatchesTheReferenceInBf16) {
  for (const Case& c : cases()) run_case(c, DType::bf16, 3e-2);
}

TEST(CudaAttention, OwnKernelMatchesTheReference) {
  for (DType t : {DType::f16, DType::bf16}) {
    const double tol = t == DType::f16 ? 4e-3 : 3e-2;
    for (const Case& c : cases()) run_case(c, t, tol, kOwn);
    for (const Case& c : own_kernel_cases()) run_case(c, t, tol, kOwn);
  }
}

// The tiered path: at a shape no process built a plan for (a fresh compile cache and a scale
// of this test's own), the first run computes with tgraph's kernel while cuDNN's plan is built
// on a thread, and is not captured; a save after it waits for the plan and writes it with the
// executable; once the plan is built, the next run computes with cuDNN and captures, and the
// one after replays. Every result as the CPU's.
TEST(CudaAttention, AColdShapesFirstRunsUseTgraphsKernelWhileCudnnBuildsItsPlan) {
  if (tiered_path_switched_off()) GTEST_SKIP() << "the tiered path is switched off in the environment";
  gputest::FreshCacheDir cache("interim-attention");
  for (DType t : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    const double tol = t == DType::f16 ? 4e-3 : 3e-2;
    std::vector<TensorData> inputs{half_data({2, 3, 40, 64}, t, 61), half_data({2, 3, 56, 64}, t, 62),
                                   half_data({2, 3, 56, 64}, t, 63), half_data({2, 1, 40, 56}, t, 64, 2.0)};
    Graph g;
    auto [ph, feeds] = gputest::placeholders_for(g, inputs);
    const double scale = t == DType::f16 ? 0.1234567 : 0.1234568;
    Tensor y = g.scaled_dot_product_attention(ph[0], ph[1], ph[2], ph[3], AttentionDesc{scale, false});
    auto want = g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(inputs);
    const long long before = detail::cudnn_attention_stand_ins();
    std::optional<Executable> compiled;
    {
      auto hold = detail::cudnn_attention_hold_builds();  // the plan is not done before the run needs it
      compiled = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
      EXPECT_EQ(whole_attention(*compiled), 1);
      gputest::expect_close(compiled->run(inputs)[0], want[0], tol, "first run");
    }
    Executable& e = *compiled;
    EXPECT_EQ(detail::cudnn_attention_stand_ins() - before, 1) << "the first run did not use tgraph's kernel";
    EXPECT_EQ(detail::cuda_graph_stats(e.impl()).replays, 0);
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("tgraph_interim_attention_" + std::to_string(::getpid()) + ".tgx")).string();
    e.save(path);  // waits for the plan
    {
      Executable l = Executable::load(path);
      std::lock_guard<std::mutex> lock(l.impl().device_code->mu);
      int attn = 0;
      for (const auto& [key, value] : l.impl().device_code->plans) attn += key.find("|attn|") != std::string::npos;
      EXPECT_EQ(attn, 1) << "the plan built after the first run was not saved with the executable";
    }
    std::filesystem::remove(path);
    detail::cudnn_attention_settle();
    for (int run = 1; run < 3; ++run)
      gputest::expect_close(e.run(inputs)[0], want[0], tol, "run " + std::to_string(run));
    EXPECT_EQ(detail::cudnn_attention_stand_ins() - before, 1);
    auto stats = detail::cuda_graph_stats(e.impl());
    EXPECT_EQ(stats.replays, 1) << stats.error;
  }
}

// f32 attention is decomposed (the fused kernel is half only); under f16 precision the same
// graph's attention computes in f16, whole.
TEST(CudaAttention, F32IsDecomposedAndAutocastKeepsItWhole) {
  std::vector<TensorData> inputs{TensorData::uniform({2, 2, 32, 64}, -1, 1, DType::f32, 7),
                                 TensorData::uniform({2, 2, 32, 64}, -1, 1, DType::f32, 8),
                                 TensorData::uniform({2, 2, 32, 64}, -1, 1, DType::f32, 9),
                                 TensorData::uniform({2, 1, 1, 32}, -1, 1, DType::f32, 10)};
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs);
  Tensor y = g.scaled_dot_product_attention(ph[0], ph[1], ph[2], ph[3]);
  auto want = g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(inputs);
  Executable f32 = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
  EXPECT_EQ(whole_attention(f32), 0);
  gputest::expect_close(f32.run(inputs)[0], want[0], 1e-5, "f32");
  Executable f16 = g.compile(feeds, {y}, {}, {.device = Device::cuda(0), .precision = Precision::f16});
  EXPECT_EQ(whole_attention(f16), 1);
  gputest::expect_close(f16.run(inputs)[0], want[0], 5e-3, "f16 precision");
}

// A mask that hides nothing, built from sizes as Hugging Face builds one when no
// attention_mask is passed (ge(arange(L), 0) broadcast to [1, 1, L, L]) and an additive mask of
// zeros: both are dropped at compile time (the node runs whole with three inputs: no bias, no
// fully-masked-row select), and the result is attention without a mask.
TEST(CudaAttention, MasksThatHideNothingAreDropped) {
  std::vector<TensorData> inputs{half_data({2, 3, 40, 64}, DType::f16, 11), half_data({2, 3, 40, 64}, DType::f16, 12),
                                 half_data({2, 3, 40, 64}, DType::f16, 13)};
  for (int form = 0; form < 2; ++form) {
    SCOPED_TRACE(form == 0 ? "boolean true from arange" : "additive zeros");
    Graph g;
    auto [ph, feeds] = gputest::placeholders_for(g, inputs);
    Tensor mask = form == 0 ? g.broadcast_to(g.greater_equal(g.reshape(g.arange(0, 40, 1), {1, 1, 40, 1}),
                                                             g.scalar(0.0)),
                                             {1, 1, 40, 40})
                            : g.constant(TensorData::zeros({2, 1, 1, 40}, DType::f16));
    Tensor y = g.scaled_dot_product_attention(ph[0], ph[1], ph[2], mask);
    Tensor plain = g.scaled_dot_product_attention(ph[0], ph[1], ph[2], std::nullopt);
    auto want = g.compile(feeds, {plain}, {}, {.device = Device::cpu()}).run(inputs);
    Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
    const auto& cg = e.impl().module.graph;
    int whole = 0;
    for (const auto& b : cg.blocks)
      for (int32_t id : b.nodes) {
        const auto& n = cg.nodes[static_cast<size_t>(id)];
        if (n.kind == detail::OpKind::Attention) {
          ++whole;
          EXPECT_EQ(n.inputs.size(), 3u) << "the mask was kept";
        }
        EXPECT_NE(n.kind, detail::OpKind::Select) << "a fully-masked-row select was left";
      }
    EXPECT_EQ(whole, 1);
    gputest::expect_close(e.run(inputs)[0], want[0], 4e-3, "masked");
  }
}

// A stream of new shapes, as a decoder's growing key length makes: 20 executables, one per key
// length, each compiled and run once while the builds are held. Every call is right (tgraph's
// kernel stands in each time); the builds wait in one bounded queue, so the 4 oldest are
// dropped unbuilt and 16 are built once the hold ends; a length whose build was dropped is
// deferred again when met again, and one whose plan was built runs cuDNN's, captured.
TEST(CudaAttention, AStreamOfColdShapesStandsInAndItsBuildsAreBounded) {
  if (tiered_path_switched_off()) GTEST_SKIP() << "the tiered path is switched off in the environment";
  gputest::FreshCacheDir cache("interim-attention-stream");
  struct Length {
    int64_t len;
    std::vector<TensorData> in, want;
    std::optional<Executable> exe;
  };
  std::vector<Length> lengths;
  const long long stood = detail::cudnn_attention_stand_ins(), made = detail::cudnn_attention_builds_made(),
                  dropped = detail::cudnn_attention_builds_dropped();
  {
    auto hold = detail::cudnn_attention_hold_builds();
    for (int64_t len = 17; len < 37; ++len) {
      Length l{len, {half_data({1, 4, 1, 64}, DType::f16, 300 + static_cast<uint64_t>(len)),
                     half_data({1, 4, len, 64}, DType::f16, 400 + static_cast<uint64_t>(len)),
                     half_data({1, 4, len, 64}, DType::f16, 500 + static_cast<uint64_t>(len))},
               {}, std::nullopt};
      Graph g;
      auto [ph, feeds] = gputest::placeholders_for(g, l.in);
      Tensor y = g.scaled_dot_product_attention(ph[0], ph[1], ph[2], std::nullopt, AttentionDesc{0.1357911, false});
      l.want = g.compile(feeds, {y}, {}, {.device = Device::cpu()}).run(l.in);
      l.exe = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
      gputest::expect_close(l.exe->run(l.in)[0], l.want[0], 4e-3, "key length " + std::to_string(len));
      lengths.push_back(std::move(l));
    }
  }
  EXPECT_EQ(detail::cudnn_attention_stand_ins() - stood, 20);
  detail::cudnn_attention_settle();
  EXPECT_EQ(detail::cudnn_attention_builds_dropped() - dropped, 4);
  EXPECT_EQ(detail::cudnn_attention_builds_made() - made, 16);
  Length& first = lengths.front();  // 17: dropped, so deferred again and stood in for again
  gputest::expect_close(first.exe->run(first.in)[0], first.want[0], 4e-3, "again at key length 17");
  EXPECT_EQ(detail::cudnn_attention_stand_ins() - stood, 21);
  Length& last = lengths.back();  // 36: built, so cuDNN's plan, captured after this run
  for (int run = 0; run < 2; ++run)
    gputest::expect_close(last.exe->run(last.in)[0], last.want[0], 4e-3, "again at key length 36");
  EXPECT_EQ(detail::cudnn_attention_stand_ins() - stood, 21);
  EXPECT_EQ(detail::cuda_graph_stats(last.exe->impl()).replays, 1);
  detail::cudnn_attention_settle();
}

// One executable with dynamic batch and sequence dims run at several sizes, each size's copy
// with its own cuDNN plan: each size, larger and smaller than the first and with keys longer
// than queries, matches the reference. The first is short, as BERT's first call was (16 x 16,
// then 16 x 128: with the first size's kernel shared, BERT-base computed garbage there).
TEST(CudaAttention, CallsAtSeveralSizesMatchTheCpu) {
  Graph g;
  Tensor q = g.placeholder(Shape({-1, 4, -1, 64}), DType::f16, "q");
  Tensor k = g.placeholder(Shape({-1, 4, -1, 64}), DType::f16, "k");
  Tensor v = g.placeholder(Shape({-1, 4, -1, 64}), DType::f16, "v");
  Tensor y = g.scaled_dot_product_attention(q, k, v, std::nullopt);
  const std::vector<std::pair<Tensor, TensorType>> feeds{{q, TensorType(Shape({-1, 4, -1, 64}), DType::f16)},
                                                         {k, TensorType(Shape({-1, 4, -1, 64}), DType::f16)},
                                                         {v, TensorType(Shape({-1, 4, -1, 64}), DType::f16)}};
  Executable cpu = g.compile(feeds, {y}, {}, {.device = Device::cpu()});
  Executable e = g.compile(feeds, {y}, {}, {.device = Device::cuda(0)});
  const std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> sizes{
      {16, {16, 16}}, {16, {128, 128}}, {2, {64, 64}}, {5, {16, 16}}, {1, {128, 256}}, {3, {40, 72}}, {2, {512, 512}}};
  uint64_t seed = 20;
  for (const auto& [b, lens] : sizes) {
    SCOPED_TRACE("batch " + std::to_string(b) + " Lq " + std::to_string(lens.first) + " Lk " +
                 std::to_string(lens.second));
    std::vector<TensorData> in{half_data({b, 4, lens.first, 64}, DType::f16, seed++),
                               half_data({b, 4, lens.second, 64}, DType::f16, seed++),
                               half_data({b, 4, lens.second, 64}, DType::f16, seed++)};
    auto want = cpu.run(in);
    for (int run = 0; run < 2; ++run) gputest::expect_close(e.run(in)[0], want[0], 4e-3, "run " + std::to_string(run));
  }
}

// An additive mask [b, 1, 1, Lk] (BERT's padding-mask form when an attention_mask is passed)
// through one executable at several sizes, the first short and the later ones longer: each
// size as the CPU.
TEST(CudaAttention, MaskedCallsAtGrowingSizesMatchTheCpu) {
  gputest::MaskedAttention a;
  uint64_t seed = 40;
  for (const auto& [b, len] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {16, 128}, {2, 512}, {3, 40}, {16, 16}}) {
    SCOPED_TRACE("batch " + std::to_string(b) + " length " + std::to_string(len));
    std::vector<TensorData> in = gputest::MaskedAttention::inputs(b, len, seed);
    seed += 4;
    auto want = a.cpu.run(in);
    for (int run = 0; run < 2; ++run) gputest::expect_close(a.gpu.run(in)[0], want[0], 4e-3, "run " + std::to_string(run));
  }
}
