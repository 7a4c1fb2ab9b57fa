#pragma once
// Data-parallel training across processes (docs/distributed.md): which rank this process is, the
// communicator the ranks share, and collectives on host tensors. The graph ops all_reduce,
// all_gather, reduce_scatter and broadcast (Graph) run through the same communicator.
//
// The engines: NCCL between GPUs (the graph collectives of a CUDA executable run on its stream,
// inside the captured CUDA graph), Gloo between CPU processes (TCP; one host or several). Ranks
// meet through a rendezvous folder they all see (Gloo's FileStore, NCCL's id), or through
// NCCL_COMM_ID (NCCL's own bootstrap).
#include <cstdint>
#include <string>
#include <vector>

#include "tgraph/descriptors.h"
#include "tgraph/executable.h"
#include "tgraph/graph.h"
#include "tgraph/tensor_data.h"

namespace tg::distributed {

/// How to join the job. Every field left at its default is read from the environment, as
/// `torchrun` (or `python -m tgraph.distributed.launch`, or `mpirun`) sets it.
struct Options {
  int rank = -1;          ///< -1: RANK, else OMPI_COMM_WORLD_RANK, else PMI_RANK, else 0
  int world_size = -1;    ///< -1: WORLD_SIZE, else OMPI_COMM_WORLD_SIZE, else PMI_SIZE, else 1
  std::string store;      ///< rendezvous folder; "": TGRAPH_DIST_STORE, else /tmp/tgraph-dist-<MASTER_ADDR>-<MASTER_PORT>
  std::string run_id;     ///< a name unique to this run (keys in the folder); "": TGRAPH_DIST_RUN_ID, TORCHELASTIC_RUN_ID, Open MPI's job id, "tgraph"
  std::string host;       ///< the address the other ranks reach this one at; "": TGRAPH_DIST_HOST, else this host's name (127.0.0.1 when MASTER_ADDR is local or unset)
  double timeout_s = 0;   ///< how long a collective waits for its peers; 0: TGRAPH_DIST_TIMEOUT, else 300
  std::string backend;    ///< "nccl", "gloo" or "auto"; "": TGRAPH_DIST_BACKEND, else auto (nccl when each rank of this host has a GPU and NCCL loads, else gloo)
  int device = -1;        ///< the CUDA device of the nccl backend; -1: local_rank()
};

/// Joins the job (once per process; a world of 1 needs no peers and no folder). Throws
/// tg::Error naming what is missing or which peer did not come.
void init(const Options& options = {});
/// Whether init() ran (and shutdown() did not).
bool initialized();
/// This process's rank (0 until init()).
int rank();
/// The number of ranks (1 until init()).
int world_size();
/// This process's rank on its host: LOCAL_RANK, else OMPI_COMM_WORLD_LOCAL_RANK, else rank().
int local_rank();
/// The engine the job runs: "nccl", "gloo", or "none" (a world of one without NCCL: copies).
std::string backend();
/// Leaves the job; collectives then fail until init() again.
void shutdown();

/// Waits until every rank has called it.
void barrier();
/// Every rank's `t` combined element by element, written back into `t` (same type on all ranks).
void all_reduce(TensorData& t, CollectiveReduce op = CollectiveReduce::sum);
/// The ranks' tensors concatenated along axis 0, in rank order (same type on all ranks).
TensorData all_gather(const TensorData& t);
/// The ranks' tensors combined, then split along axis 0 into world_size() equal parts: this
/// rank's part. Axis 0 must be divisible by the world size.
TensorData reduce_scatter(const TensorData& t, CollectiveReduce op = CollectiveReduce::sum);
/// Rank `root`'s `t` written into every rank's `t`.
void broadcast(TensorData& t, int root = 0);

/// Each gradient averaged over the ranks, built into the step's graph: the gradients (invalid
/// ones kept) are flattened into buckets of about `bucket_bytes`, filled from the last gradient
/// backwards (the backward pass produces the last layers' first, so a bucket's all_reduce can
/// start while the rest of the backward runs), one all_reduce (mean) per bucket, split back.
/// Gradients of a dynamic shape, or of another dtype than their bucket, get one each.
std::vector<Tensor> average_gradients(Graph& g, const std::vector<Tensor>& grads, size_t bucket_bytes = 25u << 20);

/// Every variable of `exe` (its optimizer's state included) set to rank `root`'s value, in name
/// order: the ranks start from the same weights whatever each drew.
void broadcast_variables(const Executable& exe, int root = 0);

/// The sample indices this rank takes from a dataset of `n` in one epoch, as PyTorch's
/// DistributedSampler: the same permutation of 0..n-1 on every rank (seeded by seed and epoch;
/// none when shuffle is false), padded by repeating its start to a multiple of the world size
/// (or cut to one when drop_last), and every world_size()-th index from rank().
std::vector<int64_t> shard(int64_t n, uint64_t seed = 0, int64_t epoch = 0, bool shuffle = true,
                           bool drop_last = false);

}  // namespace tg::distributed
