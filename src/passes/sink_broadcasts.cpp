#include "passes/sink_broadcasts.h"

#include "ops/builder.h"
#include "ops/op_def.h"
#include "passes/rewrite.h"

namespace tg::detail {
namespace {

std::vector<Tensor> rewrite(Graph& g, const Node& n, const std::vector<Tensor>& in) {
  const GraphImpl& G = g.impl();
  const OpDef& def = op_def(n.kind);
  if (!def.has(kElementwise) || def.has(kStateful) || n.outputs.size() != 1 || in.empty()) return {};
  const Shape out = G.type(n.outputs[0]).shape;
  if (!out.is_static() || out.rank() == 0) return {};
  const size_t r = static_cast<size_t>(out.rank());
  // Each operand's source, padded with leading 1s to the result's rank.
  std::vector<Tensor> src;
  std::vector<int64_t> common(r, 1);
  bool any_broadcast = false;
  for (const Tensor& t : in) {
    Tensor s = t;
    if (t.shape().rank() != 0) {
      const Node* p = G.producer(t.id());
      if (!p || p->kind != OpKind::BroadcastTo || !G.type(p->inputs[0]).shape.is_static()) return {};
      s = Tensor(&g.impl(), p->inputs[0]);
      any_broadcast = true;
    }
    const Shape& ss = s.shape();
    if (static_cast<size_t>(ss.rank()) > r) return {};
    std::vector<int64_t> padded(r - static_cast<size_t>(ss.rank()), 1);
    for (int64_t i = 0; i < ss.rank(); ++i) padded.push_back(ss[i]);
    for (size_t i = 0; i < r; ++i)
      if (padded[i] != 1) {
        if (common[i] != 1 && common[i] != padded[i]) return {};
        common[i] = padded[i];
      }
    src.push_back(static_cast<size_t>(ss.rank()) == r ? s : g.reshape(s, padded));
  }
  int64_t small = 1;
  for (int64_t d : common) small *= d;
  if (!any_broadcast || small >= out.num_elements()) return {};
  for (Tensor& s : src)
    if (!(s.shape() == Shape(common))) s = g.broadcast_to(s, common);
  return {g.broadcast_to(make(g, n.kind, src, n.attr), out.dims())};
}

}  // namespace

bool SinkBroadcasts::run(Module& m) { return rewrite_nodes(m, {0}, rewrite); }

}  // namespace tg::detail
