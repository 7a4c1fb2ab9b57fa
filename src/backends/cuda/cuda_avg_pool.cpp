// avg_pool2d and avg_pool2d_grad on the device: cuDNN (cudnn_pool.cpp) where its legacy
// pooling gives the reference's result, otherwise our kernels (kernels_avg_pool.h) — ceil_mode,
// asymmetric padding, dilation, count_include_pad with windows past the padding after, sizes
// beyond cuDNN's int32 dims. The geometry is the reference's (src/backends/cpu/ref_conv.cpp
// make_pool): padding before from the padding style and the output size, padding after
// bounding the extent that count_include_pad counts.
#include <algorithm>
#include <variant>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels_avg_pool.h"

namespace tg::detail {
namespace {

// The window geometry of pooling x (dims xd) into y (dims yd) under d; false when d or the
// dims are not a 2-D pooling the kernels take.
bool avg_pool_geometry(const PoolDesc& d, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd,
                       AvgPoolGeometry& a) {
  const bool last = d.data_layout == Layout::nhwc;
  if (!last && d.data_layout != Layout::nchw) return false;
  if (xd.size() != 4 || yd.size() != 4 || d.kernel.size() != 2) return false;
  for (size_t i = 0; i < 4; ++i)
    if (xd[i] < 0 || yd[i] < 0) return false;
  const int64_t c = last ? xd[3] : xd[1];
  if (yd[0] != xd[0] || (last ? yd[3] : yd[1]) != c) return false;
  const std::vector<int64_t>& stride = d.stride.empty() ? d.kernel : d.stride;
  const std::vector<int64_t> dil = d.dilation.empty() ? std::vector<int64_t>{1, 1} : d.dilation;
  if (stride.size() != 2 || dil.size() != 2) return false;
  if (d.padding == PaddingStyle::explicit_ && !d.explicit_padding.empty() && d.explicit_padding.size() != 4)
    return false;
  const int64_t xsp[2] = {last ? xd[1] : xd[2], last ? xd[2] : xd[3]};
  const int64_t ysp[2] = {last ? yd[1] : yd[2], last ? yd[2] : yd[3]};
  int64_t before[2], after[2];
  for (size_t i = 0; i < 2; ++i) {
    if (d.kernel[i] < 1 || stride[i] < 1 || dil[i] < 1) return false;
    const int64_t ke = (d.kernel[i] - 1) * dil[i] + 1;
    const int64_t total = std::max<int64_t>((ysp[i] - 1) * stride[i] + ke - xsp[i], 0);
    switch (d.padding) {
      case PaddingStyle::explicit_:
        before[i] = d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i];
        after[i] = d.explicit_padding.empty() ? 0 : d.explicit_padding[2 * i + 1];
        break;
      case PaddingStyle::valid: before[i] = after[i] = 0; break;
      case PaddingStyle::same: before[i] = total / 2, after[i] = total - before[i]; break;
      case PaddingStyle::same_lower: before[i] = (total + 1) / 2, after[i] = total - before[i]; break;
      default: return false;
    }
  }
  a.win = {xd[0],     c,         xsp[0], xsp[1], ysp[0],    ysp[1],    d.kernel[0], d.kernel[1],
           stride[0], stride[1], dil[0], dil[1], before[0], before[1], last};
  a.pah = after[0];
  a.paw = after[1];
  a.count_include_pad = d.count_include_pad;
  return true;
}

}  // namespace

bool cuda_avg_pool(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                   const std::vector<DevOut>& out, cudaStream_t stream, int device) {
  const bool grad = n.kind == OpKind::AvgPool2dGrad;
  if (!grad && n.kind != OpKind::AvgPool2d) return false;
  if (cudnn_pool(g, n, in, out, stream, device)) return true;
  const auto* d = std::get_if<PoolDesc>(&n.attr);
  if (!d || in.size() != (grad ? 2u : 1u) || out.size() != 1) return false;
  // x and y (the forward output); the gradient takes (dy, x) and gives dx of x's type.
  const TensorType& tx = grad ? in[1].type : in[0].type;
  const TensorType& ty = grad ? in[0].type : out[0].type;
  const DType t = tx.dtype;
  if (ty.dtype != t || out[0].type.dtype != t || (grad && out[0].type.shape != tx.shape)) return false;
  AvgPoolGeometry geo;
  if (!avg_pool_geometry(*d, tx.shape.dims(), ty.shape.dims(), geo)) return false;
  const cudaError_t e = grad ? launch_avg_pool_grad(in[0].ptr, out[0].ptr, t, geo, stream)
                             : launch_avg_pool(in[0].ptr, out[0].ptr, t, geo, stream);
  if (e == cudaErrorInvalidValue) {  // the launcher refused its arguments: nothing ran
    cudaGetLastError();
    return false;
  }
  cuda_check(e, grad ? "avg_pool2d_grad" : "avg_pool2d");
  return true;
}

}  // namespace tg::detail
