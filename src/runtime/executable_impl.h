#pragma once
// The compiled form of a graph and its CPU executor.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "passes/module.h"
#include "runtime/variable_store.h"
#include "tgraph/device.h"
#include "tgraph/tensor_data.h"

namespace tg::detail {

struct ExecutableImpl {
  Module module;
  Device device;
  std::vector<std::string> feed_names;
  std::vector<TensorType> feed_types;
  std::shared_ptr<VariableStore> store;
  std::map<std::string, int32_t> variables;  // name -> Variable node id (live ones)
  int64_t arena_bytes = 0;
  int64_t naive_bytes = 0;

  /// Checks inputs against the feeds; throws "[run] ..." naming the feed and both types.
  void check_inputs(const std::vector<TensorData>& inputs) const;
  /// Runs on the CPU; variables change only if the whole run succeeds.
  std::vector<TensorData> run_cpu(const std::vector<TensorData>& inputs) const;
};

/// The store of a graph's variables, made on first use with their initial values.
std::shared_ptr<VariableStore> variable_store_of(GraphImpl& g);

}  // namespace tg::detail
