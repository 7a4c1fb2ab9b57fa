// Main of tgraph_sweep_cpu: the op sweep's case table (op_sweep_test.cpp) run on the CPU with
// every input dim dynamic, against the static build (TG_SWEEP_DYNAMIC; issue 22). No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("TG_SWEEP_DYNAMIC", "1", 1);
  testing::InitGoogleTest(&argc, argv);
  if (testing::GTEST_FLAG(filter) == "*") testing::GTEST_FLAG(filter) = "Ops/OpSweep.*:OpSweepTable.*";
  return RUN_ALL_TESTS();
}
