// The TensorFlow PluggableDevice "TGRAPH" (issue 24): shared names of the plugin's parts.
#pragma once

#define TGRAPH_TF_EXPORT extern "C" __attribute__((visibility("default")))

#include <cstdlib>
#include <string>

namespace tgraph_tf {

/// The device type TensorFlow sees: tf.config.list_physical_devices("TGRAPH"), "/TGRAPH:0".
inline constexpr const char* kDeviceType = "TGRAPH";

/// TGRAPH_TF_LOG=1: the plugin says on stderr what it compiles and how it clusters each graph.
inline bool tf_log() {
  const char* v = std::getenv("TGRAPH_TF_LOG");
  return v && std::string(v) != "0" && std::string(v) != "";
}

}  // namespace tgraph_tf
