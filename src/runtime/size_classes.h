#pragma once
// Sizes an executable with dynamic feed dims prepares ahead of their first call (issue 22).
// Each size it meets runs a copy compiled for that size (specialize.cpp), and a GPU copy's
// generated kernels are specialised for its broadcasting: which dims are 1 decides how the
// dims coalesce and so the kernels' sources. Sizes that differ only where no dim is 1 share
// their kernels (BERT-base f16 16 x 16 -> 16 x 128: 41 ms first call); a batch of 1 after 16
// compiled ~40 new ones (1 x 128: 250 ms, 190 of them waiting for NVRTC; session 36). So after
// a new size's first run, the copies of its neighbouring size classes (each class of dynamic
// dims flipped between 1 and not 1) are compiled on a background thread and their kernels
// queued for NVRTC, nothing run: the class's first call then finds them compiled (in memory,
// and in the disk cache for the next process).
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tgraph/graph.h"

namespace tg::detail {

/// The size class of `concrete` (feed types of one run) under `declared` (the feeds' types, -1
/// for a dynamic dim): bit c set when every dynamic dim at index c of its feed is 1 (c < 32).
uint32_t size_class(const std::vector<TensorType>& declared, const std::vector<TensorType>& concrete);

/// The neighbouring size classes of `concrete`, with feed types for each: for each index c where
/// some feed has a dynamic dim, the same sizes with those dims set to 1 (or, where they are all
/// 1 now, to 8). Each comes with its class.
std::vector<std::pair<uint32_t, std::vector<TensorType>>> neighbour_sizes(const std::vector<TensorType>& declared,
                                                                          const std::vector<TensorType>& concrete);

/// Runs `job` on the process's background thread after the jobs queued before it. At exit the
/// job in progress finishes and the rest are dropped. A job's exceptions are swallowed (what
/// it prepares is made in turn when needed).
void run_in_background(std::function<void()> job);

/// Waits until every job queued before the call has run (for tests and benchmarks).
void background_jobs_wait();

/// True on a thread compiling a copy ahead of use (a neighbouring size class): a backend then
/// starts no library work for it that only a run needs (cuDNN attention plans).
bool compiling_ahead();

/// Thrown where a copy compiled ahead would need what it may not ask for on the background
/// thread (a cuDNN answer not known yet): the copy is given up, and the size compiles in turn
/// when a run meets it. Not a tg::Error: a pass that keeps a node it cannot rewrite on an Error
/// (rewrite_nodes) would otherwise swallow it and compile the size another way (attention
/// decomposed) — a copy a later run would then take for good.
struct AheadGivenUp : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Marks this thread as compiling ahead while alive.
class CompilingAhead {
 public:
  CompilingAhead();
  ~CompilingAhead();
  CompilingAhead(const CompilingAhead&) = delete;
  CompilingAhead& operator=(const CompilingAhead&) = delete;

 private:
  bool prev_;
};

}  // namespace tg::detail
