// shift_left / shift_right are fused into generated elementwise kernels, and those kernels
// compile with NVRTC for sm_90 for every integer dtype and bool (no GPU needed). Values are
// checked against the CPU in tests/gpu/cuda_layout_test.cpp.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "passes/fusion.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;

TEST(CudaCodegen, ShiftsFuseAndCompile) {
  for (DType t : {i8, i16, i32, i64, u8, boolean}) {
    Graph g;
    Tensor a = g.placeholder({4, 3}, t), b = g.placeholder({3}, t);
    Tensor y = g.bitwise_or(g.shift_left(a, b), g.shift_right(a, b));
    Module m;
    m.graph = g.impl();
    m.targets = {y.id()};
    FusionPlan plan = plan_fusion(m, 0);
    int shifts = 0;  // both shifts run in generated kernels
    for (const Step& s : plan.steps) {
      if (!s.fused()) continue;
      for (int32_t id : s.group.nodes) {
        OpKind k = m.graph.nodes[static_cast<size_t>(id)].kind;
        shifts += k == OpKind::ShiftLeft || k == OpKind::ShiftRight;
      }
      ASSERT_TRUE(elementwise_supported(m.graph, s.group)) << dtype_name(t);
      const StridePattern general = StridePattern::general(3, static_cast<int>(s.group.inputs.size()));
      for (Indexing ix : {Indexing::flat, Indexing::strided, Indexing::strided32})
        EXPECT_FALSE(nvrtc_compile(elementwise_source(m.graph, s.group, ix, -1, &general), 9, 0).empty())
            << dtype_name(t);
    }
    EXPECT_EQ(shifts, 2) << dtype_name(t);
  }
}
#endif
