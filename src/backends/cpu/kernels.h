#pragma once
// CPU kernels: the fast paths (oneDNN, vectorised loops) where one exists for the op and
// dtype, else the reference interpreter.
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

/// Evaluates a computing op (not a source, state or control-flow op) on the CPU. `planned`
/// optionally gives, per output, memory in the run's arena to hold the result (empty
/// entries: allocate); results always end up there when given.
std::vector<TensorData> cpu_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& inputs,
                                 const std::vector<TensorData>* planned = nullptr);

/// The tensor a CPU kernel writes output `i` into: the planned arena memory of the op being
/// evaluated when its type matches, else a fresh allocation.
TensorData cpu_output(size_t i, Shape shape, DType dtype);

/// While alive, cpu_output() on this thread hands out `planned` (as cpu_eval does for its node;
/// for a fast kernel called directly).
class PlannedOutputs {
 public:
  explicit PlannedOutputs(const std::vector<TensorData>* planned);
  ~PlannedOutputs();
  PlannedOutputs(const PlannedOutputs&) = delete;
  PlannedOutputs& operator=(const PlannedOutputs&) = delete;

 private:
  const std::vector<TensorData>* saved_;
};

}  // namespace tg::detail
