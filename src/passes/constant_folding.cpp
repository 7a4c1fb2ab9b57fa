#include "passes/constant_folding.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/reference.h"
#include "passes/algebraic_simplify.h"
#include "passes/fold_memo.h"
#include "tgraph/error.h"

namespace tg::detail {
bool ConstantFolding::run(Module& m) {
  GraphImpl& g = m.graph;
  bool changed = false;
  const std::vector<int32_t> uses = use_counts(m);
  // A weight's transpose read by one matmul stays a transpose: AlgebraicSimplify turns it into
  // the matmul's transpose flag (cuBLASLt and oneDNN read it transposed), as PyTorch runs a
  // Linear's x @ W^T. Folded, it made a transposed copy of every such weight: compile time
  // (57 ms a copy for BERT-base f16 on the H200), memory, and in a saved dynamic executable,
  // whose source graph keeps the untransposed weights, the weights twice (bench/RESULTS.md,
  // session 32).
  std::vector<bool> matmul_operand(g.values.size(), false);
  for (const Block& b : g.blocks)  // live nodes only (dead ones stay in g.nodes)
    for (int32_t id : b.nodes) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (n.kind == OpKind::MatMul)
        for (size_t i = 0; i < n.inputs.size() && i < 2; ++i) matmul_operand[static_cast<size_t>(n.inputs[i])] = true;
    }
  auto matmul_flag = [&](const Node& n) {
    return n.kind == OpKind::Transpose && n.outputs.size() == 1 && matmul_operand[static_cast<size_t>(n.outputs[0])] &&
           uses[static_cast<size_t>(n.outputs[0])] == 1 && n.control_deps.empty() &&
           swaps_last_two_dims(std::get<AxesDesc>(n.attr).axes);
  };
  for (Block& b : g.blocks) {
    for (int32_t id : b.nodes) {
      Node& n = g.nodes[static_cast<size_t>(id)];
      const OpDef& d = op_def(n.kind);
      // arange is a source with nothing to wait for: folded (when small, below), so what is
      // computed from it alone folds too (an attention mask built from positions).
      const bool arange = n.kind == OpKind::Arange;
      if ((!arange && (d.has(kSource) || n.inputs.empty())) || d.has(kStateful) || d.has(kSideEffects) ||
          d.has(kHasRegions) || n.kind == OpKind::NonZeroIndices || n.kind == OpKind::StopGradient || matmul_flag(n))
        continue;
      // The constants read (a broadcast constant's source with its broadcast), decided on before
      // any is expanded: a broadcast expanded and then refused (the result larger than what it
      // reads) cost a dynamic ResNet-50 f16 copy 2-5 ms per size in its decomposed batch norms,
      // each expanded to its activation's size through the reference interpreter (session 40).
      bool all_const = true, expanded = false;
      int64_t largest_raw = 0;  // elements of the largest constant read, before any expansion
      std::vector<std::pair<const Node*, const Node*>> reads;  // (constant, its broadcast or null)
      for (int32_t v : n.inputs) {
        int32_t p = g.values[static_cast<size_t>(v)].node;
        const Node* src = p < 0 ? nullptr : &g.nodes[static_cast<size_t>(p)];
        // A broadcast constant (the builder broadcasts a binary op's scalar) is a constant to
        // its reader: expanded below, for this evaluation only, when small.
        const Node* bc = src && src->kind == OpKind::BroadcastTo && src->inputs.size() == 1 ? src : nullptr;
        if (bc) {
          const int32_t q = g.values[static_cast<size_t>(bc->inputs[0])].node;
          src = q < 0 ? nullptr : &g.nodes[static_cast<size_t>(q)];
        }
        if (!src || src->kind != OpKind::Constant || src->data.empty()) {
          all_const = false;
          break;
        }
        largest_raw = std::max(largest_raw, src->data.num_elements());
        if (bc) {
          expanded = true;
          const int64_t e = g.type(v).shape.num_elements();
          if (e < 0 || e > kMaxElements) {
            all_const = false;
            break;
          }
        }
        reads.emplace_back(src, bc);
      }
      if (!all_const) continue;
      bool small = true;
      for (int32_t v : n.outputs) {
        int64_t e = g.type(v).shape.num_elements();
        small &= e >= 0 && e <= kMaxElements;
      }
      // Expanding a small constant (broadcast_to, tile, ...) would only bloat the graph.
      int64_t in_elems = 0;
      for (size_t i = 0; i < reads.size(); ++i)
        in_elems += reads[i].second ? g.type(n.inputs[i]).shape.num_elements() : reads[i].first->data.num_elements();
      int64_t out_elems = g.type(n.outputs[0]).shape.num_elements();
      // A weight's cast or transpose replaces the one constant it reads, no larger: folded
      // whatever its size (the constant goes once nothing reads it).
      const bool relayout = (n.kind == OpKind::Cast || n.kind == OpKind::Transpose) && n.inputs.size() == 1 &&
                            uses[static_cast<size_t>(n.inputs[0])] == 1 && out_elems <= kMaxRelayout &&
                            dtype_size(g.type(n.outputs[0]).dtype) <= dtype_size(g.type(n.inputs[0]).dtype);
      // Expanded inputs never make a constant larger than the largest one read (x + 2 over a
      // [1, 1, L, 1] constant folds; a broadcast scalar times a broadcast scalar does not).
      if ((!small && !relayout) || (d.has(kShapeOnly) && out_elems > in_elems) || n.kind == OpKind::BroadcastTo ||
          (expanded && out_elems > largest_raw))
        continue;
      std::vector<TensorData> in;
      for (const auto& [src, bc] : reads) {
        if (!bc) {
          in.push_back(src->data);
          continue;
        }
        try {
          in.push_back(reference_eval(g, *bc, {src->data})[0]);
        } catch (const Error&) {
          break;
        }
      }
      if (in.size() != reads.size()) continue;
      std::vector<TensorData> out;
      const std::string memo_key = relayout ? FoldMemo::step(g, n, in[0]) : std::string();
      TensorData remembered;
      if (relayout && FoldMemo::get().find(in[0], memo_key, remembered)) out.push_back(remembered);
      // A weight-sized fold through the CPU's typed kernels (the reference interpreter converts
      // each element through double: seconds for a model's weights).
      if (relayout && out.empty()) {
        if (!(n.kind == OpKind::Cast ? fast::half_op(n, in, out) : fast::shape_op(g, n, in, out)))
          out.clear();
        else if (out.size() == 1 && !out[0].empty())
          FoldMemo::get().add(in[0], memo_key, out[0]);
      }
      try {
        if (out.empty()) out = reference_eval(g, n, in);
      } catch (const Error&) {
        continue;  // an op that fails on these constants reports its error at run time
      }
      if (n.outputs.size() != 1) continue;  // multi-output folding would need one constant per output
      // The node becomes a constant in place: same output value id, so uses stay valid.
      n.kind = OpKind::Constant;
      n.inputs.clear();
      n.attr = NoDesc{};
      n.data = out[0];
      changed = true;
    }
  }
  return changed;
}

}  // namespace tg::detail
