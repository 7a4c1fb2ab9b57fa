#pragma once
// Variables' current values, shared by every executable compiled from one graph.
#include <cstdint>
#include <functional>
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
  /// Bumped with every version: a run that finds it where it left it knows, without looking at
  /// each variable, that its device copies are current (ResNet-50's 430 variables had cost a
  /// captured step ~1 ms of map lookups before its graph launched).
  uint64_t generation = 0;
  /// Variables whose newest value lives only on a device: fetched on first host read, so a
  /// training step on the GPU copies nothing back unless someone looks.
  std::map<std::string, std::function<TensorData()>> device_only;

  /// The host value of a variable (caller holds mu); fetches a device-only value first.
  TensorData& value(const std::string& name) {
    auto it = device_only.find(name);
    if (it != device_only.end()) {
      values[name] = it->second();
      device_only.erase(it);
    }
    return values.at(name);
  }
  /// Writes a host value (caller holds mu) and bumps the version.
  void write(const std::string& name, TensorData v) {
    device_only.erase(name);
    values[name] = std::move(v);
    ++versions[name];
    ++generation;
  }
};

}  // namespace tg::detail
