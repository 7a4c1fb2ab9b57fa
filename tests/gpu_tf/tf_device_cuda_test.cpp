// The TensorFlow plugin's CUDA device half (python/tensorflow/src/device_cuda.cpp) on a real GPU,
// without TensorFlow (its wheel cannot be installed on the GPU machine): the StreamExecutor
// functions TensorFlow would call, called as it calls them, and the kernels' route — TensorFlow's
// device buffers read in place by a tgraph executable run on TensorFlow's stream, its results
// copied into TensorFlow's buffers in that stream's order. TensorFlow's TF_Status functions are
// stood in for below (the device code only sets and reads a code and a message).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device_cuda.h"
#include "tgraph/tgraph.h"

struct TSL_Status {
  TF_Code code = TF_OK;
  std::string message;
};
extern "C" {
TF_Status* TF_NewStatus() { return new TSL_Status; }
void TF_DeleteStatus(TF_Status* s) { delete s; }
void TF_SetStatus(TF_Status* s, TF_Code code, const char* msg) {
  s->code = code;
  s->message = msg ? msg : "";
}
TF_Code TF_GetCode(const TF_Status* s) { return s->code; }
const char* TF_Message(const TF_Status* s) { return s->message.c_str(); }
}

namespace {

struct Executor {
  SP_Device device{};
  SP_StreamExecutor se{};
  TSL_Status status;
  Executor() {
    device.struct_size = SP_DEVICE_STRUCT_SIZE;
    device.ordinal = 0;
    se.struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
    tgraph_tf::fill_cuda_executor(&se);
  }
  SP_DeviceMemoryBase alloc(uint64_t bytes) {
    SP_DeviceMemoryBase m{};
    se.allocate(&device, bytes, 0, &m);
    return m;
  }
  void ok() { ASSERT_EQ(status.code, TF_OK) << status.message; }
};

TEST(TfDeviceCuda, MemoryCopiesAndMemsetsLandWhereTensorFlowExpects) {
  ASSERT_GT(tgraph_tf::cuda_devices(), 0);
  Executor x;
  ASSERT_NE(x.se.allocate, nullptr);
  SP_Stream stream = nullptr;
  x.se.create_stream(&x.device, &stream, &x.status);
  x.ok();
  const size_t n = 1 << 16;
  std::vector<float> host(n), back(n, -1.0f);
  for (size_t i = 0; i < n; ++i) host[i] = 0.25f * static_cast<float>(i % 977) - 3.0f;
  SP_DeviceMemoryBase a = x.alloc(n * 4), b = x.alloc(n * 4);
  ASSERT_NE(a.opaque, nullptr);
  EXPECT_EQ(a.size, n * 4);
  EXPECT_TRUE(tgraph_tf::device_memory(a.opaque));
  EXPECT_FALSE(tgraph_tf::device_memory(host.data()));
  // host -> a -> b -> host, asynchronous on one stream, then waited for
  x.se.memcpy_htod(&x.device, stream, &a, host.data(), n * 4, &x.status);
  x.ok();
  x.se.memcpy_dtod(&x.device, stream, &b, &a, n * 4, &x.status);
  x.ok();
  x.se.memcpy_dtoh(&x.device, stream, back.data(), &b, n * 4, &x.status);
  x.ok();
  x.se.block_host_until_done(&x.device, stream, &x.status);
  x.ok();
  EXPECT_EQ(std::memcmp(host.data(), back.data(), n * 4), 0);
  // memset32 with a pattern that is not one byte repeated, and memset / mem_zero
  std::vector<uint32_t> words(n);
  x.se.memset32(&x.device, stream, &a, 0x3f800000u, n * 4, &x.status);  // 1.0f
  x.ok();
  x.se.block_host_until_done(&x.device, stream, &x.status);
  x.se.sync_memcpy_dtoh(&x.device, words.data(), &a, n * 4, &x.status);
  x.ok();
  for (size_t i = 0; i < n; i += 4093) EXPECT_EQ(words[i], 0x3f800000u) << i;
  x.se.memset(&x.device, stream, &a, 0xab, n * 4, &x.status);
  x.se.block_host_until_done(&x.device, stream, &x.status);
  x.se.sync_memcpy_dtoh(&x.device, words.data(), &a, n * 4, &x.status);
  x.ok();
  EXPECT_EQ(words[n - 1], 0xababababu);
  x.se.mem_zero(&x.device, stream, &a, n * 4, &x.status);
  x.se.block_host_until_done(&x.device, stream, &x.status);
  x.se.sync_memcpy_dtoh(&x.device, words.data(), &a, n * 4, &x.status);
  x.ok();
  EXPECT_EQ(words[n / 2], 0u);
  int64_t free_bytes = 0, total = 0;
  EXPECT_TRUE(x.se.device_memory_usage(&x.device, &free_bytes, &total));
  EXPECT_GT(total, free_bytes);
  x.se.deallocate(&x.device, &a);
  x.se.deallocate(&x.device, &b);
  EXPECT_EQ(a.opaque, nullptr);
  x.se.destroy_stream(&x.device, stream);
}

TEST(TfDeviceCuda, EventsDependenciesAndCallbacksOrderTheStreams) {
  Executor x;
  SP_Stream s1 = nullptr, s2 = nullptr;
  x.se.create_stream(&x.device, &s1, &x.status);
  x.se.create_stream(&x.device, &s2, &x.status);
  x.ok();
  const size_t n = 1 << 22;  // 16 MiB: long enough that an unordered read would see old data
  std::vector<uint32_t> pattern(n, 7u), back(n, 0u);
  SP_DeviceMemoryBase a = x.alloc(n * 4), b = x.alloc(n * 4);
  x.se.mem_zero(&x.device, s1, &b, n * 4, &x.status);
  x.se.memcpy_htod(&x.device, s1, &a, pattern.data(), n * 4, &x.status);
  x.se.memset32(&x.device, s1, &a, 0x01020304u, n * 4, &x.status);
  // s2 waits for s1's work through an event, then copies a into b
  SP_Event e = nullptr;
  x.se.create_event(&x.device, &e, &x.status);
  x.ok();
  x.se.record_event(&x.device, s1, e, &x.status);
  x.se.wait_for_event(&x.device, s2, e, &x.status);
  x.se.memcpy_dtod(&x.device, s2, &b, &a, n * 4, &x.status);
  x.ok();
  // then s1 waits for s2 (a stream dependency) and reads b back; a callback after it counts
  x.se.create_stream_dependency(&x.device, s1, s2, &x.status);
  x.se.memcpy_dtoh(&x.device, s1, back.data(), &b, n * 4, &x.status);
  x.ok();
  static std::atomic<int> called{0};
  called = 0;
  ASSERT_TRUE(x.se.host_callback(&x.device, s1, [](void* arg, TF_Status* s) {
    called = *static_cast<int*>(arg);
    TF_SetStatus(s, TF_OK, "");
  }, new int(42)));  // leaked on purpose: a few bytes, read after the test body ends
  x.se.block_host_until_done(&x.device, s1, &x.status);
  x.ok();
  EXPECT_EQ(called.load(), 42);
  EXPECT_EQ(back[0], 0x01020304u);
  EXPECT_EQ(back[n - 1], 0x01020304u);
  x.se.block_host_for_event(&x.device, e, &x.status);
  x.ok();
  EXPECT_EQ(x.se.get_event_status(&x.device, e), SE_EVENT_COMPLETE);
  x.se.get_stream_status(&x.device, s2, &x.status);
  x.ok();
  // a timer around a copy measures something
  SP_Timer t = nullptr;
  x.se.create_timer(&x.device, &t, &x.status);
  x.se.start_timer(&x.device, s1, t, &x.status);
  x.se.memcpy_dtod(&x.device, s1, &a, &b, n * 4, &x.status);
  x.se.stop_timer(&x.device, s1, t, &x.status);
  x.ok();
  EXPECT_GT(tgraph_tf::cuda_timer_ns()(t), 0u);
  x.se.destroy_timer(&x.device, t);
  x.se.destroy_event(&x.device, e);
  x.se.synchronize_all_activity(&x.device, &x.status);
  x.ok();
  x.se.deallocate(&x.device, &a);
  x.se.deallocate(&x.device, &b);
  x.se.destroy_stream(&x.device, s1);
  x.se.destroy_stream(&x.device, s2);
}

TEST(TfDeviceCuda, AKernelsRunReadsTensorFlowsBuffersOnItsStream) {
  // What kernels.cpp does on CUDA: inputs in memory from allocate() wrapped in place, the
  // executable run on the stream TF_GetStream gives, the result copied into another buffer of
  // TensorFlow's on that stream; compared with the CPU backend's result.
  Executor x;
  SP_Stream stream = nullptr;
  x.se.create_stream(&x.device, &stream, &x.status);
  x.ok();
  void* cuda = tgraph_tf::cuda_stream(stream);
  ASSERT_NE(cuda, nullptr);
  tg::Graph g;
  const tg::TensorType ta{tg::Shape({64, 48}), tg::DType::f32}, tb{tg::Shape({48, 32}), tg::DType::f32};
  tg::Tensor a = g.placeholder(ta.shape, ta.dtype), b = g.placeholder(tb.shape, tb.dtype);
  tg::Tensor y = g.tanh(g.add(g.matmul(a, b), g.scalar(0.5, tg::DType::f32)));
  tg::TensorData ha(ta.shape, ta.dtype), hb(tb.shape, tb.dtype);
  for (int64_t i = 0; i < ha.num_elements(); ++i) ha.set(i, std::sin(0.37 * static_cast<double>(i)));
  for (int64_t i = 0; i < hb.num_elements(); ++i) hb.set(i, std::cos(0.11 * static_cast<double>(i)) * 0.3);
  const tg::TensorData want =
      g.compile({{a, ta}, {b, tb}}, {y}, {}, tg::CompileOptions{.device = tg::Device::cpu()}).run({ha, hb})[0];

  SP_DeviceMemoryBase ma = x.alloc(ha.nbytes()), mb = x.alloc(hb.nbytes()), my = x.alloc(want.nbytes());
  x.se.memcpy_htod(&x.device, stream, &ma, ha.data(), ha.nbytes(), &x.status);
  x.se.memcpy_htod(&x.device, stream, &mb, hb.data(), hb.nbytes(), &x.status);
  x.ok();
  const tg::Device dev = tg::Device::cuda(0);
  auto wrap = [&](const SP_DeviceMemoryBase& m, const tg::TensorType& t) {
    return tg::DeviceTensor(std::make_shared<tg::DeviceTensor::Storage>(tg::DeviceTensor::Storage{t, dev, m.opaque, nullptr}));
  };
  tg::Executable exe = g.compile({{a, ta}, {b, tb}}, {y}, {}, tg::CompileOptions{.device = dev});
  for (int rep = 0; rep < 3; ++rep) {  // the first run compiles; the others replay
    std::vector<tg::DeviceTensor> out = exe.run_device({wrap(ma, ta), wrap(mb, tb)}, cuda);
    ASSERT_EQ(out.size(), 1u);
    std::string error;
    ASSERT_TRUE(tgraph_tf::copy_on_stream(my.opaque, out[0].data(), out[0].nbytes(), cuda, error)) << error;
  }
  tg::TensorData got(want.shape(), want.dtype());
  x.se.memcpy_dtoh(&x.device, stream, got.data(), &my, got.nbytes(), &x.status);
  x.se.block_host_until_done(&x.device, stream, &x.status);
  x.ok();
  double worst = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) worst = std::max(worst, std::abs(got.at(i) - want.at(i)));
  EXPECT_LT(worst, 2e-5);  // f32 on both backends (no TF32)
  EXPECT_GT(std::abs(got.at(7)), 1e-3);
  for (SP_DeviceMemoryBase* m : {&ma, &mb, &my}) x.se.deallocate(&x.device, m);
  x.se.destroy_stream(&x.device, stream);
}

}  // namespace

int main(int argc, char** argv) {
  if (tg::Device::cuda_device_count() == 0) {
    std::printf("no usable CUDA device: the TensorFlow plugin's CUDA device tests skipped\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
