// DeviceTensor on the CPU and DLPack exchange: round trips keep values and ownership, and
// tensors tgraph cannot take are refused without touching the caller's tensor.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tgraph/device_tensor.h"
#include "tgraph/error.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

TEST(DeviceTensor, CpuTensorsShareHostMemory) {
  TensorData h = TensorData::randn({3, 5}, f32, 7);
  DeviceTensor d = DeviceTensor::from_host(h, Device::cpu());
  EXPECT_EQ(d.data(), h.data());
  EXPECT_EQ(d.type(), h.type());
  EXPECT_EQ(d.nbytes(), 60u);
  TensorData back = d.to_host();
  EXPECT_EQ(back.data(), h.data());
  DeviceTensor a = DeviceTensor::allocate(TensorType({4}, i64), Device::cpu());
  EXPECT_EQ(a.nbytes(), 32u);
  EXPECT_THROW(DeviceTensor::allocate(TensorType({-1, 4}, f32), Device::cpu()), Error);
  EXPECT_THROW(DeviceTensor().shape(), Error);
}

TEST(DeviceTensor, DlpackRoundTripKeepsValuesAndFreesOnce) {
  for (DType t : {f32, f16, bf16, f64, i8, i16, i32, i64, u8, DType::boolean}) {
    TensorData h = TensorData::uniform({2, 3, 4}, -3, 3, t, 11);
    DLManagedTensor* m = DeviceTensor::from_host(h, Device::cpu()).to_dlpack();
    ASSERT_EQ(m->dl_tensor.ndim, 3);
    EXPECT_EQ(m->dl_tensor.shape[2], 4);
    EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
    EXPECT_EQ(m->dl_tensor.data, h.data());  // zero copy
    {
      DeviceTensor back = DeviceTensor::from_dlpack(m);  // takes ownership of m
      EXPECT_EQ(back.type(), h.type()) << dtype_name(t);
      TensorData v = back.to_host();
      for (int64_t i = 0; i < h.num_elements(); ++i) ASSERT_EQ(v.at(i), h.at(i)) << dtype_name(t);
    }
  }
}

struct Foreign {
  std::vector<float> values{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> shape{2, 3};
  std::vector<int64_t> strides;
  DLManagedTensor m{};
  int* deleted;
  explicit Foreign(int* d, DLDataType dt = {kDLFloat, 32, 1}) : deleted(d) {
    m.dl_tensor.data = values.data();
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = 2;
    m.dl_tensor.dtype = dt;
    m.dl_tensor.shape = shape.data();
    m.manager_ctx = this;
    m.deleter = [](DLManagedTensor* self) {
      auto* f = static_cast<Foreign*>(self->manager_ctx);
      ++*f->deleted;
      delete f;
    };
  }
};

TEST(DeviceTensor, ForeignTensorsAreBorrowedUntilTheLastHandle) {
  int deleted = 0;
  auto* f = new Foreign(&deleted);
  {
    DeviceTensor d = DeviceTensor::from_dlpack(&f->m);
    DeviceTensor copy = d;
    EXPECT_EQ(d.shape(), Shape({2, 3}));
    EXPECT_EQ(d.to_host().at(5), 6.0);
    EXPECT_EQ(deleted, 0);
  }
  EXPECT_EQ(deleted, 1);
}

TEST(DeviceTensor, RefusesWhatItCannotTakeAndLeavesItToTheCaller) {
  int deleted = 0;
  auto* complex = new Foreign(&deleted, {kDLComplex, 64, 1});
  EXPECT_THROW(
      {
        try {
          DeviceTensor::from_dlpack(&complex->m);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("[from_dlpack] unsupported DLPack dtype"), std::string::npos);
          throw;
        }
      },
      Error);
  auto* transposed = new Foreign(&deleted);
  transposed->strides = {1, 2};
  transposed->m.dl_tensor.strides = transposed->strides.data();
  EXPECT_THROW(DeviceTensor::from_dlpack(&transposed->m), Error);
  auto* vulkan = new Foreign(&deleted);
  vulkan->m.dl_tensor.device = {kDLVulkan, 0};
  EXPECT_THROW(DeviceTensor::from_dlpack(&vulkan->m), Error);
  EXPECT_EQ(deleted, 0);  // refused tensors stay the caller's
  complex->m.deleter(&complex->m);
  transposed->m.deleter(&transposed->m);
  vulkan->m.deleter(&vulkan->m);
  EXPECT_EQ(deleted, 3);
  // Row-major strides spelled out are fine.
  auto* strided = new Foreign(&deleted);
  strided->strides = {3, 1};
  strided->m.dl_tensor.strides = strided->strides.data();
  EXPECT_EQ(DeviceTensor::from_dlpack(&strided->m).to_host().at(4), 5.0);
  EXPECT_EQ(deleted, 4);
}

TEST(DeviceTensor, CpuExecutablesRunOnHostDeviceTensors) {
  Graph g;
  Tensor x = g.placeholder({4}, f32);
  Executable e = g.compile({{x, x.type()}}, {g.exp(x)}, {}, {.device = Device::cpu()});
  TensorData hx = TensorData::uniform({4}, -1, 1, f32, 1);
  std::vector<DeviceTensor> out = e.run_device({DeviceTensor::from_host(hx, Device::cpu())});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].device(), Device::cpu());
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(static_cast<float>(out[0].to_host().at(i)), std::exp(static_cast<float>(hx.at(i))));
  EXPECT_THROW(e.run_device(std::vector<DeviceTensor>{DeviceTensor()}), Error);
  EXPECT_THROW(e.run_device(std::vector<DeviceTensor>{DeviceTensor::from_host(TensorData::zeros({5}), Device::cpu())}), Error);
}

}  // namespace
