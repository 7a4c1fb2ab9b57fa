#pragma once
// NumPy .npy files (format 1.0-3.0, little-endian, C order) <-> TensorData.
#include <string>

#include "tgraph/tensor_data.h"

namespace tg::tools {

/// Reads a .npy file; throws tg::Error with the reason on an unsupported or corrupt file.
TensorData read_npy(const std::string& path);
/// Writes a .npy file (format 1.0).
void write_npy(const std::string& path, const TensorData& t);

}  // namespace tg::tools
