#include "backends/cuda/cuda_info.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_smoke.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("[cuda] ") + what + ": " + cudaGetErrorString(e));
}
}  // namespace

int cuda_usable_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string cuda_device_description(int i) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, i) != cudaSuccess) return "";
  return std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB";
}

std::pair<size_t, size_t> cuda_memory_usage(int i) {
  if (i < 0 || i >= cuda_usable_devices()) return {0, 0};
  const size_t now = DeviceContext::get(i).bytes_in_use() + graph_memory_bytes(i);
  return {now, std::max(now, device_peak_bytes(i))};
}

void cuda_reset_peak_memory(int i) {
  if (i < 0 || i >= cuda_usable_devices()) return;
  reset_device_peak(i, DeviceContext::get(i).bytes_in_use());
}

std::vector<float> cuda_axpy(float a, const std::vector<float>& x, const std::vector<float>& y) {
  if (x.size() != y.size()) throw Error("[cuda_axpy] x and y differ in length");
  size_t bytes = x.size() * sizeof(float);
  float *dx = nullptr, *dy = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&dx), bytes), "cudaMalloc");
  struct Free {
    float** p;
    ~Free() { cudaFree(*p); }
  } fx{&dx};
  check(cudaMalloc(reinterpret_cast<void**>(&dy), bytes), "cudaMalloc");
  Free fy{&dy};
  check(cudaMemcpy(dx, x.data(), bytes, cudaMemcpyHostToDevice), "copy x");
  check(cudaMemcpy(dy, y.data(), bytes, cudaMemcpyHostToDevice), "copy y");
  check(launch_axpy(a, dx, dy, static_cast<long long>(x.size()), nullptr), "axpy launch");
  std::vector<float> out(x.size());
  check(cudaMemcpy(out.data(), dy, bytes, cudaMemcpyDeviceToHost), "copy result");
  return out;
}

}  // namespace tg::detail
