#pragma once
// CPU kernels: the fast paths (oneDNN, vectorised loops) where one exists for the op and
// dtype, else the reference interpreter.
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

/// Evaluates a computing op (not a source, state or control-flow op) on the CPU.
std::vector<TensorData> cpu_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& inputs);

}  // namespace tg::detail
