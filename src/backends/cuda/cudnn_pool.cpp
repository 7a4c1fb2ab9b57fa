// cuDNN 2-D average pooling (legacy API of cuDNN 9): avg_pool2d and its gradient, where cuDNN's
// result is the reference's. cuDNN takes one padding value per dim: it is given the padding
// before when cuDNN's output extents with it equal the real ones; otherwise (ceil_mode,
// TensorFlow's `same` with after > before) it declines, as average pooling divides by a count
// of taps that explicit padding would change. Further limits, each declined:
//   - dilation other than 1 (cuDNN pooling has none);
//   - count_include_pad when a window reaches past the padding after (the reference then
//     divides by fewer taps than the window; cuDNN divides by the full window);
//   - dtypes other than f32, f16, bf16, f64.
// Every average pooling cuDNN declines runs in cuda_avg_pool.cpp's kernels; max pooling runs in
// our own kernels (cuda_max_pool.cpp).
#include <cudnn.h>

#include <mutex>
#include <variant>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cudnn_util.h"
#include "backends/cuda/device_context.h"

namespace tg::detail {

bool cudnn_pool(const GraphImpl&, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device) {
  const bool grad = n.kind == OpKind::AvgPool2dGrad;
  if (!grad && n.kind != OpKind::AvgPool2d) return false;
  const auto* d = std::get_if<PoolDesc>(&n.attr);
  if (!d || in.size() != (grad ? 2u : 1u) || out.size() != 1) return false;
  for (const DevArg& a : in)
    if (!a.ptr) return false;
  if (!out[0].ptr) return false;

  // x and y (the forward output) of the pooling.
  const TensorType& tx = grad ? in[1].type : in[0].type;
  const TensorType& ty = grad ? in[0].type : out[0].type;
  const DType dt = tx.dtype;
  cudnnDataType_t cdt;
  if (ty.dtype != dt || out[0].type.dtype != dt) return false;
  if (dt == DType::f64) cdt = CUDNN_DATA_DOUBLE;
  else if (!cudnn_dtype(dt, cdt)) return false;
  if (grad && out[0].type.shape != tx.shape) return false;
  bool last;
  if (d->data_layout == Layout::nhwc) last = true;
  else if (d->data_layout == Layout::nchw) last = false;
  else return false;
  if (tx.shape.rank() != 4 || ty.shape.rank() != 4) return false;
  if (!cudnn_dims_ok(tx.shape) || !cudnn_dims_ok(ty.shape)) return false;
  std::vector<int64_t> xd = nc_dims(tx.shape, last), yd = nc_dims(ty.shape, last);
  if (xd[0] != yd[0] || xd[1] != yd[1]) return false;

  if (d->kernel.size() != 2 || d->kernel[0] < 1 || d->kernel[1] < 1 || d->kernel[0] > INT_MAX ||
      d->kernel[1] > INT_MAX)
    return false;
  std::vector<int64_t> stride, dil, before, after;
  if (!ones_default(d->stride.empty() ? d->kernel : d->stride, 2, stride)) return false;
  if (!ones_default(d->dilation, 2, dil)) return false;
  if (dil[0] != 1 || dil[1] != 1) return false;
  std::vector<int64_t> xsp{xd[2], xd[3]}, ysp{yd[2], yd[3]};
  if (!pads(d->padding, d->explicit_padding, xsp, ysp, d->kernel, stride, dil, before, after)) return false;
  for (size_t i = 0; i < 2; ++i) {
    if (before[i] >= d->kernel[i]) return false;  // a window of padding only: not cuDNN's business
    // count_include_pad divides by the taps inside [-before, in + after): the full window
    // only when every window ends inside it.
    if (d->count_include_pad && (ysp[i] - 1) * stride[i] - before[i] + d->kernel[i] > xsp[i] + after[i])
      return false;
  }

  TensorDescriptor xdesc, ydesc;
  PoolingDescriptor pdesc;
  if (!set_activation(ydesc.d, cdt, ty.shape, last) || !set_activation(xdesc.d, cdt, tx.shape, last)) return false;
  const cudnnPoolingMode_t mode =
      d->count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  std::vector<int> win = to_int(d->kernel), stride_i = to_int(stride), pad_i = to_int(before);
  if (cudnnSetPoolingNdDescriptor(pdesc.d, mode, CUDNN_PROPAGATE_NAN, 2, win.data(), pad_i.data(),
                                  stride_i.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  int odims[4] = {0, 0, 0, 0};  // cuDNN's output extents must be the real ones
  if (cudnnGetPoolingNdForwardOutputDim(pdesc.d, xdesc.d, 4, odims) != CUDNN_STATUS_SUCCESS) return false;
  for (size_t i = 0; i < 4; ++i)
    if (odims[i] != yd[i]) return false;

  CudnnDevice& cd = cudnn_legacy_device(device);
  std::lock_guard<std::mutex> lock(cd.mu);
  cudnnHandle_t h = cd.handle;
  TG_CUDNN(cudnnSetStream(h, stream));
  // Scaling factors are doubles for double data, floats otherwise.
  const float onef = 1.0f, zerof = 0.0f;
  const double oned = 1.0, zerod = 0.0;
  const void* one = dt == DType::f64 ? static_cast<const void*>(&oned) : &onef;
  const void* zero = dt == DType::f64 ? static_cast<const void*>(&zerod) : &zerof;
  if (!grad) {
    cudnnStatus_t s = cudnnPoolingForward(h, pdesc.d, one, xdesc.d, in[0].ptr, zero, ydesc.d, out[0].ptr);
    if (cudnn_declines(s)) return false;
    cudnn_check(s, "cudnnPoolingForward");
    return true;
  }
  // Gradient: y = pool(x) first (cuDNN's backward takes it), then dx from (y, dy, x).
  DeviceBuffer y = op_workspace(static_cast<size_t>(ty.shape.num_elements()) * dtype_size(dt), stream, device);
  cudnnStatus_t s = cudnnPoolingForward(h, pdesc.d, one, xdesc.d, in[1].ptr, zero, ydesc.d, y.get());
  if (cudnn_declines(s)) return false;
  cudnn_check(s, "cudnnPoolingForward");
  // dy has y's shape and layout: ydesc describes it too.
  s = cudnnPoolingBackward(h, pdesc.d, one, ydesc.d, y.get(), ydesc.d, in[0].ptr, xdesc.d, in[1].ptr, zero, xdesc.d,
                           out[0].ptr);
  if (cudnn_declines(s)) return false;
  cudnn_check(s, "cudnnPoolingBackward");
  return true;
}

}  // namespace tg::detail
