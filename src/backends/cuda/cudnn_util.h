#pragma once
// Internal helpers of the cuDNN ops (cudnn_conv.cpp, cudnn_pool.cpp): one cudnnHandle_t per
// device (made on first use, serialised by a per-device mutex), status checks that throw
// tg::Error, RAII descriptors, dtype mapping and the padding rule of ops/infer_conv.cpp.
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "tgraph/descriptors.h"
#include "tgraph/dtype.h"
#include "tgraph/error.h"
#include "tgraph/shape.h"

namespace tg::detail {

inline void cudnn_check(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS) {
    char detail[512] = {0};
    cudnnGetLastErrorString(detail, sizeof detail);
    throw Error(std::string("[cudnn] ") + what + ": " + cudnnGetErrorString(s) + " (" + std::to_string(int(s)) +
                ")" + (detail[0] ? std::string(": ") + detail : std::string()));
  }
}

/// A status that means "this configuration is not covered" (bad parameter or not supported):
/// the caller declines (returns false) instead of throwing.
inline bool cudnn_declines(cudnnStatus_t s) {
  int c = static_cast<int>(s) / 1000;
  return s != CUDNN_STATUS_SUCCESS && (c == 2 || c == 3);
}

#define TG_CUDNN(call) ::tg::detail::cudnn_check((call), #call)

/// The handle of `device` and the mutex that serialises its use. The handle is made on first
/// use with `device` current.
struct CudnnDevice {
  cudnnHandle_t handle = nullptr;
  std::mutex mu;
};

inline CudnnDevice& cudnn_device(int device) {
  static std::mutex map_mu;
  static std::map<int, std::unique_ptr<CudnnDevice>> devices;
  std::lock_guard<std::mutex> lock(map_mu);
  auto& d = devices[device];
  if (!d) {
    auto made = std::make_unique<CudnnDevice>();
    int prev = -1;
    TG_CUDA(cudaGetDevice(&prev));
    if (prev != device) TG_CUDA(cudaSetDevice(device));
    cudnnStatus_t s = cudnnCreate(&made->handle);
    if (prev != device) cudaSetDevice(prev);
    cudnn_check(s, "cudnnCreate");
    d = std::move(made);  // never destroyed: lives as long as the process, as the streams do
  }
  return *d;
}

/// A handle of this thread's own for `device`, set while the thread warms library calls up
/// ahead of a first run (library_warmup.cpp), so they do not queue on the device's mutex.
struct CudnnThreadHandle {
  int device = -1;
  CudnnDevice* own = nullptr;
};
inline CudnnThreadHandle& cudnn_thread_handle() {
  thread_local CudnnThreadHandle h;
  return h;
}

/// The handle for cuDNN's legacy calls (convolution, pooling), which keep no state in it:
/// this thread's own while it warms calls up, else the device's. Attention's graph-API plans
/// are built and executed on the device's handle only; convolutions' (cudnn_conv_graph.h) on
/// either (a plan built on one handle executes on another of its device).
inline CudnnDevice& cudnn_legacy_device(int device) {
  const CudnnThreadHandle& t = cudnn_thread_handle();
  return t.own && t.device == device ? *t.own : cudnn_device(device);
}

/// cuDNN data type of a tensor dtype; false for dtypes the conv/pool paths do not take.
inline bool cudnn_dtype(DType t, cudnnDataType_t& out) {
  switch (t) {
    case DType::f32: out = CUDNN_DATA_FLOAT; return true;
    case DType::f16: out = CUDNN_DATA_HALF; return true;
    case DType::bf16: out = CUDNN_DATA_BFLOAT16; return true;
    default: return false;
  }
}

struct TensorDescriptor {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDescriptor() { TG_CUDNN(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(d); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
};
struct FilterDescriptor {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDescriptor() { TG_CUDNN(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(d); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
};
struct ConvolutionDescriptor {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvolutionDescriptor() { TG_CUDNN(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(d); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
};
struct PoolingDescriptor {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolingDescriptor() { TG_CUDNN(cudnnCreatePoolingDescriptor(&d)); }
  ~PoolingDescriptor() { cudnnDestroyPoolingDescriptor(d); }
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
};

inline bool is_channels_last(Layout l) { return l == Layout::nhwc || l == Layout::ndhwc; }
inline bool is_channels_first(Layout l) { return l == Layout::nchw || l == Layout::ncdhw; }

/// True when every dim of `s` is known, positive and fits an int, and the element count fits
/// an int too (cuDNN's legacy descriptors take ints).
inline bool cudnn_dims_ok(const Shape& s) {
  if (!s.ranked()) return false;
  long long n = 1;
  for (int64_t d : s.dims()) {
    if (d <= 0 || d > INT_MAX) return false;
    n *= d;
    if (n > INT_MAX) return false;
  }
  return true;
}

/// An activation of dims `d` (channels last or first) as a cuDNN tensor: dims [N, C, spatial...]
/// with the strides of its memory layout. False when the shape does not fit.
inline bool set_activation(cudnnTensorDescriptor_t desc, cudnnDataType_t dt, const Shape& s, bool last,
                           cudnnStatus_t* status = nullptr) {
  if (!cudnn_dims_ok(s) || s.rank() < 3) return false;
  const auto& d = s.dims();
  const int nsp = static_cast<int>(d.size()) - 2;
  std::vector<int> dims(d.size()), strides(d.size());
  int n = static_cast<int>(d[0]), c = static_cast<int>(last ? d.back() : d[1]);
  std::vector<int> sp;
  for (int i = 0; i < nsp; ++i) sp.push_back(static_cast<int>(last ? d[1 + i] : d[2 + i]));
  dims[0] = n;
  dims[1] = c;
  for (int i = 0; i < nsp; ++i) dims[2 + i] = sp[i];
  // Strides in elements of the memory layout.
  long long spatial = 1;
  for (int v : sp) spatial *= v;
  if (last) {
    strides[1] = 1;
    long long st = c;
    for (int i = nsp - 1; i >= 0; --i) {
      strides[2 + i] = static_cast<int>(st);
      st *= sp[i];
    }
    strides[0] = static_cast<int>(st);
  } else {
    long long st = 1;
    for (int i = nsp - 1; i >= 0; --i) {
      strides[2 + i] = static_cast<int>(st);
      st *= sp[i];
    }
    strides[1] = static_cast<int>(spatial);
    strides[0] = static_cast<int>(spatial * c);
  }
  cudnnStatus_t st = cudnnSetTensorNdDescriptor(desc, dt, static_cast<int>(dims.size()), dims.data(), strides.data());
  if (status) *status = st;
  return st == CUDNN_STATUS_SUCCESS;
}

/// [N, C, spatial...] of an activation shape.
inline std::vector<int64_t> nc_dims(const Shape& s, bool last) {
  const auto& d = s.dims();
  std::vector<int64_t> r{d[0], last ? d.back() : d[1]};
  for (size_t i = 0; i + 2 < d.size(); ++i) r.push_back(last ? d[1 + i] : d[2 + i]);
  return r;
}

/// Padding before each spatial dim exactly as the CPU reference (backends/cpu/ref_conv.cpp):
/// explicit values, 0 for valid, TensorFlow's same split of
/// total = max((out-1)*stride + (k-1)*dilation + 1 - in, 0) (same: before = total/2;
/// same_lower: before = (total+1)/2). `after` gets the rest (explicit: explicit_padding[2i+1]).
/// False for a style this path does not take or malformed vectors.
inline bool pads(PaddingStyle style, const std::vector<int64_t>& expl, const std::vector<int64_t>& in_sp,
                 const std::vector<int64_t>& out_sp, const std::vector<int64_t>& k, const std::vector<int64_t>& stride,
                 const std::vector<int64_t>& dil, std::vector<int64_t>& before, std::vector<int64_t>& after) {
  const size_t n = in_sp.size();
  if (out_sp.size() != n || k.size() != n || stride.size() != n || dil.size() != n) return false;
  if (style == PaddingStyle::explicit_ && !expl.empty() && expl.size() != 2 * n) return false;
  before.assign(n, 0);
  after.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    int64_t ke = (k[i] - 1) * dil[i] + 1;
    int64_t total = std::max<int64_t>((out_sp[i] - 1) * stride[i] + ke - in_sp[i], 0);
    switch (style) {
      case PaddingStyle::explicit_:
        before[i] = expl.empty() ? 0 : expl[2 * i];
        after[i] = expl.empty() ? 0 : expl[2 * i + 1];
        break;
      case PaddingStyle::valid: break;
      case PaddingStyle::same:
        before[i] = total / 2;
        after[i] = total - before[i];
        break;
      case PaddingStyle::same_lower:
        before[i] = (total + 1) / 2;
        after[i] = total - before[i];
        break;
      default: return false;
    }
    if (before[i] < 0 || after[i] < 0 || before[i] > INT_MAX / 2) return false;
  }
  return true;
}

/// `v`, or n ones when empty; false when its size is not n or a value is outside [1, INT_MAX].
inline bool ones_default(const std::vector<int64_t>& v, size_t n, std::vector<int64_t>& out) {
  out = v.empty() ? std::vector<int64_t>(n, 1) : v;
  if (out.size() != n) return false;
  for (int64_t x : out)
    if (x < 1 || x > INT_MAX) return false;
  return true;
}

inline std::vector<int> to_int(const std::vector<int64_t>& v) { return std::vector<int>(v.begin(), v.end()); }

}  // namespace tg::detail
