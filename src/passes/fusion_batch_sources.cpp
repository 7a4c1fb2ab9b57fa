// Batching small work on the block's sources (FusionOptions::stitch_reductions, the CUDA
// backend): elementwise steps that read only placeholders, constants and variables and write
// little (the casts of weights to bf16, a batch norm's per-channel casts of gamma and beta,
// num_batches_tracked + 1 on an i64 scalar, the backward's per-channel factors of saved
// statistics) ran wherever their readers sit in the node order, one launch each: 270 launches
// of 2-5 us in tgraph_train's ResNet-50 step. Their inputs exist from the start, so such steps
// of one shape join one group, run at the first of them: a kernel with several independent
// members and outputs.
#include <map>
#include <unordered_map>

#include "passes/fusion.h"

namespace tg::detail {
namespace {

// What may be computed earlier than its readers need it: outputs of at most 8 MB (a weight's
// bf16 copy: ResNet-50's largest is 4 MB), at most 64 MB of them in a block, since each now
// lives from its batch to its last reader (an inference graph's casts of its weights would
// otherwise all be alive at once instead of one at a time).
constexpr int64_t kMaxBatchedBytes = 8 << 20, kMaxMovedBytes = 64 << 20;

// Bytes of v.
int64_t bytes_of(const GraphImpl& g, int32_t v) {
  return g.type(v).shape.num_elements() * static_cast<int64_t>(dtype_size(g.type(v).dtype));
}

// A value the block has from its start (is_start_value).
bool is_source(const GraphImpl& g, int32_t v) {
  const Node* p = g.producer(v);
  return p && is_start_value(*p);
}

}  // namespace

void batch_source_steps(const Module& m, int32_t block, FusionPlan& plan) {
  // The top-level block only: a loop body's groups may write its state in place or set its
  // condition (cuda_run_ops.cpp), which a merged group must not take on.
  if (block != 0) return;
  const GraphImpl& g = m.graph;
  std::vector<Step>& steps = plan.steps;
  // Candidates by the shape they compute at: a group (or lone elementwise op) whose inputs are
  // all sources and whose outputs are all small.
  std::map<std::string, std::vector<size_t>> by_shape;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].pinned) continue;
    FusionGroup grp;
    if (!step_group(g, steps[i], grp) || grp.nodes.empty()) continue;
    bool ok = true;
    for (int32_t id : grp.nodes) ok &= fusible_elementwise(g, g.nodes[static_cast<size_t>(id)]);
    for (int32_t v : grp.inputs) ok &= is_source(g, v);
    const Shape& s = group_shape(g, grp);
    ok &= s.ranked() && s.is_static();
    for (int32_t v : grp.outputs) ok &= g.type(v).shape == s && bytes_of(g, v) <= kMaxBatchedBytes;
    if (ok) by_shape[s.str()].push_back(i);
  }
  auto out_bytes = [&](const FusionGroup& grp) {
    int64_t b = 0;
    for (int32_t v : grp.outputs) b += bytes_of(g, v);
    return b;
  };
  int64_t moved = 0;
  std::vector<bool> gone(steps.size(), false);
  for (const auto& entry : by_shape) {
    const std::string& shape = entry.first;  // named, not a structured binding: lambdas capture it (clang 14)
    const auto& idx = entry.second;
    if (idx.size() < 2) continue;
    size_t at = idx[0];
    FusionGroup merged;
    step_group(g, steps[at], merged);
    int joined = 0;
    // The batch so far replaces its first step.
    auto place = [&] {
      if (!joined) return;
      steps[at] = Step{-1, std::move(merged), nullptr, nullptr};
      plan.decisions.push_back("batch of " + std::to_string(joined + 1) + " steps on sources at " + shape);
    };
    for (size_t k = 1; k < idx.size(); ++k) {
      FusionGroup next;
      step_group(g, steps[idx[k]], next);
      if (moved + out_bytes(next) > kMaxMovedBytes) break;  // the rest stay where they are
      const std::vector<int32_t> inputs = merge_members(merged.inputs, next.inputs);
      const std::vector<int32_t> outputs = merge_members(merged.outputs, next.outputs);
      if (inputs.size() > static_cast<size_t>(kMaxFusedOperands) ||
          outputs.size() > static_cast<size_t>(kMaxFusedOperands) ||
          merged.nodes.size() + next.nodes.size() > kMaxGroupMembers) {
        place();  // this batch is full: the next one starts here
        at = idx[k];
        merged = std::move(next);
        joined = 0;
        continue;
      }
      moved += out_bytes(next);
      merged.nodes = merge_members(merged.nodes, next.nodes);
      merged.inputs = inputs;
      merged.outputs = outputs;
      gone[idx[k]] = true;
      ++joined;
    }
    place();
  }
  // The sources are steps of their own (a constant's upload, a variable's device copy): those a
  // batch reads move up to right before it (they read nothing, so any earlier place is right).
  std::unordered_map<int32_t, size_t> source_step;  // value -> the lone step making it
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].fused()) continue;
    const Node& n = g.nodes[static_cast<size_t>(steps[i].node)];
    if (n.outputs.size() == 1 && is_source(g, n.outputs[0])) source_step[n.outputs[0]] = i;
  }
  std::vector<bool> emitted(steps.size(), false);
  std::vector<Step> kept;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (gone[i] || emitted[i]) continue;
    for (int32_t v : step_inputs(g, steps[i]))
      if (auto it = source_step.find(v); it != source_step.end() && it->second > i && !emitted[it->second]) {
        kept.push_back(steps[it->second]);
        emitted[it->second] = true;
      }
    kept.push_back(std::move(steps[i]));
    emitted[i] = true;
  }
  steps = std::move(kept);
}

}  // namespace tg::detail
