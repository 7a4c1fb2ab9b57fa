// Shapes of the collectives: all_reduce and broadcast keep their operand's type; all_gather
// joins the ranks' tensors on axis 0 (world times as long), reduce_scatter splits axis 0 into
// one part per rank. The world size is the one the op was built in (CollectiveDesc).
#include "ops/infer.h"

namespace tg::detail {

InferResult infer_collective(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  const auto& d = std::get<CollectiveDesc>(c.attr);
  const TensorType& x = c.inputs[0];
  if (d.world < 1 || d.rank < 0 || d.rank >= d.world)
    return op_error(c, "rank " + std::to_string(d.rank) + " is not in a world of " + std::to_string(d.world));
  const bool reduces = c.kind == OpKind::AllReduce || c.kind == OpKind::ReduceScatter;
  if (reduces) {
    if (!is_float(x.dtype) && x.dtype != DType::i32 && x.dtype != DType::i64)
      return op_error(c, "combines f32, f64, f16, bf16, i32 or i64 tensors, not " + x.str());
    if (d.reduce == CollectiveReduce::mean && !is_float(x.dtype))
      return op_error(c, "a mean of integer tensors (" + x.str() + "): use sum");
  }
  if (c.kind == OpKind::Broadcast && (d.root < 0 || d.root >= d.world))
    return op_error(c, "root " + std::to_string(d.root) + " is not a rank of a world of " + std::to_string(d.world));
  if (c.kind != OpKind::AllGather && c.kind != OpKind::ReduceScatter) return {{x}, {}};
  if (!x.shape.ranked() || x.shape.rank() == 0)
    return op_error(c, "takes a tensor of rank 1 or more (axis 0 is split or joined across the ranks), not " + x.str());
  std::vector<int64_t> dims(x.shape.dims().begin(), x.shape.dims().end());
  if (dims[0] >= 0) {
    if (c.kind == OpKind::AllGather) {
      dims[0] *= d.world;
    } else {
      if (dims[0] % d.world != 0)
        return op_error(c, "axis 0 of " + x.str() + " must split into " + std::to_string(d.world) +
                               " equal parts, one per rank");
      dims[0] /= d.world;
    }
  }
  return {{TensorType(Shape(dims), x.dtype)}, {}};
}

}  // namespace tg::detail
