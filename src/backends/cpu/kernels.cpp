#include "backends/cpu/kernels.h"

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/reference.h"

namespace tg::detail {

std::vector<TensorData> cpu_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& inputs) {
  std::vector<TensorData> out;
  if (cpu_fast_eval(g, n, inputs, out)) return out;
  return reference_eval(g, n, inputs);
}

}  // namespace tg::detail
