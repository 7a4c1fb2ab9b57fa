#include "distributed/watchdog.h"

#include <cstdio>
#include <utility>

namespace tg::detail {
namespace {

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", s);
  return b;
}

}  // namespace

Watchdog::Watchdog(std::function<std::string()> failure, std::function<void(const std::string&)> fire,
                   std::chrono::milliseconds poll)
    : failure_(std::move(failure)), fire_(std::move(fire)), poll_(poll), thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Item& i : items_)
    if (i.release) i.release();
}

void Watchdog::watch(std::function<bool()> done, double timeout_s, std::function<void()> release) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fired_.empty() && !stop_) {
      const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
      items_.push_back(Item{std::move(done), std::chrono::steady_clock::now() + limit, timeout_s, std::move(release)});
      release = nullptr;
    }
  }
  if (release) release();  // not watched: fired or stopping
  wake_.notify_all();
}

std::string Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

size_t Watchdog::watching() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !items_.empty(); });
    if (stop_) return;
    // Polled outside the lock (the callbacks may take the owner's locks or call the driver):
    // only this thread removes items, so the ones taken stay valid.
    std::vector<Item> items = std::move(items_);
    items_.clear();
    lock.unlock();
    std::string why = failure_ ? failure_() : "";
    const auto now = std::chrono::steady_clock::now();
    std::vector<Item> left;
    for (Item& i : items) {
      if (why.empty() && i.done()) {
        if (i.release) i.release();
        continue;
      }
      if (why.empty() && now >= i.deadline)
        why = "a collective did not finish within " + seconds(i.timeout_s) + " s (a peer died, hangs, or left the job)";
      left.push_back(std::move(i));
    }
    if (!why.empty()) {
      fire_(why);
      for (Item& i : left)
        if (i.release) i.release();
      left.clear();
    }
    lock.lock();
    if (!why.empty()) {
      fired_ = why;
      for (Item& i : items_)  // watched meanwhile: over too
        if (i.release) i.release();
      items_.clear();
      continue;
    }
    // Items added while polling go after the ones still waiting.
    for (Item& i : items_) left.push_back(std::move(i));
    items_ = std::move(left);
    if (!items_.empty()) wake_.wait_for(lock, poll_, [&] { return stop_; });
  }
}

}  // namespace tg::detail
