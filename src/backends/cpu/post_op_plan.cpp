// Which elementwise chains after f32 convolutions and matmuls the primitive applies itself, as
// oneDNN post-ops (fused_plan.h's CpuPostOps). Matmuls take activations and per-column or
// scalar operands (a linear layer's bias, then GELU: BERT's intermediate layers), also across a
// reshape of the result (after which only activations follow). An inference ResNet's bias add, residual add and ReLU
// then cost no pass over memory of their own: as fused loops they read the convolution's
// result back and write it again, about 6% of ResNet-50's time at batch 1 on two cores.
//
// A chain grows from the convolution's result while each value has exactly one reader, that
// reader is an elementwise op oneDNN can apply (fast::post_op_supported) of the result's
// shape, and its other operand, if any, is in memory before the convolution runs: one tensor
// of the result's shape computed earlier (a residual add, oneDNN's sum post-op), or a scalar
// or per-channel tensor, possibly the source of a broadcast only this op reads (a bias). A
// residual add of two convolutions' results goes to the later one.
#include <algorithm>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/fused_plan.h"
#include "core/env.h"
#include "ops/op_def.h"

namespace tg::detail {
namespace {

constexpr size_t kMaxPostOps = 8;

bool f32_static(const GraphImpl& g, int32_t v) {
  const TensorType& t = g.type(v);
  return t.dtype == DType::f32 && t.shape.is_static();
}

// A convolution oneDNN runs (fast_conv.cpp: f32 data and filters, 2-D, plain layouts) or an
// f32 matmul (fast_matmul.cpp).
bool producer_candidate(const GraphImpl& g, const Node& n) {
  if ((n.kind != OpKind::Conv2d && n.kind != OpKind::MatMul) || n.inputs.size() != 2 || n.outputs.size() != 1 ||
      !n.control_deps.empty())
    return false;
  for (int32_t v : {n.inputs[0], n.inputs[1], n.outputs[0]})
    if (!f32_static(g, v)) return false;
  if (n.kind == OpKind::MatMul) return g.type(n.outputs[0]).shape.rank() >= 2;
  const auto* d = std::get_if<ConvDesc>(&n.attr);
  if (!d || (d->data_layout != Layout::nhwc && d->data_layout != Layout::nchw)) return false;
  return g.type(n.outputs[0]).shape.rank() == 4;
}

// A scalar, or one value per channel (axis `channel` of the result), right-aligned: the
// broadcast operands oneDNN's jit convolutions apply.
bool per_channel(const Shape& src, const Shape& to, int64_t channel) {
  if (src.rank() > to.rank()) return false;
  const int64_t off = to.rank() - src.rank();
  for (int64_t i = 0; i < src.rank(); ++i) {
    const int64_t d = src.dims()[static_cast<size_t>(i)];
    if (d != 1 && (off + i != channel || d != to.dims()[static_cast<size_t>(channel)])) return false;
  }
  return true;
}

}  // namespace

std::vector<std::pair<int32_t, CpuPostOps>> plan_post_ops(const GraphImpl& g, const std::vector<int32_t>& pos,
                                                              const std::vector<std::vector<int32_t>>& users,
                                                              const std::vector<char>& external,
                                                              const std::vector<char>& elementwise) {
  std::vector<std::pair<int32_t, CpuPostOps>> out;
  if (env_flag("TGRAPH_NO_CONV_POST_OPS")) return out;
  std::vector<int32_t> convs;
  for (size_t id = 0; id < g.nodes.size(); ++id)
    if (pos[id] >= 0 && producer_candidate(g, g.nodes[id])) convs.push_back(static_cast<int32_t>(id));
  std::sort(convs.begin(), convs.end(), [&](int32_t a, int32_t b) {
    return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
  });
  // Where each node's result is first in memory: its position; its convolution's for the last
  // op of a chain; never (-1) for the other nodes a chain absorbs.
  std::vector<int32_t> ready = pos;
  std::vector<char> taken(g.nodes.size(), 0);
  auto in_memory_before = [&](int32_t v, int32_t at) {
    const int32_t p = g.values[static_cast<size_t>(v)].node;
    if (p < 0) return true;
    const int32_t r = ready[static_cast<size_t>(p)];
    return r >= 0 && r < at;
  };
  auto sole_reader = [&](int32_t v) {
    const auto& us = users[static_cast<size_t>(v)];
    return !external[static_cast<size_t>(v)] && us.size() == 1 ? us[0] : -1;
  };

  for (int32_t c : convs) {
    const Node& conv = g.nodes[static_cast<size_t>(c)];
    const int32_t at = pos[static_cast<size_t>(c)];
    const bool mm = conv.kind == OpKind::MatMul;
    Shape ys = g.type(conv.outputs[0]).shape;
    // The axis a per-channel operand runs along: a convolution's channels, a matmul's columns.
    const int64_t channel = mm ? ys.rank() - 1 : std::get<ConvDesc>(conv.attr).data_layout == Layout::nhwc ? 3 : 1;
    bool reshaped = false;  // past a reshape only activations follow (the channel axis moved)
    CpuPostOps post;
    int32_t v = conv.outputs[0];
    while (post.ops.size() < kMaxPostOps) {
      const int32_t u = sole_reader(v);
      if (u < 0 || taken[static_cast<size_t>(u)] || pos[static_cast<size_t>(u)] < 0) break;
      const Node& un = g.nodes[static_cast<size_t>(u)];
      if (un.kind == OpKind::Reshape) {  // the same bytes under another shape: read through
        if (un.inputs.size() != 1 || un.outputs.size() != 1 || !un.control_deps.empty() ||
            !f32_static(g, un.outputs[0]))
          break;
        post.absorbed.push_back(u);
        v = un.outputs[0];
        ys = g.type(v).shape;
        reshaped = true;
        continue;
      }
      if (!elementwise[static_cast<size_t>(u)]) break;
      if (!fast::post_op_supported(un.kind) || un.outputs.size() != 1) break;
      const int32_t r = un.outputs[0];
      if (!f32_static(g, r) || !(g.type(r).shape == ys)) break;
      int32_t operand = -1, broadcast = -1, via = -1;
      if (un.inputs.size() == 2) {
        if (un.inputs[0] == un.inputs[1] || reshaped) break;
        const bool first = un.inputs[0] == v;
        if (!first && (un.kind == OpKind::Sub || un.kind == OpKind::Div)) break;
        int32_t w = first ? un.inputs[1] : un.inputs[0];
        const int32_t wp = g.values[static_cast<size_t>(w)].node;
        int32_t through = -1;
        if (wp >= 0 && g.nodes[static_cast<size_t>(wp)].kind == OpKind::BroadcastTo) {
          through = w;  // read through its source; the broadcast goes when nothing else reads it
          if (sole_reader(w) == u && elementwise[static_cast<size_t>(wp)] && !taken[static_cast<size_t>(wp)])
            broadcast = wp;
          w = g.nodes[static_cast<size_t>(wp)].inputs[0];
        }
        if (!f32_static(g, w) || !in_memory_before(w, at)) break;
        const Shape& ws = g.type(w).shape;
        if (ws == ys && through < 0) {  // a residual: oneDNN's sum, one per convolution
          if (un.kind != OpKind::Add || post.sum >= 0 || mm) break;
          post.sum = w;
        } else if (!per_channel(ws, ys, channel)) {
          break;
        }
        operand = w;
        via = through;
      } else if (un.inputs.size() != 1) {
        break;
      }
      post.ops.push_back(u);
      post.operands.push_back(operand);
      post.through.push_back(via);
      if (broadcast >= 0) post.absorbed.push_back(broadcast);
      post.absorbed.push_back(u);
      v = r;
    }
    // Reshapes after the last op stay out (nothing gained, and they are plain views anyway).
    while (!post.absorbed.empty() && g.nodes[static_cast<size_t>(post.absorbed.back())].kind == OpKind::Reshape) {
      v = g.nodes[static_cast<size_t>(post.absorbed.back())].inputs[0];
      post.absorbed.pop_back();
    }
    if (post.ops.empty()) continue;
    for (int32_t id : post.absorbed) {
      taken[static_cast<size_t>(id)] = 1;
      ready[static_cast<size_t>(id)] = -1;
    }
    ready[static_cast<size_t>(post.ops.back())] = at;
    std::sort(post.absorbed.begin(), post.absorbed.end(), [&](int32_t a, int32_t b) {
      return pos[static_cast<size_t>(a)] < pos[static_cast<size_t>(b)];
    });
    post.end = v;
    out.emplace_back(c, std::move(post));
  }
  return out;
}

}  // namespace tg::detail
