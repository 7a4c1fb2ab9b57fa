// Device kernels of the indexing, sorting and random ops against the CPU backend on random
// inputs: gather / gather_nd / gather_along_axis (negative indices, batch_dims), the scatter
// family in every mode (atomics and the deterministic ordered path, duplicates), one_hot,
// non_zero_indices, top_k / sort / argsort along every axis (ties, NaN, signed zeros), and
// random / dropout (the CPU's Philox numbers). Every graph but non_zero_indices must run
// without a CPU fallback: its second run replays a captured CUDA graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"
#include "gpu/gpu_test_util.h"

using namespace tg;

namespace {

CompileOptions gpu() { return {.device = Device::cuda(0)}; }
CompileOptions cpu() { return {.device = Device::cpu()}; }

double tolerance(DType t) { return t == bf16 ? 1e-2 : t == f16 ? 1e-3 : t == f64 ? 1e-12 : 1e-6; }

using gputest::differential;
using gputest::expect_close;

void expect_bitwise(const TensorData& got, const TensorData& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  ASSERT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << what;
}

TensorData rnd(Shape s, DType t, uint64_t seed, double lo = -2, double hi = 2) {
  return TensorData::uniform(std::move(s), lo, hi, t, seed);
}

// Integers in [lo, hi) of dtype t.
TensorData ints(Shape s, int64_t lo, int64_t hi, DType t, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi - 1);
  TensorData r(std::move(s), t);
  for (int64_t i = 0; i < r.num_elements(); ++i) r.set(i, static_cast<double>(d(gen)));
  return r;
}


const DType kFloats[] = {f32, f16, bf16, f64};

}  // namespace

TEST(CudaIndexing, GatherAxesBatchDimsNegativeIndices) {
  for (DType t : kFloats)
    for (DType it : {i32, i64}) {
      std::string w = std::string(dtype_name(t)) + "/" + dtype_name(it);
      differential("gather axis 1 " + w, [](Graph& g, auto& x) { return std::vector{g.gather(x[0], x[1], 1)}; },
                   {rnd({5, 7, 3}, t, 1), ints({4, 2}, -7, 7, it, 2)}, 0);
      differential("gather axis 0 " + w, [](Graph& g, auto& x) { return std::vector{g.gather(x[0], x[1], 0)}; },
                   {rnd({9, 64}, t, 3), ints({33}, -9, 9, it, 4)}, 0);
      differential("gather axis -1 " + w, [](Graph& g, auto& x) { return std::vector{g.gather(x[0], x[1], -1)}; },
                   {rnd({6, 5, 11}, t, 5), ints({3, 4}, -11, 11, it, 6)}, 0);
      differential("gather batch_dims 1 " + w,
                   [](Graph& g, auto& x) { return std::vector{g.gather(x[0], x[1], 2, 1)}; },
                   {rnd({5, 3, 7, 2}, t, 7), ints({5, 6}, -7, 7, it, 8)}, 0);
    }
  differential("gather bool", [](Graph& g, auto& x) { return std::vector{g.gather(x[0], x[1], 1)}; },
               {ints({4, 9}, 0, 2, boolean, 1), ints({5}, -9, 9, i32, 2)}, 0);
  differential("gather i8 odd rows", [](Graph& g, auto& x) { return std::vector{g.gather(x[0], x[1], 0)}; },
               {ints({7, 3}, -100, 100, i8, 1), ints({12}, -7, 7, i64, 2)}, 0);
}

TEST(CudaIndexing, GatherNdAndAlongAxis) {
  for (DType t : kFloats)
    for (DType it : {i32, i64}) {
      std::string w = std::string(dtype_name(t)) + "/" + dtype_name(it);
      differential("gather_nd K=2 " + w, [](Graph& g, auto& x) { return std::vector{g.gather_nd(x[0], x[1])}; },
                   {rnd({6, 5, 4, 8}, t, 1), ints({7, 2}, -5, 5, it, 2)}, 0);
      differential("gather_nd K=rank " + w, [](Graph& g, auto& x) { return std::vector{g.gather_nd(x[0], x[1])}; },
                   {rnd({6, 5, 4}, t, 3), ints({3, 2, 3}, -4, 4, it, 4)}, 0);
      differential("gather_nd batch_dims 1 " + w,
                   [](Graph& g, auto& x) { return std::vector{g.gather_nd(x[0], x[1], 1)}; },
                   {rnd({6, 5, 4}, t, 5), ints({6, 3, 1}, -5, 5, it, 6)}, 0);
      differential("gather_along_axis " + w,
                   [](Graph& g, auto& x) { return std::vector{g.gather_along_axis(x[0], x[1], 1)}; },
                   {rnd({4, 6, 5}, t, 7), ints({4, 9, 5}, -6, 6, it, 8)}, 0);
      differential("gather_along_axis smaller " + w,
                   [](Graph& g, auto& x) { return std::vector{g.gather_along_axis(x[0], x[1], -1)}; },
                   {rnd({4, 6, 5}, t, 9), ints({2, 3, 7}, -5, 5, it, 10)}, 0);
    }
}

TEST(CudaIndexing, ScatterEveryModeBothPaths) {
  const ScatterMode modes[] = {ScatterMode::set, ScatterMode::add, ScatterMode::sub, ScatterMode::mul,
                               ScatterMode::div, ScatterMode::min, ScatterMode::max};
  for (DType t : {f32, f16, bf16, f64, i32, i64, i8})
    for (ScatterMode m : modes)
      for (bool det : {false, true}) {
        const bool integer = is_integer(t);
        // Updates away from zero (div), few duplicates: atomics change float rounding only.
        TensorData x = integer ? ints({6, 10}, -50, 50, t, 1) : rnd({6, 10}, t, 1, 0.5, 2);
        TensorData u = integer ? ints({5, 10}, 1, 9, t, 2) : rnd({5, 10}, t, 2, 0.5, 2);
        TensorData id = ints({5}, -6, 6, i32, 3);
        const bool exact = det || m == ScatterMode::set || m == ScatterMode::min || m == ScatterMode::max || integer;
        const double tol = exact ? 0 : tolerance(t) * 4;
        std::string w = std::string(dtype_name(t)) + " " + std::to_string(static_cast<int>(m)) + (det ? " det" : "");
        differential("scatter " + w, [&](Graph& g, auto& v) { return std::vector{g.scatter(v[0], v[1], v[2], 0, m, 0, det)}; },
                     {x, id, u}, tol);
        differential("scatter_nd " + w,
                     [&](Graph& g, auto& v) { return std::vector{g.scatter_nd(v[0], g.expand_dims(v[1], {-1}), v[2], m, 0, det)}; },
                     {x, id, u}, tol);
        differential("scatter_along_axis " + w,
                     [&](Graph& g, auto& v) { return std::vector{g.scatter_along_axis(v[0], v[1], v[2], 1, m, det)}; },
                     {x, ints({3, 4}, -10, 10, i64, 4), integer ? ints({3, 4}, 1, 9, t, 5) : rnd({3, 4}, t, 5, 0.5, 2)},
                     tol);
      }
}

TEST(CudaIndexing, ScatterBatchDimsAndAxis) {
  differential("scatter axis 1 batch_dims 1", [](Graph& g, auto& v) {
    return std::vector{g.scatter(v[0], v[1], v[2], 1, ScatterMode::add, 1)};
  }, {rnd({4, 6, 3}, f32, 1), ints({4, 5}, -6, 6, i64, 2), rnd({4, 5, 3}, f32, 3)}, 1e-5);
  differential("scatter_nd batch_dims 1 K 2", [](Graph& g, auto& v) {
    return std::vector{g.scatter_nd(v[0], v[1], v[2], ScatterMode::add, 1, true)};
  }, {rnd({3, 4, 5, 6}, f32, 4), ints({3, 7, 2}, -4, 4, i32, 5), rnd({3, 7, 6}, f32, 6)}, 0);
}

TEST(CudaIndexing, ScatterAddHeavyDuplicatesAndDeterminism) {
  // 2,000 update rows into 3 rows of 64: hundreds of updates per element.
  for (DType t : {f32, f64, f16, bf16}) {
    // f16 / bf16 atomics add in an unspecified order and round at every step, so their sum of
    // random values differs from the CPU's by rounding noise that grows with the ~667 updates
    // per element; with integer updates in [-1, 1] every partial sum (|s| < 256) is exact in
    // both types, so any order gives the CPU's result exactly and a lost update shows.
    const bool half = t == f16 || t == bf16;
    TensorData x = half ? ints({3, 64}, -4, 4, t, 1) : rnd({3, 64}, t, 1);
    TensorData u = half ? ints({2000, 64}, -1, 2, t, 2) : rnd({2000, 64}, t, 2, -1, 1);
    TensorData id = ints({2000, 1}, -3, 3, i32, 3);
    auto build = [](Graph& g, auto& v) { return std::vector{g.scatter_nd(v[0], v[1], v[2], ScatterMode::add)}; };
    differential(std::string("atomic add ") + dtype_name(t), build, {x, id, u}, t == f32 ? 1e-4 : t == f64 ? 1e-12 : 0);
    // Deterministic: the reference's order, so bitwise the CPU, run after run.
    Graph g;
    Tensor a = g.placeholder(x.shape(), t), b = g.placeholder(id.shape(), i32), c = g.placeholder(u.shape(), t);
    Tensor y = g.scatter_nd(a, b, c, ScatterMode::add, 0, true);
    auto feeds = std::vector<std::pair<Tensor, TensorType>>{{a, a.type()}, {b, b.type()}, {c, c.type()}};
    auto want = g.compile(feeds, {y}, {}, cpu()).run({x, id, u})[0];
    Executable e1 = g.compile(feeds, {y}, {}, gpu()), e2 = g.compile(feeds, {y}, {}, gpu());
    auto r1 = e1.run({x, id, u})[0], r2 = e1.run({x, id, u})[0], r3 = e2.run({x, id, u})[0];
    expect_bitwise(r1, want, std::string("deterministic vs CPU ") + dtype_name(t));
    expect_bitwise(r2, r1, std::string("deterministic replay ") + dtype_name(t));
    expect_bitwise(r3, r1, std::string("deterministic second executable ") + dtype_name(t));
  }
  // Scalar elements all landing on two positions, i64 and f32, along an axis.
  differential("along axis duplicates i64", [](Graph& g, auto& v) {
    return std::vector{g.scatter_along_axis(v[0], v[1], v[2], 0, ScatterMode::add)};
  }, {ints({2, 8}, -9, 9, i64, 1), ints({500, 8}, 0, 2, i32, 2), ints({500, 8}, -9, 9, i64, 3)}, 0);
}

TEST(CudaIndexing, OneHot) {
  for (DType t : {f32, f16, i64, u8})
    for (int64_t axis : {-1, 0, 1})
      differential(std::string("one_hot ") + dtype_name(t) + " axis " + std::to_string(axis), [&](Graph& g, auto& v) {
        return std::vector{g.one_hot(v[0], 5, axis, t, 3.5, -1.25)};
      }, {ints({3, 4}, -7, 8, i32, static_cast<uint64_t>(axis + 5))}, 0);
  differential("one_hot i64 indices", [](Graph& g, auto& v) { return std::vector{g.one_hot(v[0], 6)}; },
               {ints({10}, -6, 6, i64, 1)}, 0);
}

TEST(CudaIndexing, NonZeroIndicesRunsOnTheDeviceUncaptured) {
  for (DType t : {f32, f16, i32, boolean}) {
    TensorData x = ints({5, 6, 7}, -1, 2, t, 3);  // about a third zeros
    if (t == f32) {
      x.set(3, -0.0);  // zero
      x.set(4, std::numeric_limits<double>::quiet_NaN());  // non-zero
    }
    differential(std::string("non_zero_indices ") + dtype_name(t),
                 [](Graph& g, auto& v) { return std::vector{g.non_zero_indices(v[0])}; }, {x}, 0, false);
  }
  differential("non_zero_indices none", [](Graph& g, auto& v) { return std::vector{g.non_zero_indices(v[0])}; },
               {TensorData::zeros({4, 3}, f32)}, 0, false);
}

TEST(CudaSort, TopKSortArgSortEveryAxisTiesNaN) {
  for (DType t : {f32, f16, bf16, f64, i32, i64, u8}) {
    TensorData x = ints({6, 9, 5}, is_integer(t) && t == u8 ? 0 : -3, 4, t, 7);  // many ties
    if (is_float(t)) {
      const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
      x.set(0, nan), x.set(7, nan), x.set(12, -0.0), x.set(20, inf), x.set(33, -inf), x.set(45, nan);
    }
    for (int64_t axis : {0, 1, 2, -1})
      for (bool desc : {false, true}) {
        std::string w = std::string(dtype_name(t)) + " axis " + std::to_string(axis) + (desc ? " desc" : "");
        differential("sort/argsort " + w, [&](Graph& g, auto& v) {
          return std::vector{g.sort(v[0], axis, desc), g.argsort(v[0], axis, desc)};
        }, {x}, 0);
        differential("top_k " + w, [&](Graph& g, auto& v) {
          auto [vals, idx] = g.top_k(v[0], 3, axis, desc);
          return std::vector{vals, idx};
        }, {x}, 0);
      }
  }
  differential("sort one long line", [](Graph& g, auto& v) {
    return std::vector{g.sort(v[0]), g.argsort(v[0], 0, true)};
  }, {rnd({100000}, f32, 3)}, 0);
}

TEST(CudaRandom, SameNumbersAsTheCpu) {
  // The state comes in as data ({seed, counter}) so several counters are exercised.
  TensorData state = TensorData::from_vector({2}, i64, {1234567891011.0, 77.0});
  for (DType t : {f32, f16, bf16, f64, i32, i64, u8}) {
    RandomDesc d{.shape = {7, 13}, .dtype = t, .distribution = Distribution::uniform, .a = -3.5, .b = 250.0};
    differential(std::string("uniform ") + dtype_name(t), [&](Graph& g, auto& v) {
      auto [y, next] = g.random(v[0], d);
      auto [y2, next2] = g.random(next, d);  // the stream continues
      return std::vector{y, next, y2, next2};
    }, {state}, 0);
  }
  for (DType t : kFloats)
    for (Distribution dist : {Distribution::normal, Distribution::truncated_normal}) {
      RandomDesc d{.shape = {5, 21}, .dtype = t, .distribution = dist, .a = 0.5, .b = 2.0};
      differential(std::string("normal ") + dtype_name(t) + (dist == Distribution::normal ? "" : " truncated"),
                   [&](Graph& g, auto& v) {
                     auto [y, next] = g.random(v[0], d);
                     return std::vector{y, next};
                   },
                   {state}, tolerance(t));
    }
  for (DType t : kFloats)
    differential(std::string("dropout ") + dtype_name(t), [](Graph& g, auto& v) {
      auto [y, next] = g.dropout(v[0], g.random_state(42), 0.3);
      auto [y2, next2] = g.dropout(v[0], next, 0.3);
      return std::vector{y, y2, next2};
    }, {rnd({9, 31}, t, 5)}, 0);
}

TEST(CudaIndexing, OutOfRangeIndexFailsTheRunBeforeVariablesChange) {
  auto expect_error = [](const std::function<void()>& f, const std::string& text) {
    try {
      f();
      ADD_FAILURE() << "no error; expected " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  {
    Graph g;
    Tensor x = g.placeholder({5, 3}, f32), i = g.placeholder({4, 1}, i32);
    Executable e = g.compile({{x, x.type()}, {i, i.type()}}, {g.gather_nd(x, i)}, {}, gpu());
    TensorData bad = TensorData::from_vector({4, 1}, i32, {0, 7, 1, 2});
    expect_error([&] { e.run({rnd({5, 3}, f32, 1), bad}); },
                 "[gather_nd] index 7 is out of range for dim 0 of size 5 (clamped on the device)");
    TensorData good = TensorData::from_vector({4, 1}, i32, {0, -5, 1, 2});
    EXPECT_EQ(e.run({rnd({5, 3}, f32, 1), good})[0].shape(), Shape({4, 3}));
  }
  {
    Graph g;
    Tensor x = g.placeholder({4, 6}, f32), i = g.placeholder({2}, i64);
    Executable e = g.compile({{x, x.type()}, {i, i.type()}}, {g.gather(x, i, 1)}, {}, gpu());
    expect_error([&] { e.run({rnd({4, 6}, f32, 1), TensorData::from_vector({2}, i64, {1, -7})}); },
                 "[gather] index -7 is out of range for dim 1 of size 6");
  }
  // A training-style update: the bad run (uncaptured, then replayed) leaves the variable as it was.
  Graph g;
  Tensor w = g.variable(TensorData::from_floats({5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), "w");
  Tensor ids = g.placeholder({3, 1}, i32);
  Operation step = g.assign(w, g.scatter_nd(w, ids, g.constant(TensorData::full({3, 2}, 1.0, f32)), ScatterMode::add));
  Executable e = g.compile({{ids, ids.type()}}, {}, {step}, gpu());
  TensorData good = TensorData::from_vector({3, 1}, i32, {0, -1, 0}), bad = TensorData::from_vector({3, 1}, i32, {0, 5, 1});
  expect_error([&] { e.run({bad}); }, "[scatter_nd] index 5 is out of range for dim 0 of size 5");
  EXPECT_EQ(e.variable("w").to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  e.run({good});  // records and captures
  e.run({good});  // replays
  const std::vector<double> after{5, 6, 3, 4, 5, 6, 7, 8, 11, 12};  // row 0 += 2, row 4 += 1, twice
  EXPECT_EQ(e.variable("w").to_vector(), after);
  expect_error([&] { e.run({bad}); }, "[scatter_nd] index 5 is out of range");  // replayed graph
  EXPECT_EQ(e.variable("w").to_vector(), after);
  e.run({good});
  EXPECT_EQ(e.variable("w").to_vector(), (std::vector<double>{7, 8, 3, 4, 5, 6, 7, 8, 12, 13}));
}
