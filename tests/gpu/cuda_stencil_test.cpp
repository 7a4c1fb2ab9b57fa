// The generated stencil kernel against the CPU backend on random inputs: every reduction and
// boundary mode, every padding style, strides and dilation, 2-D / 3-D / 4-D windows on rank 4
// and 5 sources, f32 / f16 / bf16 / f64, run-time and constant weights; stitched elementwise
// prologues and epilogues against the unfused graph. Each case also runs twice and checks that
// the run was captured into a CUDA graph (no op fell back to the CPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>

#include "ir/attr.h"
#include "core/env.h"
#include "passes/fusion.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"
#include "cpp/test_util.h"
#include "gpu/gpu_test_util.h"

using namespace tg;

namespace {

using Build = std::function<std::vector<Tensor>(Graph&, std::vector<Tensor>&)>;

CompileOptions gpu(bool dynamic = false) {
  return {.device = Device::cuda(0), .disable_type_inference = dynamic};
}
CompileOptions cpu(bool dynamic = false) {
  return {.device = Device::cpu(), .disable_type_inference = dynamic};
}

double tolerance(DType t) { return t == bf16 ? 4e-2 : t == f16 ? 4e-3 : t == f64 ? 1e-12 : 1e-5; }

TensorData rnd(Shape s, DType t, uint64_t seed, double lo = -2, double hi = 2) {
  return TensorData::uniform(std::move(s), lo, hi, t, seed);
}
// Weights whose products with any value are exact, so argmin / argmax see the reference's ties.
TensorData exact_weights(Shape s, DType t, uint64_t seed) {
  const double table[] = {1, -1, 2, 0.5, -2, 0.25};
  TensorData r = rnd(s, f64, seed, 0, 6);
  std::vector<double> v;
  for (int64_t i = 0; i < r.num_elements(); ++i) v.push_back(table[std::min(5, static_cast<int>(r.at(i)))]);
  return TensorData::from_vector(s, t, v);
}

using gputest::expect_close;

struct Built {
  Graph g;
  std::vector<std::pair<Tensor, TensorType>> feeds;
  std::vector<Tensor> outs;
};

std::unique_ptr<Built> build_graph(const Build& build, const std::vector<TensorData>& inputs, bool dynamic) {
  auto b = std::make_unique<Built>();
  std::vector<Tensor> ph;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Shape s = inputs[i].shape();
    if (dynamic) s = Shape(std::vector<int64_t>(static_cast<size_t>(s.rank()), -1));
    ph.push_back(b->g.placeholder(s, inputs[i].dtype(), "in" + std::to_string(i)));
    b->feeds.emplace_back(ph.back(), TensorType(s, inputs[i].dtype()));
  }
  b->outs = build(b->g, ph);
  return b;
}

// Number of stitched stencil steps the CUDA executor plans for the executable's top block.
int stitched_steps(const Executable& e) {
  const detail::SwitchScope scope(e.impl().switches);  // the plan sees the executable's switches
  int n = 0;
  for (const detail::Step& s : detail::plan_fusion(e.impl().module, 0, {.stitch_stencils = true}).steps)
    n += s.stitch != nullptr;
  return n;
}

// GPU against CPU; with static shapes the GPU runs twice and the second run must replay a
// captured CUDA graph (nothing fell back to the CPU).
void differential(const std::string& what, const Build& build, const std::vector<TensorData>& inputs,
                  double tol, bool dynamic = false) {
  auto b = build_graph(build, inputs, dynamic);
  auto want = b->g.compile(b->feeds, b->outs, {}, cpu(dynamic)).run(inputs);
  Executable e = b->g.compile(b->feeds, b->outs, {}, gpu(dynamic));
  auto first = e.run(inputs);
  for (size_t i = 0; i < b->outs.size(); ++i)
    expect_close(first[i], want[i], tol, what + " output " + std::to_string(i));
  if (dynamic) return;
  auto again = e.run(inputs);
  auto stats = detail::cuda_graph_stats(e.impl());
  EXPECT_EQ(stats.captures, 1) << what << ": " << stats.error;
  EXPECT_EQ(stats.replays, 1) << what << ": " << stats.error;
  EXPECT_TRUE(stats.error.empty()) << what << ": " << stats.error;
  for (size_t i = 0; i < b->outs.size(); ++i)
    expect_close(again[i], want[i], tol, what + " replay " + std::to_string(i));
}

const Reduction kReductions[] = {Reduction::sum,     Reduction::min,    Reduction::max,
                                 Reduction::product, Reduction::argmin, Reduction::argmax};
const Boundary kBoundaries[] = {Boundary::zero,         Boundary::constant,  Boundary::clamp_to_edge,
                                Boundary::reflect,      Boundary::symmetric, Boundary::periodic,
                                Boundary::anti_periodic};
const PaddingStyle kPaddings[] = {PaddingStyle::same, PaddingStyle::valid, PaddingStyle::explicit_,
                                  PaddingStyle::same_lower, PaddingStyle::explicit_offset};

bool is_arg(Reduction r) { return r == Reduction::argmin || r == Reduction::argmax; }

// Source values keep products of many taps away from overflow and underflow.
TensorData source(Shape s, DType t, Reduction r, uint64_t seed) {
  return r == Reduction::product ? rnd(std::move(s), t, seed, 0.6, 1.4) : rnd(std::move(s), t, seed);
}
TensorData weights(Shape s, DType t, Reduction r, uint64_t seed) {
  if (is_arg(r)) return exact_weights(std::move(s), t, seed);
  return r == Reduction::product ? rnd(std::move(s), t, seed, 0.8, 1.2) : rnd(std::move(s), t, seed, -1, 1);
}

std::string name(const char* what, Reduction r, Boundary b, PaddingStyle p) {
  return std::string(what) + " " + detail::enum_name(r) + " " + detail::enum_name(b) + " " +
         detail::enum_name(p);
}

StencilDesc desc(Reduction r, Boundary b, PaddingStyle p = PaddingStyle::same) {
  StencilDesc d;
  d.reduction = r;
  d.boundary = b;
  d.padding_style = p;
  d.padding_constant = 0.75;
  if (p == PaddingStyle::explicit_ || p == PaddingStyle::explicit_offset)
    d.explicit_padding = {0, 0, 0, 1, 2, 1, 3, 4};
  if (p == PaddingStyle::explicit_offset) d.offsets = {0, 0, -1, 2};
  return d;
}

}  // namespace

TEST(CudaStencil, EveryReductionBoundaryAndPadding2D) {
  uint64_t seed = 1;
  int k = 0;
  for (Reduction r : kReductions)
    for (Boundary b : kBoundaries) {
      const PaddingStyle p = kPaddings[k % 5];
      const bool constant_weights = k++ % 2;
      const StencilDesc d = desc(r, b, p);
      const TensorData w = weights({1, 1, 3, 4}, f32, r, seed++);
      std::vector<TensorData> in{source({2, 1, 37, 70}, f32, r, seed++)};
      if (!constant_weights) in.push_back(w);
      differential(
          name("2-D", r, b, p) + (constant_weights ? " constant weights" : ""),
          [&](Graph& g, std::vector<Tensor>& x) {
            return std::vector{g.stencil(x[0], constant_weights ? g.constant(w) : x[1], d)};
          },
          in, is_arg(r) ? 0 : 1e-5);
    }
}

TEST(CudaStencil, StridesAndDilation) {
  uint64_t seed = 100;
  for (Reduction r : kReductions)
    for (Boundary b : {Boundary::zero, Boundary::reflect, Boundary::anti_periodic}) {
      StencilDesc d = desc(r, b, PaddingStyle::same);
      d.strides = {1, 1, 2, 3};
      d.dilation_rates = {1, 1, 2, 2};
      differential(
          name("strided dilated", r, b, d.padding_style),
          [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], d)}; },
          {source({3, 1, 41, 150}, f32, r, seed), weights({1, 1, 3, 3}, f32, r, seed + 1)},
          is_arg(r) ? 0 : 1e-5);
      seed += 2;
    }
}

TEST(CudaStencil, ThreeDAndFourDWindows) {
  uint64_t seed = 200;
  for (Reduction r : kReductions)
    for (Boundary b : {Boundary::zero, Boundary::constant, Boundary::symmetric, Boundary::periodic}) {
      const StencilDesc d = desc(r, b);
      differential(
          name("3-D", r, b, d.padding_style),
          [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], d)}; },
          {source({1, 9, 20, 45}, f32, r, seed), weights({1, 3, 3, 3}, f32, r, seed + 1)},
          is_arg(r) ? 0 : 1e-5);
      // Rank-5 source, a window over all four last dims, explicit padding, a stride and a dilation.
      StencilDesc d4 = desc(r, b, PaddingStyle::explicit_);
      d4.explicit_padding = {1, 0, 2, 1, 0, 1, 1, 2};
      d4.strides = {1, 2, 1, 1};
      d4.dilation_rates = {1, 1, 2, 1};
      differential(
          name("rank-5 4-D window", r, b, d4.padding_style),
          [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], d4)}; },
          {source({2, 3, 5, 4, 7}, f32, r, seed + 2), weights({2, 2, 2, 3}, f32, r, seed + 3)},
          is_arg(r) ? 0 : 1e-5);
      seed += 4;
    }
}

TEST(CudaStencil, HalfBfloatAndDouble) {
  uint64_t seed = 300;
  for (DType t : {f16, bf16, f64})
    for (Reduction r : kReductions)
      for (Boundary b : {Boundary::constant, Boundary::reflect, Boundary::anti_periodic}) {
        const StencilDesc d = desc(r, b);
        const TensorData w = weights({1, 1, 3, 3}, t, r, seed + 1);
        const bool constant_weights = b == Boundary::reflect;
        std::vector<TensorData> in{source({1, 2, 33, 40}, t, r, seed)};
        if (!constant_weights) in.push_back(w);
        differential(
            name(dtype_name(t), r, b, d.padding_style),
            [&](Graph& g, std::vector<Tensor>& x) {
              return std::vector{g.stencil(x[0], constant_weights ? g.constant(w) : x[1], d)};
            },
            in, is_arg(r) ? 0 : 2 * tolerance(t));
        seed += 2;
      }
}

TEST(CudaStencil, TwoDAndThreeDFormsThroughReshapes) {
  // An image [H, W] and a volume [D, H, W] made rank 4, as the 2-D / 3-D forms are.
  std::vector<double> lap2 = {0, 1, 0, 1, -4, 1, 0, 1, 0}, lap3(27, 0.0);
  lap3[4] = lap3[10] = lap3[12] = lap3[14] = lap3[16] = lap3[22] = 1;
  lap3[13] = -6;
  for (Boundary b : {Boundary::zero, Boundary::clamp_to_edge, Boundary::periodic}) {
    StencilDesc d = desc(Reduction::sum, b);
    differential(
        std::string("2-D Laplacian ") + detail::enum_name(b),
        [&](Graph& g, std::vector<Tensor>& x) {
          Tensor w = g.constant(TensorData::from_vector({1, 1, 3, 3}, f32, lap2));
          return std::vector{g.reshape(g.stencil(g.reshape(x[0], {1, 1, 300, 257}), w, d), {300, 257})};
        },
        {rnd({300, 257}, f32, 1)}, 1e-5);
    differential(
        std::string("3-D Laplacian ") + detail::enum_name(b),
        [&](Graph& g, std::vector<Tensor>& x) {
          Tensor w = g.constant(TensorData::from_vector({1, 3, 3, 3}, f32, lap3));
          return std::vector{g.reshape(g.stencil(g.reshape(x[0], {1, 40, 33, 70}), w, d), {40, 33, 70})};
        },
        {rnd({40, 33, 70}, f32, 2)}, 1e-5);
  }
  // Constant weights skip their zero taps only while the tile is finite: inf and NaN still
  // spread through 0 * inf as in the reference.
  TensorData bad = rnd({1, 12, 17, 66}, f32, 3);
  bad.set(5 * 17 * 66 + 3 * 66 + 10, INFINITY);
  bad.set(9 * 17 * 66 + 16 * 66 + 65, NAN);
  differential(
      "3-D Laplacian with inf and NaN",
      [&](Graph& g, std::vector<Tensor>& x) {
        return std::vector{
            g.stencil(x[0], g.constant(TensorData::from_vector({1, 3, 3, 3}, f32, lap3)), StencilDesc{})};
      },
      {bad}, 1e-5);
}

TEST(CudaStencil, EdgeCases) {
  uint64_t seed = 400;
  for (Boundary b : kBoundaries)
    for (int64_t n : {1, 2, 3}) {  // a window larger than the source (reflect with n = 1, 2)
      StencilDesc d = desc(Reduction::sum, b);
      differential(
          std::string("tiny source ") + detail::enum_name(b) + " n=" + std::to_string(n),
          [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], d)}; },
          {rnd({1, 1, n, n + 1}, f32, seed), rnd({1, 1, 5, 7}, f32, seed + 1)}, 1e-5);
      seed += 2;
    }
  StencilDesc d = desc(Reduction::sum, Boundary::symmetric);
  auto plain = [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], d)}; };
  differential("9x9 window (weights from memory)", plain,
               {rnd({1, 1, 50, 61}, f32, 1), rnd({1, 1, 9, 9}, f32, 2)}, 1e-5);
  differential("25x25 window (a loop over taps)", plain,
               {rnd({1, 1, 40, 45}, f32, 3), rnd({1, 1, 25, 25}, f32, 4)}, 1e-4);
  differential("1-D window", plain, {rnd({1, 1, 3, 1000}, f32, 5), rnd({1, 1, 1, 5}, f32, 6)}, 1e-5);
  differential("window on the outer dim", plain, {rnd({6, 5, 4, 3}, f32, 7), rnd({3, 1, 1, 1}, f32, 8)},
               1e-5);
  differential("dynamic shapes", plain, {rnd({2, 1, 30, 40}, f32, 9), rnd({1, 1, 3, 3}, f32, 10)}, 1e-5,
               true);
  differential(
      "same tensor as source and weights",
      [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[0], d)}; },
      {rnd({2, 2, 2, 2}, f32, 11)}, 1e-5);
  // NaN in the window: the first NaN wins min / max / argmin / argmax and spreads through sums.
  TensorData s = rnd({1, 1, 20, 20}, f32, 12);
  s.set(45, NAN);
  s.set(46, NAN);
  for (Reduction r : kReductions) {
    StencilDesc dn = desc(r, Boundary::zero);
    differential(
        std::string("NaN ") + detail::enum_name(r),
        [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], dn)}; },
        {s, exact_weights({1, 1, 3, 3}, f32, 13)}, 1e-5);
  }
}

namespace {

// The fused graph (stitched prologue / epilogue) against the same graph with fusion off, and
// both against the CPU; `stitched` is the number of stitched steps expected.
void fused_vs_unfused(const std::string& what, const Build& build, const std::vector<TensorData>& inputs,
                      double tol, int stitched) {
  differential(what, build, inputs, tol);
  auto b = build_graph(build, inputs, false);
  Executable fused = b->g.compile(b->feeds, b->outs, {}, gpu());
  EXPECT_EQ(stitched_steps(fused), stitched) << what;
  auto got = fused.run(inputs);
  CompileOptions no_fusion = gpu();
  no_fusion.switches = {{"TGRAPH_NO_FUSION", "1"}};
  Executable plain = b->g.compile(b->feeds, b->outs, {}, no_fusion);
  EXPECT_EQ(stitched_steps(plain), 0) << what;
  auto want = plain.run(inputs);
  // Equal up to FMA contraction inside the fused prologue / epilogue (a few ulp).
  for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i], tol, what + " fused vs unfused");
}

}  // namespace

TEST(CudaStencil, StitchedPrologueAndEpilogue) {
  uint64_t seed = 500;
  for (DType t : {f32, f16, bf16})
    for (Boundary b : {Boundary::zero, Boundary::constant, Boundary::reflect, Boundary::anti_periodic}) {
      StencilDesc d = desc(Reduction::sum, b);
      // x * a + b -> stencil -> relu(y) * c: the padding value is the stencil's, not a * pad + b.
      fused_vs_unfused(
          std::string("x*a+b -> stencil -> relu*c ") + dtype_name(t) + " " + detail::enum_name(b),
          [&](Graph& g, std::vector<Tensor>& x) {
            Tensor y = g.stencil(g.add(g.mul(x[0], x[1]), x[2]), x[3], d);
            return std::vector{g.mul(g.relu(y), x[4])};
          },
          {rnd({2, 1, 30, 77}, t, seed), rnd({2, 1, 30, 77}, t, seed + 1), rnd({2, 1, 30, 77}, t, seed + 2),
           rnd({1, 1, 3, 3}, t, seed + 3), rnd({2, 1, 30, 77}, t, seed + 4)},
          4 * tolerance(t), 1);
      seed += 5;
    }
  StencilDesc d = desc(Reduction::sum, Boundary::constant);
  fused_vs_unfused(
      "2-D form: views, a scalar and a broadcast row",
      [&](Graph& g, std::vector<Tensor>& x) {
        Tensor s = g.mul(g.exp(x[0]), g.scalar(0.5));
        Tensor y = g.reshape(g.stencil(g.reshape(s, {1, 1, 40, 50}), x[1], d), {40, 50});
        return std::vector{g.add(g.tanh(y), x[2])};
      },
      {rnd({40, 50}, f32, 1), rnd({1, 1, 3, 3}, f32, 2), rnd({50}, f32, 3)}, 1e-5, 1);
  StencilDesc da = desc(Reduction::argmax, Boundary::clamp_to_edge);
  fused_vs_unfused(
      "argmax with a cast epilogue, the result a target too",
      [&](Graph& g, std::vector<Tensor>& x) {
        Tensor y = g.stencil(g.abs(x[0]), x[1], da);
        return std::vector{g.mul(g.cast(y, f32), x[0]), y};
      },
      {rnd({1, 3, 20, 33}, f32, 4), exact_weights({1, 1, 3, 3}, f32, 5)}, 1e-6, 1);
  fused_vs_unfused(
      "prologue result used again: epilogue only",
      [&](Graph& g, std::vector<Tensor>& x) {
        Tensor s = g.sigmoid(x[0]);
        return std::vector{g.sub(g.stencil(s, x[1], d), s)};
      },
      {rnd({1, 2, 21, 40}, f32, 6), rnd({1, 1, 3, 3}, f32, 7)}, 1e-5, 1);
  fused_vs_unfused(
      "two stencils in a chain",
      [&](Graph& g, std::vector<Tensor>& x) {
        Tensor y = g.stencil(g.neg(x[0]), x[1], d);
        return std::vector{g.square(g.stencil(g.relu(y), x[1], d))};
      },
      {rnd({1, 1, 30, 31}, f32, 8), rnd({1, 1, 3, 3}, f32, 9)}, 1e-5, 2);
  fused_vs_unfused(
      "rank-5, a broadcast operand, f16 in and out",
      [&](Graph& g, std::vector<Tensor>& x) {
        Tensor y = g.stencil(g.add(g.cast(x[0], f32), x[1]), x[2], d);
        return std::vector{g.cast(g.maximum(y, g.scalar(0.0)), f16)};
      },
      {rnd({2, 2, 3, 6, 9}, f16, 10), rnd({1, 1, 1, 1, 9}, f32, 11), rnd({1, 2, 2, 2}, f32, 12)}, 4e-3, 1);
  fused_vs_unfused(
      "epilogue at a bigger shape: prologue only",
      [&](Graph& g, std::vector<Tensor>& x) {
        return std::vector{g.add(g.stencil(g.relu(x[0]), x[1], d), x[2])};
      },
      {rnd({1, 1, 8, 9}, f32, 13), rnd({1, 1, 3, 3}, f32, 14), rnd({3, 1, 8, 9}, f32, 15)}, 1e-5, 1);
}

// The direct (register-blocked) kernel's paths: threads inside the source (no boundary logic)
// and at its edges, 16-byte vector loads (rows of a multiple of 4 elements) beside element
// loads (odd widths), chunks starting off a 16-byte boundary (the window's offset), partial
// vector stores at the row's end, zero taps skipped until a non-finite value is read; under
// several kernel shapes (TGRAPH_STENCIL_CONFIG), the shared-memory tile kernel among them.
TEST(CudaStencil, DirectKernelShapes) {
  std::vector<double> lap2 = {0, 1, 0, 1, -4, 1, 0, 1, 0}, lap3(27, 0.0);
  lap3[4] = lap3[10] = lap3[12] = lap3[14] = lap3[16] = lap3[22] = 1;
  lap3[13] = -6;
  TensorData bad3 = rnd({1, 20, 24, 64}, f32, 41);
  bad3.set(7 * 24 * 64 + 9 * 64 + 30, INFINITY);  // inside: a zero tap of its neighbours' windows
  bad3.set(12 * 24 * 64 + 5 * 64 + 33, NAN);
  uint64_t seed = 600;
  for (const char* cfg : {"", "tile", "v=4,r=8,tx=32", "v=8,r=2,tx=16", "v=2,r=3,tx=64,mb=3"}) {
    WithSwitches config(*cfg ? std::map<std::string, std::string>{{"TGRAPH_STENCIL_CONFIG", cfg}}
                             : std::map<std::string, std::string>{});
    const std::string c = std::string(" [") + cfg + "]";
    for (int64_t w : {260, 257, 62})
      for (Boundary b : {Boundary::zero, Boundary::anti_periodic}) {
        StencilDesc d = desc(Reduction::sum, b, PaddingStyle::explicit_offset);
        d.explicit_padding = {0, 0, 0, 0, 1, 1, 2, 0};  // the window starts 2 elements left
        differential(
            "Laplacian width " + std::to_string(w) + " " + detail::enum_name(b) + c,
            [&](Graph& g, std::vector<Tensor>& x) {
              Tensor k = g.constant(TensorData::from_vector({1, 1, 3, 3}, f32, lap2));
              return std::vector{g.stencil(x[0], k, desc(Reduction::sum, b)), g.stencil(x[0], k, d)};
            },
            {rnd({2, 1, 45, w}, f32, seed++)}, 1e-5);
        StencilDesc m = desc(Reduction::argmax, b);
        differential(
            "3x5 argmax width " + std::to_string(w) + " " + detail::enum_name(b) + c,
            [&](Graph& g, std::vector<Tensor>& x) { return std::vector{g.stencil(x[0], x[1], m)}; },
            {rnd({1, 1, 37, w}, f32, seed), exact_weights({1, 1, 3, 5}, f32, seed + 1)}, 0);
        seed += 2;
      }
    differential(
        "3-D Laplacian, inf and NaN inside" + c,
        [&](Graph& g, std::vector<Tensor>& x) {
          return std::vector{
              g.stencil(x[0], g.constant(TensorData::from_vector({1, 3, 3, 3}, f32, lap3)), StencilDesc{})};
        },
        {bad3}, 1e-5);
    fused_vs_unfused(
        "stitched x*0.5+1 -> Laplacian -> relu*2, width 128" + c,
        [&](Graph& g, std::vector<Tensor>& x) {
          Tensor s = g.add(g.mul(x[0], g.scalar(0.5)), g.scalar(1.0));
          Tensor y = g.stencil(s, g.constant(TensorData::from_vector({1, 1, 3, 3}, f32, lap2)));
          return std::vector{g.mul(g.relu(y), g.scalar(2.0))};
        },
        {rnd({1, 1, 70, 128}, f32, seed++)}, 1e-5, 1);
    fused_vs_unfused(
        "stitched a*x+b (flat operands, vector loads), f16 epilogue" + c,
        [&](Graph& g, std::vector<Tensor>& x) {
          Tensor y = g.stencil(g.add(g.mul(x[0], x[1]), x[2]), x[3], desc(Reduction::sum, Boundary::constant));
          return std::vector{g.cast(g.relu(y), f16), y};
        },
        {rnd({1, 2, 33, 132}, f32, seed), rnd({1, 2, 33, 132}, f32, seed + 1), rnd({1, 2, 33, 132}, f32, seed + 2),
         rnd({1, 1, 3, 3}, f32, seed + 3)},
        4e-3, 1);
    seed += 4;
  }
}
