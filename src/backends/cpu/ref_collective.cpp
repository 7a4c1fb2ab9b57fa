// The collectives in the reference (and so on the CPU backend, and on the host for backends
// without their own): the process's communicator (tg::distributed) on a copy of the operand.
// A graph built for a world of n runs only where the job has n ranks.
#include "backends/cpu/ref_util.h"
#include "tgraph/distributed.h"

namespace tg::detail::ref {

std::vector<TensorData> eval_collective(const Ctx& c) {
  const auto& d = c.attr<CollectiveDesc>();
  if (d.world != distributed::world_size() || d.rank != distributed::rank())
    c.fail("built as rank " + std::to_string(d.rank) + " of " + std::to_string(d.world) + ", run as rank " +
           std::to_string(distributed::rank()) + " of " + std::to_string(distributed::world_size()) +
           " (build the graph after tg::distributed::init)");
  switch (c.kind()) {
    case OpKind::AllReduce: {
      TensorData t = c.in[0].clone();
      distributed::all_reduce(t, d.reduce);
      return {t};
    }
    case OpKind::AllGather: return {distributed::all_gather(c.in[0])};
    case OpKind::ReduceScatter: return {distributed::reduce_scatter(c.in[0], d.reduce)};
    case OpKind::Broadcast: {
      TensorData t = c.in[0].clone();
      distributed::broadcast(t, static_cast<int>(d.root));
      return {t};
    }
    default: c.fail("is not a collective");
  }
}

}  // namespace tg::detail::ref
