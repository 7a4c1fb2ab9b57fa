#include "runtime/size_classes.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace tg::detail {
namespace {

constexpr int64_t kNotOne = 8;  // the size a class of dims all 1 is prepared at (its kernels serve every size > 1)
constexpr size_t kMaxClasses = 32;

// Calls f(c, concrete dim) for each dynamic dim (declared -1) at index c < kMaxClasses.
template <typename F>
void each_dynamic_dim(const std::vector<TensorType>& declared, const std::vector<TensorType>& concrete, F f) {
  for (size_t i = 0; i < declared.size() && i < concrete.size(); ++i) {
    const Shape &d = declared[i].shape, &s = concrete[i].shape;
    if (d.rank() < 0 || d.rank() != s.rank()) continue;
    for (int64_t c = 0; c < d.rank() && c < static_cast<int64_t>(kMaxClasses); ++c)
      if (d[c] < 0) f(i, c, s[c]);
  }
}

// One thread, started on first use, for jobs run in order; joined at exit. Statics built before
// the first job is queued (the op registry, the passes' and backends' tables a compile reads:
// the executable's own compile and first run came first) are destroyed after the handler runs.
struct Background {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  uint64_t queued = 0, done = 0;
  bool busy = false, stopping = false;
  std::thread worker;

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [this] { return stopping || !jobs.empty(); });
      if (stopping) return;
      std::function<void()> job = std::move(jobs.front());
      jobs.pop_front();
      busy = true;
      lock.unlock();
      try {
        job();
      } catch (...) {  // speculative work: what it prepares is made in turn when needed
      }
      job = nullptr;  // (what it held is released outside the lock)
      lock.lock();
      busy = false;
      ++done;
      cv.notify_all();
    }
  }
};

Background& background() {
  static auto* b = new Background;  // never destroyed: stopped and joined by the exit handler
  return *b;
}

void stop_background() {
  Background& b = background();
  std::deque<std::function<void()>> dropped;  // destroyed outside the lock (they hold copies)
  {
    std::lock_guard<std::mutex> lock(b.mu);
    b.stopping = true;
    b.done += b.jobs.size();
    dropped.swap(b.jobs);
  }
  b.cv.notify_all();
  if (b.worker.joinable()) b.worker.join();
}

thread_local bool ahead = false;

}  // namespace

uint32_t size_class(const std::vector<TensorType>& declared, const std::vector<TensorType>& concrete) {
  uint32_t some = 0, not_one = 0;
  each_dynamic_dim(declared, concrete, [&](size_t, int64_t c, int64_t size) {
    some |= 1u << c;
    if (size != 1) not_one |= 1u << c;
  });
  return some & ~not_one;
}

std::vector<std::pair<uint32_t, std::vector<TensorType>>> neighbour_sizes(const std::vector<TensorType>& declared,
                                                                          const std::vector<TensorType>& concrete) {
  uint32_t classes = 0;
  each_dynamic_dim(declared, concrete, [&](size_t, int64_t c, int64_t) { classes |= 1u << c; });
  const uint32_t ones = size_class(declared, concrete);
  std::vector<std::pair<uint32_t, std::vector<TensorType>>> out;
  for (uint32_t c = 0; c < kMaxClasses; ++c) {
    if (!(classes >> c & 1u)) continue;
    const bool to_one = !(ones >> c & 1u);
    std::vector<TensorType> types = concrete;
    each_dynamic_dim(declared, concrete, [&](size_t i, int64_t at, int64_t) {
      if (at != static_cast<int64_t>(c)) return;
      std::vector<int64_t> dims = types[i].shape.dims();
      dims[static_cast<size_t>(at)] = to_one ? 1 : kNotOne;
      types[i].shape = Shape(std::move(dims));
    });
    out.emplace_back(ones ^ (1u << c), std::move(types));
  }
  return out;
}

void run_in_background(std::function<void()> job) {
  Background& b = background();
  std::lock_guard<std::mutex> lock(b.mu);
  if (b.stopping) return;
  if (!b.worker.joinable()) {
    try {
      b.worker = std::thread([&b] { b.loop(); });
    } catch (const std::exception&) {  // no thread: nothing is prepared ahead
      return;
    }
    std::atexit(stop_background);
  }
  b.jobs.push_back(std::move(job));
  ++b.queued;
  b.cv.notify_all();
}

void background_jobs_wait() {
  Background& b = background();
  std::unique_lock<std::mutex> lock(b.mu);
  const uint64_t target = b.queued;
  b.cv.wait(lock, [&] { return b.stopping || b.done >= target; });
}

bool compiling_ahead() { return ahead; }

CompilingAhead::CompilingAhead() : prev_(ahead) { ahead = true; }
CompilingAhead::~CompilingAhead() { ahead = prev_; }

}  // namespace tg::detail
