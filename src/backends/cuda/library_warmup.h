#pragma once
// Library calls made once ahead of a first run, several at a time (issue 22). CUDA loads a
// library's kernels at their first launch and cuDNN builds its plans inside a call, one call
// after another in an op-by-op first run. In a fresh process on the H200 the first executions
// of ResNet-50's 69 distinct convolutions (three directions, algorithms known) took 306 ms on
// one thread and 116-117 ms on 4 or 8 threads with a cuDNN handle and a stream each
// (bench_library_plans --cold-threads); a small batch does not load the kernels a large one
// uses, so the calls run at their own shapes, on scratch memory whose values do not matter.
// The run that follows finds the kernels loaded, the algorithms chosen and the plans built.
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace tg::detail {

/// One library call on scratch memory, enqueued on the stream it is given.
using WarmCall = std::function<void(cudaStream_t)>;

/// Runs `calls` on up to four threads of their own (each with its own stream and cuDNN handle
/// for the legacy calls, cudnn_legacy_device) from construction; wait() (or the destructor)
/// returns when every call is done and its stream synchronised. A call that fails is dropped:
/// the run makes it itself, as without the warm-up.
class LibraryWarmup {
 public:
  LibraryWarmup(std::vector<WarmCall> calls, int device);
  ~LibraryWarmup();
  LibraryWarmup(const LibraryWarmup&) = delete;
  LibraryWarmup& operator=(const LibraryWarmup&) = delete;
  void wait();

 private:
  std::vector<WarmCall> calls_;
  std::vector<std::thread> threads_;
};

/// A new size's first run may take, this once, a library choice made at another size whose
/// kernels are loaded (a convolution's algorithm at another batch size, its workspace asked
/// again) instead of asking the library's heuristics while the caller waits (6-12 ms per
/// convolution on the H200, ~50 ms of ResNet-50's first call at batch 1 after 32). The questions
/// it put off are collected here and asked on warm-up threads once the run is done (ask_later);
/// the next run, the one a CUDA graph captures, waits for them and uses the heuristics'
/// answers: the first call is fast, the steady ones as without this. Installed on the running
/// thread for one first run when `on` (not under TGRAPH_NO_PROVISIONAL_CHOICES=1 nor
/// TGRAPH_NO_LIBRARY_WARMUP=1: the questions are asked on warm-up threads).
class ProvisionalChoices {
 public:
  explicit ProvisionalChoices(bool on);
  ~ProvisionalChoices();
  ProvisionalChoices(const ProvisionalChoices&) = delete;
  ProvisionalChoices& operator=(const ProvisionalChoices&) = delete;
  /// The one installed on this thread, or null.
  static ProvisionalChoices* current();
  /// A question put off, by its problem's key (one ask per key): a call that asks the library
  /// and files its answer.
  void put_off(const std::string& key, WarmCall ask) {
    if (keys_.insert(key).second) asks_.push_back(std::move(ask));
  }
  /// The questions put off, being asked from now on up to four threads (null when none).
  std::unique_ptr<LibraryWarmup> ask_later(int device);

 private:
  std::vector<WarmCall> asks_;
  std::set<std::string> keys_;
  bool on_;
  ProvisionalChoices* saved_ = nullptr;
};

/// Library work under way on another thread that a run relied on (an attention plan being
/// built while tgraph's kernel stood in): the executable settles it before it is destroyed.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  /// True once nothing is left to wait for.
  virtual bool finished() const = 0;
  /// Returns once nothing is left to wait for (work not yet begun may be dropped).
  virtual void settle() = 0;
};

/// Installed on the running thread for a run that no CUDA graph captures: an op whose library
/// plan is still being made on another thread may then run a stand-in kernel of tgraph's own
/// (cuDNN's attention plan for a shape no process on the machine ran: 0.1-0.8 s of run-time
/// compile on the H200) and say so (note()); the executor neither captures such a run nor counts
/// its input types warm, so a later run looks again and the one that finds every plan made is
/// captured. Where none is installed (a capture, a caller that cannot look again), the op waits
/// for its plan.
class InterimKernels {
 public:
  InterimKernels();
  ~InterimKernels();
  InterimKernels(const InterimKernels&) = delete;
  InterimKernels& operator=(const InterimKernels&) = delete;
  /// The one installed on this thread, or null.
  static InterimKernels* current();
  /// A stand-in ran for `work`, still under way (the executable settles it before it is
  /// destroyed: CudaState::building).
  void note(std::shared_ptr<PendingWork> work) { works_.push_back(std::move(work)); }
  bool used() const { return !works_.empty(); }
  std::vector<std::shared_ptr<PendingWork>> take() { return std::move(works_); }

 private:
  std::vector<std::shared_ptr<PendingWork>> works_;
  InterimKernels* saved_ = nullptr;
};

/// Registers (up to 64 times) an exit handler that stops the warm-up calls not begun and waits
/// for those under way (10 s at most): call before starting calls that may outlive the run that
/// needs them, after that run has made the statics they use.
void library_warmup_wait_at_exit();

/// Runs `body` on a detached thread counted with the warm-up threads, which the exit handler
/// waits for (call library_warmup_wait_at_exit() first, after making the statics `body` uses).
/// An exception out of `body` is dropped. Throws when no thread can be started.
void library_warmup_detached(std::function<void()> body);

/// True once the program has begun to exit (the exit handler runs): work not yet begun is dropped.
bool library_warmup_exiting();

/// Warm-up calls made in this process that returned without an error (for tests).
long long library_warmup_calls_made();

/// False when TGRAPH_NO_LIBRARY_WARMUP=1 (first runs make their library calls one by one).
bool library_warmup_enabled();

}  // namespace tg::detail
