#pragma once
// The engine under tg::distributed (distributed.h): what a collective library does for it.
// One implementation per library: Gloo on the CPU (gloo_backend.cpp); NCCL between GPUs
// (nccl_engine.cpp), which also serves host tensors through device copies.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tgraph/descriptors.h"
#include "tgraph/dtype.h"

namespace tg::detail {

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  /// Combines `count` elements in place across the ranks (sum, max or min; mean is the caller's).
  virtual void all_reduce(void* data, size_t count, DType dtype, CollectiveReduce op) = 0;
  /// Rank r's `bytes` land at out + r * bytes on every rank.
  virtual void all_gather(const void* in, void* out, size_t bytes) = 0;
  /// Rank `root`'s `bytes` written over every rank's.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

/// Where the ranks meet and how long they wait for each other.
struct Rendezvous {
  int rank = 0;
  int world = 1;
  std::string store;   // a folder every rank sees
  std::string run_id;  // the keys' prefix in it
  std::string host;    // this rank's address for its peers
  double timeout_s = 300;
};

/// Gloo over TCP; throws tg::Error when Gloo is not built or a peer does not come. Gloo lives in
/// a module of its own (libtgraph_gloo.so, gloo_backend.cpp) loaded on first use with its own
/// symbols first (RTLD_DEEPBIND): PyTorch carries another Gloo whose exported symbols would
/// otherwise stand in for libgloo's (and libgloo's for torch's) in one process.
std::unique_ptr<CollectiveBackend> make_gloo_backend(const Rendezvous& r);

}  // namespace tg::detail

/// The module's one entry (gloo_backend.cpp): a new backend, or null with the reason in `error`.
extern "C" tg::detail::CollectiveBackend* tgraph_gloo_backend(const tg::detail::Rendezvous* r, char* error,
                                                              size_t error_size);

namespace tg::detail {

/// Collectives on device memory, enqueued on a CUDA stream (`stream` is a cudaStream_t) and
/// returning at once: NCCL's. Counts are elements of `dtype`; mean is the caller's (a sum here).
class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  /// The CUDA device the communicator is bound to.
  virtual int device() const = 0;
  /// True when `dtype` can be reduced (all_reduce / reduce_scatter).
  virtual bool reducible(DType dtype) const = 0;
  virtual void all_reduce(const void* in, void* out, size_t count, DType dtype, CollectiveReduce op, void* stream) = 0;
  /// Rank r's `bytes` land at out + r * bytes.
  virtual void all_gather(const void* in, void* out, size_t bytes, void* stream) = 0;
  /// The ranks' `count * world` elements combined; this rank's `count` of them, in rank order.
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType dtype, CollectiveReduce op,
                              void* stream) = 0;
  /// Rank `root`'s `bytes` from `in` written to every rank's `out`.
  virtual void broadcast(const void* in, void* out, size_t bytes, int root, void* stream) = 0;
  /// What the communicator's watchdog (watch_device_step) needs: an event recorded on `stream`
  /// now (the caller's until release_event), whether its work is done, NCCL's asynchronous
  /// error ("" when none), and the abort that makes the communicator's kernels return.
  virtual void* record_event(void* stream) = 0;
  virtual bool event_done(void* event) = 0;
  virtual void release_event(void* event) = 0;
  virtual std::string async_error() = 0;
  virtual void abort() = 0;
  /// Makes the calling thread (the watchdog's) use this engine's device.
  virtual void bind_thread() = 0;
};

/// An NCCL communicator of r.world ranks on CUDA device `device`, set up through NCCL's own
/// bootstrap: rank 0's ncclUniqueId handed over through the rendezvous folder, or made from
/// NCCL_COMM_ID by every rank when the user set it. Sets NCCL_NVLS_ENABLE=0 unless the user set
/// it. Throws tg::Error ([distributed] init ...) when NCCL, CUDA or a peer is missing.
std::unique_ptr<DeviceCollectives> make_nccl_engine(const Rendezvous& r, int device);
/// Host collectives (CollectiveBackend) through `device`'s engine: staged in device memory, each
/// waited for at most r.timeout_s (the communicator is aborted past it, so peers fail too).
std::unique_ptr<CollectiveBackend> make_nccl_host_backend(DeviceCollectives& device, const Rendezvous& r);
/// Whether NCCL can be loaded in this process (the "nccl" backend's condition, with CUDA).
bool nccl_available();

/// Runs f on the job's device engine under the communicator's lock (collectives are issued one
/// at a time, in the same order on every rank) when the job runs NCCL on CUDA device `device`;
/// false (f not run) otherwise. An error f throws breaks the communicator and comes back as
/// tg::Error naming `op` and the rank.
bool with_device_collectives(int device, const char* op, const std::function<void(DeviceCollectives&)>& f);

/// Watches the work enqueued on `stream` (a cudaStream_t) so far — a step of a CUDA executable
/// on `device` whose collectives run through NCCL — for the job's timeout, on the communicator's
/// watchdog thread (watchdog.h): if NCCL reports a peer's failure first, or the time passes, the
/// communicator is aborted (the step's kernels return, their results not valid; the peers fail
/// too) and broken. No-op when the job runs no NCCL on `device`.
void watch_device_step(int device, void* stream);
/// Throws tg::Error naming `op` and the rank when the communicator on `device` is broken.
void check_device_collectives(int device, const char* op);
/// Counts the jobs joined in this process (distributed::init): a CUDA graph captured with NCCL
/// calls of one communicator is not replayed after another is joined.
uint64_t device_collectives_generation();

}  // namespace tg::detail
