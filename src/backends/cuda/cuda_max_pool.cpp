// max_pool2d, max_pool2d_with_indices and max_pool2d_grad on the device, our kernels
// (kernels_max_pool.h) for every geometry the reference takes (padding styles, ceil_mode,
// dilation) and every dtype but bool (the gradient: float dtypes). cuDNN's legacy max pooling,
// used before, ran its backward at 0.5 TB/s after recomputing y, and took no dilation.
// max_pool2d_grad pools x once more for the window taps of the maxima (two bytes each, into
// a workspace) and gathers dy through them: the first maximum of each window in row-major order receives its
// gradient, as in the reference and PyTorch.
#include <limits>
#include <variant>

#include "backends/cpu/ref_util.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels_max_pool.h"
#include "backends/cuda/pool_geometry.h"
#include "core/element.h"
#include "ops/op_def.h"

namespace tg::detail {
namespace {

// The dtype's bytes of the value no element loses to: -inf, or the integer minimum.
unsigned long long lowest_bits(DType t) {
  const double v = is_float(t) ? -std::numeric_limits<double>::infinity() : static_cast<double>(ref::int_min(t));
  unsigned long long b = 0;
  store_element(&b, t, 0, v);
  return b;
}

}  // namespace

bool cuda_max_pool(const GraphImpl&, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream, int device) {
  const bool grad = n.kind == OpKind::MaxPool2dGrad, indices = n.kind == OpKind::MaxPool2dWithIndices;
  if (!grad && !indices && n.kind != OpKind::MaxPool2d) return false;
  const auto* d = std::get_if<PoolDesc>(&n.attr);
  if (!d || in.size() != (grad ? 2u : 1u) || out.size() != (indices ? 2u : 1u)) return false;
  // x and y (the forward output); the gradient takes (dy, x) and gives dx of x's type.
  const TensorType& tx = grad ? in[1].type : in[0].type;
  const TensorType& ty = grad ? in[0].type : out[0].type;
  const DType t = tx.dtype;
  if (t == DType::boolean || ty.dtype != t || out[0].type.dtype != t) return false;
  if (grad && (out[0].type.shape != tx.shape || !is_float(t))) return false;
  if (indices && out[1].type.dtype != DType::i32) return false;
  PoolGeometry geo;
  if (!pool_geometry(*d, tx.shape.dims(), ty.shape.dims(), geo)) return false;
  const long long ny = ty.shape.num_elements();
  if (!max_pool_taps_ok(geo)) return false;
  if (!grad)
    return launched(launch_max_pool(in[0].ptr, out[0].ptr, indices ? static_cast<int32_t*>(out[1].ptr) : nullptr,
                                    nullptr, t, geo, lowest_bits(t), stream),
                    op_name(n.kind));
  DeviceBuffer taps = op_workspace(static_cast<size_t>(ny) * sizeof(uint16_t), stream, device);
  auto* tp = reinterpret_cast<uint16_t*>(taps.get());
  if (!launched(launch_max_pool(in[1].ptr, nullptr, nullptr, tp, t, geo, lowest_bits(t), stream), "max_pool2d_grad"))
    return false;
  return launched(launch_max_pool_grad(in[0].ptr, tp, out[0].ptr, t, geo, stream), "max_pool2d_grad");
}

}  // namespace tg::detail
