// cuDNN 2-D pooling (legacy API of cuDNN 9): max_pool2d, avg_pool2d and their gradients.
//
// As for convolution (cudnn_conv.cpp), cuDNN takes one padding value per dim: it is given the
// padding before when cuDNN's output extents with it equal the real ones. Otherwise (ceil_mode,
// TensorFlow's `same` with after > before) max pooling runs unpadded on x padded explicitly
// with -inf (the dtype's lowest), which never wins over a tap inside x; its gradient is
// computed for the padded x and the interior copied out (an input equal to -inf ties with the
// padding: which receives the gradient is then cuDNN's choice). Average pooling divides by a
// count of taps that explicit padding would change, so it is declined there; every average
// pooling cuDNN declines runs in cuda_avg_pool.cpp's kernels instead.
// Further limits, each declined:
//   - dilation other than 1 (cuDNN pooling has none);
//   - avg with count_include_pad when a window reaches past the padding after (the reference
//     then divides by fewer taps than the window; cuDNN divides by the full window);
//   - dtypes other than f32, f16, bf16, f64 (max_pool2d also takes integers);
//   - max_pool2d_with_indices (cuda_layout's kernel).
// Max pooling ignores the padding and propagates NaN, as the reference does. Which of several
// equal maxima receives the gradient in max_pool2d_grad is cuDNN's choice (deterministic
// mode); the reference gives it to the first in row-major window order: they differ only on
// exact ties.
// The gradients need the forward output y: it is recomputed into a temporary buffer.
#include <cudnn.h>

#include <mutex>
#include <variant>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cudnn_util.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_copy.h"

namespace tg::detail {
namespace {

// The bits of -inf in float dtype t (the padding of max pooling), low bytes.
unsigned long long lowest_bits(DType t) {
  switch (t) {
    case DType::f16: return 0xfc00ull;
    case DType::bf16: return 0xff80ull;
    case DType::f64: return 0xfff0000000000000ull;
    default: return 0xff800000ull;
  }
}

}  // namespace

bool cudnn_pool(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device) {
  bool is_max, grad;
  switch (n.kind) {
    case OpKind::MaxPool2d: is_max = true, grad = false; break;
    case OpKind::AvgPool2d: is_max = false, grad = false; break;
    case OpKind::MaxPool2dGrad: is_max = true, grad = true; break;
    case OpKind::AvgPool2dGrad: is_max = false, grad = true; break;
    default: return false;
  }
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
    if (!is_max && d->count_include_pad && (ysp[i] - 1) * stride[i] - before[i] + d->kernel[i] > xsp[i] + after[i])
      return false;
  }

  TensorDescriptor xdesc, ydesc;
  PoolingDescriptor pdesc;
  if (!set_activation(ydesc.d, cdt, ty.shape, last)) return false;
  cudnnPoolingMode_t mode = is_max ? CUDNN_POOLING_MAX_DETERMINISTIC
                            : d->count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                   : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  std::vector<int> win = to_int(d->kernel), stride_i = to_int(stride);
  // Describes the pooling with padding `pad` over x of shape xs; true when cuDNN's output
  // extents are the real ones.
  auto describe = [&](const std::vector<int64_t>& pad, const Shape& xs) {
    std::vector<int> pad_i = to_int(pad);
    if (!set_activation(xdesc.d, cdt, xs, last)) return false;
    if (cudnnSetPoolingNdDescriptor(pdesc.d, mode, CUDNN_PROPAGATE_NAN, 2, win.data(), pad_i.data(),
                                    stride_i.data()) != CUDNN_STATUS_SUCCESS)
      return false;
    int odims[4] = {0, 0, 0, 0};
    if (cudnnGetPoolingNdForwardOutputDim(pdesc.d, xdesc.d, 4, odims) != CUDNN_STATUS_SUCCESS) return false;
    for (size_t i = 0; i < 4; ++i)
      if (odims[i] != yd[i]) return false;
    return true;
  };
  // Max pooling over x padded explicitly: every window starts inside [-before, in) (so it has a
  // tap inside x), and x is padded up to the end of the last window.
  const std::vector<int64_t>& xdims = tx.shape.dims();
  std::vector<int64_t> xpd = xdims, xbefore(4, 0);
  bool padded = false;
  if (!describe(before, tx.shape)) {
    if (!is_max) return false;
    for (size_t i = 0; i < 2; ++i) {
      const size_t m = last ? 1 + i : 2 + i;
      const int64_t end = (ysp[i] - 1) * stride[i] + d->kernel[i];  // of the last window, in padded x
      if ((ysp[i] - 1) * stride[i] - before[i] >= xsp[i]) return false;
      xpd[m] = std::max(end, before[i] + xsp[i]);
      xbefore[m] = before[i];
    }
    if (!cudnn_dims_ok(Shape(xpd)) || !describe({0, 0}, Shape(xpd))) return false;
    padded = true;
  }

  CudnnDevice& cd = cudnn_device(device);
  std::lock_guard<std::mutex> lock(cd.mu);
  cudnnHandle_t h = cd.handle;
  TG_CUDNN(cudnnSetStream(h, stream));
  // Scaling factors are doubles for double data, floats otherwise.
  const float onef = 1.0f, zerof = 0.0f;
  const double oned = 1.0, zerod = 0.0;
  const void* one = dt == DType::f64 ? static_cast<const void*>(&oned) : &onef;
  const void* zero = dt == DType::f64 ? static_cast<const void*>(&zerod) : &zerof;
  const size_t esize = dtype_size(dt);
  const void* x = grad ? in[1].ptr : in[0].ptr;
  DeviceBuffer xp, dxp;
  if (padded) {
    xp = op_workspace(static_cast<size_t>(Shape(xpd).num_elements()) * esize, stream, device);
    std::vector<long long> id(xdims.begin(), xdims.end()), od(xpd.begin(), xpd.end()),
        bf(xbefore.begin(), xbefore.end());
    TG_CUDA(launch_pad(x, xp.get(), 4, id.data(), od.data(), bf.data(), PadKind::constant, lowest_bits(dt),
                       static_cast<int>(esize), stream));
    x = xp.get();
  }
  if (!grad) {
    cudnnStatus_t s = cudnnPoolingForward(h, pdesc.d, one, xdesc.d, x, zero, ydesc.d, out[0].ptr);
    if (cudnn_declines(s)) return false;
    cudnn_check(s, "cudnnPoolingForward");
    return true;
  }
  // Gradient: y = pool(x) first, then dx from (y, dy, x).
  DeviceBuffer y = op_workspace(static_cast<size_t>(ty.shape.num_elements()) * esize, stream, device);
  cudnnStatus_t s = cudnnPoolingForward(h, pdesc.d, one, xdesc.d, x, zero, ydesc.d, y.get());
  if (cudnn_declines(s)) return false;
  cudnn_check(s, "cudnnPoolingForward");
  if (padded) dxp = op_workspace(static_cast<size_t>(Shape(xpd).num_elements()) * esize, stream, device);
  // dy has y's shape and layout: ydesc describes it too.
  s = cudnnPoolingBackward(h, pdesc.d, one, ydesc.d, y.get(), ydesc.d, in[0].ptr, xdesc.d, x, zero, xdesc.d,
                           padded ? dxp.get() : out[0].ptr);
  if (cudnn_declines(s)) return false;
  cudnn_check(s, "cudnnPoolingBackward");
  if (padded) {  // dx is the interior of the padded x's gradient
    StridedCopy cp;
    cp.rank = 4;
    long long in_st = 1, out_st = 1;
    for (int i = 3; i >= 0; --i) {
      const size_t u = static_cast<size_t>(i);
      cp.dims[i] = xdims[u];
      cp.in_strides[i] = in_st;
      cp.out_strides[i] = out_st;
      cp.in_offset += xbefore[u] * in_st;
      in_st *= xpd[u];
      out_st *= xdims[u];
    }
    TG_CUDA(launch_strided_copy(dxp.get(), out[0].ptr, cp, static_cast<int>(esize), stream));
  }
  return true;
}

}  // namespace tg::detail
