#pragma once
// TGRAPH_PROFILE=1: the CPU executor (and the CUDA one, on uncaptured runs: cuda_run_ops.cpp)
// times every step it runs and, at exit, prints to stderr the total time per op kind (fused
// groups by their member count), so a user can see where a training step's time goes.
#include <chrono>
#include <string>

namespace tg::detail {

/// True when TGRAPH_PROFILE=1 is set.
bool cpu_profiling();
/// True when TGRAPH_PROFILE=2: profile rows name a lone op's operand shapes too.
bool profiling_shapes();
/// True when TGRAPH_PROFILE=first: the CUDA executor times each step's first run instead (its
/// kernel generation, library plans and heuristics: where a cold first step goes).
bool profiling_first_runs();
/// Adds `seconds` spent in one step of kind `what` (printed at exit).
void cpu_profile_add(const std::string& what, double seconds);

/// Prints the table so far under `title` and starts a new one (a benchmark's phases apart).
void cpu_profile_flush(const std::string& title);

/// Times its scope into the profile under `what` when profiling is on.
class CpuProfileScope {
 public:
  explicit CpuProfileScope(const char* what) : what_(what), on_(cpu_profiling()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  explicit CpuProfileScope(std::string what) : owned_(std::move(what)), what_(nullptr), on_(cpu_profiling()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~CpuProfileScope() {
    if (on_)
      cpu_profile_add(what_ ? std::string(what_) : owned_,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  CpuProfileScope(const CpuProfileScope&) = delete;
  CpuProfileScope& operator=(const CpuProfileScope&) = delete;

 private:
  std::string owned_;
  const char* what_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace tg::detail
