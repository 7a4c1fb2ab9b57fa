#pragma once
// Work split into parts that run at once on threads of their own (a file read in parts, a
// checksum per chunk, tensors copied: memory touched for the first time is written at the
// speed of its page faults, which several threads multiply).
#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace tg::detail {

/// How many parts to use for `items` pieces of work: at most 8, at most the machine's threads.
inline size_t parallel_parts(size_t items) {
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  return std::max<size_t>(1, std::min<size_t>({8, hw, items}));
}

/// Runs part(0) .. part(parts - 1) at once, part 0 on the calling thread; returns when every
/// part has, then rethrows the first exception a part threw.
inline void run_in_parts(size_t parts, const std::function<void(size_t)>& part) {
  std::vector<std::exception_ptr> failed(parts);
  auto guarded = [&](size_t t) {
    try {
      part(t);
    } catch (...) {
      failed[t] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < parts; ++t) threads.emplace_back(guarded, t);
  if (parts > 0) guarded(0);
  for (auto& th : threads) th.join();
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

}  // namespace tg::detail
