#pragma once
// Fusion analysis: groups chains of elementwise ops (with the broadcasts and casts that feed
// them) so a backend can run each group as one generated kernel. It does not rewrite the
// graph: it returns the steps of a block in run order, each a single op or a group, and the
// reason each time a group had to be closed. TGRAPH_NO_FUSION=1 turns grouping off.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "passes/module.h"

namespace tg::detail {

/// The most operands (values read from outside) a planned kernel may take: a generated CUDA
/// kernel passes their pointers by value (elementwise_codegen.h), so the planner's merges stop
/// there rather than make a group that no kernel can run.
inline constexpr int kMaxFusedOperands = 24;
/// The most members a plan pass lets a group grow to by recomputing or absorbing others: a
/// generated kernel's statements stay few enough to compile fast.
inline constexpr size_t kMaxGroupMembers = 256;

struct FusionGroup {
  std::vector<int32_t> nodes;    // members, in run order
  std::vector<int32_t> inputs;   // values read from outside the group
  std::vector<int32_t> outputs;  // member values used outside the group
};

struct StencilStitch;
struct ReduceStitch;

/// One step of a block: a lone op (group empty, node >= 0) or a fused group. With
/// FusionOptions::stitch_stencils a step may instead be a stitched stencil (stitch set), with
/// FusionOptions::stitch_reductions a stitched reduction (reduce set).
struct Step {
  int32_t node = -1;
  FusionGroup group;
  std::shared_ptr<const StencilStitch> stitch;
  std::shared_ptr<const ReduceStitch> reduce;
  // A lone op that FusionOptions::pin kept out of every group (a library call folds it in).
  bool pinned = false;
  bool fused() const { return node < 0; }
  /// A fused elementwise group (neither a lone op nor a stitched step).
  bool is_group() const { return node < 0 && !stitch && !reduce; }
};

/// A stencil run as one kernel together with the elementwise group computing its source (the
/// prologue, applied to each source element as it is loaded) and the one consuming its result
/// (the epilogue, applied to each output before the store); docs/ops-semantics.md (Stencil).
/// Either group may be empty (with stitching on, every stencil is such a step). Value-preserving views (reshape, expand_dims, squeeze) between
/// them are absorbed, so the 2-D / 3-D forms (a reshape to rank 4 and back) stitch too.
struct StencilStitch {
  int32_t stencil = -1;                  // the stencil node
  FusionGroup prologue, epilogue;        // prologue.outputs is {the source before source_views}
  std::vector<int32_t> source_views;     // view nodes from the prologue's output to the source
  std::vector<int32_t> result_views;     // view nodes from the stencil's output to what the epilogue reads
  std::vector<int32_t> inputs;           // values read from outside the step
  std::vector<int32_t> outputs;          // values produced and used outside the step
  std::vector<Step> pieces;              // the steps it replaces, in run order (to run them unfused)
};

struct FusionPlan {
  std::vector<Step> steps;
  std::vector<std::string> decisions;  // why groups were closed (for TGRAPH_DUMP and tests)
};

/// Options of plan_fusion; the defaults plan what every backend can run.
struct FusionOptions {
  bool stitch_stencils = false;    // plan StencilStitch steps (the CUDA backend)
  bool stitch_reductions = false;  // recompute cheap producers, plan ReduceStitch steps (CUDA)
  // Elementwise ops the backend computes inside a library call with their producer (a matmul
  // epilogue): planned as pinned lone steps, never fused, recomputed into or stitched. `uses`
  // is use_counts of the module.
  bool (*pin)(const GraphImpl& g, const std::vector<int32_t>& uses, const Node& n) = nullptr;
};

/// True when an op is computed by a generated elementwise kernel (alone or fused).
bool elementwise_kernel_op(const GraphImpl& g, const Node& n);
/// True when an op may be computed inside a fused elementwise kernel: an elementwise kernel
/// op without control dependencies (those pin it in the order of its own step).
bool fusible_elementwise(const GraphImpl& g, const Node& n);
/// Plans the steps of `block` of the module.
FusionPlan plan_fusion(const Module& m, int32_t block, const FusionOptions& options = {});
/// True when TGRAPH_NO_FUSION=1 is set.
bool fusion_disabled();
/// Appends every value node `n` reads to `out`, with the reads of its regions (a node in a
/// region may read enclosing values).
void node_reads(const GraphImpl& g, const Node& n, std::vector<int32_t>& out);
/// The nodes a step runs (a group's members, a stitched step's pieces, or the lone node). A node
/// may be run by several steps: a group recomputes the members of another it reads from.
std::vector<int32_t> step_nodes(const Step& s);
/// The values a step reads from before it (control flow's reads of enclosing values included).
std::vector<int32_t> step_inputs(const GraphImpl& g, const Step& s);
/// The step as an elementwise group: a fused group, or a lone elementwise op as a group of one
/// (its result its output); false for any other step.
bool step_group(const GraphImpl& g, const Step& s, FusionGroup& out);
/// The shape every member of a group is computed at (its last member's).
const Shape& group_shape(const GraphImpl& g, const FusionGroup& grp);
/// True for the views that keep a value's dtype and element order (reshape, expand_dims,
/// squeeze): what planning may look through.
bool is_value_view(OpKind k);
/// True for a node whose value the block has from its start, read nothing and ordered after
/// nothing: a placeholder, a constant, or a variable (read as it was when the run began wherever
/// it is read: writes are committed at the end). Its step may move anywhere earlier.
bool is_start_value(const Node& n);

// The passes over a plan that FusionOptions::stitch_reductions adds (passes/fusion_recompute.cpp,
// passes/reduce_stitch.h), in the order plan_fusion runs them.
/// Lets fused groups compute the members of earlier groups they read instead of reading them,
/// when that reads fewer tensors of their size; drops outputs (and groups) nothing reads then.
void recompute_producers(const Module& m, int32_t block, FusionPlan& plan);
/// The members of group p that computing values `want` needs, in p's order.
std::vector<int32_t> group_cone(const GraphImpl& g, const FusionGroup& p, const std::vector<int32_t>& want);
/// The same, reading the values in `available` (other outputs of p, written anyway) instead of
/// computing them.
std::vector<int32_t> group_cone_from(const GraphImpl& g, const FusionGroup& p, const std::vector<int32_t>& want,
                                     const std::vector<int32_t>& available);
/// The values `nodes` read that none of them computes, in the order first read.
std::vector<int32_t> outside_reads(const GraphImpl& g, const std::vector<int32_t>& nodes);
/// The nodes of `first`, then those of `then` not among them (a node computed once).
std::vector<int32_t> merge_members(const std::vector<int32_t>& first, const std::vector<int32_t>& then);
/// Bytes of the values among `vals` that have `elements` elements (static shapes): what a kernel
/// over that many elements reads or writes of them. Smaller values (read once per block: a
/// per-channel operand, a scalar) count nothing. Counted in bytes, not tensors: two bf16
/// activations cost what one f32 copy does.
int64_t full_size_bytes(const GraphImpl& g, const std::vector<int32_t>& vals, int64_t elements);
/// How many times each value is read by the steps of `plan` (of `block`) and from outside the block.
std::vector<int32_t> plan_reads(const Module& m, int32_t block, const FusionPlan& plan);
/// Lets all the readers of a cheap group (groups and stitched reductions over its shape)
/// compute its members themselves when that reads fewer bytes in all than the group's own
/// reads and writes (passes/fusion_shared_recompute.cpp); the group is dropped afterwards.
void recompute_shared_producers(const Module& m, int32_t block, FusionPlan& plan);
/// Moves an elementwise step into the group computing the latest of its operands when every
/// operand is ready there (passes/fusion_absorb.cpp): the values it read from that group stay
/// in registers.
void absorb_consumers(const Module& m, int32_t block, FusionPlan& plan);
/// Lets a group whose output is a widening cast of a value it has at hand write that narrower
/// value instead, each reader (elementwise groups, stitched reductions) casting it itself
/// (passes/fusion_narrow.cpp).
void narrow_widened_outputs(const Module& m, int32_t block, FusionPlan& plan);
/// Runs the small elementwise steps that read only placeholders, constants and variables as one
/// group per shape, at the first of them (passes/fusion_batch_sources.cpp): one launch, not one
/// each.
void batch_source_steps(const Module& m, int32_t block, FusionPlan& plan);
/// Drops group outputs that no step and nothing outside the block reads, and groups left
/// with none.
void drop_unread_outputs(const Module& m, int32_t block, FusionPlan& plan);

}  // namespace tg::detail
