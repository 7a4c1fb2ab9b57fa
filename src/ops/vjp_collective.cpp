// Gradient rules of the collectives, for data-parallel (SPMD) programs: every rank runs the same
// graph and the loss is the sum of the ranks' losses. Each rule is another collective, built with
// the forward op's world and rank, so every rank runs the same collectives in its backward pass.
#include "ops/builder.h"
#include "ops/vjp.h"

namespace tg::detail {
namespace {

using V = std::vector<Tensor>;

Tensor collective(VjpContext& c, OpKind k, Tensor x, CollectiveReduce reduce) {
  CollectiveDesc d = c.attr<CollectiveDesc>();
  d.reduce = reduce;
  return make(c.g, k, {x}, d);
}

// Where the forward picked x's element (max / min): ties share the gradient, as for reduce_max.
Tensor picked(VjpContext& c, Tensor x, Tensor y) { return c.g.cast(c.g.equal(x, y), x.dtype()); }

// y_r = combine_s x_s: each x_s feeds every rank's y, so its gradient is the ranks' dy summed
// (averaged for mean), masked to the elements it won for max / min.
V all_reduce_vjp(VjpContext& c) {
  const CollectiveReduce r = c.attr<CollectiveDesc>().reduce;
  const bool mean = r == CollectiveReduce::mean;
  Tensor dx = collective(c, OpKind::AllReduce, c.dout[0], mean ? CollectiveReduce::mean : CollectiveReduce::sum);
  if (r == CollectiveReduce::max || r == CollectiveReduce::min) dx = c.g.mul(dx, picked(c, c.in[0], c.out[0]));
  return {dx};
}
// y = concat_s x_s on every rank: x_s's gradient is the sum over ranks of dy's part s.
V all_gather_vjp(VjpContext& c) { return {collective(c, OpKind::ReduceScatter, c.dout[0], CollectiveReduce::sum)}; }
// y_r = combine_s x_s[part r]: x_s[part r] feeds y_r only, so dx_s = concat_r dy_r.
V reduce_scatter_vjp(VjpContext& c) {
  const auto& d = c.attr<CollectiveDesc>();
  Tensor dx = collective(c, OpKind::AllGather, c.dout[0], CollectiveReduce::sum);
  if (d.reduce == CollectiveReduce::mean) dx = c.g.div(dx, c.g.scalar(static_cast<double>(d.world), dx.dtype()));
  if (d.reduce == CollectiveReduce::max || d.reduce == CollectiveReduce::min)
    dx = c.g.mul(dx, picked(c, c.in[0], collective(c, OpKind::AllGather, c.out[0], CollectiveReduce::sum)));
  return {dx};
}
// y_r = x_root: the root's gradient is every rank's dy summed, the others' zero. Every rank joins
// the sum (a collective must be run by all), and the others multiply it by 0.
V broadcast_vjp(VjpContext& c) {
  const auto& d = c.attr<CollectiveDesc>();
  Tensor sum = collective(c, OpKind::AllReduce, c.dout[0], CollectiveReduce::sum);
  return {c.g.mul(sum, c.g.scalar(d.rank == d.root ? 1.0 : 0.0, sum.dtype()))};
}

}  // namespace

void register_collective_vjps(VjpTable& t) {
  t[static_cast<size_t>(OpKind::AllReduce)] = all_reduce_vjp;
  t[static_cast<size_t>(OpKind::AllGather)] = all_gather_vjp;
  t[static_cast<size_t>(OpKind::ReduceScatter)] = reduce_scatter_vjp;
  t[static_cast<size_t>(OpKind::Broadcast)] = broadcast_vjp;
}

}  // namespace tg::detail
