// What a cuDNN legacy convolution call costs on the host, and what its cost depends on: the
// same problem again, problems in turn on one handle, a handle per problem, fresh descriptors,
// a problem made first on another handle (a warm-up thread's). cuDNN 9 runs its legacy calls
// through execution plans it builds inside the call; this finds out what it remembers of them.
// Build and run on the GPU machine (not part of the CMake build: one file, cuDNN and CUDA only):
//   g++ -O2 -std=c++17 bench/cudnn_call_cost.cpp -o /tmp/cc -I/usr/local/cuda/include \
//     -L/usr/local/cuda/lib64 -lcudnn -lcudart && /tmp/cc
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                   \
  do {                                                                          \
    auto s_ = (x);                                                              \
    if (s_ != 0) {                                                              \
      std::fprintf(stderr, "%s:%d %s failed (%d)\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

namespace {
struct Problem {
  int n, c, h, k, r, pad, stride;
};
struct Descs {
  cudnnTensorDescriptor_t x{}, y{};
  cudnnFilterDescriptor_t w{};
  cudnnConvolutionDescriptor_t conv{};
  int oh = 0;
  void make(const Problem& p) {
    CK(cudnnCreateTensorDescriptor(&x));
    CK(cudnnCreateTensorDescriptor(&y));
    CK(cudnnCreateFilterDescriptor(&w));
    CK(cudnnCreateConvolutionDescriptor(&conv));
    CK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, p.n, p.c, p.h, p.h));
    CK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, p.k, p.c, p.r, p.r));
    CK(cudnnSetConvolution2dDescriptor(conv, p.pad, p.pad, p.stride, p.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH));
    oh = (p.h + 2 * p.pad - p.r) / p.stride + 1;
    CK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, p.n, p.k, oh, oh));
  }
  void free() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

void* xbuf;
void* ybuf;
void* wbuf;
void* wsbuf;
const size_t kWs = size_t(256) << 20;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudnnConvolutionFwdAlgo_t choose(cudnnHandle_t h, const Descs& d) {
  cudnnConvolutionFwdAlgoPerf_t perf[16];
  int got = 0;
  CK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 16, &got, perf));
  for (int i = 0; i < got; ++i) {
    size_t ws = 0;
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, perf[i].algo, &ws) == CUDNN_STATUS_SUCCESS &&
        ws <= kWs)
      return perf[i].algo;
  }
  std::fprintf(stderr, "no algorithm\n");
  std::exit(1);
}

// One call's host time (ms): the workspace size asked, then the forward call; not synchronised.
double call(cudnnHandle_t h, cudaStream_t s, const Descs& d, cudnnConvolutionFwdAlgo_t a) {
  const float one = 1, zero = 0;
  double t0 = now_ms();
  size_t ws = 0;
  CK(cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, a, &ws));
  CK(cudnnSetStream(h, s));
  CK(cudnnConvolutionForward(h, &one, d.x, xbuf, d.w, wbuf, d.conv, a, wsbuf, ws, &zero, d.y, ybuf));
  return now_ms() - t0;
}

std::string fmt(const std::vector<double>& v) {
  std::string r;
  char b[32];
  for (double x : v) {
    std::snprintf(b, sizeof b, "%.3f ", x);
    r += b;
  }
  return r;
}
}  // namespace

int main() {
  std::printf("cuDNN %zu\n", cudnnGetVersion());
  CK(cudaMalloc(&xbuf, size_t(512) << 20));
  CK(cudaMalloc(&ybuf, size_t(512) << 20));
  CK(cudaMalloc(&wbuf, size_t(64) << 20));
  CK(cudaMalloc(&wsbuf, kWs));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudnnHandle_t h1, h2;
  CK(cudnnCreate(&h1));
  CK(cudnnCreate(&h2));
  // ResNet-50-like: 3x3 at 56 / 28, a 1x1 expansion, a strided 3x3.
  const std::vector<Problem> base = {{8, 64, 56, 64, 3, 1, 1}, {8, 128, 28, 128, 3, 1, 1},
                                     {8, 64, 56, 256, 1, 0, 1}, {8, 128, 56, 128, 3, 1, 2}};
  auto at_batch = [&](int n) {
    std::vector<Problem> v = base;
    for (auto& p : v) p.n = n;
    return v;
  };
  std::vector<Descs> d(base.size());
  std::vector<cudnnConvolutionFwdAlgo_t> algo(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    d[i].make(base[i]);
    double t0 = now_ms();
    algo[i] = choose(h1, d[i]);
    double t1 = now_ms();
    double first = call(h1, s, d[i], algo[i]);
    CK(cudaStreamSynchronize(s));
    std::printf("problem %zu: heuristics %.3f ms, first call %.3f ms (algo %d)\n", i, t1 - t0, first, int(algo[i]));
  }
  // 1. The same problem again and again on one handle.
  {
    std::vector<double> t;
    for (int r = 0; r < 6; ++r) t.push_back(call(h1, s, d[0], algo[0]));
    CK(cudaStreamSynchronize(s));
    std::printf("1. same problem, same handle: %s\n", fmt(t).c_str());
  }
  // 2. Problems in turn on one handle, descriptors kept.
  {
    std::vector<double> t;
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < d.size(); ++i) t.push_back(call(h1, s, d[i], algo[i]));
    CK(cudaStreamSynchronize(s));
    std::printf("2. problems in turn, one handle: %s\n", fmt(t).c_str());
  }
  // 3. Problems in turn, fresh descriptors per call.
  {
    std::vector<double> t;
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < d.size(); ++i) {
        Descs f;
        f.make(base[i]);
        t.push_back(call(h1, s, f, algo[i]));
        f.free();
      }
    CK(cudaStreamSynchronize(s));
    std::printf("3. in turn, fresh descriptors: %s\n", fmt(t).c_str());
  }
  // 4. A handle per problem, problems in turn.
  std::vector<cudnnHandle_t> hp(base.size());
  {
    double t0 = now_ms();
    for (auto& h : hp) CK(cudnnCreate(&h));
    std::printf("4. %zu handles made in %.3f ms\n", hp.size(), now_ms() - t0);
    std::vector<double> t;
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < d.size(); ++i) t.push_back(call(hp[i], s, d[i], algo[i]));
    CK(cudaStreamSynchronize(s));
    std::printf("4. in turn, a handle per problem: %s\n", fmt(t).c_str());
  }
  // 5. A new batch size (32) with the batch-8 algorithms: in turn on h1, each first call and later.
  {
    auto p32 = at_batch(32);
    std::vector<Descs> e(p32.size());
    for (size_t i = 0; i < e.size(); ++i) e[i].make(p32[i]);
    std::vector<double> t;
    for (int r = 0; r < 2; ++r)
      for (size_t i = 0; i < e.size(); ++i) t.push_back(call(h1, s, e[i], algo[i]));
    CK(cudaStreamSynchronize(s));
    std::printf("5. batch 32 in turn on one handle (round 1, round 2): %s\n", fmt(t).c_str());
  }
  // 6. Batch 48 made first on h2 (another thread's handle, as a warm-up), then on h1.
  {
    auto p48 = at_batch(48);
    std::vector<Descs> e(p48.size());
    for (size_t i = 0; i < e.size(); ++i) e[i].make(p48[i]);
    cudaStream_t s2;
    CK(cudaStreamCreate(&s2));
    std::vector<double> ahead;
    std::thread th([&] {
      for (size_t i = 0; i < e.size(); ++i) ahead.push_back(call(h2, s2, e[i], algo[i]));
      CK(cudaStreamSynchronize(s2));
    });
    th.join();
    std::vector<double> t;
    for (size_t i = 0; i < e.size(); ++i) t.push_back(call(h1, s, e[i], algo[i]));
    CK(cudaStreamSynchronize(s));
    std::printf("6. batch 48 on another thread's handle: %s; then on h1: %s\n", fmt(ahead).c_str(), fmt(t).c_str());
  }
  // 7. Batch 64 made first on each problem's own handle on 4 threads at once, then again on
  // those handles from this thread (the run borrowing the warm-up's handles).
  {
    auto p64 = at_batch(64);
    std::vector<Descs> e(p64.size());
    for (size_t i = 0; i < e.size(); ++i) e[i].make(p64[i]);
    std::vector<double> ahead(e.size());
    std::vector<cudaStream_t> ss(e.size());
    for (auto& x : ss) CK(cudaStreamCreate(&x));
    double t0 = now_ms();
    std::vector<std::thread> th;
    for (size_t i = 0; i < e.size(); ++i)
      th.emplace_back([&, i] {
        ahead[i] = call(hp[i], ss[i], e[i], algo[i]);
        CK(cudaStreamSynchronize(ss[i]));
      });
    for (auto& x : th) x.join();
    double wall = now_ms() - t0;
    std::vector<double> t;
    for (size_t i = 0; i < e.size(); ++i) t.push_back(call(hp[i], s, e[i], algo[i]));
    CK(cudaStreamSynchronize(s));
    std::printf("7. batch 64 on 4 threads, a handle each: %s (wall %.3f ms); then those handles here: %s\n",
                fmt(ahead).c_str(), wall, fmt(t).c_str());
  }
  // 8. Batch 64 on h1, after 7 (does any of it carry to a handle that never ran it?).
  {
    auto p64 = at_batch(64);
    std::vector<Descs> e(p64.size());
    for (size_t i = 0; i < e.size(); ++i) e[i].make(p64[i]);
    std::vector<double> t;
    for (size_t i = 0; i < e.size(); ++i) t.push_back(call(h1, s, e[i], algo[i]));
    CK(cudaStreamSynchronize(s));
    std::printf("8. batch 64 then on h1: %s\n", fmt(t).c_str());
  }
  return 0;
}
