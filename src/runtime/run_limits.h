#pragma once
// Timeouts, cancellation and interrupts of runs (RunOptions, interrupt_runs): the executor
// checks its run's limits between steps and loop iterations.
#include <atomic>
#include <chrono>
#include <cstdint>

#include "tgraph/executable.h"

namespace tg::detail {

/// The limits of one run, taken when it starts: the options Executable::run was given on this
/// thread (none for a plain run) and the interrupt count then.
class RunLimits {
 public:
  RunLimits();
  /// Throws tg::Error "[run] timed out / cancelled / interrupted after N steps" when the run
  /// must stop; `steps` counts the checks so far (cheap: the clock is read only with a timeout).
  void check() {
    ++steps_;
    if (interrupts_.load(std::memory_order_relaxed) != generation_ || (cancel_ && cancel_->load(std::memory_order_relaxed)) ||
        (timeout_s_ > 0 && std::chrono::steady_clock::now() > deadline_))
      stop();
  }

  /// Sets the options runs on this thread take until the scope ends (Executable::run).
  class Scope {
   public:
    explicit Scope(const RunOptions& o);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const RunOptions* previous_;
  };

  static std::atomic<uint64_t> interrupts_;

 private:
  [[noreturn]] void stop() const;
  uint64_t generation_;
  const std::atomic<bool>* cancel_ = nullptr;
  double timeout_s_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  int64_t steps_ = 0;
};

}  // namespace tg::detail
