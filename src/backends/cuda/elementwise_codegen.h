#pragma once
// CUDA C++ source for a fused elementwise group (NVRTC compiles it). One thread computes
// every member at one output index; only the group's outputs are written.
#include <string>
#include <unordered_map>

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
  unsigned long long handle;                   // the conditional node the kernel may set
};

/// Source of the kernel `tg_ew` for the group; `flat` when every input has the output's
/// shape (no index arithmetic). Throws tg::Error for an op it cannot generate.
/// With `condition` >= 0 (a one-element output of the group) the kernel also sets the CUDA
/// graph conditional `handle` to that value's truth, as a loop's control kernel would.
std::string elementwise_source(const GraphImpl& g, const FusionGroup& group, bool flat, int32_t condition = -1);
/// True when every member can be generated.
bool elementwise_supported(const GraphImpl& g, const FusionGroup& group);

// Pieces for kernels that compute an elementwise group inline (the stitched stencil).
/// The includes and helper functions the generated expressions call.
std::string elementwise_prelude();
/// Statements `const <type> v<id> = ...;` computing every member of `group` in order, reading
/// the group's inputs by the expressions in `names`, which gains the members' names. Each
/// member is rounded to its dtype, so it holds what the unfused op would have stored.
std::string elementwise_members(const GraphImpl& g, const FusionGroup& group,
                                std::unordered_map<int32_t, std::string>& names, const std::string& indent);
/// The C type values of dtype t are computed in (float for f16 / bf16 / f32).
const char* codegen_compute_type(DType t);
/// The C type dtype t is stored as.
const char* codegen_storage_type(DType t);
/// Expression loading element `off` of dtype t from pointer expression `ptr`, in the compute type.
std::string codegen_load(DType t, const std::string& ptr, const std::string& off);
/// Expression converting compute-type value v to dtype t's storage type.
std::string codegen_store(DType t, const std::string& v);
/// Expression rounding compute-type value e to what dtype t holds.
std::string codegen_round_to(DType t, const std::string& e);

}  // namespace tg::detail
