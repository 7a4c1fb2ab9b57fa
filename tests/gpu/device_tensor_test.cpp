// DeviceTensor on the GPU: host round trips through pinned staging (small and chunked sizes),
// DLPack export/import of device memory.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tgraph/device_tensor.h"
#include "tgraph/error.h"

using namespace tg;

namespace {

TEST(DeviceTensorGpu, HostRoundTripsThroughStaging) {
  // 1 KiB (direct), 1 MiB (one staged chunk), 37 MiB + odd bytes (several chunks, last partial).
  for (int64_t n : {256LL, 262144LL, 9700001LL}) {
    TensorData h = TensorData::uniform({n}, -5, 5, f32, static_cast<uint64_t>(n));
    DeviceTensor d = DeviceTensor::from_host(h, Device::cuda(0));
    EXPECT_EQ(d.device(), Device::cuda(0));
    EXPECT_NE(d.data(), h.data());
    TensorData back = d.to_host();
    ASSERT_EQ(back.type(), h.type());
    ASSERT_EQ(std::memcmp(back.data(), h.data(), h.nbytes()), 0) << n;
  }
}

TEST(DeviceTensorGpu, DlpackExportsDeviceMemory) {
  TensorData h = TensorData::uniform({3, 70000}, -1, 1, bf16, 3);
  DeviceTensor d = DeviceTensor::from_host(h, Device::cuda(0));
  DLManagedTensor* m = d.to_dlpack();
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(m->dl_tensor.device.device_id, 0);
  EXPECT_EQ(m->dl_tensor.data, d.data());
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLBfloat);
  DeviceTensor back = DeviceTensor::from_dlpack(m);
  EXPECT_EQ(back.data(), d.data());
  TensorData v = back.to_host();
  ASSERT_EQ(std::memcmp(v.data(), h.data(), h.nbytes()), 0);
}

}  // namespace
