#pragma once
// CUDA C++ source for a fused elementwise group (NVRTC compiles it). One thread computes
// every member at one output index; only the group's outputs are written.
#include <string>

#include "passes/fusion.h"

namespace tg::detail {

/// Maximum rank and operand count the generated kernels take.
inline constexpr int kMaxRank = 8;
inline constexpr int kMaxOperands = 24;

/// Kernel arguments (passed by value).
struct ElementwiseArgs {
  const void* in[kMaxOperands];
  void* out[kMaxOperands];
  long long n;
  int rank;
  long long dims[kMaxRank];
  long long strides[kMaxOperands][kMaxRank];  // per input, element strides (0 = broadcast)
};

/// Source of the kernel `tg_ew` for the group; `flat` when every input has the output's
/// shape (no index arithmetic). Throws tg::Error for an op it cannot generate.
std::string elementwise_source(const GraphImpl& g, const FusionGroup& group, bool flat);
/// True when every member can be generated.
bool elementwise_supported(const GraphImpl& g, const FusionGroup& group);

}  // namespace tg::detail
