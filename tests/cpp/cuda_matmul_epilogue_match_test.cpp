// Which matmul + bias (+ activation) patterns the CUDA executor folds into the cuBLASLt epilogue
// (matmul_epilogue.h), on the plans of optimised modules. No GPU needed; the numbers are tested
// in tests/gpu/cuda_matmul_epilogue_test.cpp.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>

#include "backends/cuda/matmul_epilogue.h"
#include "passes/pipeline.h"
#include "tgraph/nn.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;
using E = MatmulShape::Epilogue;

namespace {

// The epilogues matched in the optimised module of `build` (placeholders of `shapes`, dtype t).
std::vector<E> matches(const std::vector<Shape>& shapes, DType t,
                       const std::function<std::vector<Tensor>(Graph&, std::vector<Tensor>&)>& build) {
  Graph g;
  std::vector<Tensor> x;
  for (const Shape& s : shapes) x.push_back(g.placeholder(s, t));
  std::vector<Tensor> outs = build(g, x);
  Module m;
  m.graph = g.impl();
  for (const Tensor& p : x) m.feeds.push_back(p.id());
  for (const Tensor& o : outs) m.targets.push_back(o.id());
  run_pipeline(m, /*optimize=*/true, /*decompose_composites=*/true);
  FusionPlan plan = plan_fusion(m, 0, FusionOptions{.stitch_stencils = true});
  std::vector<E> r;
  for (const EpilogueMatch& e : match_epilogues(m, plan))
    if (e.kind != E::none) r.push_back(e.kind);
  return r;
}

const std::vector<Shape> kLinear{{37, 64}, {64, 48}, {48}};

}  // namespace

TEST(CudaMatmulEpilogueMatch, BiasAndActivationsFold) {
  for (DType t : {f32, f16, bf16}) {
    EXPECT_EQ(matches(kLinear, t, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }),
              std::vector<E>{E::bias});
    EXPECT_EQ(matches(kLinear, t, [](Graph& g, auto& x) { return std::vector{g.add(x[2], g.matmul(x[0], x[1]))}; }),
              std::vector<E>{E::bias});
    EXPECT_EQ(matches(kLinear, t,
                      [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; }),
              std::vector<E>{E::relu_bias});
    EXPECT_EQ(matches(kLinear, t,
                      [](Graph& g, auto& x) { return std::vector{g.gelu_tanh(g.add(g.matmul(x[0], x[1]), x[2]))}; }),
              std::vector<E>{E::gelu_tanh_bias});
  }
  EXPECT_EQ(matches({{3, 37, 64}, {64, 48}, {1, 1, 48}}, f32,
                    [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; }),
            std::vector<E>{E::relu_bias});
  EXPECT_EQ(matches({{37, 64}, {48, 64}, {1, 48}}, f16,
                    [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1], false, true), x[2])}; }),
            std::vector<E>{E::bias});
  // nn::Linear on [.., in]: a reshape of the 2-D result sits between the matmul and the add.
  EXPECT_EQ(matches({{2, 5, 32}}, f32,
                    [](Graph& g, auto& x) {
                      nn::Linear fc(g, "fc", 32, 16);
                      return std::vector{g.gelu_tanh(fc.forward(g, x[0]))};
                    }),
            std::vector<E>{E::gelu_tanh_bias});
  setenv("TGRAPH_NO_FUSION", "1", 1);
  auto unfused = matches(kLinear, f32,
                         [](Graph& g, auto& x) { return std::vector{g.relu(g.add(g.matmul(x[0], x[1]), x[2]))}; });
  unsetenv("TGRAPH_NO_FUSION");
  EXPECT_EQ(unfused, std::vector<E>{E::relu_bias});
  setenv("TGRAPH_NO_EPILOGUE", "1", 1);
  auto off = matches(kLinear, f32, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; });
  unsetenv("TGRAPH_NO_EPILOGUE");
  EXPECT_TRUE(off.empty());
}

TEST(CudaMatmulEpilogueMatch, OthersDoNotFold) {
  auto none = [](const std::vector<Shape>& shapes, DType t, auto build) {
    return matches(shapes, t, build).empty();
  };
  EXPECT_TRUE(none(kLinear, f32, [](Graph& g, auto& x) {
    Tensor y = g.matmul(x[0], x[1]);
    return std::vector{g.add(y, x[2]), y};
  }));
  EXPECT_TRUE(none(kLinear, f32, [](Graph& g, auto& x) {
    Tensor y = g.matmul(x[0], x[1]);
    return std::vector{g.mul(g.add(y, x[2]), y)};
  }));
  EXPECT_TRUE(none({{37, 64}, {64, 48}, {37, 1}}, f32,
                   [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }));
  EXPECT_TRUE(none({{37, 64}, {64, 48}, {37, 48}}, f32,
                   [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }));
  EXPECT_TRUE(none(kLinear, f32,
                   [](Graph& g, auto& x) { return std::vector{g.gelu(g.add(g.matmul(x[0], x[1]), x[2]))}; }));
  EXPECT_TRUE(none(kLinear, f64, [](Graph& g, auto& x) { return std::vector{g.add(g.matmul(x[0], x[1]), x[2])}; }));
  // [add, mul] in one group: the sum is not left alone.
  EXPECT_TRUE(none(kLinear, f32, [](Graph& g, auto& x) {
    return std::vector{g.mul(g.add(g.matmul(x[0], x[1]), x[2]), x[2])};
  }));
}
#endif
