// tgraph._tgraph.distributed: the process's place in a data-parallel job (its engine: NCCL or
// Gloo) and host collectives on numpy arrays (include/tgraph/distributed.h);
// python/tgraph/distributed.py re-exports it.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "py_args.h"
#include "py_tensor.h"
#include "tgraph/distributed.h"

namespace tgpy {
using namespace nb::literals;
namespace dist = tg::distributed;

void bind_distributed(nb::module_& m) {
  nb::module_ d = m.def_submodule("distributed", "data-parallel jobs: ranks, rendezvous, collectives");
  d.def("init", [](int rank, int world_size, const std::string& store, const std::string& run_id,
                   const std::string& host, double timeout_s, const std::string& backend, int device) {
    nb::gil_scoped_release release;  // waits for the other ranks
    dist::init(dist::Options{rank, world_size, store, run_id, host, timeout_s, backend, device});
  }, "rank"_a = -1, "world_size"_a = -1, "store"_a = "", "run_id"_a = "", "host"_a = "", "timeout_s"_a = 0.0,
     "backend"_a = "", "device"_a = -1);
  d.def("backend", &dist::backend, "the engine: 'nccl', 'gloo', or 'none' (one rank, collectives are copies)");
  d.def("initialized", &dist::initialized);
  d.def("rank", &dist::rank);
  d.def("world_size", &dist::world_size);
  d.def("local_rank", &dist::local_rank);
  d.def("shutdown", &dist::shutdown);
  d.def("barrier", [] {
    nb::gil_scoped_release release;
    dist::barrier();
  });
  d.def("all_reduce", [](nb::handle a, nb::handle reduce) {
    tg::TensorData t = from_array(a).clone();
    const auto op = enum_from_py<tg::CollectiveReduce>(reduce);
    {
      nb::gil_scoped_release release;
      dist::all_reduce(t, op);
    }
    return to_numpy(t);
  }, "x"_a, "reduce"_a = "sum");
  d.def("all_gather", [](nb::handle a) {
    tg::TensorData t = from_array(a), out;
    {
      nb::gil_scoped_release release;
      out = dist::all_gather(t);
    }
    return to_numpy(out);
  }, "x"_a);
  d.def("broadcast", [](nb::handle a, int root) {
    tg::TensorData t = from_array(a).clone();
    {
      nb::gil_scoped_release release;
      dist::broadcast(t, root);
    }
    return to_numpy(t);
  }, "x"_a, "root"_a = 0);
  d.def("shard", &dist::shard, "n"_a, "seed"_a = 0, "epoch"_a = 0, "shuffle"_a = true, "drop_last"_a = false);
}

}  // namespace tgpy
