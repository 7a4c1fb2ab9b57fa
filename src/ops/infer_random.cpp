// Inference for random ops. Randomness is explicit: a Philox state (i64 [2]: seed, counter)
// goes in and the advanced state comes out, so graphs stay pure and replayable.
#include "ops/infer.h"

namespace tg::detail {
namespace {

const TensorType kState(Shape{2}, DType::i64);

InferResult check_state(const InferContext& c, size_t i) {
  const TensorType& s = c.inputs[i];
  if (s.dtype != DType::i64 || !shape_compatible(kState.shape, s.shape))
    return op_error(c, "state must be i64 [2] (from random_state), state is " + s.str());
  return {};
}

}  // namespace

InferResult infer_random_state(const InferContext& c) {
  if (!c.inputs.empty()) return op_error(c, "takes no inputs");
  return {{kState}, {}};
}

// state -> {values of RandomDesc's shape and dtype, next state}.
InferResult infer_random(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (r = check_state(c, 0); !r.ok()) return r;
  const auto& d = std::get<RandomDesc>(c.attr);
  for (int64_t v : d.shape)
    if (v < 0) return op_error(c, "shape " + Shape(d.shape).str() + " must be static and >= 0");
  if (d.distribution == Distribution::uniform) {
    if (!is_float(d.dtype) && !is_integer(d.dtype))
      return op_error(c, std::string("uniform draws numbers, not ") + dtype_name(d.dtype));
    if (!(d.a < d.b))
      return op_error(
          c, "uniform needs min a < max b, got a=" + std::to_string(d.a) + ", b=" + std::to_string(d.b));
  } else {
    if (!is_float(d.dtype))
      return op_error(
          c, enum_name(d.distribution) + " needs a floating-point dtype, got " + dtype_name(d.dtype));
    if (!(d.b > 0))
      return op_error(c, enum_name(d.distribution) + " needs stddev b > 0, got " + std::to_string(d.b));
  }
  return {{TensorType(Shape(d.shape), d.dtype), kState}, {}};
}

// (x, state) -> {y like x, next state}.
InferResult infer_dropout(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  if (!is_float(c.inputs[0].dtype))
    return op_error(c, "needs a floating-point input, x is " + c.inputs[0].str());
  if (r = check_state(c, 1); !r.ok()) return r;
  double rate = std::get<DropoutDesc>(c.attr).rate;
  if (!(rate >= 0 && rate < 1)) return op_error(c, "rate must be in [0, 1), got " + std::to_string(rate));
  return {{c.inputs[0], kState}, {}};
}

}  // namespace tg::detail
