// Converters of ONNX's reductions (axes as an attribute, or as an input from ReduceSum-13 and
// every Reduce*-18) and ArgMax / ArgMin / CumSum / TopK.
#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

enum class R { sum, mean, max, min, prod, l1, l2, log_sum, log_sum_exp, sum_square };

// Axes from the attribute (older opsets) or the optional second input; nullopt = identity.
std::optional<std::vector<int64_t>> reduce_axes(Ctx& c, bool axes_input) {
  std::vector<int64_t> axes;
  if (axes_input) {
    if (c.has_input(1)) axes = c.ints_in(1);
    if (axes.empty() && c.attr_i("noop_with_empty_axes", 0)) return std::nullopt;
  } else {
    axes = c.attr_ints("axes");
  }
  int64_t rank = c.in(0).rank();
  for (auto& a : axes) a = norm_axis(c, a, rank);
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  return axes;
}

template <R kind, bool axes_input>
void reduce(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  bool keep = c.attr_i("keepdims", 1) != 0;
  auto axes_opt = reduce_axes(c, axes_input);
  if (!axes_opt) return c.out(0, g.identity(x));
  const auto& axes = *axes_opt;
  if (x.dtype() == DType::boolean && (kind == R::max || kind == R::min))  // bool max / min: any / all
    return c.out(0, kind == R::max ? g.reduce_any(x, axes, keep) : g.reduce_all(x, axes, keep));
  Tensor y;
  switch (kind) {
    case R::sum: y = g.reduce_sum(x, axes, keep); break;
    case R::mean: y = g.reduce_mean(x, axes, keep); break;
    case R::max: y = g.reduce_max(x, axes, keep); break;
    case R::min: y = g.reduce_min(x, axes, keep); break;
    case R::prod: y = g.reduce_prod(x, axes, keep); break;
    case R::l1: y = g.reduce_sum(g.abs(x), axes, keep); break;
    case R::l2: y = g.sqrt(g.reduce_sum(g.mul(x, x), axes, keep)); break;
    case R::log_sum: y = g.log(g.reduce_sum(x, axes, keep)); break;
    case R::log_sum_exp: y = g.reduce_logsumexp(x, axes, keep); break;
    case R::sum_square: y = g.reduce_sum(g.mul(x, x), axes, keep); break;
  }
  c.out(0, y);
}

template <bool is_max>
void arg(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  int64_t axis = norm_axis(c, c.attr_i("axis", 0), x.rank());
  bool keep = c.attr_i("keepdims", 1) != 0;
  if (c.attr_i("select_last_index", 0)) {
    int64_t n = x.shape()[axis];
    if (n < 0) c.fail("select_last_index needs a static size along the axis");
    Tensor r = g.reverse(x, {axis});
    Tensor i = is_max ? g.argmax(r, axis, keep) : g.argmin(r, axis, keep);
    i = g.cast(i, DType::i64);
    return c.out(0, g.sub(g.scalar(static_cast<double>(n - 1), DType::i64), i));
  }
  Tensor i = is_max ? g.argmax(x, axis, keep) : g.argmin(x, axis, keep);
  c.out(0, g.cast(i, DType::i64));
}

// CumSum / CumProd: the axis as an input, exclusive and reverse as attributes.
template <Tensor (Graph::*scan)(Tensor, int64_t, bool, bool)>
void cumulative(Ctx& c) {
  Tensor x = c.in(0);
  auto axis = c.ints_in(1);
  if (axis.size() != 1) c.fail("axis must be a scalar");
  c.out(0, (c.g.*scan)(x, norm_axis(c, axis[0], x.rank()), c.attr_i("exclusive", 0) != 0,
                       c.attr_i("reverse", 0) != 0));
}

void topk(Ctx& c) {
  Tensor x = c.in(0);
  int64_t k = c.opset < 10 ? c.attr_i("k", 1) : c.ints_in(1).at(0);
  int64_t axis = norm_axis(c, c.attr_i("axis", -1), x.rank());
  auto [v, i] = c.g.top_k(x, k, axis, c.attr_i("largest", 1) != 0);
  c.out(0, v);
  c.out(1, c.g.cast(i, DType::i64));
}

#define REDUCE(NAME, KIND, INPUT_SINCE)                           \
  {NAME, 1, INPUT_SINCE - 1, reduce<R::KIND, false>}, {           \
    NAME, INPUT_SINCE, kNewestOpset, reduce<R::KIND, true>                  \
  }

}  // namespace

const std::vector<Converter>& reduce_converters() {
  static const std::vector<Converter> t = {
      REDUCE("ReduceSum", sum, 13),
      REDUCE("ReduceMean", mean, 18),
      REDUCE("ReduceMax", max, 18),
      REDUCE("ReduceMin", min, 18),
      REDUCE("ReduceProd", prod, 18),
      REDUCE("ReduceL1", l1, 18),
      REDUCE("ReduceL2", l2, 18),
      REDUCE("ReduceLogSum", log_sum, 18),
      REDUCE("ReduceLogSumExp", log_sum_exp, 18),
      REDUCE("ReduceSumSquare", sum_square, 18),
      {"ArgMax", 1, kNewestOpset, arg<true>},
      {"ArgMin", 1, kNewestOpset, arg<false>},
      {"CumSum", 11, kNewestOpset, cumulative<&Graph::cumsum>},
      {"CumProd", 26, kNewestOpset, cumulative<&Graph::cumprod>},
      {"TopK", 1, kNewestOpset, topk},
  };
  return t;
}

}  // namespace tg::onnx_import
