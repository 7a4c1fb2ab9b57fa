#include "passes/autocast.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "passes/fusion.h"
#include "passes/rewrite.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// Ops computed in half: the matmul and convolution families (forward, conv_transpose, and the
// data and weight gradients autodiff built), two operands and one result; and max pooling and
// its gradient, as PyTorch's autocast runs them in their input's dtype: the maximum of values
// rounded to half is one of them, so the forward is exact on activations stored in half
// (HalfStorage), and the f32 copies around a pooling of half data (4 bytes a value where 2
// suffice, both ways) go.
bool computes_in_half(const GraphImpl& g, const Node& n) {
  Family f = op_def(n.kind).family;
  // Attention (q, k, v and an additive mask; a boolean mask stays boolean), as PyTorch's
  // autocast runs scaled_dot_product_attention: the fused kernels take half operands.
  if (n.kind == OpKind::Attention) {
    if (n.inputs.size() < 3 || n.outputs.size() != 1 || g.type(n.outputs[0]).dtype != DType::f32) return false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const DType t = g.type(n.inputs[i]).dtype;
      if (t != DType::f32 && !(i == 3 && t == DType::boolean)) return false;
    }
    return true;
  }
  const bool pool = n.kind == OpKind::MaxPool2d || n.kind == OpKind::MaxPool2dGrad;
  if (f != Family::matmul && f != Family::conv && f != Family::conv_grad && !pool) return false;
  if (n.inputs.size() != (n.kind == OpKind::MaxPool2d ? 1u : 2u) || n.outputs.size() != 1) return false;
  for (int32_t v : n.inputs)
    if (g.type(v).dtype != DType::f32) return false;
  return g.type(n.outputs[0]).dtype == DType::f32;
}

// Appends transpose(x) with `attr`'s axes, in `block` but listed in no block's nodes yet (as
// add_cast_node: the caller places it).
int32_t add_transpose_node(GraphImpl& g, int32_t x, const Attr& attr, int32_t block) {
  Node n;
  n.kind = OpKind::Transpose;
  n.block = block;
  n.inputs = {x};
  n.attr = attr;
  const InferResult r = g.infer(n);
  if (!r.ok() || r.types.size() != 1) throw Error("[autocast] transpose: " + r.error);
  const int32_t id = static_cast<int32_t>(g.nodes.size());
  n.outputs = {static_cast<int32_t>(g.values.size())};
  g.values.push_back(Value{r.types[0], id, 0, block, {}});
  g.nodes.push_back(std::move(n));
  return id;
}

bool reads(const Node& n, int32_t v) {
  return std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end();
}

struct Rewriter {
  GraphImpl& g;
  DType half;
  std::unordered_map<int32_t, int32_t> half_of;              // f32 value -> its half value
  std::unordered_map<int32_t, std::vector<int32_t>> after;   // node -> new nodes right after it
  std::unordered_map<int32_t, std::vector<int32_t>> before;  // node -> new nodes right before it
  std::vector<std::vector<int32_t>> at_start;                // per block: new nodes first
  std::vector<std::pair<int32_t, int32_t>> backs;            // (rewritten op, its cast back)

  // The half copy of f32 value v: made once, right after v's producer (or first in v's block
  // for a region parameter), so it is visible wherever v is and joins the producer's fused
  // kernel when the producer is elementwise.
  int32_t half_value(int32_t v) {
    auto it = half_of.find(v);
    if (it != half_of.end()) return it->second;
    const int32_t producer = g.values[static_cast<size_t>(v)].node,
                  block = g.values[static_cast<size_t>(v)].block;
    const Node* p = producer >= 0 ? &g.nodes[static_cast<size_t>(producer)] : nullptr;
    int32_t h;
    if (p && p->kind == OpKind::Cast && g.type(p->inputs[0]).dtype == half) {
      h = p->inputs[0];  // v = cast(half value): half -> f32 -> half is exact
    } else if (transposed_constant(p)) {
      // v = transpose(weight), a Linear's W^T: the transpose of the weight's half copy (equal
      // bits). The cast of the weight alone then folds as a weight's cast (one per weight,
      // shared by a dynamic executable's copies: fold_memo.h), and the transpose stays for the
      // matmul to read as its transpose flag; cast(transpose(W)) folded a transposed f32 copy of
      // every weight first (BERT-base f16: 85M elements, ~200 ms a copy on 2 cores).
      const Attr axes = p->attr;  // (copied: adding nodes may move p)
      const int32_t t = add_transpose_node(g, half_value(p->inputs[0]), axes, block);
      after[producer].push_back(t);
      h = g.nodes[static_cast<size_t>(t)].outputs[0];
    } else {
      int32_t c = add_cast_node(g, v, half, block);
      if (producer >= 0)
        after[producer].push_back(c);
      else
        at_start[static_cast<size_t>(block)].push_back(c);
      h = g.nodes[static_cast<size_t>(c)].outputs[0];
    }
    half_of.emplace(v, h);
    return h;
  }

  // p transposes an f32 constant (and has no control dependencies to keep).
  bool transposed_constant(const Node* p) const {
    if (!p || p->kind != OpKind::Transpose || p->inputs.size() != 1 || !p->control_deps.empty()) return false;
    const int32_t q = g.values[static_cast<size_t>(p->inputs[0])].node;
    return q >= 0 && g.nodes[static_cast<size_t>(q)].kind == OpKind::Constant &&
           g.type(p->inputs[0]).dtype == DType::f32;
  }

  // n computes in half; its f32 result keeps its value id, now produced by a cast back
  // (placed by place_backs once every op is rewritten).
  void rewrite(int32_t id) {
    std::vector<int32_t> in;
    for (int32_t v : std::vector<int32_t>(g.nodes[static_cast<size_t>(id)].inputs))
      in.push_back(g.type(v).dtype == DType::f32 ? half_value(v) : v);  // an attention mask may be boolean
    Node& n = g.nodes[static_cast<size_t>(id)];
    const std::vector<int32_t> old_in = n.inputs;
    n.inputs = in;
    InferResult r = g.infer(n);
    if (!r.ok()) {
      n.inputs = old_in;
      throw Error("[autocast] " + std::string(op_name(n.kind)) + " does not type-check in " +
                  dtype_name(half) + ": " + r.error);
    }
    const int32_t y = n.outputs[0], block = n.block;
    const int32_t yh = static_cast<int32_t>(g.values.size());
    g.values.push_back(Value{r.types[0], id, 0, block, {}});
    g.nodes[static_cast<size_t>(id)].outputs[0] = yh;
    backs.emplace_back(id, add_cast_node(g, yh, DType::f32, block, y));
  }

  // Where the cast back of op `id` goes. Right before y's first reader in the block, so it
  // opens that reader's fused kernel (the fuser groups chains of adjacent ops) -- unless the
  // reader already continues a fused chain just before it (e.g. the broadcast of a bias), which
  // the cast would cut: then right after the op. Also right after it when the first use is
  // inside a region, or a cast of y made earlier must follow it.
  void place_back(int32_t id, int32_t cast) {
    const int32_t y = g.nodes[static_cast<size_t>(cast)].outputs[0];
    auto& next = after[id];
    bool early_reader = false;
    for (int32_t c : next) early_reader |= reads(g.nodes[static_cast<size_t>(c)], y);
    const auto& nodes = g.blocks[static_cast<size_t>(g.nodes[static_cast<size_t>(id)].block)].nodes;
    size_t pos = static_cast<size_t>(std::find(nodes.begin(), nodes.end(), id) - nodes.begin()), k = pos + 1;
    for (; !early_reader && k < nodes.size(); ++k) {
      const Node& n = g.nodes[static_cast<size_t>(nodes[k])];
      if (reads(n, y) || !n.regions.empty()) break;
    }
    bool before_reader =
        !early_reader && k < nodes.size() && g.nodes[static_cast<size_t>(nodes[k])].regions.empty();
    for (size_t j = k; before_reader && j-- > pos + 1;) {
      const Node& prev = g.nodes[static_cast<size_t>(nodes[j])];
      if (!fusible_elementwise(g, prev)) break;
      if (reads(g.nodes[static_cast<size_t>(nodes[k])], prev.outputs[0])) before_reader = false;
    }
    if (before_reader)
      before[nodes[k]].push_back(cast);
    else
      next.insert(next.begin(), cast);
  }

  // Lists the nodes placed before `id`, `id`, then those placed after it (recursively).
  void emit(int32_t id, std::vector<int32_t>& out) {
    if (auto it = before.find(id); it != before.end())
      for (int32_t c : it->second) emit(c, out);
    out.push_back(id);
    if (auto it = after.find(id); it != after.end())
      for (int32_t c : it->second) emit(c, out);
  }
};

}  // namespace

bool Autocast::run(Module& m) {
  if (half != DType::bf16 && half != DType::f16)
    throw Error(std::string("[autocast] computes in bf16 or f16, not ") + dtype_name(half));
  GraphImpl& g = m.graph;
  Rewriter rw{g, half, {}, {}, {}, std::vector<std::vector<int32_t>>(g.blocks.size()), {}};
  std::vector<int32_t> todo;
  for (const Block& b : g.blocks)
    for (int32_t id : b.nodes)
      if (computes_in_half(g, g.nodes[static_cast<size_t>(id)])) todo.push_back(id);
  if (todo.empty()) return false;
  for (int32_t id : todo) rw.rewrite(id);
  for (auto [id, cast] : rw.backs) rw.place_back(id, cast);
  for (size_t b = 0; b < g.blocks.size(); ++b) {
    std::vector<int32_t> order;
    for (int32_t c : rw.at_start[b]) rw.emit(c, order);
    for (int32_t id : g.blocks[b].nodes) rw.emit(id, order);
    g.blocks[b].nodes = std::move(order);
  }
  return true;
}

bool apply_precision(Module& m, Precision p) {
  switch (p) {
    case Precision::f32: return false;
    case Precision::tf32: m.graph.allow_tf32 = true; return false;
    case Precision::bf16: return Autocast(DType::bf16).run(m);
    case Precision::f16: return Autocast(DType::f16).run(m);
  }
  throw Error("[compile] unknown precision " + std::to_string(static_cast<int>(p)) +
              " (expected f32, tf32, bf16 or f16)");
}

}  // namespace tg::detail
