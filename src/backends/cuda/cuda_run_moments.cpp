// Run's paired moments: batch, layer and group norm decompose into reduce_mean and
// reduce_variance of the same tensor over the same axes (passes/decompose.cpp). Run apart, each
// reads the whole tensor; the variance kernel already sums the elements, so the first of the
// pair to run computes both (cuda_reduce with two outputs) and the other finds its value there.
#include <map>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/cuda_run.h"
#include "core/env.h"

namespace tg::detail::cuda_run {

// Pairs are made within one block (a branch's value must not come from the other branch's
// body), between plan steps of their own (not nodes a fused kernel absorbed), once per
// executable. TGRAPH_NO_MOMENTS=1 leaves every reduction to itself.
int32_t Run::moment_partner(int32_t id) {
  if (!st.moments_paired) {
    st.moments_paired = true;
    if (!env_flag("TGRAPH_NO_MOMENTS"))
      for (int32_t b = 0; b < static_cast<int32_t>(g.blocks.size()); ++b) {
        using Key = std::tuple<int32_t, std::vector<int64_t>, bool>;  // input, axes, keep_dims
        std::map<Key, int32_t> means, variances;
        for (const Step& s : plan(b).steps) {
          if (s.fused() || s.stitch) continue;
          const Node& n = g.nodes[static_cast<size_t>(s.node)];
          if (n.kind != OpKind::ReduceMean && n.kind != OpKind::ReduceVariance) continue;
          const auto& d = std::get<ReduceDesc>(n.attr);
          Key key{n.inputs[0], d.axes, d.keep_dims};
          auto& mine = n.kind == OpKind::ReduceMean ? means : variances;
          auto& other = n.kind == OpKind::ReduceMean ? variances : means;
          auto it = other.find(key);
          if (it != other.end()) {
            st.moment_partners[s.node] = it->second;
            st.moment_partners[it->second] = s.node;
            other.erase(it);
          } else {
            mine.emplace(key, s.node);
          }
        }
      }
  }
  auto it = st.moment_partners.find(id);
  return it == st.moment_partners.end() ? -1 : it->second;
}

bool Run::paired_moments(const Node& n) {
  if (n.kind != OpKind::ReduceMean && n.kind != OpKind::ReduceVariance) return false;
  const int32_t id = static_cast<int32_t>(&n - g.nodes.data());
  const int32_t partner = moment_partner(id);
  if (partner < 0) return false;
  if (moments_done.erase(id)) return true;  // its partner computed it, earlier in this block
  const Node& p = g.nodes[static_cast<size_t>(partner)];
  const Node& var = n.kind == OpKind::ReduceVariance ? n : p;
  const Node& mean = n.kind == OpKind::ReduceMean ? n : p;
  const DevTensor& x = in(n.inputs[0]);
  const TensorType vt = g.output_types_for(var, {x.type})[0], mt = g.output_types_for(mean, {x.type})[0];
  if (!(vt == mt)) return false;
  DevTensor v = alloc(vt), m = alloc(mt);
  OpWorkspaceScope workspace([this](size_t bytes) { return buffer(bytes); });  // capture-safe temporaries
  if (!cuda_reduce(g, var, {DevArg{x.buf.get(), x.type}}, {DevOut{v.buf.get(), vt}, DevOut{m.buf.get(), mt}},
                   stream, ctx.index()))
    return false;
  slots[static_cast<size_t>(var.outputs[0])] = std::move(v);
  slots[static_cast<size_t>(mean.outputs[0])] = std::move(m);
  moments_done.insert(partner);
  return true;
}

}  // namespace tg::detail::cuda_run
