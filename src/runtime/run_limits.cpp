#include "runtime/run_limits.h"

#include <cstdio>
#include <string>

#include "tgraph/error.h"

namespace tg {
namespace detail {
namespace {
thread_local const RunOptions* t_options = nullptr;
}  // namespace

std::atomic<uint64_t> RunLimits::interrupts_{0};

RunLimits::RunLimits() : generation_(interrupts_.load()) {
  if (!t_options) return;
  cancel_ = t_options->cancel;
  timeout_s_ = t_options->timeout_s;
  if (timeout_s_ > 0)
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s_));
}

void RunLimits::stop() const {
  std::string why;
  if (interrupts_.load() != generation_) why = "interrupted";
  else if (cancel_ && cancel_->load()) why = "cancelled";
  else {
    char b[64];
    std::snprintf(b, sizeof b, "timed out (timeout %g s)", timeout_s_);
    why = b;
  }
  throw Error("[run] " + why + " after " + std::to_string(steps_) + " steps; no variable changed");
}

RunLimits::Scope::Scope(const RunOptions& o) : previous_(t_options) { t_options = &o; }
RunLimits::Scope::~Scope() { t_options = previous_; }

}  // namespace detail

void interrupt_runs() { detail::RunLimits::interrupts_.fetch_add(1, std::memory_order_relaxed); }

}  // namespace tg
