// The TensorFlow PluggableDevice "TGRAPH" (issue 24): shared names of the plugin's parts.
#pragma once

#define TGRAPH_TF_EXPORT extern "C" __attribute__((visibility("default")))

namespace tgraph_tf {

/// The device type TensorFlow sees: tf.config.list_physical_devices("TGRAPH"), "/TGRAPH:0".
inline constexpr const char* kDeviceType = "TGRAPH";

}  // namespace tgraph_tf
