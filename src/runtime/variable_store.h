#pragma once
// Variables' current values, shared by every executable compiled from one graph.
#include <map>
#include <mutex>
#include <string>

#include "tgraph/tensor_data.h"

namespace tg::detail {

struct VariableStore {
  std::mutex mu;
  std::map<std::string, TensorData> values;
};

}  // namespace tg::detail
