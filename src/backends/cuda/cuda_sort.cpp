// Host side of top_k / sort / argsort on the device (kernels_sort.cu): the input is viewed as
// [outer, len, inner] around the axis and every line is sorted at once, stably, in the
// reference's order (NaN above every number, -0 equal to +0, ties in input order). The
// workspace comes from the executor's stream-ordered pool, so a run stays capturable.
#include <variant>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_sort.h"

namespace tg::detail {

bool cuda_sort(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
               cudaStream_t stream, int device) {
  if (in.size() != 1) return false;
  int64_t axis;
  bool descending;
  if (const auto* t = std::get_if<TopKDesc>(&n.attr)) axis = t->axis, descending = t->largest;
  else if (const auto* s = std::get_if<SortDesc>(&n.attr)) axis = s->axis, descending = s->descending;
  else return false;
  const Shape& xs = in[0].type.shape;
  const int64_t rank = xs.rank();
  if (rank < 1) return false;
  const int64_t ax = axis < 0 ? axis + rank : axis;
  if (ax < 0 || ax >= rank) return false;
  long long outer = 1, inner = 1;
  for (int64_t i = 0; i < ax; ++i) outer *= xs[i];
  for (int64_t i = ax + 1; i < rank; ++i) inner *= xs[i];
  const long long len = xs[ax];
  void* values = nullptr;
  int32_t* positions = nullptr;
  long long k = len;
  switch (n.kind) {
    case OpKind::TopK:
      if (out.size() != 2) return false;
      k = std::get<TopKDesc>(n.attr).k;
      values = out[0].ptr;
      positions = static_cast<int32_t*>(out[1].ptr);
      break;
    case OpKind::Sort:
      if (out.size() != 1) return false;
      values = out[0].ptr;
      break;
    case OpKind::ArgSort:
      if (out.size() != 1) return false;
      positions = static_cast<int32_t*>(out[0].ptr);
      break;
    default: return false;
  }
  const long long items = outer * inner * len;
  if (items >= (1LL << 31) || k < 0 || k > len) return false;
  if (outer * inner * k == 0) return true;
  int sms = 0;
  TG_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t bytes = sort_lines_workspace(outer * inner, len, in[0].type.dtype);
  DeviceBuffer ws = op_workspace(bytes, stream, device);
  TG_CUDA(launch_sort_lines(in[0].ptr, in[0].type.dtype, outer, len, inner, k, descending, values, positions, ws.get(),
                            bytes, sms, stream));
  return true;
}

}  // namespace tg::detail
