#pragma once
// Variables' current values, shared by every executable compiled from one graph.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "tgraph/tensor_data.h"

namespace tg::detail {

struct VariableStore {
  std::mutex mu;
  std::map<std::string, TensorData> values;
  /// Bumped on every write, so device copies know when they are stale.
  std::map<std::string, uint64_t> versions;
};

}  // namespace tg::detail
