// DeviceTensor on the GPU: host round trips through pinned staging (small and chunked sizes),
// DLPack export/import of device memory.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tgraph/device_tensor.h"
#include "tgraph/error.h"
#include "tgraph/tgraph.h"
#include "runtime/executable_impl.h"

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

TEST(DeviceTensorGpu, RunsStayOnTheDeviceAndMatchHostRuns) {
  Graph g;
  Tensor x = g.placeholder({300, 64}, f32), w = g.placeholder({64, 32}, f32);
  Tensor v = g.variable(TensorData::zeros({300, 32}), "last");
  Tensor y = g.tanh(g.matmul(x, w));
  Operation up = g.assign(v, y);
  Tensor z = g.control_dependency({up}, [&] { return std::vector{g.mul(y, g.scalar(2.0))}; })[0];
  Executable e = g.compile({{x, x.type()}, {w, w.type()}}, {y, z}, {}, {.device = Device::cuda(0)});
  Executable host = g.compile({{x, x.type()}, {w, w.type()}}, {y, z}, {}, {.device = Device::cuda(0)});
  for (int run = 0; run < 3; ++run) {  // the second and third runs replay the captured graph
    TensorData hx = TensorData::uniform({300, 64}, -1, 1, f32, 10 + run), hw = TensorData::uniform({64, 32}, -1, 1, f32, 20);
    DeviceTensor dx = DeviceTensor::from_host(hx, Device::cuda(0)), dw = DeviceTensor::from_host(hw, Device::cuda(0));
    std::vector<DeviceTensor> out = e.run_device({dx, dw});
    std::vector<TensorData> want = host.run({hx, hw});
    ASSERT_EQ(out.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(out[k].device(), Device::cuda(0));
      TensorData got = out[k].to_host();
      ASSERT_EQ(std::memcmp(got.data(), want[k].data(), want[k].nbytes()), 0) << "output " << k << " run " << run;
    }
    // Outputs are fresh buffers: the next run does not overwrite them.
    TensorData kept = out[0].to_host();
    e.run_device({dx, dw});
    ASSERT_EQ(std::memcmp(out[0].to_host().data(), kept.data(), kept.nbytes()), 0);
    // A host-memory DeviceTensor is copied to the device first.
    std::vector<DeviceTensor> mixed = e.run_device({DeviceTensor::from_host(hx, Device::cpu()), dw});
    ASSERT_EQ(std::memcmp(mixed[1].to_host().data(), want[1].data(), want[1].nbytes()), 0);
  }
  EXPECT_GE(tg::detail::cuda_graph_stats(e.impl()).replays, 2);
  EXPECT_THROW(e.run_device({DeviceTensor::from_host(TensorData::zeros({3, 3}), Device::cuda(0)), DeviceTensor()}), Error);
}

}  // namespace
