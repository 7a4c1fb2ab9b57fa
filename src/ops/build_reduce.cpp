// Builders of reductions, scans, top_k, sort, matmul and band_part.
#include "ops/builder.h"

namespace tg {
using namespace detail;

#define REDUCE(fn, K)                                                    \
  Tensor Graph::fn(Tensor x, std::vector<int64_t> axes, bool keep_dims) { \
    return make(*this, OpKind::K, {x}, ReduceDesc{std::move(axes), keep_dims}); \
  }
REDUCE(reduce_sum, ReduceSum) REDUCE(reduce_prod, ReduceProd) REDUCE(reduce_max, ReduceMax)
REDUCE(reduce_min, ReduceMin) REDUCE(reduce_mean, ReduceMean)
REDUCE(reduce_variance, ReduceVariance) REDUCE(reduce_all, ReduceAll)
REDUCE(reduce_any, ReduceAny) REDUCE(reduce_logsumexp, ReduceLogSumExp)
#undef REDUCE

Tensor Graph::argmax(Tensor x, int64_t axis, bool keep_dims) {
  return make(*this, OpKind::ArgMax, {x}, ReduceDesc{{axis}, keep_dims});
}
Tensor Graph::argmin(Tensor x, int64_t axis, bool keep_dims) {
  return make(*this, OpKind::ArgMin, {x}, ReduceDesc{{axis}, keep_dims});
}

#define CUMULATIVE(fn, K)                                                      \
  Tensor Graph::fn(Tensor x, int64_t axis, bool exclusive, bool reverse) {     \
    return make(*this, OpKind::K, {x}, CumulativeDesc{axis, exclusive, reverse}); \
  }
CUMULATIVE(cumsum, CumSum) CUMULATIVE(cumprod, CumProd) CUMULATIVE(cummax, CumMax)
CUMULATIVE(cummin, CumMin)
#undef CUMULATIVE

std::pair<Tensor, Tensor> Graph::top_k(Tensor x, int64_t k, int64_t axis, bool largest) {
  auto out = make_multi(*this, OpKind::TopK, {x}, TopKDesc{k, axis, largest});
  return {out[0], out[1]};
}
Tensor Graph::sort(Tensor x, int64_t axis, bool descending) {
  return make(*this, OpKind::Sort, {x}, SortDesc{axis, descending});
}
Tensor Graph::argsort(Tensor x, int64_t axis, bool descending) {
  return make(*this, OpKind::ArgSort, {x}, SortDesc{axis, descending});
}

Tensor Graph::matmul(Tensor a, Tensor b, bool transpose_a, bool transpose_b) {
  use(*this, a, OpKind::MatMul, "a");
  use(*this, b, OpKind::MatMul, "b");
  DType t = promote_types(a.dtype(), b.dtype());
  return make(*this, OpKind::MatMul, {cast_if(*this, a, t), cast_if(*this, b, t)},
              MatmulDesc{transpose_a, transpose_b});
}
Tensor Graph::scaled_matmul(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, DType out, bool transpose_a,
                             bool transpose_b) {
  use(*this, a, OpKind::ScaledMatMul, "a");
  use(*this, b, OpKind::ScaledMatMul, "b");
  use(*this, scale_a, OpKind::ScaledMatMul, "scale_a");
  use(*this, scale_b, OpKind::ScaledMatMul, "scale_b");
  return make(*this, OpKind::ScaledMatMul, {a, b, scale_a, scale_b}, ScaledMatmulDesc{transpose_a, transpose_b, out});
}
Tensor Graph::band_part(Tensor x, int64_t num_lower, int64_t num_upper) {
  return make(*this, OpKind::BandPart, {x}, BandPartDesc{num_lower, num_upper});
}

}  // namespace tg
