// The collectives through NCCL on one GPU (a job of one rank with the nccl backend: the only
// kind of GPU machine lent so far has one device, and NCCL refuses two ranks on one). Each
// collective runs in a compiled CUDA executable that is captured into a CUDA graph and
// replayed, on NCCL's stream of its own and on the run's stream; values against the inputs
// (a world of one: every collective is the identity, a mean divides by one) and against the
// CPU backend (whose host collectives go through the same NCCL communicator); a gradient
// through all_reduce and a data-parallel step (average_gradients) training on the device.
// Skipped when NCCL cannot be loaded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/cuda_run.h"
#include "distributed/backend.h"
#include "gpu/gpu_test_util.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

// Joins a one-rank job on device 0 through NCCL for the test's duration.
class Nccl : public testing::Test {
 protected:
  void SetUp() override {
    if (!detail::nccl_available()) GTEST_SKIP() << "NCCL (libnccl.so.2) cannot be loaded here";
    distributed::Options o;
    o.rank = 0;
    o.world_size = 1;
    o.backend = "nccl";
    o.device = 0;
    distributed::init(o);
    ASSERT_EQ(distributed::backend(), "nccl");
  }
  void TearDown() override { distributed::shutdown(); }
};

const detail::cuda_run::CudaState& cuda_state(const Executable& e) {
  return *static_cast<const detail::cuda_run::CudaState*>(e.impl().backend_state.get());
}

void expect_captured(const Executable& e, const std::string& what) {
  const detail::CudaGraphStats s = detail::cuda_graph_stats(e.impl());
  EXPECT_EQ(s.captures, 1) << what << ": " << s.error;
  EXPECT_GE(s.replays, 1) << what << ": " << s.error;
  EXPECT_TRUE(s.error.empty()) << what << ": " << s.error;
}

}  // namespace

TEST_F(Nccl, EachCollectiveInACapturedGraphOnItsOwnStreamAndOnTheRunsStream) {
  for (DType t : {f32, f16, bf16, f64, i32, i64}) {
    for (bool same_stream : {false, true}) {
      const std::string what = std::string(dtype_name(t)) + (same_stream ? ", run's stream" : ", own stream");
      SCOPED_TRACE(what);
      // Large enough that NCCL's kernels take a while (a missing join would read early).
      const TensorData x = TensorData::uniform({4096, 65}, -3, 3, t, 7);
      Graph g;
      Tensor p = g.placeholder(x.shape(), t, "x");
      std::vector<Tensor> outs = {g.all_reduce(p), g.all_reduce(p, CollectiveReduce::max),
                                  g.all_reduce(p, CollectiveReduce::min), g.all_gather(p), g.reduce_scatter(p),
                                  g.broadcast(p, 0)};
      if (is_float(t)) outs.push_back(g.all_reduce(p, CollectiveReduce::mean));
      // Read right after the collectives, beside their operand: the run's stream must wait.
      outs.push_back(g.add(g.all_reduce(p), p));
      CompileOptions o{.device = Device::cuda(0)};
      if (same_stream) o.switches = {{"TGRAPH_DIST_SAME_STREAM", "1"}};
      Executable gpu = g.compile({{p, x.type()}}, outs, {}, o);
      const std::vector<TensorData> want = g.compile({{p, x.type()}}, outs, {}, {.device = Device::cpu()}).run({x});
      for (int run = 0; run < 3; ++run) {
        const std::vector<TensorData> got = gpu.run({x});
        for (size_t i = 0; i + 1 < outs.size(); ++i)
          gputest::expect_close(got[i], x, 0, what + ": collective " + std::to_string(i) + " run " + std::to_string(run));
        gputest::expect_close(got.back(), want.back(), 0, what + ": the sum read at once, run " + std::to_string(run));
        for (size_t i = 0; i < outs.size(); ++i) gputest::expect_close(got[i], want[i], 0, what + ": against the CPU");
      }
      expect_captured(gpu, what);
      // Whether NCCL's work went on the executable's own stream: one event per collective.
      const detail::cuda_run::CollectiveStream& cs = cuda_state(gpu).collectives;
      EXPECT_EQ(cs.stream != nullptr, !same_stream);
      EXPECT_EQ(cs.done.size(), same_stream ? 0u : outs.size());
    }
  }
}

TEST_F(Nccl, GradientThroughAllReduceAndADataParallelStepTrainOnTheDevice) {
  const TensorData x0 = TensorData::uniform({64, 32}, -1, 1, f32, 3), w0 = TensorData::uniform({32, 16}, -1, 1, f32, 4);
  const TensorData b0 = TensorData::uniform({16}, -1, 1, f32, 5);
  auto build = [&](Graph& g, Tensor& x, bool bucketed) {
    x = g.placeholder({64, 32}, f32, "x");
    Tensor w = g.variable(w0, "w"), b = g.variable(b0, "b");
    Tensor y = g.all_reduce(g.tanh(g.add(g.matmul(x, w), b)), CollectiveReduce::mean);
    Tensor loss = g.reduce_sum(g.mul(y, y));
    auto grads = g.gradients(loss, {w, b});
    std::vector<Tensor> gs = {grads[w], grads[b]};
    if (bucketed) gs = distributed::average_gradients(g, gs);
    Tensor lr = g.constant(TensorData::scalar(0.05));
    return std::make_pair(std::vector<Tensor>{loss, gs[0], gs[1]},
                          std::vector<Operation>{g.assign(w, g.sub(w, g.mul(lr, gs[0]))),
                                                 g.assign(b, g.sub(b, g.mul(lr, gs[1])))});
  };
  for (bool bucketed : {false, true}) {
    const std::string what = bucketed ? "average_gradients" : "gradient through all_reduce";
    SCOPED_TRACE(what);
    Graph gc, gg;
    Tensor xc, xg;
    auto [tc, oc] = build(gc, xc, bucketed);
    auto [tg_, og] = build(gg, xg, bucketed);
    Executable cpu = gc.compile({{xc, x0.type()}}, tc, oc, {.device = Device::cpu()});
    Executable gpu = gg.compile({{xg, x0.type()}}, tg_, og, {.device = Device::cuda(0)});
    distributed::broadcast_variables(gpu);  // through NCCL's host path: rank 0's own values
    for (int step = 0; step < 4; ++step) {
      const std::vector<TensorData> want = cpu.run({x0}), got = gpu.run({x0});
      for (size_t i = 0; i < want.size(); ++i)
        gputest::expect_close(got[i], want[i], 1e-4, what + ": step " + std::to_string(step) + " output " + std::to_string(i));
    }
    gputest::expect_close(gpu.variable("w"), cpu.variable("w"), 1e-4, what + ": w after 4 steps");
    gputest::expect_close(gpu.variable("b"), cpu.variable("b"), 1e-4, what + ": b after 4 steps");
    expect_captured(gpu, what);
    EXPECT_GT(cuda_state(gpu).collectives.done.size(), 0u) << what << ": no collective ran through NCCL";
  }
}

TEST_F(Nccl, HostCollectivesGoThroughTheDeviceCommunicator) {
  TensorData h = TensorData::uniform({1000}, -2, 2, f16, 9), want = h.clone();
  distributed::all_reduce(h, CollectiveReduce::mean);
  gputest::expect_close(h, want, 0, "f16 mean of one rank");
  gputest::expect_close(distributed::all_gather(want), want, 0, "all_gather of one rank");
  gputest::expect_close(distributed::reduce_scatter(want), want, 0, "reduce_scatter of one rank");
  distributed::broadcast(h, 0);
  gputest::expect_close(h, want, 0, "broadcast of one rank");
  distributed::barrier();
}

// The watchdog on a CUDA step's NCCL work (communicator.cpp, watchdog.h), in a job of one rank:
// steps that finish in time are released and never fire it (many runs, captured); a step that
// takes longer than the job's timeout (a slow chain of matmuls before its all_reduce, with a
// timeout of 1 ms standing in for a dead peer) has the communicator aborted and its run fails
// with an error naming the communicator, and so does the run after it. Each part leaves the job
// (shutdown) however it ends, so the next tests can join again.
TEST(NcclWatchdog, AStepPastTheTimeoutAbortsTheCommunicatorAndFailsTheRun) {
  if (!detail::nccl_available()) GTEST_SKIP() << "NCCL (libnccl.so.2) cannot be loaded here";
  for (double timeout : {300.0, 0.001}) {
    SCOPED_TRACE("timeout " + std::to_string(timeout));
    distributed::Options o;
    o.rank = 0;
    o.world_size = 1;
    o.backend = "nccl";
    o.device = 0;
    o.timeout_s = timeout;
    distributed::init(o);
    struct Leave {  // however this part ends: the next tests join again
      ~Leave() { distributed::shutdown(); }
    } leave;
    Graph g;
    Tensor a = g.placeholder({4096, 4096}, f32, "a");
    Tensor y = a;
    // ~150 ms of f32 work enqueued before the collective, whose watch begins at its enqueue:
    // the 1 ms timeout passes while the GPU is still busy.
    for (int i = 0; i < 64; ++i) y = g.matmul(y, a);
    Tensor r = g.all_reduce(g.reduce_sum(y, {1}));
    Executable e = g.compile({{a, a.type()}}, {r}, {}, {.device = Device::cuda(0)});
    const TensorData x = TensorData::uniform({4096, 4096}, -0.015, 0.015, f32, 11);
    if (timeout > 1) {
      for (int run = 0; run < 4; ++run) EXPECT_NO_THROW(e.run({x})) << "run " << run;
    } else {
      try {
        e.run({x});
        ADD_FAILURE() << "a step past the timeout did not fail";
      } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("the communicator failed"), std::string::npos) << err.what();
        EXPECT_NE(std::string(err.what()).find("did not finish within"), std::string::npos) << err.what();
      }
      try {
        e.run({x});
        ADD_FAILURE() << "a run after the communicator failed did not fail";
      } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("the communicator failed"), std::string::npos) << err.what();
      }
    }
  }
}
