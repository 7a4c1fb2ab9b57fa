// Builders of the collectives: each records the world size and rank of the job it is built in
// (tg::distributed), which the shape rules and the gradients read.
#include "ops/builder.h"
#include "tgraph/distributed.h"

namespace tg {
using namespace detail;

namespace {
CollectiveDesc here(CollectiveReduce reduce = CollectiveReduce::sum, int64_t root = 0) {
  return CollectiveDesc{reduce, root, distributed::world_size(), distributed::rank()};
}
}  // namespace

Tensor Graph::all_reduce(Tensor x, CollectiveReduce reduce) { return make(*this, OpKind::AllReduce, {x}, here(reduce)); }
Tensor Graph::all_gather(Tensor x) { return make(*this, OpKind::AllGather, {x}, here()); }
Tensor Graph::reduce_scatter(Tensor x, CollectiveReduce reduce) {
  return make(*this, OpKind::ReduceScatter, {x}, here(reduce));
}
Tensor Graph::broadcast(Tensor x, int64_t root) { return make(*this, OpKind::Broadcast, {x}, here(CollectiveReduce::sum, root)); }

}  // namespace tg
