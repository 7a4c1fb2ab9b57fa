#pragma once
// The engine under tg::distributed (distributed.h): what a collective library does for it.
// One implementation per library: Gloo on the CPU (gloo_backend.cpp); NCCL joins for CUDA.
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

}  // namespace tg::detail
