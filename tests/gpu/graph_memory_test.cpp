// GraphMemory: the device memory captured graphs and executables' constants live in (plain
// cudaMalloc chunks, not the stream-ordered pool; docs/decisions.md). Its pieces are aligned and
// usable, it grows in chunks, and it goes back to the driver when the last buffer does.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/device_context.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

TEST(GraphMemoryGpu, PiecesAreAlignedDisjointAndUsable) {
  detail::DeviceContext& ctx = detail::DeviceContext::get(0);
  const size_t before = detail::graph_memory_bytes(0);
  {
    std::vector<detail::DeviceBuffer> bufs;
    std::vector<size_t> sizes{
        1, 300, 4096, size_t{5} << 20, 7, size_t{3} << 20};  // 5 MiB: a chunk of its own
    {
      detail::GraphMemory m(ctx);
      for (size_t n : sizes) bufs.push_back(m.take(n));
      EXPECT_GE(m.bytes(), (size_t{8} << 20) + 4096);
      EXPECT_EQ(detail::graph_memory_bytes(0) - before, m.bytes());
    }  // the buffers keep their chunks after the GraphMemory is gone
    EXPECT_GT(detail::graph_memory_bytes(0), before);
    for (size_t i = 0; i < bufs.size(); ++i) {
      auto a = reinterpret_cast<uintptr_t>(bufs[i].get());
      EXPECT_EQ(a % 256, 0u) << i;
      for (size_t j = 0; j < i; ++j) {
        auto b = reinterpret_cast<uintptr_t>(bufs[j].get());
        EXPECT_TRUE(a + sizes[i] <= b || b + sizes[j] <= a) << i << " overlaps " << j;
      }
    }
    // Each piece holds what is written to it (a neighbour's write would show).
    for (size_t i = 0; i < bufs.size(); ++i) {
      std::vector<unsigned char> h(sizes[i], static_cast<unsigned char>(17 * i + 3));
      ASSERT_EQ(cudaMemcpy(bufs[i].get(), h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    for (size_t i = 0; i < bufs.size(); ++i) {
      std::vector<unsigned char> h(sizes[i]);
      ASSERT_EQ(cudaMemcpy(h.data(), bufs[i].get(), h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      for (unsigned char c : h) ASSERT_EQ(c, static_cast<unsigned char>(17 * i + 3)) << i;
    }
  }
  EXPECT_EQ(detail::graph_memory_bytes(0), before);
}

// A captured run (a while loop with constants in its body) holds graph memory for its inputs,
// intermediates and constants, and gives it all back when the executable goes.
TEST(GraphMemoryGpu, AnExecutableGivesItsMemoryBack) {
  const size_t before = detail::graph_memory_bytes(0);
  {
    Graph g;
    Tensor x = g.placeholder({1000}, f32, "x");
    auto r = g.while_loop(
        {x, g.scalar(0, i32)},
        [&](Graph& s, std::vector<Tensor> v) {
          return std::pair{s.less(v[1], s.scalar(5, i32)), v};
        },
        [&](Graph& s, std::vector<Tensor> v) {
          return std::vector{s.add(s.mul(v[0], s.scalar(0.5)), s.scalar(1.0)), s.add(v[1], s.scalar(1, i32))};
        });
    Executable e = g.compile({{x, x.type()}}, {r[0]}, {}, CompileOptions{.device = Device::cuda(0)});
    TensorData in = TensorData::uniform({1000}, -3, 3, f32, 11);
    for (int run = 0; run < 3; ++run) {
      TensorData y = e.run({in})[0];
      for (int64_t i = 0; i < 1000; ++i) {
        double want = in.at(i);
        for (int k = 0; k < 5; ++k) want = want * 0.5 + 1.0;
        ASSERT_NEAR(y.at(i), want, 1e-5) << "run " << run << " at " << i;
      }
    }
    detail::CudaGraphStats st = detail::cuda_graph_stats(e.impl());
    EXPECT_EQ(st.captures, 1) << st.error;
    EXPECT_EQ(st.replays, 2);
    EXPECT_GT(detail::graph_memory_bytes(0), before);
  }
  EXPECT_EQ(detail::graph_memory_bytes(0), before);
}

// A released piece serves a later take of the same size or smaller (no new chunk), neighbours
// merge, and a piece still held is never handed out twice.
TEST(GraphMemoryGpu, ReleasedPiecesAreReused) {
  detail::DeviceContext& ctx = detail::DeviceContext::get(0);
  detail::GraphMemory m(ctx);
  detail::DeviceBuffer a = m.take(size_t{1} << 20), b = m.take(size_t{1} << 20), c = m.take(4096);
  const size_t reserved = m.bytes();
  std::byte* pa = a.get();
  a.reset();
  b.reset();  // a and b merge into one free 2 MiB piece
  detail::DeviceBuffer d = m.take(size_t{3} << 19);  // 1.5 MiB: fits in the merged piece
  EXPECT_EQ(d.get(), pa);
  detail::DeviceBuffer e = m.take(size_t{1} << 19);  // the rest of it
  EXPECT_EQ(e.get(), pa + (size_t{3} << 19));
  EXPECT_EQ(m.bytes(), reserved);
  detail::DeviceBuffer f = m.take(4096);  // nothing free fits: new bytes, not c's
  EXPECT_NE(f.get(), c.get());
}

// A plan (GraphMemory::plan) serves takes of the planned sizes (or less) in order at their
// offsets in one chunk; a take that would overlap a planned buffer still alive, or is larger
// than planned, gets a chunk of its own, and the plan goes on with the next take.
TEST(GraphMemoryGpu, PlannedTakesLandAtTheirOffsetsWhereTheyFit) {
  detail::DeviceContext& ctx = detail::DeviceContext::get(0);
  detail::GraphMemory m(ctx);
  // a [0, 1 MiB) and b [1 MiB, 1.5 MiB) alive together; c reuses a's bytes once a is gone;
  // d is planned over b, which will still be alive; e is larger than planned; f fits again.
  const size_t mib = size_t{1} << 20;
  m.plan({mib, mib / 2, mib, mib / 2, mib / 2, mib / 2}, {0, mib, 0, mib, 0, mib / 2}, 2 * mib);
  EXPECT_EQ(m.bytes(), 2 * mib);
  detail::DeviceBuffer a = m.take(mib), b = m.take(mib / 2);
  EXPECT_EQ(b.get(), a.get() + mib);
  std::byte* base = a.get();
  a.reset();
  detail::DeviceBuffer c = m.take(mib - 100);  // rounded up: within the planned size
  EXPECT_EQ(c.get(), base);
  EXPECT_EQ(m.planned_takes(), 3u);
  auto outside = [&](const detail::DeviceBuffer& x) { return x.get() < base || x.get() >= base + 2 * mib; };
  detail::DeviceBuffer d = m.take(mib / 2);  // b is alive there
  EXPECT_TRUE(outside(d));
  c.reset();
  detail::DeviceBuffer e = m.take(mib);  // more than planned
  EXPECT_TRUE(outside(e));
  detail::DeviceBuffer f = m.take(mib / 4);  // planned at mib / 2, clear now that c is gone
  EXPECT_EQ(f.get(), base + mib / 2);
  EXPECT_EQ(m.planned_takes(), 4u);
}

// A captured training step lays its memory out from the uncaptured run before it: every take of
// the block planned, the graph's memory about the most its buffers held at once (the inputs'
// and variables' copies, taken apart, in chunks of at least 2 MiB each), and the values still
// the CPU's.
TEST(GraphMemoryGpu, ACapturedTrainingStepHoldsItsLivePeak) {
  const int64_t batch = 2048, width = 512;
  // Six relu(x w) layers, a squared error and SGD on the weights, compiled for `device` (each
  // graph its own variables).
  auto step = [&](Graph& g, Device device) {
    Tensor x = g.placeholder({batch, width}, f32, "x"), t = g.placeholder({batch, width}, f32, "t");
    std::vector<Tensor> ws;
    Tensor y = x;
    for (int l = 0; l < 6; ++l) {
      ws.push_back(g.variable(TensorData::uniform({width, width}, -0.05, 0.05, f32, 10 + l), "w" + std::to_string(l)));
      y = g.relu(g.matmul(y, ws.back()));
    }
    Tensor loss = g.reduce_mean(g.square(g.sub(y, t)));
    auto grads = g.gradients(loss, ws);
    std::vector<Operation> ops;
    for (Tensor w : ws) ops.push_back(g.assign(w, g.sub(w, g.mul(grads[w], g.scalar(0.1)))));
    return g.compile({{x, x.type()}, {t, t.type()}}, {loss}, ops, CompileOptions{.device = device});
  };
  TensorData xs = TensorData::uniform({batch, width}, -1, 1, f32, 1), ts = TensorData::uniform({batch, width}, 0, 1, f32, 2);
  Graph g, h;
  Executable e = step(g, Device::cuda(0)), c = step(h, Device::cpu());
  std::vector<float> losses;
  for (int run = 0; run < 4; ++run) losses.push_back(static_cast<float>(e.run({xs, ts})[0].at(0)));
  const detail::CudaGraphStats s = detail::cuda_graph_stats(e.impl());
  ASSERT_EQ(s.captures, 1) << s.error;
  EXPECT_GT(s.graph_planned, 10u);
  EXPECT_LE(s.graph_bytes, s.graph_live_peak + (size_t{8} << 20)) << s.graph_bytes << " for a live peak of " << s.graph_live_peak;
  EXPECT_LT(losses[3], losses[0]);
  for (int run = 0; run < 4; ++run)
    EXPECT_NEAR(c.run({xs, ts})[0].at(0), losses[static_cast<size_t>(run)], 1e-3 * std::abs(losses[0])) << "run " << run;
}

// A captured run of 40 chained matmuls (no two fuse) holds a few of its [512, 512]
// intermediates at a time, not all 40: each is dropped after its last reader and its bytes
// serve the next. The values are the CPU's, on the captured run and its replays.
TEST(GraphMemoryGpu, ACapturedChainReusesItsIntermediates) {
  const int64_t n = 512;
  const int depth = 40;
  Graph g;
  Tensor x = g.placeholder({n, n}, f32, "x");
  Tensor w = g.constant(TensorData::uniform({n, n}, -1.0 / 16, 1.0 / 16, f32, 5), "w");
  Tensor y = x;
  for (int i = 0; i < depth; ++i) y = g.tanh(g.matmul(y, w));
  TensorData in = TensorData::uniform({n, n}, -1, 1, f32, 6);
  TensorData want = g.compile({{x, x.type()}}, {y}, {}, CompileOptions{.device = Device::cpu()}).run({in})[0];
  const size_t before = detail::graph_memory_bytes(0);
  Executable e = g.compile({{x, x.type()}}, {y}, {}, CompileOptions{.device = Device::cuda(0)});
  for (int run = 0; run < 3; ++run) {
    TensorData got = e.run({in})[0];
    for (int64_t i = 0; i < n * n; i += 97) ASSERT_NEAR(got.at(i), want.at(i), 1e-4) << "run " << run << " at " << i;
  }
  EXPECT_EQ(detail::cuda_graph_stats(e.impl()).captures, 1) << detail::cuda_graph_stats(e.impl()).error;
  const size_t tensor = n * n * 4, held = detail::graph_memory_bytes(0) - before;
  EXPECT_LT(held, 12 * tensor) << "the capture holds " << held / tensor << " intermediates' worth";
}

// A stream-ordered caller that donates its input (the same buffer refilled each step, as a
// caching allocator hands it back) lets the captured run keep its intermediates in the input's
// bytes once the input is read: its buffers hold fewer bytes of its own than without, the CPU's
// values at every replay. A call that does not donate gets no replay of that graph (a capture of
// its own), and its input is left as it was.
TEST(GraphMemoryGpu, DonatedInputsHoldTheRunsIntermediates) {
  const int64_t n = 1024;
  Graph g;
  Tensor x = g.placeholder({n, n}, f32, "x");
  Tensor w = g.constant(TensorData::uniform({n, n}, -1.0 / 16, 1.0 / 16, f32, 5), "w");
  Tensor h = x;
  for (int i = 0; i < 8; ++i) h = g.tanh(g.matmul(h, w));
  // A small output: a large one (alive past the run, so in the graph's own memory) beside the
  // product it is made from would set both peaks alike.
  Tensor y = g.reduce_sum(h, {1});
  Executable cpu = g.compile({{x, x.type()}}, {y}, {}, CompileOptions{.device = Device::cpu()});
  Executable donating = g.compile({{x, x.type()}}, {y}, {}, CompileOptions{.device = Device::cuda(0)});
  Executable plain = g.compile({{x, x.type()}}, {y}, {}, CompileOptions{.device = Device::cuda(0)});
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  DeviceTensor in = DeviceTensor::allocate(x.type(), Device::cuda(0));
  auto fill = [&](const TensorData& v) {
    ASSERT_EQ(cudaMemcpyAsync(in.data(), v.data(), v.nbytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
  };
  for (int step = 0; step < 4; ++step) {
    TensorData v = TensorData::uniform({n, n}, -1, 1, f32, 10 + step);
    const TensorData want = cpu.run({v})[0];
    for (Executable* e : {&donating, &plain}) {
      fill(v);
      std::vector<DeviceTensor> out = e == &donating ? e->run_device({in}, stream, {0}) : e->run_device({in}, stream);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      TensorData got = out[0].to_host();
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(got.at(i), want.at(i), 1e-3) << "step " << step << (e == &donating ? " donated" : " plain") << " at " << i;
    }
  }
  const RunStats d = donating.run_stats(), p = plain.run_stats();
  EXPECT_EQ(d.captures, 1) << d.capture_error;
  EXPECT_GE(d.replays, 2);
  EXPECT_GT(d.buffers_in_donated, 0u);
  EXPECT_EQ(p.buffers_in_donated, 0u);
  EXPECT_LE(d.graph_live_peak + n * n * 2, p.graph_live_peak)  // one [n, n] intermediate fewer (4 MiB)
      << "donated: " << d.graph_live_peak << " bytes, plain: " << p.graph_live_peak;
  // Not donated this time: the graph that writes into the input is not replayed.
  TensorData v = TensorData::uniform({n, n}, -1, 1, f32, 20);
  fill(v);
  std::vector<DeviceTensor> out = donating.run_device({in}, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const TensorData want = cpu.run({v})[0], got = out[0].to_host(), kept = in.to_host();
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got.at(i), want.at(i), 1e-3) << "at " << i;
  for (int64_t i = 0; i < n * n; i += 97) ASSERT_EQ(kept.at(i), v.at(i)) << "the input changed at " << i;
  EXPECT_EQ(donating.run_stats().captures, 2);
  EXPECT_THROW(donating.run_device({in}, stream, {1}), Error);
  cudaStreamDestroy(stream);
}

}  // namespace
