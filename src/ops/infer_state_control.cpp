// Inference for sources, variables, assign, and control flow.
#include "ops/infer.h"

namespace tg::detail {

InferResult infer_source(const InferContext& c) {
  if (!c.inputs.empty()) return op_error(c, "takes no inputs");
  if (!c.declared || c.declared->size() != 1) return op_error(c, "has no declared type");
  return {*c.declared, {}};
}

InferResult infer_variable(const InferContext& c) {
  InferResult r = infer_source(c);
  if (r.ok() && !r.types[0].shape.is_static())
    return op_error(c, "variable shape must be static, got " + r.types[0].shape.str());
  return r;
}

InferResult infer_read_variable(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  return {{c.inputs[0]}, {}};
}

InferResult infer_assign(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  if (c.inputs[0].dtype != c.inputs[1].dtype || !shape_compatible(c.inputs[0].shape, c.inputs[1].shape))
    return op_error(c, "value does not match the variable: " +
                           describe_inputs(c, {"variable", "value"}));
  return {{}, {}};
}

InferResult infer_if_else(const InferContext& c) {
  if (c.inputs.empty()) return op_error(c, "needs a predicate");
  const TensorType& p = c.inputs[0];
  if (p.dtype != DType::boolean || (p.shape.ranked() && p.shape.num_elements() != 1 && p.shape.is_static()))
    return op_error(c, "predicate must be a bool scalar, got " + p.str());
  const auto& rr = *c.region_results;
  if (rr.size() != 2) return op_error(c, "needs then and else regions");
  if (rr[0].size() != rr[1].size())
    return op_error(c, "branches return " + std::to_string(rr[0].size()) + " and " +
                           std::to_string(rr[1].size()) + " tensors");
  std::vector<TensorType> out;
  for (size_t i = 0; i < rr[0].size(); ++i) {
    if (rr[0][i].dtype != rr[1][i].dtype || rr[0][i].shape.rank() != rr[1][i].shape.rank())
      return op_error(c, "result " + std::to_string(i) + " differs between branches: then gives " +
                             rr[0][i].str() + ", else gives " + rr[1][i].str());
    // Dims that differ between branches become dynamic.
    std::vector<int64_t> dims = rr[0][i].shape.dims();
    for (size_t k = 0; k < dims.size(); ++k)
      if (dims[k] != rr[1][i].shape.dims()[k]) dims[k] = -1;
    out.emplace_back(rr[0][i].shape.ranked() ? Shape(dims) : Shape::unranked(), rr[0][i].dtype);
  }
  return {out, {}};
}

namespace {
InferResult loop_carried(const InferContext& c, size_t first_init,
                         const std::vector<TensorType>& body_out, const char* what) {
  size_t n = c.inputs.size() - first_init;
  if (body_out.size() != n)
    return op_error(c, std::string(what) + " returns " + std::to_string(body_out.size()) +
                           " tensors for " + std::to_string(n) + " loop-carried values");
  for (size_t i = 0; i < n; ++i) {
    const TensorType& init = c.inputs[first_init + i];
    if (init.dtype != body_out[i].dtype || !shape_compatible(init.shape, body_out[i].shape))
      return op_error(c, std::string(what) + " result " + std::to_string(i) + " is " +
                             body_out[i].str() + " but the loop-carried value is " + init.str());
  }
  return {std::vector<TensorType>(c.inputs.begin() + static_cast<long>(first_init), c.inputs.end()), {}};
}

bool scalar_of(const TensorType& t, DType d) {
  return t.dtype == d && (!t.shape.ranked() || !t.shape.is_static() || t.shape.num_elements() == 1);
}
}  // namespace

InferResult infer_for_loop(const InferContext& c) {
  // inputs: lower, upper, step (i32 scalars), then the initial loop-carried values
  if (c.inputs.size() < 3) return op_error(c, "needs lower, upper and step");
  for (int i = 0; i < 3; ++i)
    if (!scalar_of(c.inputs[static_cast<size_t>(i)], DType::i32))
      return op_error(c, "lower, upper and step must be i32 scalars, got " + c.inputs[static_cast<size_t>(i)].str());
  return loop_carried(c, 3, (*c.region_results)[0], "body");
}

InferResult infer_while_loop(const InferContext& c) {
  // regions: before (returns pred then results), after (returns new args)
  const auto& rr = *c.region_results;
  if (rr.size() != 2 || rr[0].empty()) return op_error(c, "needs before and after regions");
  if (!scalar_of(rr[0][0], DType::boolean))
    return op_error(c, "before's predicate must be a bool scalar, got " + rr[0][0].str());
  std::vector<TensorType> results(rr[0].begin() + 1, rr[0].end());
  InferResult r = loop_carried(c, 0, rr[1], "after");
  if (!r.ok()) return r;
  return {results, {}};
}

}  // namespace tg::detail
