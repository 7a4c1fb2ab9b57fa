#pragma once
// A watchdog for work a collective engine completes on its own (a step's NCCL kernels on a CUDA
// stream): a thread of its own polls each watched item until it is done; if the engine reports
// a failure first (a peer's error), or an item is not done by its deadline (a peer that died
// mid-collective leaves this rank's kernels waiting forever), it fires once: its owner aborts
// the communicator (ncclCommAbort makes the kernels return, so whoever waits for the stream is
// released) and records why. After firing it watches nothing more: the communicator is over.
// No CUDA here, so every build tests it (tests/cpp/watchdog_test.cpp).
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tg::detail {

class Watchdog {
 public:
  /// `failure`: the engine's asynchronous error ("" when none), asked at each poll while items
  /// are watched. `fire`: called once, on the watchdog's thread, with the reason.
  /// `on_start`: run first on the watchdog's thread (the engine binds its device there).
  Watchdog(std::function<std::string()> failure, std::function<void(const std::string&)> fire,
           std::chrono::milliseconds poll = std::chrono::milliseconds(2), std::function<void()> on_start = {});
  /// Stops the thread; items still watched are released unfired.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Watches an item: `done` is polled until it says true (then `release` is called), for at
  /// most timeout_s — counted from when it was watched, or from when an item watched before it
  /// was seen finished, if later: work queued behind other work on a stream gets its own full
  /// time (and an item that hangs is never kept alive by items watched after it).
  /// Ignored (released at once) once the watchdog has fired.
  void watch(std::function<bool()> done, double timeout_s, std::function<void()> release = {});
  /// The reason it fired, "" while it has not.
  std::string fired() const;
  /// Fires now with `why` if anything is still watched (the owner is shutting down and would
  /// otherwise wait for that work forever); true if it fired.
  bool abandon(const std::string& why);
  /// Items being watched (tests).
  size_t watching() const;

 private:
  struct Item {
    std::function<bool()> done;
    std::chrono::steady_clock::time_point deadline;
    double timeout_s;
    std::function<void()> release;
  };
  void loop();
  void fire_locked(std::unique_lock<std::mutex>& lock, std::vector<Item> items, const std::string& why);

  std::function<std::string()> failure_;
  std::function<void(const std::string&)> fire_;
  const std::chrono::milliseconds poll_;
  std::function<void()> on_start_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Item> items_;
  bool polling_ = false;  // the thread holds the items outside the lock (abandon waits it out)
  std::condition_variable idle_;
  std::string fired_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace tg::detail
