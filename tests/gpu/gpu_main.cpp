// Main of the GPU test binary: reports "skipped" (exit 77) when no CUDA device is usable.
#include <gtest/gtest.h>

#include <cstdio>

#include "tgraph/device.h"

int main(int argc, char** argv) {
  if (tg::Device::cuda_device_count() == 0) {
    std::printf("no usable CUDA device: GPU tests skipped\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
