// Which scaled_dot_product_attention nodes the CUDA backend runs whole (cudnn_attention.cpp),
// and the rewrite that makes each fit cuDNN's fused kernel: the two halves of
// PipelineOptions::keep_composite / lower_kept. Decomposition asks cuda_keeps_attention before
// precision has set the dtypes (the shapes are all it looks at); lower_cuda_attention runs after
// it and either keeps a node (f16 / bf16, cuDNN builds a plan for it) or decomposes it as before.
//
// A kept node's mask becomes what cuDNN's bias takes: additive, q's dtype, rank 4 with dims 1
// or full (a boolean mask: 0 where true, -inf where false). tgraph's attention gives 0 for a
// query whose keys are all masked (docs/ops-semantics.md), where the kernel's softmax over
// all -inf scores is not a number: a select on "this row's mask is -inf throughout" (computed
// on the mask, a tensor per query at most) restores it.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "backends/cuda/attention_lowering.h"
#include "backends/cuda/attention_plans.h"
#include "backends/cuda/cuda_ops.h"
#include "core/env.h"
#include "ops/builder.h"
#include "passes/algebraic_simplify.h"
#include "passes/constant_folding.h"
#include "passes/decompose.h"
#include "passes/match_attention.h"
#include "passes/rewrite.h"
#include "runtime/size_classes.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

bool fused_attention_off() { return env_flag("TGRAPH_NO_FUSED_ATTENTION"); }

// The mask's dims as the kernel's bias [b, h, Lq, Lk] sees them (numpy broadcasting against the
// scores [..., Lq, Lk], q of rank 3 taken as one batch of heads); false for a mask of higher
// rank than the scores or dims that do not broadcast.
bool bias_dims(const Shape& q, const Shape& k, const Shape& m, std::vector<int64_t>& out) {
  if (!m.ranked() || !m.is_static() || m.rank() > q.rank()) return false;
  std::vector<int64_t> full(q.dims().begin(), q.dims().end() - 1);
  full.push_back(k.dim(-2));  // [..., Lq, Lk]
  std::vector<int64_t> md(full.size(), 1);
  const size_t off = full.size() - static_cast<size_t>(m.rank());
  for (size_t i = 0; i < static_cast<size_t>(m.rank()); ++i) {
    const int64_t d = m[static_cast<int64_t>(i)];
    if (d != 1 && d != full[off + i]) return false;
    md[off + i] = d;
  }
  if (md.size() == 3) md.insert(md.begin(), 1);
  out = md;
  return true;
}

AttentionCall call_of(const GraphImpl& g, const Node& n, DType dtype) {
  return attention_call(std::get<AttentionDesc>(n.attr), dtype, g.type(n.inputs[0]).shape, g.type(n.inputs[1]).shape,
                        g.type(n.inputs[2]).shape);
}

// The bias dims the kernel gets for node n (the mask's, keys always full), or false when the
// mask cannot be one.
bool kernel_bias(const GraphImpl& g, const Node& n, std::vector<int64_t>& dims) {
  if (n.inputs.size() < 4) return true;
  const Shape &q = g.type(n.inputs[0]).shape, &k = g.type(n.inputs[1]).shape;
  if (!bias_dims(q, k, g.type(n.inputs[3]).shape, dims)) return false;
  dims[3] = k.dim(-2);  // a mask broadcast over the keys is materialised along them
  return true;
}

// True when value v is known now to let every query see every key: a constant (through
// broadcasts and views) that is true throughout (a boolean mask) or 0 throughout (additive).
bool everything_visible(const GraphImpl& g, int32_t v) {
  const std::optional<double> s = splat(g, v, true);
  return s && *s == (g.type(v).dtype == DType::boolean ? 1.0 : 0.0);
}

// Drops the masks that hide nothing. Hugging Face's models build an all-true mask when the
// caller passes no attention_mask (BERT-base: ge(arange(L), 0) broadcast to [1, 1, L, L]); as
// a bias it cost a runtime-compiled cuDNN engine (a second's NVRTC compile in the first call on
// the H200), a bias read per score and the fully-masked-row select. Folds the graph's constants
// first (the masks come from aranges and sizes; the weights' casts that autocast made fold here
// instead of in the rounds after).
bool drop_visible_masks(Module& m) {
  GraphImpl& g = m.graph;
  auto masked = [&](const Node& n) { return n.kind == OpKind::Attention && n.inputs.size() > 3; };
  bool any = false;
  for (const Block& b : g.blocks)
    for (int32_t id : b.nodes) any = any || masked(g.nodes[static_cast<size_t>(id)]);
  if (!any) return false;
  bool changed = ConstantFolding().run(m);
  for (const Block& b : g.blocks)
    for (int32_t id : b.nodes) {
      Node& n = g.nodes[static_cast<size_t>(id)];
      if (masked(n) && everything_visible(g, n.inputs[3])) {
        n.inputs.pop_back();
        changed = true;
      }
    }
  return changed;
}

}  // namespace

bool cuda_keeps_attention(const GraphImpl& g, const Node& n) {
  if (n.kind != OpKind::Attention || n.inputs.size() < 3 || !cudnn_attention_available() || fused_attention_off())
    return false;
  for (int32_t v : n.inputs)
    if (!g.type(v).shape.ranked() || !g.type(v).shape.is_static()) return false;
  // Causal with a mask: a row can lose every key to the two together; left to the decomposition.
  if (n.inputs.size() > 3 && std::get<AttentionDesc>(n.attr).causal) return false;
  AttentionCall c = call_of(g, n, DType::f16);  // the shapes, as a half call would have them
  std::vector<int64_t> bias;
  if (!kernel_bias(g, n, bias)) return false;
  if (n.inputs.size() > 3) c.mask = Shape(bias), c.masked = true;
  return attention_geometry_taken(c);
}

bool match_cuda_attention(Module& m) {
  return cudnn_attention_available() && !fused_attention_off() && MatchAttention().run(m);
}

bool lower_cuda_attention(Module& m, int device) {
  GraphImpl& G = m.graph;
  const bool dropped = !fused_attention_off() && drop_visible_masks(m);
  std::vector<int32_t> kept;  // the output values of the attention nodes cuDNN runs
  bool changed = rewrite_nodes(m, [&](Graph& g, const Node& n, const std::vector<Tensor>& in) {
    if (n.kind != OpKind::Attention) return std::vector<Tensor>{};
    const DType dt = G.type(n.inputs[0]).dtype;
    bool ok = (dt == DType::f16 || dt == DType::bf16) && G.type(n.inputs[1]).dtype == dt &&
              G.type(n.inputs[2]).dtype == dt && cuda_keeps_attention(G, n);
    std::vector<int64_t> bias;
    AttentionCall c = call_of(G, n, dt);
    if (ok && n.inputs.size() > 3) {
      ok = kernel_bias(G, n, bias);
      c.mask = Shape(bias), c.masked = true;
      // A bias shared by every query ([b, h, 1, Lk], a padding mask) where cuDNN wants one per
      // query (asked now, the plan built in turn: the form decides the graph).
      // Not when the queries are one (the full form is the same) or tgraph's kernel runs every call.
      if (ok && bias[2] == 1 && c.q.dim(-2) > 1 && !env_flag("TGRAPH_OWN_ATTENTION")) {
        // A size compiled ahead (runtime/size_classes.h) does not ask (a plan built on the
        // background thread for a size nobody may run): it is given up unless the answer is known.
        if (compiling_ahead() && !attention_plan_made(device, c))
          throw AheadGivenUp("[compile] a size compiled ahead needs cuDNN's answer for attention " + c.q.str());
        if (!cudnn_attention_supported(device, c)) {
          bias[2] = c.q.dim(-2);
          c.mask = Shape(bias);
        }
      }
    }
    std::string why;
    if (ok && !cudnn_attention_kept(device, c, &why)) {
      ok = false;
      if (env_flag("TGRAPH_LOG_FALLBACK"))
        std::fprintf(stderr, "[tgraph] attention q %s k %s v %s decomposed: %s\n", c.q.str().c_str(), c.k.str().c_str(),
                     c.v.str().c_str(), why.c_str());
    }
    if (!ok) return std::vector<Tensor>{};  // decomposed below
    if (n.inputs.size() < 4) {
      kept.push_back(n.outputs[0]);
      return std::vector<Tensor>{};  // runs as it is
    }
    Tensor mask = in[3];
    const double ninf = -std::numeric_limits<double>::infinity();
    if (mask.dtype() == DType::boolean)
      mask = g.select(mask, g.scalar(0.0, dt), g.scalar(ninf, dt));
    else if (mask.dtype() != dt)
      mask = g.cast(mask, dt);
    std::vector<int64_t> given(bias.size(), 1);  // the mask's dims at rank 4
    const Shape& ms = mask.shape();
    for (int64_t i = 0; i < ms.rank(); ++i) given[static_cast<size_t>(4 - ms.rank() + i)] = ms[i];
    if (given.size() != static_cast<size_t>(ms.rank())) mask = g.reshape(mask, given);
    if (given != bias) mask = g.broadcast_to(mask, bias);
    Tensor y = g.scaled_dot_product_attention(in[0], in[1], in[2], mask, std::get<AttentionDesc>(n.attr));
    kept.push_back(y.id());
    // A query whose every key is masked gives 0.
    Tensor none = g.equal(g.reduce_max(mask, {-1}, true), g.scalar(ninf, dt));
    if (y.rank() == 3) none = g.reshape(none, {bias[1], bias[2], 1});
    return std::vector<Tensor>{g.select(none, g.scalar(0.0, dt), y)};
  });
  // The rest of the attention nodes is decomposed now, as it would have been without the fused
  // kernel (other composites still here were kept by the backend for kernels of their own).
  DecomposeComposites rest;
  rest.keep = [&kept](const GraphImpl&, const Node& n) {
    return n.kind != OpKind::Attention || std::find(kept.begin(), kept.end(), n.outputs[0]) != kept.end();
  };
  changed |= rest.run(m);
  return changed || dropped;
}

}  // namespace tg::detail
