// Gather and scatter (mode set) along one axis without batch dims, as slab copies: x viewed as
// [outer, n, inner], each index picks a contiguous row of `inner` elements. A scatter whose
// input nobody else holds (TensorData::sole_owner: a loop-carried tape the executor moved in)
// writes into it instead of copying it first. Out-of-range indices, other modes and the _nd /
// _along_axis forms go to the reference, which defines them and reports errors.
#include <cstring>

#include "backends/cpu/fast_kernels.h"
#include "tgraph/descriptors.h"

namespace tg::detail::fast {
namespace {

bool index_value(const TensorData& ind, int64_t i, int64_t n, int64_t& r) {
  const int64_t k = ind.dtype() == DType::i32 ? ind.ptr<int32_t>()[i] : ind.ptr<int64_t>()[i];
  r = k < 0 ? k + n : k;
  return r >= 0 && r < n;
}

// x's dims around `axis` (negative counts from the end), or false.
bool slab_dims(const Shape& x, int64_t axis, int64_t& ax, int64_t& outer, int64_t& inner) {
  if (!x.ranked() || x.rank() < 1) return false;
  ax = axis < 0 ? axis + x.rank() : axis;
  if (ax < 0 || ax >= x.rank()) return false;
  outer = inner = 1;
  for (int64_t d = 0; d < ax; ++d) outer *= x[d];
  for (int64_t d = ax + 1; d < x.rank(); ++d) inner *= x[d];
  return true;
}

}  // namespace

bool indexing(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  const bool scatter = n.kind == OpKind::Scatter;
  if (n.kind != OpKind::Gather && !scatter) return false;
  const int64_t axis = scatter ? std::get<ScatterDesc>(n.attr).axis : std::get<GatherDesc>(n.attr).axis;
  const int64_t batch =
      scatter ? std::get<ScatterDesc>(n.attr).batch_dims : std::get<GatherDesc>(n.attr).batch_dims;
  if (batch != 0 || (scatter && std::get<ScatterDesc>(n.attr).mode != ScatterMode::set)) return false;
  const TensorData &x = in[0], &ind = in[1];
  if (ind.dtype() != DType::i32 && ind.dtype() != DType::i64) return false;
  int64_t ax, outer, inner;
  if (!slab_dims(x.shape(), axis, ax, outer, inner)) return false;
  const int64_t rows = x.shape()[ax], count = ind.num_elements();
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype());
  std::vector<int64_t> at(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j)
    if (!index_value(ind, j, rows, at[static_cast<size_t>(j)])) return false;  // the reference reports it
  if (!scatter) {
    Shape ys;  // x[:axis] + indices + x[axis+1:]
    std::vector<int64_t> d;
    for (int64_t k = 0; k < ax; ++k) d.push_back(x.shape()[k]);
    for (int64_t k = 0; k < ind.shape().rank(); ++k) d.push_back(ind.shape()[k]);
    for (int64_t k = ax + 1; k < x.shape().rank(); ++k) d.push_back(x.shape()[k]);
    TensorData y(Shape(d), x.dtype());
    const auto* src = static_cast<const std::byte*>(x.data());
    auto* dst = static_cast<std::byte*>(y.data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j)
        std::memcpy(dst + static_cast<size_t>(o * count + j) * row_bytes,
                    src + static_cast<size_t>(o * rows + at[static_cast<size_t>(j)]) * row_bytes, row_bytes);
    out = {std::move(y)};
    return true;
  }
  const TensorData& u = in[2];
  if (u.dtype() != x.dtype() || u.num_elements() != outer * count * inner) return false;
  TensorData y = x.sole_owner() ? x : x.clone();
  const auto* src = static_cast<const std::byte*>(u.data());
  auto* dst = static_cast<std::byte*>(y.data());
  for (int64_t o = 0; o < outer; ++o)  // in the updates' order: the last write to a row wins
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(dst + static_cast<size_t>(o * rows + at[static_cast<size_t>(j)]) * row_bytes,
                  src + static_cast<size_t>(o * count + j) * row_bytes, row_bytes);
  out = {std::move(y)};
  return true;
}

}  // namespace tg::detail::fast
