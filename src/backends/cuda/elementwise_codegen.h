#pragma once
// CUDA C++ source for a fused elementwise group (NVRTC compiles it). One thread computes
// every member at one output index; only the group's outputs are written.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "passes/fusion.h"

namespace tg::detail {

/// Maximum rank and operand count the generated kernels take.
inline constexpr int kMaxRank = 8;
inline constexpr int kMaxOperands = kMaxFusedOperands;

/// Kernel arguments (passed by value).
struct ElementwiseArgs {
  const void* in[kMaxOperands];
  void* out[kMaxOperands];
  long long n;
  int rank;
  long long dims[kMaxRank];
  long long strides[kMaxOperands][kMaxRank];  // per input, element strides (0 = broadcast)
  unsigned long long handle;                   // the conditional node the kernel may set
  unsigned div_mul[kMaxRank], div_shift[kMaxRank];  // Indexing::strided32: fast_divisor of dims
};

/// How a kernel finds each input's element for output index i.
enum class Indexing {
  flat,       // every input has the output's shape: element i
  strided,    // coordinates of i by 64-bit division, then each input's strides
  strided32,  // the same with 32-bit multiply-shift division (n < 2^31: fast_divisor)
};

/// What a strided kernel may be compiled for (ElementwiseArgs after coalesce_dims): the rank,
/// and per input whether it is read at the output's own index (its strides are the output's
/// contiguous ones) and along which dims it moves (non-zero strides). Sizes and strides stay
/// run-time arguments, so inputs of new sizes with the same broadcasting reuse the kernel.
struct StridePattern {
  int rank = 0;
  std::vector<bool> flat;             // per input
  std::vector<uint32_t> moves_along;  // per input: bit d set when its stride along dim d is not 0
  /// A vector kernel's grid-stride step is a multiple of the innermost dim (hoistable_inner):
  /// an input moving along that dim alone (batch norm's per-channel operands in NHWC) is at
  /// the same offset in every step of a thread, so it is loaded once, before the loop.
  bool hoist_inner = false;
  static StridePattern of(const ElementwiseArgs& a, int inputs);
  /// The most general pattern of a rank: every input moves along every dim.
  static StridePattern general(int rank, int inputs);
  std::string key() const;
};

/// The name of the group's kernel: "tg_ew_" and its first ops' names and its op count
/// ("tg_ew_sub_mul_select_n7"), so a profile (ncu, torch.profiler) tells the groups apart.
std::string elementwise_kernel_name(const GraphImpl& g, const FusionGroup& group);

/// Source of the kernel elementwise_kernel_name(g, group) for the group. Throws tg::Error for an op it cannot generate.
/// With `condition` >= 0 (a one-element output of the group) the kernel also sets the CUDA
/// graph conditional `handle` to that value's truth, as a loop's control kernel would. A
/// strided kernel is compiled for its inputs' `pattern` (required; tg::Error without one):
/// straight-line coordinates, a flat input read at i, a broadcast one only along the dims it
/// moves (a loop over a run-time rank, indexing the strides by it, made the batch-norm
/// normalisation, four per-channel operands, bound by instructions at 1.8 TB/s).
/// With `vec` > 1 (elementwise_vector_width) each thread computes `vec` neighbouring outputs
/// from one vector load per input (tg::Error with a condition).
std::string elementwise_source(const GraphImpl& g, const FusionGroup& group, Indexing ix, int32_t condition = -1,
                               const StridePattern* pattern = nullptr, int vec = 1);

/// True when a vector kernel of `vec` lanes over `a` (coalesced, strided) may load its inputs
/// that move along the innermost dim alone once per thread (StridePattern::hoist_inner).
bool hoistable_inner(const ElementwiseArgs& a, int vec);

/// How many neighbouring outputs one thread of the kernel for `a` (coalesced unless `flat`)
/// computes: 8, 4 or 2 when the innermost dim is a multiple of it, every input read along that
/// dim is contiguous there with its other strides multiples of it, and every pointer is aligned
/// to a vector of its dtype; else 1. One offset computation and one 16-byte load for eight bf16
/// elements, where one thread per element left the bf16 kernels of a training step (2-byte
/// loads, the coordinates per element) at a fifth of the copy bandwidth.
int elementwise_vector_width(const ElementwiseArgs& a, bool flat, const std::vector<DType>& in_types,
                             const std::vector<DType>& out_types);

/// Division by a run-time constant d >= 1 as q = (umulhi(n, mul) + n) >> shift, exact for
/// every n < 2^31 (Granlund & Montgomery: shift = ceil(log2 d), mul = floor(2^32 (2^shift -
/// d) / d) + 1; the sum cannot overflow because umulhi(n, mul) <= n). A 64-bit division is a
/// long emulated sequence on the GPU, and a broadcasting kernel needs one per dim per element.
struct FastDivisor {
  uint32_t mul = 1, shift = 0;
};
inline FastDivisor fast_divisor(uint32_t d) {
  FastDivisor f;
  while ((uint64_t{1} << f.shift) < d) ++f.shift;
  f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << f.shift) - d)) / d + 1);
  return f;
}
/// n / d as the strided32 kernel computes it (for tests of fast_divisor).
inline uint32_t fast_divide(uint32_t n, FastDivisor f) {
  return static_cast<uint32_t>(((static_cast<uint64_t>(n) * f.mul >> 32) + n) >> f.shift);
}

/// Drops size-1 dims and merges neighbouring dims every input walks contiguously (or
/// broadcasts along both), so a [N,H,W,C] output with a per-channel input has 2 dims, not 4:
/// fewer divisions per element. Leaves at least one dim.
void coalesce_dims(ElementwiseArgs& a, int inputs);
/// True when every member can be generated.
bool elementwise_supported(const GraphImpl& g, const FusionGroup& group);

// Pieces for kernels that compute an elementwise group inline (the stitched stencil).
/// The includes and helper functions the generated expressions call.
std::string elementwise_prelude();
/// Statements `const <type> v<id> = ...;` computing every member of `group` in order, reading
/// the group's inputs by the expressions in `names`, which gains the members' names. Members
/// of integer dtypes wrap to them; f16 / bf16 members stay in float (rounded where stored and
/// at explicit casts) unless round_half_ops().
std::string elementwise_members(const GraphImpl& g, const FusionGroup& group,
                                std::unordered_map<int32_t, std::string>& names, const std::string& indent);
/// TGRAPH_ROUND_HALF_OPS=1: every f16 / bf16 member of a generated kernel is rounded to its
/// dtype, as the unfused op would store it (to tell excess precision from a real difference).
bool round_half_ops();
/// The C type values of dtype t are computed in (float for f16 / bf16 / f32).
const char* codegen_compute_type(DType t);
/// The C type dtype t is stored as.
const char* codegen_storage_type(DType t);
/// Expression loading element `off` of dtype t from pointer expression `ptr`, in the compute type.
std::string codegen_load(DType t, const std::string& ptr, const std::string& off);
/// Expression converting stored value p of dtype t to its compute type.
std::string codegen_from_storage(DType t, const std::string& p);
/// Expression converting compute-type value v to dtype t's storage type.
std::string codegen_store(DType t, const std::string& v);
/// Expression rounding compute-type value e to what dtype t holds.
std::string codegen_round_to(DType t, const std::string& e);

}  // namespace tg::detail
