#pragma once
// Where an executable runs.
#include <string>

namespace tg {

/// A compute device: the CPU or one CUDA GPU.
struct Device {
  enum class Kind : unsigned char { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  /// The best device present: the first CUDA GPU when one is usable, else the CPU.
  static Device best();
  /// Number of usable CUDA devices (0 when the backend is not built or no driver is present).
  static int cuda_device_count();
  /// "cpu (2 threads)" or "cuda:0 (NVIDIA H200, sm_90, 139 GiB)".
  std::string describe() const;
  /// "cpu" or "cuda:0".
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace tg
