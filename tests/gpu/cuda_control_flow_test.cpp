// Control flow on the device: if_else, for_loop and while_loop lowered to CUDA graph
// conditional nodes, against the CPU backend on random inputs. Each GPU executable records
// its first run and replays the captured graph after; a replay with capture_error empty
// proves the predicates and trip counts never went to the host.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"
#include "gpu/gpu_test_util.h"

using namespace tg;

namespace {

using gputest::expect_close;

TensorData rnd(Shape s, uint64_t seed, double lo = -1, double hi = 1) {
  return TensorData::uniform(std::move(s), lo, hi, f32, seed);
}
TensorData i32s(int v) { return TensorData::scalar(v, i32); }
TensorData flag(bool b) { return TensorData::scalar(b ? 1 : 0, boolean); }

struct Built {
  std::vector<std::pair<Tensor, TensorType>> feeds;
  std::vector<Tensor> targets;
  std::vector<Operation> ops;
};
using Builder = std::function<Built(Graph&)>;

// The same graph built twice (each graph has its own variables) and compiled for each device.
struct CpuAndGpu {
  Graph gc, gg;
  Executable cpu, gpu;
  explicit CpuAndGpu(const Builder& build) {
    Built c = build(gc), g = build(gg);
    cpu = gc.compile(c.feeds, c.targets, c.ops, {.device = Device::cpu()});
    gpu = gg.compile(g.feeds, g.targets, g.ops, {.device = Device::cuda(0)});
  }
  void check(const std::vector<TensorData>& in, double tol, const std::string& what) {
    std::vector<TensorData> want = cpu.run(in), got = gpu.run(in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(got[i], want[i], tol, what + ": output " + std::to_string(i));
  }
  void expect_replayed(int replays) {
    detail::CudaGraphStats s = detail::cuda_graph_stats(gpu.impl());
    EXPECT_TRUE(s.error.empty()) << s.error;
    EXPECT_EQ(s.captures, 1) << s.error;
    EXPECT_EQ(s.replays, replays) << s.error;
  }
};

Tensor in(Built& b, Graph& g, Shape s, DType t, const std::string& name) {
  Tensor x = g.placeholder(s, t, name);
  b.feeds.emplace_back(x, TensorType(std::move(s), t));
  return x;
}

}  // namespace

TEST(CudaControlFlow, IfElseTakesBothBranchesOnReplay) {
  CpuAndGpu fed([](Graph& g) {
    Built b;
    Tensor p = in(b, g, Shape{}, boolean, "p"), x = in(b, g, {16, 8}, f32, "x"),
           w = in(b, g, {8, 8}, f32, "w");
    auto out = g.if_else(
        p,
        [&](Graph& r) {
          return std::vector{r.tanh(r.matmul(x, w)), r.reduce_sum(x)};
        },
        [&](Graph& r) {
          return std::vector{r.mul(x, r.scalar(2.0)), r.reduce_max(x)};
        });
    b.targets = {g.add(out[0], x), out[1]};
    return b;
  });
  for (int run = 0; run < 4; ++run)
    fed.check({flag(run % 2 == 0), rnd({16, 8}, 10 + run), rnd({8, 8}, 20 + run)}, 1e-5,
              "run " + std::to_string(run));
  fed.expect_replayed(3);

  // The predicate computed on the device, from data.
  CpuAndGpu computed([](Graph& g) {
    Built b;
    Tensor x = in(b, g, {32}, f32, "x");
    auto out = g.if_else(
        g.greater(g.reduce_sum(x), g.scalar(0.0)), [&](Graph& r) { return std::vector{r.exp(x)}; },
        [&](Graph& r) { return std::vector{r.neg(x)}; });
    b.targets = {out[0]};
    return b;
  });
  for (int run = 0; run < 4; ++run) {  // positive sums, then negative ones
    bool pos = run % 2 == 0;
    computed.check({rnd({32}, 30 + run, pos ? 0.1 : -1, pos ? 1 : -0.1)}, 1e-5,
                   "data predicate run " + std::to_string(run));
  }
  computed.expect_replayed(3);
}

TEST(CudaControlFlow, ForLoopBoundsStepsAndMatmulInTheBody) {
  CpuAndGpu loop([](Graph& g) {
    Built b;
    Tensor lo = in(b, g, Shape{}, i32, "lo"), hi = in(b, g, Shape{}, i32, "hi"),
           step = in(b, g, Shape{}, i32, "step");
    Tensor x = in(b, g, {4, 8}, f32, "x"), w = in(b, g, {8, 8}, f32, "w");
    auto r = g.for_loop(lo, hi, step, {x, g.scalar(1.0)}, [&](Graph& s, Tensor i, std::vector<Tensor> a) {
      Tensor fi = s.cast(i, f32);
      // Reads the outer w; the index feeds both carried values.
      return std::vector{s.add(s.tanh(s.matmul(a[0], w)), s.mul(fi, s.scalar(0.01))), s.add(a[1], fi)};
    });
    b.targets = {r[0], r[1], g.mul(r[0], r[1])};
    return b;
  });
  const int bounds[][3] = {{0, 5, 1}, {2, 11, 3}, {5, 5, 1}, {7, 3, 1}, {-3, 4, 2}};
  uint64_t seed = 40;
  for (const auto& bd : bounds) {
    std::string what =
        "for " + std::to_string(bd[0]) + ".." + std::to_string(bd[1]) + " step " + std::to_string(bd[2]);
    loop.check({i32s(bd[0]), i32s(bd[1]), i32s(bd[2]), rnd({4, 8}, seed++), rnd({8, 8}, seed++, -0.5, 0.5)},
               1e-4, what);
  }
  loop.expect_replayed(4);
  // A step that is not positive is an error on the device too, and the next run recovers.
  std::vector<TensorData> bad{i32s(0), i32s(4), i32s(0), rnd({4, 8}, 1), rnd({8, 8}, 2)};
  EXPECT_THROW(loop.cpu.run(bad), Error);
  EXPECT_THROW(loop.gpu.run(bad), Error);
  loop.check({i32s(1), i32s(4), i32s(1), rnd({4, 8}, 3), rnd({8, 8}, 4)}, 1e-4, "after the error");
}

TEST(CudaControlFlow, WhileLoopNewtonSqrtReturnsBeforesResults) {
  CpuAndGpu newton([](Graph& g) {
    Built b;
    Tensor a = in(b, g, {64}, f32, "a");
    auto r = g.while_loop(
        {a, g.scalar(0, i32)},
        [&](Graph& s, std::vector<Tensor> v) {
          // before: the error of the current estimate; results differ from the params.
          Tensor err = s.reduce_max(s.abs(s.sub(s.mul(v[0], v[0]), a)));
          Tensor go = s.logical_and(s.greater(err, s.scalar(1e-5)), s.less(v[1], s.scalar(30, i32)));
          return std::pair{go, std::vector{v[0], v[1], err}};
        },
        [&](Graph& s, std::vector<Tensor> v) {
          Tensor y = s.mul(s.scalar(0.5), s.add(v[0], s.div(a, v[0])));
          return std::vector{y, s.add(v[1], s.scalar(1, i32))};
        });
    b.targets = {r[0], r[1], r[2]};
    return b;
  });
  for (int run = 0; run < 3; ++run)
    newton.check({rnd({64}, 50 + run, 1, 4)}, 2e-5, "newton run " + std::to_string(run));
  newton.expect_replayed(2);
}

TEST(CudaControlFlow, NestedLoopInsideIfInsideLoop) {
  CpuAndGpu nested([](Graph& g) {
    Built b;
    Tensor x = in(b, g, {8}, f32, "x"), w = in(b, g, {8}, f32, "w"), n = in(b, g, Shape{}, i32, "n");
    auto r = g.while_loop(
        {x, g.scalar(0, i32)},
        [&](Graph& s, std::vector<Tensor> v) {
          return std::pair{s.less(v[1], n), v};
        },
        [&](Graph& s, std::vector<Tensor> v) {
          Tensor even = s.equal(s.floor_mod(v[1], s.scalar(2, i32)), s.scalar(0, i32));
          auto y = s.if_else(
              even,
              [&](Graph& t) {
                return t.for_loop(
                    t.add(v[1], t.scalar(2, i32)), {v[0]}, [&](Graph& u, Tensor i, std::vector<Tensor> a) {
                      return std::vector{u.add(u.mul(a[0], u.scalar(0.9)), u.mul(w, u.cast(i, f32)))};
                    });
              },
              [&](Graph& t) { return std::vector{t.mul(v[0], t.scalar(1.1))}; });
          return std::vector{y[0], s.add(v[1], s.scalar(1, i32))};
        });
    b.targets = {r[0], r[1]};
    return b;
  });
  for (int run = 0; run < 3; ++run)
    nested.check({rnd({8}, 60 + run), rnd({8}, 70 + run), i32s(3 + run)}, 1e-5,
                 "nested run " + std::to_string(run));
  nested.expect_replayed(2);
}

TEST(CudaControlFlow, AssignsInsideBodiesReachTheVariable) {
  CpuAndGpu acc([](Graph& g) {
    Built b;
    Tensor x = in(b, g, {8}, f32, "x"), p = in(b, g, Shape{}, boolean, "p");
    Tensor v = g.variable(TensorData::uniform({8}, -1, 1, f32, 3), "acc");
    Tensor u = g.variable(TensorData::uniform({8}, -1, 1, f32, 4), "flip");
    auto r = g.for_loop(g.scalar(0, i32), g.scalar(4, i32), g.scalar(1, i32), {x},
                        [&](Graph& s, Tensor, std::vector<Tensor> a) {
                          Tensor cur = s.read_variable(v);
                          Operation up = s.assign(v, s.add(s.mul(cur, s.scalar(0.5)), a[0]));
                          return s.control_dependency({up}, [&] {
                            return std::vector{s.add(a[0], s.mul(s.read_variable(v), s.scalar(0.1)))};
                          });
                        });
    // Assigned in one branch only: the other keeps the value.
    auto f = g.if_else(
        p,
        [&](Graph& s) {
          Operation up = s.assign(u, s.add(s.read_variable(u), r[0]));
          return s.control_dependency({up}, [&] { return std::vector{s.read_variable(u)}; });
        },
        [&](Graph& s) { return std::vector{s.read_variable(u)}; });
    b.targets = {r[0], f[0]};
    return b;
  });
  for (int run = 0; run < 4; ++run) {
    acc.check({rnd({8}, 80 + run), flag(run != 1)}, 1e-5, "assign run " + std::to_string(run));
    for (const char* name : {"acc", "flip"})
      expect_close(acc.gpu.variable(name), acc.cpu.variable(name), 1e-5,
                   std::string(name) + " after run " + std::to_string(run));
  }
  acc.expect_replayed(3);
}

TEST(CudaControlFlow, TenThousandIterationWhileLoopIsCaptured) {
  CpuAndGpu count([](Graph& g) {
    Built b;
    Tensor x = in(b, g, {1024}, f32, "x"), n = in(b, g, Shape{}, i32, "n");
    auto r = g.while_loop(
        {x, g.scalar(0, i32)},
        [&](Graph& s, std::vector<Tensor> v) {
          return std::pair{s.less(v[1], n), v};
        },
        [&](Graph& s, std::vector<Tensor> v) {
          return std::vector{s.add(s.mul(v[0], s.scalar(0.5)), s.scalar(1.0)), s.add(v[1], s.scalar(1, i32))};
        });
    b.targets = {r[0], r[1]};
    return b;
  });
  count.check({rnd({1024}, 90), i32s(10000)}, 1e-6, "10k first run");
  count.check({rnd({1024}, 91, -100, 100), i32s(10000)}, 1e-6, "10k replay");
  count.check({rnd({1024}, 92, -100, 100), i32s(3)}, 1e-6, "3 iterations");
  count.check({rnd({1024}, 93), i32s(0)}, 1e-6, "no iteration");
  count.expect_replayed(3);
  // The body's two kernels write the state buffers and the predicate's kernel sets the
  // condition: no control kernel runs per iteration (loop_donation.h).
  detail::CudaGraphStats st = detail::cuda_graph_stats(count.gpu.impl());
  EXPECT_EQ(st.body_control_kernels, 0);
  EXPECT_EQ(st.body_results_in_place, 2);
  EXPECT_EQ(st.body_conditions_in_kernels, 1);
  std::vector<TensorData> last = count.gpu.run({rnd({1024}, 94, -100, 100), i32s(10000)});
  EXPECT_EQ(last[1].at(0), 10000);
  for (int64_t i = 0; i < 1024; ++i) ASSERT_NEAR(last[0].at(i), 2.0, 1e-6) << i;
}

// Loop results computed straight into the state buffers, in the cases where that must not
// happen (old contents copied to another state, read after the producer, one value in two
// states) and where it may (reads before the producer, a for_loop body, a loop nested in a
// loop, a predicate computed in `after` and passed through `before`), against the CPU.
TEST(CudaControlFlow, LoopResultsComputedInPlaceMatchTheCpu) {
  CpuAndGpu loops([](Graph& g) {
    Built b;
    Tensor x = in(b, g, {4, 8}, f32, "x"), n = in(b, g, Shape{}, i32, "n");
    // (a, b) -> (a*0.9 + 1, a): the old a is copied into b at the end of each trip.
    auto shift = g.while_loop(
        {x, x, g.scalar(0, i32)}, [&](Graph& s, std::vector<Tensor> v) { return std::pair{s.less(v[2], n), v}; },
        [&](Graph& s, std::vector<Tensor> v) {
          return std::vector{s.add(s.mul(v[0], s.scalar(0.9)), s.scalar(1.0)), v[0], s.add(v[2], s.scalar(1, i32))};
        });
    // y read by a concat with the old a after y's kernel; y returned twice; a reduction of
    // the old a before y's kernel.
    auto mixed = g.while_loop(
        {x, x, g.scalar(0, i32)}, [&](Graph& s, std::vector<Tensor> v) { return std::pair{s.less(v[2], n), v}; },
        [&](Graph& s, std::vector<Tensor> v) {
          Tensor mean = s.reduce_mean(v[0], {1}, true);
          Tensor y = s.add(s.mul(s.sub(v[0], mean), s.scalar(0.5)), s.scalar(0.25));
          Tensor both = s.slice(s.concat({y, v[1]}, 0), {2, 0}, {6, 8});
          return std::vector{y, s.add(both, s.mul(v[1], s.scalar(0.1))), s.add(v[2], s.scalar(1, i32))};
        });
    // A for_loop over the index with a while_loop nested in its body; the inner predicate is
    // computed in `after` and passed through `before`.
    auto outer = g.for_loop(n, {x}, [&](Graph& s, Tensor i, std::vector<Tensor> v) {
      auto inner = s.while_loop(
          {s.mul(v[0], s.scalar(0.5)), s.scalar(1, boolean)},
          [&](Graph& t, std::vector<Tensor> u) { return std::pair{u[1], u}; },
          [&](Graph& t, std::vector<Tensor> u) {
            Tensor m = t.reduce_max(t.abs(u[0]));
            return std::vector{t.add(u[0], t.scalar(0.125)), t.less(m, t.scalar(3.0))};
          });
      return std::vector{s.add(inner[0], s.cast(i, f32))};
    });
    b.targets = {shift[0], shift[1], mixed[0], mixed[1], outer[0]};
    return b;
  });
  for (int run = 0; run < 3; ++run)
    loops.check({rnd({4, 8}, 300 + run), i32s(5 + run)}, 1e-5, "in-place loops run " + std::to_string(run));
  loops.expect_replayed(2);
  EXPECT_GT(detail::cuda_graph_stats(loops.gpu.impl()).body_results_in_place, 0);
}

// Library calls inside loop bodies: a cuDNN convolution and pooling in a for_loop body and a
// while_loop body (their workspaces come from the capture-safe op workspace), captured once and
// replayed with the trip count and the predicate decided on the device.
TEST(CudaControlFlow, CudnnCallsInsideLoopBodiesAreCaptured) {
  ConvDesc same;
  same.padding = PaddingStyle::same;
  PoolDesc pool;
  pool.kernel = {3, 3};
  pool.stride = {1, 1};
  pool.padding = PaddingStyle::same;
  CpuAndGpu loop([&](Graph& g) {
    Built b;
    Tensor n = in(b, g, Shape{}, i32, "n");
    Tensor x = in(b, g, {2, 12, 12, 8}, f32, "x"), w = in(b, g, {3, 3, 8, 8}, f32, "w");
    auto r = g.for_loop(n, {x}, [&](Graph& s, Tensor, std::vector<Tensor> a) {
      return std::vector{s.tanh(s.max_pool2d(s.conv2d(a[0], w, same), pool))};
    });
    // Convolve until the mean absolute value drops below 0.05 (or 20 steps).
    auto wl = g.while_loop(
        {x, g.scalar(0, i32)},
        [&](Graph& s, std::vector<Tensor> v) {
          Tensor go = s.logical_and(s.greater(s.reduce_mean(s.abs(v[0])), s.scalar(0.05)), s.less(v[1], s.scalar(20, i32)));
          return std::pair{go, v};
        },
        [&](Graph& s, std::vector<Tensor> v) {
          return std::vector{s.mul(s.tanh(s.conv2d(v[0], w, same)), s.scalar(0.5)), s.add(v[1], s.scalar(1, i32))};
        });
    b.targets = {r[0], wl[0], wl[1]};
    return b;
  });
  uint64_t seed = 900;
  for (int trips : {3, 0, 5}) {
    loop.check({i32s(trips), rnd({2, 12, 12, 8}, seed), rnd({3, 3, 8, 8}, seed + 1, -0.3, 0.3)}, 1e-4,
               "conv loop, " + std::to_string(trips) + " trips");
    seed += 2;
  }
  loop.expect_replayed(2);
}
