// Layout, data-movement and scan ops on the CUDA device (src/backends/cuda/cuda_layout.cpp)
// against the CPU backend on random inputs, for every dtype class: transpose, concat, split,
// strided_slice, slice_update, pad, tile, reverse, shape_of, arange, space_to_depth /
// depth_to_space, resize, band_part, the cumulative scans, max_pool2d_with_indices and the
// generated shift_left / shift_right. Data movement must match bit for bit.
//
// Each executable runs twice and must have captured a CUDA graph without error: an op that
// fell back to the CPU copies to the host, which rules capture out, so this proves that no op
// fell back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "runtime/executable_impl.h"
#include "gpu/gpu_test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

const DType kAll[] = {f32, f16, bf16, f64, i8, i16, i32, i64, u8, boolean};
const DType kFloats[] = {f32, f16, bf16, f64};
const DType kNumeric[] = {f32, f16, bf16, f64, i8, i16, i32, i64, u8};

// Unoptimised by default: the ops reach the executor as built (no folding of arange / shape_of).
CompileOptions options(Device d, bool dynamic, bool optimize) {
  return {.device = d, .disable_type_inference = dynamic, .optimize = optimize};
}

// Random values that use each dtype's range (bool: 0 / 1 bytes).
TensorData rnd(Shape s, DType t, uint64_t seed) {
  switch (t) {
    case DType::boolean: {
      TensorData u = TensorData::uniform(s, 0, 2, u8, seed), b(s, boolean);
      if (u.nbytes()) std::memcpy(b.data(), u.data(), u.nbytes());
      return b;
    }
    case DType::i8: return TensorData::uniform(std::move(s), -128, 128, t, seed);
    case DType::u8: return TensorData::uniform(std::move(s), 0, 256, t, seed);
    case DType::i16: return TensorData::uniform(std::move(s), -32768, 32768, t, seed);
    case DType::i32: return TensorData::uniform(std::move(s), -2e9, 2e9, t, seed);
    case DType::i64: return TensorData::uniform(std::move(s), -4e18, 4e18, t, seed);
    default: return TensorData::uniform(std::move(s), -4, 4, t, seed);
  }
}

double tolerance(DType t) {
  return t == bf16 ? 8e-3 : t == f16 ? 1e-3 : t == f64 ? 1e-12 : is_float(t) ? 2e-6 : 0;
}

void expect_equal(const TensorData& got, const TensorData& want, bool exact, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  if (exact) {
    if (want.nbytes() == 0 || std::memcmp(got.data(), want.data(), want.nbytes()) == 0) return;
    const size_t es = dtype_size(want.dtype());
    for (int64_t i = 0; i < want.num_elements(); ++i)
      ASSERT_EQ(std::memcmp(static_cast<const char*>(got.data()) + i * es,
                            static_cast<const char*>(want.data()) + i * es, es),
                0)
          << what << ": element " << i << " is " << got.at(i) << ", want " << want.at(i);
  }
  const double tol = tolerance(want.dtype());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double w = want.at(i), g = got.at(i);
    if (std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << what << " at " << i;
      continue;
    }
    if (std::isinf(w)) {  // an exclusive cummax / cummin starts from -inf / +inf
      ASSERT_EQ(g, w) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(g, w, tol * (1 + std::abs(w))) << what << " at " << i;
  }
}

using Build = std::function<std::vector<Tensor>(Graph&, const std::vector<Tensor>&)>;

// Builds the graph once, compiles it for both devices and compares every target, on the first
// (recording, capturing) run and the second (replayed) run.
void check(const std::string& what, const Build& build, const std::vector<TensorData>& inputs,
           bool exact = true, bool dynamic = false, bool optimize = false) {
  SCOPED_TRACE(what);
  Graph g;
  auto [ph, feeds] = gputest::placeholders_for(g, inputs, dynamic);
  std::vector<Tensor> outs = build(g, ph);
  std::vector<TensorData> want =
      g.compile(feeds, outs, {}, options(Device::cpu(), dynamic, optimize)).run(inputs);
  Executable exe = g.compile(feeds, outs, {}, options(Device::cuda(0), dynamic, optimize));
  for (int run = 0; run < 2; ++run) {
    std::vector<TensorData> got = exe.run(inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      expect_equal(got[i], want[i], exact,
                   what + ", run " + std::to_string(run) + ", output " + std::to_string(i));
  }
  auto stats = detail::cuda_graph_stats(exe.impl());
  EXPECT_EQ(stats.error, "") << what;
  if (!dynamic) {  // dynamic feeds are never captured
    EXPECT_EQ(stats.captures, 1) << what;
    EXPECT_EQ(stats.replays, 1) << what;
  }
}

std::string name(const char* op, DType t) { return std::string(op) + " " + dtype_name(t); }

}  // namespace

TEST(CudaLayout, Transpose) {
  for (DType t : kAll) {
    check(name("transpose", t),
          [](Graph& g, auto& x) {
            return std::vector{g.transpose(x[0], {0}),
                               g.transpose(x[1], {1, 0}),
                               g.transpose(x[2], {2, -3, 1}),
                               g.transpose(x[3], {3, 1, 0, 2}),
                               g.transpose(x[4], {-1, 2, 0, 3, 1}),
                               g.transpose(x[5], {1, 0})};
          },
          {rnd({7}, t, 1), rnd({5, 9}, t, 2), rnd({3, 4, 5}, t, 3), rnd({2, 3, 5, 7}, t, 4),
           rnd({2, 3, 1, 4, 5}, t, 5), rnd({0, 3}, t, 6)});
  }
  // Shapes that take the tiled path (minor dim transposed) and the word-wide path (minor dim kept).
  for (DType t : {f32, f16, i8, f64}) {
    check(name("transpose tiled / vectorised", t),
          [](Graph& g, auto& x) {
            return std::vector{g.transpose(x[0], {0, 2, 3, 1}), g.transpose(x[1], {0, 2, 1}),
                               g.transpose(x[2], {0, 2, 1, 3}), g.transpose(x[3], {1, 0})};
          },
          {rnd({2, 37, 19, 23}, t, 7), rnd({3, 64, 100}, t, 8), rnd({2, 33, 5, 64}, t, 9),
           rnd({65, 129}, t, 10)});
  }
}

TEST(CudaLayout, ConcatAndSplit) {
  for (DType t : kAll) {
    check(name("concat", t),
          [](Graph& g, auto& x) {
            return std::vector{g.concat({x[0], x[1], x[2]}, -1), g.concat({x[3], x[4]}, 0),
                               g.concat({x[5]}, 0), g.concat({x[6], x[3], x[6]}, 1)};
          },
          {rnd({2, 3, 4}, t, 1), rnd({2, 3, 0}, t, 2), rnd({2, 3, 5}, t, 3), rnd({3, 6}, t, 4),
           rnd({1, 6}, t, 5), rnd({11}, t, 6), rnd({3, 2}, t, 7)});
    check(name("split", t),
          [](Graph& g, auto& x) {
            std::vector<Tensor> a = g.split(x[0], {2, 0, 5}, -1), b = g.split(x[1], {1, 2, 1}, 0),
                                c = g.split(x[2], {3, 4}, 1);
            a.insert(a.end(), b.begin(), b.end());
            a.insert(a.end(), c.begin(), c.end());
            return a;
          },
          {rnd({3, 2, 7}, t, 8), rnd({4, 5}, t, 9), rnd({2, 7, 3, 2, 3}, t, 10)});
  }
  check(
      "concat and split, dynamic shapes",
      [](Graph& g, auto& x) {
        std::vector<Tensor> s = g.split(x[0], {1, 2}, 1);
        return std::vector{g.concat({x[0], x[1]}, 0), s[0], s[1], g.shape_of(x[1])};
      },
      {rnd({2, 3}, f32, 11), rnd({4, 3}, f32, 12)}, true, true);
}

TEST(CudaLayout, StridedSliceAndSliceUpdate) {
  auto slice = [](std::vector<int64_t> b, std::vector<int64_t> e, std::vector<int64_t> s, int64_t bm = 0,
                  int64_t em = 0, int64_t sq = 0) { return SliceDesc{b, e, s, bm, em, sq}; };
  for (DType t : kAll) {
    check(name("strided_slice", t),
          [&](Graph& g, auto& x) {
            return std::vector{
                g.strided_slice(x[0], slice({1}, {9}, {3})),
                g.strided_slice(x[0], slice({-2}, {0}, {-2})),                   // negative stride
                g.strided_slice(x[1], slice({0, 5}, {0, 0}, {1, -1}, 1, 1)),     // masks: all, reversed
                g.strided_slice(x[1], slice({2, -1}, {3, 0}, {1, 1}, 0, 2, 1)),  // squeeze dim 0
                g.strided_slice(x[2], slice({1}, {-1}, {1})),                    // trailing dims whole
                g.strided_slice(x[2], slice({0, 3, -1}, {4, 0, -5}, {2, -2, -1})),
                g.strided_slice(x[1], slice({3, 0}, {1, 2}, {1, 1}))};  // empty
          },
          {rnd({11}, t, 1), rnd({4, 6}, t, 2), rnd({5, 4, 3, 2}, t, 3)});
    check(name("slice_update", t),
          [&](Graph& g, auto& x) {
            return std::vector{g.slice_update(x[0], x[1], slice({1, 5}, {4, 0}, {2, -2})),
                               g.slice_update(x[0], x[2], slice({2}, {3}, {1}, 0, 0, 1)),
                               g.slice_update(x[0], x[3], slice({3, 0}, {3, 6}, {1, 1}))};  // empty update
          },
          {rnd({5, 7}, t, 4), rnd({2, 3}, t, 5), rnd({7}, t, 6), rnd({0, 6}, t, 7)});
  }
}

TEST(CudaLayout, PadEveryMode) {
  for (DType t : kAll) {
    // The constant goes through the dtype's store rule: truncated and saturated for integers.
    check(name("pad", t),
          [](Graph& g, auto& x) {
            return std::vector{g.pad(x[0], {2}, {3}, PadMode::constant, -300.75),
                               g.pad(x[1], {1, 0, 2}, {2, 3, 0}, PadMode::constant, 2.5),
                               g.pad(x[1], {2, 1, 1}, {1, 3, 2}, PadMode::reflect),
                               g.pad(x[1], {3, 4, 0}, {2, 1, 2}, PadMode::symmetric),
                               g.pad(x[1], {4, 0, 3}, {1, 5, 2}, PadMode::edge),
                               g.pad(x[2], {1, 1, 0, 2}, {0, 2, 1, 1}, PadMode::reflect),
                               g.pad(x[3], {1, 2}, {1, 0}, PadMode::constant, 1e12),  // empty input
                               // last dims of 8: the vector paths (V = 8, 4 or 2 by the dtype)
                               g.pad(x[1], {0, 1, 2}, {1, 0, 1}, PadMode::constant, 0.5),
                               g.pad(x[1], {1, 1, 1}, {1, 1, 2}, PadMode::reflect),
                               g.pad(x[1], {0, 2, 1}, {2, 0, 2}, PadMode::edge),
                               g.pad(x[1], {1, 0, 3}, {0, 1, 0}, PadMode::symmetric),
                               g.pad(x[2], {0, 1, 1, 0}, {0, 1, 1, 4}, PadMode::constant, -1.0)};  // the stem's fold
          },
          {rnd({5}, t, 1), rnd({3, 4, 5}, t, 2), rnd({2, 3, 2, 4}, t, 3), rnd({0, 3}, t, 4)});
  }
}

TEST(CudaLayout, TileReverseSpaceDepth) {
  for (DType t : kAll) {
    check(name("tile / reverse", t),
          [](Graph& g, auto& x) {
            return std::vector{g.tile(x[0], {3}),          g.tile(x[1], {2, 1, 3}),
                               g.tile(x[1], {1, 0, 2}),    g.tile(x[2], {2, 2, 1, 1, 2}),
                               g.reverse(x[0], {0}),       g.reverse(x[1], {-1, 0}),
                               g.reverse(x[2], {1, 3, 4}), g.reverse(x[3], {0})};
          },
          {rnd({5}, t, 1), rnd({2, 3, 4}, t, 2), rnd({2, 1, 3, 2, 3}, t, 3), rnd({0, 2}, t, 4)});
    check(name("space_to_depth / depth_to_space", t),
          [](Graph& g, auto& x) {
            return std::vector{g.space_to_depth(x[0], 2), g.space_to_depth(x[1], 3, Layout::nchw),
                               g.depth_to_space(x[2], 2), g.depth_to_space(x[3], 3, Layout::nchw),
                               g.depth_to_space(g.space_to_depth(x[0], 2), 2)};
          },
          {rnd({2, 4, 6, 3}, t, 5), rnd({2, 3, 6, 9}, t, 6), rnd({2, 3, 5, 12}, t, 7),
           rnd({1, 18, 2, 3}, t, 8)});
  }
}

TEST(CudaLayout, ShapeOfArangeBandPart) {
  check("shape_of",
        [](Graph& g, auto& x) {
          return std::vector{g.shape_of(x[0]), g.shape_of(x[1]), g.shape_of(x[2]), g.neg(x[0])};
        },
        {rnd({3, 0, 5}, f32, 1), rnd({}, i8, 2), rnd({2, 3, 4, 5, 6}, boolean, 3)});
  for (DType t : kNumeric) {
    // Integers truncate and saturate (i8 / u8 run past their range here).
    check(
        name("arange", t),
        [t](Graph& g, auto&) {
          return std::vector{g.arange(0, 300, 1, t), g.arange(7.5, -3, -0.75, t), g.arange(-2, 2, 0.3, t),
                             g.arange(5, 5, 1, t)};
        },
        {}, !is_float(t));
  }
  check("arange bool", [](Graph& g, auto&) { return std::vector{g.arange(-1, 2, 0.5, boolean)}; }, {});
  for (DType t : kAll) {
    check(name("band_part", t),
          [](Graph& g, auto& x) {
            return std::vector{g.band_part(x[0], -1, 0), g.band_part(x[0], 0, -1),  g.band_part(x[1], 1, 2),
                               g.band_part(x[1], 0, 0),  g.band_part(x[2], -1, -1), g.band_part(x[2], 3, 1)};
          },
          {rnd({5, 7}, t, 4), rnd({2, 3, 6, 4}, t, 5), rnd({3, 9, 2}, t, 6)});
  }
}

TEST(CudaLayout, CumulativeScans) {
  using Fn = Tensor (Graph::*)(Tensor, int64_t, bool, bool);
  const std::pair<const char*, Fn> ops[] = {{"cumsum", &Graph::cumsum},
                                            {"cumprod", &Graph::cumprod},
                                            {"cummax", &Graph::cummax},
                                            {"cummin", &Graph::cummin}};
  for (DType t : kNumeric) {
    for (const auto& [op, fn] : ops) {
      const bool prod = std::string(op) == "cumprod";
      // Products of floats stay near 1 so they neither overflow nor vanish.
      auto in = [&](Shape s, uint64_t seed) {
        return prod && is_float(t) ? TensorData::uniform(std::move(s), 0.6, 1.5, t, seed)
                                   : rnd(std::move(s), t, seed);
      };
      const bool exact = !is_float(t) || !(prod || std::string(op) == "cumsum");
      // Last axis, long lines (a warp per line); middle axis (a thread per line); short lines.
      check(
          name(op, t),
          [fn = fn](Graph& g, auto& x) {
            std::vector<Tensor> r;
            for (bool excl : {false, true})
              for (bool rev : {false, true}) {
                r.push_back((g.*fn)(x[0], -1, excl, rev));
                r.push_back((g.*fn)(x[1], 1, excl, rev));
                r.push_back((g.*fn)(x[2], 0, excl, rev));
              }
            r.push_back((g.*fn)(x[3], 0, false, false));
            return r;
          },
          {in({3, 77}, 1), in({4, 9, 5}, 2), in({6}, 3), in({0, 4}, 4)}, exact);
    }
  }
  // NaN propagates through cummax / cummin from where it appears.
  for (DType t : kFloats) {
    TensorData x = rnd({2, 50}, t, 7);
    x.set(17, std::nan(""));
    x.set(50 + 40, std::nan(""));
    check(
        name("cummax / cummin with NaN", t),
        [](Graph& g, auto& v) {
          return std::vector{g.cummax(v[0], 1), g.cummin(v[0], 1, true, true), g.cummax(v[0], 0)};
        },
        {x}, false);
  }
}

TEST(CudaLayout, Resize) {
  const CoordinateMode coords[] = {CoordinateMode::half_pixel, CoordinateMode::align_corners,
                                   CoordinateMode::asymmetric, CoordinateMode::pytorch_half_pixel};
  const NearestRounding rounds[] = {NearestRounding::round_prefer_floor, NearestRounding::round_prefer_ceil,
                                    NearestRounding::floor, NearestRounding::ceil};
  for (DType t : {f32, f16, bf16, f64, i8, i32, i64, u8}) {
    check(name("resize nearest", t),
          [&](Graph& g, auto& x) {
            std::vector<Tensor> r;
            for (CoordinateMode c : coords)
              for (NearestRounding n : rounds) {
                r.push_back(g.resize(x[0], ResizeDesc{{11, 4}, ResizeMode::nearest, c, n, Layout::nhwc}));
                r.push_back(g.resize(x[1], ResizeDesc{{3, 13}, ResizeMode::nearest, c, n, Layout::nchw}));
                r.push_back(g.resize(x[1], ResizeDesc{{1, 1}, ResizeMode::nearest, c, n, Layout::nchw}));
              }
            return r;
          },
          {rnd({2, 5, 7, 3}, t, 1), rnd({2, 3, 6, 5}, t, 2)});
  }
  for (DType t : kFloats) {
    check(
        name("resize bilinear", t),
        [&](Graph& g, auto& x) {
          std::vector<Tensor> r;
          for (CoordinateMode c : coords) {
            r.push_back(g.resize(x[0], ResizeDesc{{11, 4}, ResizeMode::bilinear, c, {}, Layout::nhwc}));
            r.push_back(g.resize(x[1], ResizeDesc{{3, 13}, ResizeMode::bilinear, c, {}, Layout::nchw}));
            r.push_back(g.resize(x[1], ResizeDesc{{1, 1}, ResizeMode::bilinear, c, {}, Layout::nchw}));
          }
          return r;
        },
        {rnd({2, 5, 7, 3}, t, 3), rnd({2, 3, 6, 5}, t, 4)}, false);
  }
}

TEST(CudaLayout, MaxPoolWithIndices) {
  for (DType t : kNumeric) {
    // Narrow value ranges make ties, which go to the first maximum in window order.
    TensorData small = TensorData::uniform({2, 3, 9, 8}, -3, 3, t, 11);
    check(name("max_pool2d_with_indices", t),
          [](Graph& g, auto& x) {
            PoolDesc a{{3, 3}, {2, 2}, {}, PaddingStyle::same, {}, Layout::nhwc};
            PoolDesc b{{2, 3}, {1, 2}, {2, 1}, PaddingStyle::explicit_, {1, 0, 2, 1}, Layout::nchw, true};
            // A window of dilation 3 over two rows can miss both: the dtype's lowest value, index -1.
            PoolDesc c{{2, 2}, {1, 1}, {3, 1}, PaddingStyle::explicit_, {2, 2, 0, 0}, Layout::nhwc};
            auto [ya, ia] = g.max_pool2d_with_indices(x[0], a);
            auto [yb, ib] = g.max_pool2d_with_indices(x[1], b);
            auto [yc, ic] = g.max_pool2d_with_indices(x[2], c);
            return std::vector{ya, ia, yb, ib, yc, ic};
          },
          {rnd({2, 9, 7, 3}, t, 12), small, rnd({1, 2, 5, 2}, t, 13)});
  }
  TensorData x = rnd({1, 6, 6, 2}, f32, 14);
  x.set(7, std::nan(""));
  check("max_pool2d_with_indices NaN",
        [](Graph& g, auto& v) {
          auto [y, i] = g.max_pool2d_with_indices(v[0], PoolDesc{{2, 2}, {1, 1}});
          return std::vector{y, i};
        },
        {x});
}

TEST(CudaLayout, ShiftsAreGenerated) {
  for (DType t : {i8, i16, i32, i64, u8, boolean}) {
    const double w = t == boolean ? 1 : static_cast<double>(dtype_size(t) * 8);
    // Shift amounts from below 0 to past the width (0 / the sign there).
    TensorData s =
        t == boolean ? rnd({6, 7}, t, 2) : TensorData::uniform({6, 7}, t == u8 ? 0 : -3, w + 3, t, 2);
    TensorData s1 = t == boolean ? rnd({7}, t, 3) : TensorData::uniform({7}, 0, w, t, 3);
    check(name("shift_left / shift_right", t),
          [](Graph& g, auto& x) {
            return std::vector{g.shift_left(x[0], x[1]), g.shift_right(x[0], x[1]), g.shift_right(x[0], x[2]),
                               g.bitwise_xor(g.shift_left(x[0], x[2]), x[0])};  // fused with another op
          },
          {rnd({6, 7}, t, 1), s, s1});
  }
}

TEST(CudaLayout, OptimisedGraphMixingLayoutOps) {
  check(
      "mixed chain, optimised",
      [](Graph& g, auto& x) {
        Tensor a = g.transpose(x[0], {0, 2, 1});
        Tensor b = g.slice(a, {0, 1, 0}, {-1, 4, -1});
        Tensor c = g.concat({b, g.reverse(b, {1})}, 1);
        Tensor d = g.pad(g.cumsum(c, -1), {0, 1, 2}, {1, 0, 0}, PadMode::edge);
        return std::vector{g.tile(d, {1, 2, 1}), g.space_to_depth(g.reshape(d, {1, 2, 14, 14}), 2)};
      },
      {rnd({3, 12, 5}, f32, 1)}, false, false, true);
}
