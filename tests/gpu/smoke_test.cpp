// GPU smoke test: a kernel runs on the device and agrees with the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cuda/cuda_info.h"
#include "tgraph/device.h"
#include "tgraph/tensor_data.h"

TEST(GpuSmoke, DeviceIsDescribed) {
  ASSERT_GT(tg::Device::cuda_device_count(), 0);
  EXPECT_NE(tg::detail::cuda_device_description(0).find("sm_"), std::string::npos);
}

TEST(GpuSmoke, AxpyMatchesCpu) {
  const int n = 1 << 20;
  tg::TensorData x = tg::TensorData::randn({n}, tg::f32, 1), y = tg::TensorData::randn({n}, tg::f32, 2);
  std::vector<float> xv(x.ptr<float>(), x.ptr<float>() + n), yv(y.ptr<float>(), y.ptr<float>() + n);
  std::vector<float> got = tg::detail::cuda_axpy(2.5f, xv, yv);
  for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], std::fma(2.5f, xv[i], yv[i])) << "at " << i;
}
