// Where a library call's first use goes (issue 22): for ResNet-50's convolutions (forward, data
// and weight gradients, NHWC) and BERT-base's matmuls, the host time of cuDNN's algorithm query,
// its workspace query, the first execution (lazily loaded kernels, plans cuDNN builds inside)
// and a second one; cuBLASLt's heuristic and first / second launches likewise. It tells whether
// saving the chosen algorithms with an executable (skipping the queries) can make a loaded or a
// new-size first run fast, or whether the first executions dominate.
//
//   bench_library_plans [--batch 64] [--dtype bf16|f32]
//   bench_library_plans --cold-threads T [--pre-batch P] [--batch 64]: in a fresh process, the
//     algorithms of every convolution (three directions) queried first, then each one's first
//     execution at batch P spread over T threads (a handle and stream each), then all of them
//     at `batch` on one thread: whether kernels load in parallel, and whether a small batch
//     loads the kernels a large one uses.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CK(x)                                                                       \
  do {                                                                              \
    auto s_ = (x);                                                                  \
    if (static_cast<int>(s_) != 0) {                                                \
      std::fprintf(stderr, "%s failed (%d) line %d\n", #x, static_cast<int>(s_), __LINE__); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Conv {
  int c, h, k, r, stride;  // input channels, input size (square), output channels, window, stride
};

// ResNet-50's distinct convolutions at 224x224 (stem, bottleneck 1x1 / 3x3, downsampling).
const std::vector<Conv> kResnet = {
    {3, 224, 64, 7, 2},     {64, 56, 64, 1, 1},    {64, 56, 64, 3, 1},    {64, 56, 256, 1, 1},
    {256, 56, 64, 1, 1},    {256, 56, 128, 1, 1},  {128, 56, 128, 3, 2},  {128, 28, 512, 1, 1},
    {256, 56, 512, 1, 2},   {512, 28, 128, 1, 1},  {128, 28, 128, 3, 1},  {512, 28, 256, 1, 1},
    {256, 28, 256, 3, 2},   {256, 14, 1024, 1, 1}, {512, 28, 1024, 1, 2}, {1024, 14, 256, 1, 1},
    {256, 14, 256, 3, 1},   {1024, 14, 512, 1, 1}, {512, 14, 512, 3, 2},  {512, 7, 2048, 1, 1},
    {1024, 14, 2048, 1, 2}, {2048, 7, 512, 1, 1},  {512, 7, 512, 3, 1},
};

struct Sums {
  double query = 0, ws = 0, first = 0, second = 0;
  int n = 0;
};

void report(const char* what, const Sums& s) {
  std::printf("%-22s %3d configs: query %7.2f ms  workspace %6.2f ms  first run %7.2f ms  second run %6.2f ms  (per config %.2f / %.2f / %.2f)\n",
              what, s.n, s.query, s.ws, s.first, s.second, s.query / s.n, s.first / s.n, s.second / s.n);
}

// One convolution of config `c` at `batch` in direction `dir` (0 forward, 1 data, 2 filter): the
// algorithm queried from cuDNN's heuristics when `algo` < 0 (else taken as given, as a saved
// choice would be), the workspace size, a first and a second execution, each timed; with
// `execute` false only the query.
int conv_one(cudnnHandle_t h, const Conv& c, int batch, cudnnDataType_t dt, int dir, int algo, Sums& sum, void* x,
             void* w, void* y, void* ws, size_t ws_bytes, cudaStream_t stream, bool execute = true) {
  const int pad = c.r / 2, oh = (c.h + 2 * pad - c.r) / c.stride + 1;
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CK(cudnnCreateTensorDescriptor(&xd));
  CK(cudnnCreateTensorDescriptor(&yd));
  CK(cudnnCreateFilterDescriptor(&wd));
  CK(cudnnCreateConvolutionDescriptor(&cd));
  CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, dt, batch, c.c, c.h, c.h));
  CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, dt, batch, c.k, oh, oh));
  CK(cudnnSetFilter4dDescriptor(wd, dt, CUDNN_TENSOR_NHWC, c.k, c.c, c.r, c.r));
  CK(cudnnSetConvolution2dDescriptor(cd, pad, pad, c.stride, c.stride, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CK(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
  int count = 0, ret = 0;
  size_t need = 0;
  float one = 1, zero = 0;
  double t0 = now_ms();
  if (algo < 0) {
    if (dir == 0) {
      CK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> p(count);
      CK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, count, &ret, p.data()));
      for (int i = 0; i < ret && algo < 0; ++i)
        if (p[i].status == CUDNN_STATUS_SUCCESS) algo = p[i].algo;
    } else if (dir == 1) {
      CK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> p(count);
      CK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, count, &ret, p.data()));
      for (int i = 0; i < ret && algo < 0; ++i)
        if (p[i].status == CUDNN_STATUS_SUCCESS) algo = p[i].algo;
    } else {
      CK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> p(count);
      CK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, count, &ret, p.data()));
      for (int i = 0; i < ret && algo < 0; ++i)
        if (p[i].status == CUDNN_STATUS_SUCCESS) algo = p[i].algo;
    }
  }
  double t1 = now_ms();
  if (!execute) {
    sum.query += t1 - t0, ++sum.n;
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
    return algo;
  }
  if (dir == 0)
    CK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, cudnnConvolutionFwdAlgo_t(algo), &need));
  else if (dir == 1)
    CK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, cudnnConvolutionBwdDataAlgo_t(algo), &need));
  else
    CK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, cudnnConvolutionBwdFilterAlgo_t(algo), &need));
  if (need > ws_bytes) {
    std::fprintf(stderr, "workspace %zu over %zu\n", need, ws_bytes);
    std::exit(1);
  }
  double t2 = now_ms();
  auto run = [&] {
    if (dir == 0)
      CK(cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, cudnnConvolutionFwdAlgo_t(algo), ws, need, &zero, yd, y));
    else if (dir == 1)
      CK(cudnnConvolutionBackwardData(h, &one, wd, w, yd, y, cd, cudnnConvolutionBwdDataAlgo_t(algo), ws, need, &zero,
                                      xd, x));
    else
      CK(cudnnConvolutionBackwardFilter(h, &one, xd, x, yd, y, cd, cudnnConvolutionBwdFilterAlgo_t(algo), ws, need,
                                        &zero, wd, w));
    CK(cudaStreamSynchronize(stream));
  };
  run();
  double t3 = now_ms();
  run();
  double t4 = now_ms();
  sum.query += t1 - t0, sum.ws += t2 - t1, sum.first += t3 - t2, sum.second += t4 - t3, ++sum.n;
  cudnnDestroyTensorDescriptor(xd);
  cudnnDestroyTensorDescriptor(yd);
  cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return algo;
}

void lt_pass(cublasLtHandle_t lt, cudaDataType_t dt, const std::vector<std::array<int, 3>>& shapes, Sums& sum, void* a,
             void* b, void* c, void* ws, size_t ws_bytes, cudaStream_t stream) {
  for (auto [m, n, k] : shapes) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatrixLayoutCreate(&la, dt, n, k, n));
    CK(cublasLtMatrixLayoutCreate(&lb, dt, k, m, k));
    CK(cublasLtMatrixLayoutCreate(&lc, dt, n, m, n));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    float one = 1, zero = 0;
    double t0 = now_ms();
    CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &res, &found));
    double t1 = now_ms();
    CK(cublasLtMatmul(lt, desc, &one, b, la, a, lb, &zero, c, lc, c, lc, &res.algo, ws, ws_bytes, stream));
    CK(cudaStreamSynchronize(stream));
    double t2 = now_ms();
    CK(cublasLtMatmul(lt, desc, &one, b, la, a, lb, &zero, c, lc, c, lc, &res.algo, ws, ws_bytes, stream));
    CK(cudaStreamSynchronize(stream));
    double t3 = now_ms();
    sum.query += t1 - t0, sum.first += t2 - t1, sum.second += t3 - t2, ++sum.n;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
  }
}

// --cold-threads: see the header.
int cold_threads(int threads, int pre, int batch, cudnnDataType_t dt) {
  double t0 = now_ms();
  CK(cudaFree(nullptr));
  double t1 = now_ms();
  std::vector<cudnnHandle_t> hs(threads);
  std::vector<cudaStream_t> ss(threads);
  for (int t = 0; t < threads; ++t) {
    CK(cudnnCreate(&hs[t]));
    CK(cudaStreamCreate(&ss[t]));
    CK(cudnnSetStream(hs[t], ss[t]));
  }
  double t2 = now_ms();
  const size_t big = size_t(batch) * 256 * 56 * 56 * 4 + (size_t(1) << 26), ws_bytes = size_t(2) << 30;
  const size_t pre_big = size_t(pre) * 256 * 56 * 56 * 4 + (size_t(1) << 26);
  std::vector<void*> xs(threads), ys(threads), wss(threads);
  void* w;
  CK(cudaMalloc(&w, size_t(64) << 20));
  for (int t = 0; t < threads; ++t) {
    CK(cudaMalloc(&xs[t], pre_big));
    CK(cudaMalloc(&ys[t], pre_big));
    CK(cudaMalloc(&wss[t], ws_bytes));
  }
  std::vector<std::array<int, 3>> items;  // config, direction, algorithm
  Sums q;
  for (int dir = 0; dir < 3; ++dir)
    for (size_t i = 0; i < kResnet.size(); ++i) {
      items.push_back({int(i), dir,
                       conv_one(hs[0], kResnet[i], batch, dt, dir, -1, q, nullptr, nullptr, nullptr, nullptr, 0,
                                ss[0], false)});
    }
  double t3 = now_ms();
  std::vector<Sums> per(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i = t; i < items.size(); i += threads)
        conv_one(hs[t], kResnet[items[i][0]], pre, dt, items[i][1], items[i][2], per[t], xs[t], w, ys[t], wss[t],
                 ws_bytes, ss[t]);
    });
  for (auto& th : pool) th.join();
  double t4 = now_ms();
  Sums after;
  void *xb, *yb;
  CK(cudaMalloc(&xb, big));
  CK(cudaMalloc(&yb, big));
  for (const auto& it : items)
    conv_one(hs[0], kResnet[it[0]], batch, dt, it[1], it[2], after, xb, w, yb, wss[0], ws_bytes, ss[0]);
  std::printf("cold: context %.1f ms, %d handles %.1f ms, %zu queries %.1f ms; first runs at batch %d on %d threads: "
              "wall %.1f ms; then batch %d: first runs %.1f ms, second %.1f ms (%d items)\n",
              t1 - t0, threads, t2 - t1, items.size(), t3 - t2, pre, threads, t4 - t3, batch, after.first,
              after.second, after.n);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 64;
  bool f32 = false;
  int cold = 0, pre = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dtype")) f32 = !std::strcmp(argv[i + 1], "f32");
    if (!std::strcmp(argv[i], "--cold-threads")) cold = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--pre-batch")) pre = std::atoi(argv[i + 1]);
  }
  if (cold > 0) return cold_threads(cold, pre > 0 ? pre : batch, batch, f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16);
  double t0 = now_ms();
  CK(cudaFree(nullptr));
  double t1 = now_ms();
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  double t2 = now_ms();
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  double t3 = now_ms();
  std::printf("CUDA context %.1f ms, cudnnCreate %.1f ms, cublasLtCreate %.1f ms\n", t1 - t0, t2 - t1, t3 - t2);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  CK(cudnnSetStream(h, stream));
  const size_t big = size_t(batch) * 256 * 112 * 112 * 4 + (size_t(1) << 24), ws_bytes = size_t(2) << 30;
  void *x, *w, *y, *ws;
  CK(cudaMalloc(&x, big));
  CK(cudaMalloc(&y, big));
  CK(cudaMalloc(&w, size_t(64) << 20));
  CK(cudaMalloc(&ws, ws_bytes));
  CK(cudaMemset(x, 0, big));
  CK(cudaMemset(y, 0, big));
  CK(cudaMemset(w, 0, size_t(64) << 20));
  cudnnDataType_t dt = f32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
  const char* names[3] = {"forward", "data grad", "weight grad"};
  for (int dir = 0; dir < 3; ++dir) {
    std::vector<int> algos;
    Sums cold, again, half, saved;
    for (const Conv& c : kResnet) algos.push_back(conv_one(h, c, batch, dt, dir, -1, cold, x, w, y, ws, ws_bytes, stream));
    for (const Conv& c : kResnet) conv_one(h, c, batch, dt, dir, -1, again, x, w, y, ws, ws_bytes, stream);
    for (const Conv& c : kResnet) conv_one(h, c, batch / 2, dt, dir, -1, half, x, w, y, ws, ws_bytes, stream);
    for (size_t i = 0; i < kResnet.size(); ++i)
      conv_one(h, kResnet[i], batch / 4, dt, dir, algos[i], saved, x, w, y, ws, ws_bytes, stream);
    std::printf("conv %s:\n", names[dir]);
    report("  cold", cold);
    report("  same shapes again", again);
    report("  batch/2, queried", half);
    report("  batch/4, algo given", saved);
  }
  // The forward's configs at batch/8 on 4 threads, each with its own handle, stream and buffers:
  // whether the first uses run in parallel (plans built on the host) or queue on one lock.
  {
    const int threads = 4;
    std::vector<Sums> per(threads);
    double t0 = now_ms();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        cudnnHandle_t ht;
        cudaStream_t st;
        CK(cudnnCreate(&ht));
        CK(cudaStreamCreate(&st));
        CK(cudnnSetStream(ht, st));
        void *xt, *yt, *wst;
        CK(cudaMalloc(&xt, big / 4));
        CK(cudaMalloc(&yt, big / 4));
        CK(cudaMalloc(&wst, size_t(512) << 20));
        for (size_t i = t; i < kResnet.size(); i += threads)
          conv_one(ht, kResnet[i], batch / 8, dt, 0, -1, per[t], xt, w, yt, wst, size_t(512) << 20, st);
      });
    for (auto& th : pool) th.join();
    Sums all;
    for (auto& p : per) all.query += p.query, all.ws += p.ws, all.first += p.first, all.second += p.second, all.n += p.n;
    std::printf("conv forward, batch/8 on %d threads: wall %.1f ms (a handle each)\n", threads, now_ms() - t0);
    report("  summed over threads", all);
  }
  // BERT-base's matmuls at batch x seq tokens: QKV, attention out, FFN up / down.
  for (int tokens : {16 * 128, 16 * 64, 8 * 128}) {
    std::vector<std::array<int, 3>> shapes = {{tokens, 2304, 768}, {tokens, 768, 768}, {tokens, 3072, 768}, {tokens, 768, 3072}};
    Sums s;
    lt_pass(lt, f32 ? CUDA_R_32F : CUDA_R_16BF, shapes, s, x, w, y, ws, ws_bytes, stream);
    std::string what = "matmul " + std::to_string(tokens) + " tokens";
    report(what.c_str(), s);
  }
  return 0;
}
