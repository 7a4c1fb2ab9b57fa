#pragma once
// The reference interpreter: every op evaluated in double precision, the oracle that tests
// and the constant folder use. Slow and simple on purpose; the fast CPU kernels are elsewhere.
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

/// Output types of node n for concrete input types (its inference rule run on them).
/// Throws tg::Error when the inputs do not fit the op.
std::vector<TensorType> concrete_output_types(const GraphImpl& g, const Node& n,
                                              const std::vector<TensorData>& inputs);

/// Evaluates one op that has no regions and no state (not placeholder/variable/assign/
/// read_variable/control flow) on host inputs of any dtype, computing in double and
/// returning outputs in the node's output dtypes with concrete shapes.
/// Throws tg::Error naming the op on bad input (e.g. an out-of-range index).
std::vector<TensorData> reference_eval(const GraphImpl& g, const Node& n,
                                       const std::vector<TensorData>& inputs);

/// Whether reference_eval evaluates op k (every op but those the executor runs itself).
bool reference_evaluates(OpKind k);
/// Whether the executor runs op k itself (sources, state, control flow).
bool executor_evaluates(OpKind k);

}  // namespace tg::detail
