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
#include "backends/cuda/pool_geometry.h"

namespace tg::detail {
namespace {

// The window geometry of pooling x (dims xd) into y (dims yd) under d; false when d or the
// dims are not a 2-D pooling the kernels take.
bool avg_pool_geometry(const PoolDesc& d, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd,
                       AvgPoolGeometry& a) {
  int64_t after[2];
  if (!pool_geometry(d, xd, yd, a.win, after)) return false;
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
