// Compiling and running on the CPU: results, dynamic shapes, variables, errors, threads.
#include <thread>

#include "runtime/executable_impl.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {
CompileOptions cpu_opts(bool dynamic = false) { return {.device = Device::cpu(), .disable_type_inference = dynamic}; }
}  // namespace

TEST(Executable, RunsAndMatchesHandComputation) {
  Graph g;
  Tensor x = g.placeholder({2, 2}, f32, "x");
  Tensor y = g.reduce_sum(g.mul(x, g.scalar(3.0)), {1});
  Executable exe = g.compile({{x, x.type()}}, {y}, {}, cpu_opts());
  auto out = exe.run({TensorData::from_floats({2, 2}, {1, 2, 3, 4})});
  EXPECT_EQ(out[0].to_vector(), (std::vector<double>{9, 21}));
  EXPECT_EQ(exe.output_types({TensorType({2, 2}, f32)})[0], TensorType({2}, f32));
}

TEST(Executable, DynamicBatchWithoutRecompiling) {
  Graph g;
  Tensor x = g.placeholder({-1, 3}, f32, "x");
  Tensor y = g.reduce_max(x, {1});
  Executable exe = g.compile({{x, TensorType({-1, 3}, f32)}}, {y}, {}, cpu_opts(true));
  EXPECT_EQ(exe.declared_output_types()[0].shape, (Shape{-1}));
  EXPECT_EQ(exe.output_types({TensorType({7, 3}, f32)})[0].shape, (Shape{7}));
  for (int64_t n : {1, 4, 9}) {
    TensorData in = TensorData::randn({n, 3}, f32, static_cast<uint64_t>(n));
    auto out = exe.run({in});
    ASSERT_EQ(out[0].shape(), (Shape{n}));
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(out[0].at(i), std::max({in.at(3 * i), in.at(3 * i + 1), in.at(3 * i + 2)}));
  }
}

// Two dynamic dims in one target (batch x sequence, as a PyTorch graph with symbolic sizes
// has them): the target takes them from a shape source, and the gradient reshapes back the same
// way; one executable serves every size.
TEST(Executable, ReshapeAndBroadcastTakeDimsFromSources) {
  Graph g;
  Tensor ids = g.placeholder({-1, -1}, i64, "ids");
  Tensor x = g.placeholder({-1, 6}, f32, "x");  // [B * S, 6]
  Tensor y = g.reshape(x, {dim_from_source(0), dim_from_source(1), 3, -1}, {ids});
  Tensor row = g.constant(TensorData::from_floats({1, 1, 2}, {5, 7}));
  Tensor z = g.broadcast_to(row, {dim_from_source(0), dim_from_source(1), 2}, {ids});
  EXPECT_EQ(y.shape(), (Shape{-1, -1, 3, -1}));
  Tensor loss = g.reduce_sum(g.mul(g.mul(y, y), g.reshape(g.arange(1, 7), {3, 2})), {0, 1, 2, 3});
  Tensor dx = g.gradients(loss, {x}).at(x);
  Executable exe = g.compile({{ids, ids.type()}, {x, x.type()}}, {y, z, dx}, {}, cpu_opts(true));
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 3}, {1, 5}, {4, 1}}) {
    TensorData xv = TensorData::randn({b * s, 6}, f32, static_cast<uint64_t>(b * 10 + s));
    auto out = exe.run({TensorData::zeros({b, s}, i64), xv});
    ASSERT_EQ(out[0].shape(), (Shape{b, s, 3, 2}));
    ASSERT_EQ(out[1].shape(), (Shape{b, s, 2}));
    ASSERT_EQ(out[2].shape(), (Shape{b * s, 6}));
    for (int64_t i = 0; i < b * s * 6; ++i) {
      EXPECT_EQ(out[0].at(i), xv.at(i));
      EXPECT_FLOAT_EQ(out[2].at(i), static_cast<float>(2 * xv.at(i) * static_cast<double>(i % 6 + 1)));
    }
    for (int64_t i = 0; i < b * s * 2; ++i) EXPECT_EQ(out[1].at(i), i % 2 ? 7 : 5);
  }
  // sizes that do not agree are an error naming the op and the shapes
  EXPECT_TG_ERROR(exe.run({TensorData::zeros({2, 2}, i64), TensorData::randn({5, 6})}), "[reshape]", "[5,6]");
  EXPECT_TG_ERROR(g.reshape(x, {dim_from_source(2)}, {ids}), "[reshape]", "dim 2 of its shape sources",
                  "which have 2 dims");
}

// Dynamic feed dims, run at concrete sizes: each size runs a copy compiled for it (so every
// static-shape pass applies), kept per size; variables are shared; the switch keeps it dynamic.
TEST(Executable, DynamicExecutableRunsACopyCompiledPerSize) {
  for (bool specialise : {true, false}) {
    Graph g;
    Tensor x = g.placeholder({-1, -1, 8}, f32, "x");
    Tensor w = g.variable(TensorData::uniform({8, 8}, -0.5, 0.5, f32, 3), "w");
    Tensor h0 = g.gelu(g.matmul(x, w));
    Tensor h = g.sub(h0, g.reduce_mean(h0, {2}, true));  // a stitched reduction on CUDA
    Tensor y = g.softmax(g.add(h, x), -1);
    Tensor loss = g.reduce_mean(g.mul(y, y), {0, 1, 2});
    Operation step = g.assign(w, g.sub(w, g.mul(g.scalar(0.1), g.gradients(loss, {w}).at(w))));
    CompileOptions dyn = cpu_opts(true);
    if (!specialise) dyn.switches = {{"TGRAPH_NO_SPECIALIZE", "1"}};
    Executable exe = g.compile({{x, x.type()}}, {y}, {step}, dyn);
    for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 3}, {3, 5}, {2, 3}}) {
      TensorData in = TensorData::randn({b, s, 8}, f32, static_cast<uint64_t>(b * 7 + s));
      const TensorData w_before = exe.variable("w");
      Graph ref_graph;  // the same step compiled statically for this size, from the same weights
      Tensor rx = ref_graph.placeholder({b, s, 8}, f32, "x");
      Tensor rw = ref_graph.variable(w_before, "w");
      Tensor rh0 = ref_graph.gelu(ref_graph.matmul(rx, rw));
      Tensor rh = ref_graph.sub(rh0, ref_graph.reduce_mean(rh0, {2}, true));
      Tensor ry = ref_graph.softmax(ref_graph.add(rh, rx), -1);
      Tensor rl = ref_graph.reduce_mean(ref_graph.mul(ry, ry), {0, 1, 2});
      Operation rs = ref_graph.assign(
          rw, ref_graph.sub(rw, ref_graph.mul(ref_graph.scalar(0.1), ref_graph.gradients(rl, {rw}).at(rw))));
      Executable ref = ref_graph.compile({{rx, rx.type()}}, {ry}, {rs}, cpu_opts());
      auto want = ref.run({in});
      auto got = exe.run({in});
      ASSERT_EQ(got[0].shape(), (Shape{b, s, 8}));
      for (int64_t i = 0; i < want[0].num_elements(); ++i) EXPECT_NEAR(got[0].at(i), want[0].at(i), 1e-5);
      const TensorData w_after = exe.variable("w"), w_want = ref.variable("w");
      for (int64_t i = 0; i < 64; ++i) EXPECT_NEAR(w_after.at(i), w_want.at(i), 1e-6) << "weights after " << b << "x" << s;
    }
    std::lock_guard<std::mutex> lock(exe.impl().specialized_mu);
    EXPECT_EQ(exe.impl().specialized.size(), specialise ? 2u : 0u);
  }
}

TEST(Executable, BadInputsAreRefusedWithNames) {
  Graph g;
  Tensor x = g.placeholder({-1, 3}, f32, "images");
  Executable exe = g.compile({{x, TensorType({-1, 3}, f32)}}, {g.neg(x)}, {}, cpu_opts(true));
  EXPECT_TG_ERROR(exe.run({TensorData::randn({2, 3}, f64)}), "[run] feed 'images'", "[-1,3] f32", "[2,3] f64");
  EXPECT_TG_ERROR(exe.run({TensorData::randn({2, 4})}), "feed 'images'", "[2,4] f32");
  EXPECT_TG_ERROR(exe.run({TensorData::randn({3})}), "feed 'images'", "[3] f32");
  EXPECT_TG_ERROR(exe.run({}), "[run] 0 inputs given for 1 feeds");
  EXPECT_TG_ERROR(g.compile({{x, TensorType({-1, 4}, f32)}}, {x}), "[compile] feed %images");
}

TEST(Executable, VariablesPersistAndAreShared) {
  Graph g;
  Tensor w = g.variable(TensorData::from_floats({2}, {1, 2}), "w");
  Operation step = g.assign(w, g.add(w, g.scalar(1.0)));
  Executable train = g.compile({}, {}, {step}, cpu_opts());
  Executable infer = g.compile({}, {g.mul(w, g.scalar(10.0))}, {}, cpu_opts());
  train.run({});
  train.run({});
  EXPECT_EQ(train.variable("w").to_vector(), (std::vector<double>{3, 4}));
  EXPECT_EQ(infer.run({})[0].to_vector(), (std::vector<double>{30, 40}));
  infer.set_variable("w", TensorData::from_floats({2}, {0, 0}));
  EXPECT_EQ(train.variable("w").to_vector(), (std::vector<double>{0, 0}));
  EXPECT_TG_ERROR(infer.set_variable("w", TensorData::zeros({3})), "[variable] 'w' is [2] f32");
  EXPECT_TG_ERROR(infer.variable("nope"), "no variable named 'nope'");
}

TEST(Executable, ReadsSeeStartOfRunUnlessOrderedAfterAssign) {
  Graph g;
  Tensor w = g.variable(TensorData::from_floats({1}, {5}), "w");
  Operation up = g.assign(w, g.scalar(7.0, f32));
  Tensor before = g.identity(w);
  Tensor after = g.control_dependency({up}, [&] { return std::vector{g.read_variable(w)}; })[0];
  Executable exe = g.compile({}, {before, after}, {}, cpu_opts());
  auto out = exe.run({});
  EXPECT_EQ(out[0].at(0), 5);
  EXPECT_EQ(out[1].at(0), 7);
  EXPECT_EQ(exe.variable("w").at(0), 7);
}

TEST(Executable, FailedRunLeavesVariablesUnchanged) {
  Graph g;
  Tensor w = g.variable(TensorData::from_floats({1}, {5}), "w");
  Tensor step = g.placeholder({}, i32, "step");
  Operation up = g.assign(w, g.scalar(9.0, f32));
  Tensor r = g.control_dependency({up}, [&] {
    return g.for_loop(g.scalar(0, i32), g.scalar(3, i32), step, {g.scalar(1.0)},
                      [](Graph& b, Tensor, std::vector<Tensor> a) { return std::vector{b.mul(a[0], b.scalar(2.0))}; });
  })[0];
  Executable exe = g.compile({{step, step.type()}}, {r}, {up}, cpu_opts());
  EXPECT_TG_ERROR(exe.run({TensorData::scalar(0, i32)}), "[for_loop] step must be positive");
  EXPECT_EQ(exe.variable("w").at(0), 5);
  EXPECT_EQ(exe.run({TensorData::scalar(1, i32)})[0].at(0), 8);
  EXPECT_EQ(exe.variable("w").at(0), 9);
}

TEST(Executable, ControlFlowOnCpu) {
  Graph g;
  Tensor p = g.placeholder({}, boolean, "p");
  Tensor x = g.placeholder({2}, f32, "x");
  Tensor ie = g.if_else(p, [&](Graph& b) { return std::vector{b.mul(x, b.scalar(2.0))}; },
                        [&](Graph& b) { return std::vector{b.neg(x)}; })[0];
  // while (sum < 100) x *= 3; returns before's results when the predicate is false.
  auto wl = g.while_loop(
      {x},
      [](Graph& b, std::vector<Tensor> a) { return std::pair{b.less(b.reduce_sum(a[0]), b.scalar(100.0)), a}; },
      [](Graph& b, std::vector<Tensor> r) { return std::vector{b.mul(r[0], b.scalar(3.0))}; });
  auto fl = g.for_loop(g.scalar(2, i32), g.scalar(11, i32), g.scalar(3, i32), {g.scalar(0, i32)},
                       [](Graph& b, Tensor i, std::vector<Tensor> a) { return std::vector{b.add(a[0], i)}; });
  Executable exe = g.compile({{p, p.type()}, {x, x.type()}}, {ie, wl[0], fl[0]}, {}, cpu_opts());
  TensorData xv = TensorData::from_floats({2}, {1, 2});
  auto t = exe.run({TensorData::scalar(1, boolean), xv});
  EXPECT_EQ(t[0].to_vector(), (std::vector<double>{2, 4}));
  // sums 3, 9, 27, 81 continue; 243 stops: before's results at that point are returned.
  EXPECT_EQ(t[1].to_vector(), (std::vector<double>{81, 162}));
  EXPECT_EQ(t[2].at(0), 2 + 5 + 8);
  auto f = exe.run({TensorData::scalar(0, boolean), xv});
  EXPECT_EQ(f[0].to_vector(), (std::vector<double>{-1, -2}));
}

TEST(Executable, ConcurrentRunsMatchSerial) {
  Graph g;
  Tensor x = g.placeholder({16, 16}, f32, "x");
  Tensor w = g.variable(TensorData::randn({16, 16}, f32, 3), "w");
  Tensor y = g.reduce_sum(g.tanh(g.matmul(x, w)), {1});
  Executable exe = g.compile({{x, x.type()}}, {y}, {}, cpu_opts());
  std::vector<TensorData> ins, serial;
  for (int i = 0; i < 8; ++i) {
    ins.push_back(TensorData::randn({16, 16}, f32, static_cast<uint64_t>(100 + i)));
    serial.push_back(exe.run({ins.back()})[0]);
  }
  std::vector<std::vector<double>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        for (int i = t; i < 8; i += 4) got[static_cast<size_t>(i)] = exe.run({ins[static_cast<size_t>(i)]})[0].to_vector();
    });
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], serial[static_cast<size_t>(i)].to_vector());
  auto fut = exe.run_async({ins[0]});
  EXPECT_EQ(fut.get()[0].to_vector(), serial[0].to_vector());
}

TEST(Executable, GraphRunCachesBySignature) {
  Graph g;
  Tensor x = g.placeholder({-1}, f32, "x");
  Tensor y = g.square(x);
  EXPECT_EQ(g.run({{x, TensorData::from_floats({2}, {3, 4})}}, {y})[0].to_vector(), (std::vector<double>{9, 16}));
  EXPECT_EQ(g.run({{x, TensorData::from_floats({1}, {5})}}, {y})[0].to_vector(), (std::vector<double>{25}));
  EXPECT_EQ(g.run({{x, TensorData::from_floats({2}, {1, 2})}}, {y})[0].to_vector(), (std::vector<double>{1, 4}));
}

TEST(Executable, BufferPlanReusesMemory) {
  Graph g;
  Tensor x = g.placeholder({1024}, f32, "x");
  Tensor y = x;
  for (int i = 0; i < 20; ++i) y = g.exp(g.neg(y));  // a chain: each buffer dies at once
  Executable exe = g.compile({{x, x.type()}}, {y}, {}, cpu_opts());
  EXPECT_EQ(exe.naive_intermediate_bytes(), 39 * 4096);  // the target is returned, not planned
  EXPECT_LE(exe.planned_arena_bytes(), 2 * 4096);
}

TEST(Executable, ArenaReuseGivesTheSameResultsAsFreshBuffers) {
  // Static shapes run from the planned arena (with in-place reuse); dynamic shapes allocate
  // every intermediate. The numbers must agree exactly.
  Graph g;
  Tensor x = g.placeholder({4, 64}, f32, "x");
  Tensor w = g.variable(TensorData::randn({64, 64}, f32, 1), "w");
  Tensor a = g.tanh(g.matmul(x, w));
  Tensor b = g.relu(g.sub(a, g.scalar(0.1)));
  Tensor c = g.add(g.exp(g.neg(b)), a);           // a is read late: its bytes must survive
  Tensor d = g.softmax(g.mul(c, b));
  Tensor s = g.reduce_sum(g.concat({d, c, b}, 1), {1});
  Operation up = g.assign(w, g.add(w, g.reduce_mean(d)));
  Tensor after = g.control_dependency({up}, [&] { return std::vector{g.read_variable(w)}; })[0];
  TensorData in = TensorData::randn({4, 64}, f32, 2);
  Executable stat = g.compile({{x, x.type()}}, {s, d, g.reduce_sum(after)}, {}, cpu_opts());
  EXPECT_GT(stat.planned_arena_bytes(), 0);
  auto r1 = stat.run({in});
  stat.set_variable("w", TensorData::randn({64, 64}, f32, 1));
  Executable dyn = g.compile({{x, TensorType({-1, 64}, f32)}}, {s, d, g.reduce_sum(after)}, {}, cpu_opts(true));
  auto r2 = dyn.run({in});
  for (size_t k = 0; k < r1.size(); ++k) EXPECT_EQ(r1[k].to_vector(), r2[k].to_vector()) << "output " << k;
}

TEST(Executable, InPlaceReuseNeedsEqualElementSizes) {
  // select's output (f32) must not overwrite its bool condition, even though both round up to
  // the same 64-byte arena slot.
  Graph g;
  Tensor x = g.placeholder({5}, f32, "x");
  Tensor y = g.select(g.greater(x, g.scalar(1.5)), x, g.mul(x, g.scalar(0.0)));
  Executable e = g.compile({{x, x.type()}}, {g.select(g.less(x, g.scalar(-1.5)), x, y)}, {}, cpu_opts());
  auto r = e.run({TensorData::from_floats({5}, {-2, -1, 0, 1, 2})});
  EXPECT_EQ(r[0].to_vector(), (std::vector<double>{-2, 0, 0, 0, 2}));
}
