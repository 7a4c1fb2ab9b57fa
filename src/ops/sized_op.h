#pragma once
// sized_op: an op whose sizes are tensors computed in the graph from other tensors' sizes
// (descriptors.h, SizedDesc). What the builder, the compile and the reference interpreter share:
// evaluating such sizes where they are known, and turning the node into the op it stands for.
#include <optional>
#include <unordered_map>
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

/// The number of data inputs of a sized_op (x; none for arange): its sizes come after them.
size_t sized_data_inputs(const SizedDesc& d);

/// Value v's elements when they follow from constants and static shapes alone (shape_of of a
/// tensor whose type is static, and small arithmetic, gathers, concats and casts of such),
/// nullopt otherwise. `memo` keeps what was evaluated (and what could not be, as empty data)
/// across calls on one unchanged graph.
std::optional<TensorData> known_size_value(const GraphImpl& g, int32_t v,
                                           std::unordered_map<int32_t, std::optional<TensorData>>& memo);

/// Value v's elements as far as they are known (a Concat of a Shape's known dims and constants):
/// one per element, nullopt where unknown; empty when even its length is not known.
std::vector<std::optional<int64_t>> partial_size_value(const GraphImpl& g, int32_t v);

/// The output dims of a sized_op that its data input's type and its sizes' known elements tell
/// (-1 elsewhere); empty where nothing is known.
std::vector<int64_t> sized_known_dims(const SizedDesc& d, const Shape& x,
                                      const std::vector<std::vector<std::optional<int64_t>>>& sizes);

/// Whether value v depends on a tensor's values (a feed's, a variable's, random numbers) rather
/// than only on sizes and constants: such sizes are refused (data-dependent shapes).
bool depends_on_values(const GraphImpl& g, int32_t v);

/// The node a sized_op stands for, given its sizes' values and its data inputs' (static) types:
/// kind, attribute and inputs of the plain op (the sizes dropped). Throws tg::Error naming the
/// op when the sizes do not fit (a wrong count, a negative size).
struct PlainOp {
  OpKind kind;
  Attr attr;
  std::vector<int32_t> inputs;
};
PlainOp sized_as_plain(const Node& n, const std::vector<TensorData>& sizes, const std::vector<TensorType>& data_types);

}  // namespace tg::detail
