#include "distributed/watchdog.h"

#include <algorithm>
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
                   std::chrono::milliseconds poll, std::function<void()> on_start)
    : failure_(std::move(failure)),
      fire_(std::move(fire)),
      poll_(poll),
      on_start_(std::move(on_start)),
      thread_([this] { loop(); }) {}

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

bool Watchdog::abandon(const std::string& why) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return !polling_; });  // the items a poll holds are back in items_ then
  if (!fired_.empty() || items_.empty()) return false;
  std::vector<Item> items = std::move(items_);
  items_.clear();
  fire_locked(lock, std::move(items), why);
  return true;
}

// Fires with `why` (the lock let go meanwhile) and releases `items` and whatever was watched since.
void Watchdog::fire_locked(std::unique_lock<std::mutex>& lock, std::vector<Item> items, const std::string& why) {
  fired_ = why;  // first: watch() releases new items at once from now on
  lock.unlock();
  fire_(why);
  for (Item& i : items)
    if (i.release) i.release();
  lock.lock();
  std::vector<Item> late = std::move(items_);
  items_.clear();
  lock.unlock();
  for (Item& i : late)
    if (i.release) i.release();
  lock.lock();
}

void Watchdog::loop() {
  if (on_start_) on_start_();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !items_.empty(); });
    if (stop_) return;
    // Polled outside the lock (the callbacks may take the owner's locks or call the driver):
    // only this thread removes items, so the ones taken stay valid.
    std::vector<Item> items = std::move(items_);
    items_.clear();
    polling_ = true;
    lock.unlock();
    std::string why = failure_ ? failure_() : "";
    const auto now = std::chrono::steady_clock::now();
    std::vector<Item> left;
    bool finished_before = false;  // an item watched before this one finished in this poll
    for (Item& i : items) {  // in the order they were watched
      if (!why.empty()) {
        left.push_back(std::move(i));
        continue;
      }
      if (i.done()) {
        if (i.release) i.release();
        finished_before = true;
        continue;
      }
      // Work that finished lets what was queued behind it start: its time counts from now. Only
      // work watched after it: an item watched earlier that hangs is not kept alive by others.
      if (finished_before)
        i.deadline = std::max(i.deadline, now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                    std::chrono::duration<double>(i.timeout_s)));
      else if (now >= i.deadline)
        why = "a collective did not finish within " + seconds(i.timeout_s) + " s (a peer died, hangs, or left the job)";
      left.push_back(std::move(i));
    }
    lock.lock();
    polling_ = false;
    idle_.notify_all();
    if (!why.empty() && fired_.empty()) {
      fire_locked(lock, std::move(left), why);
      continue;
    }
    if (!fired_.empty()) {  // (it fired from abandon() while this poll ran: these are over too)
      lock.unlock();
      for (Item& i : left)
        if (i.release) i.release();
      lock.lock();
      continue;
    }
    // Items added while polling go after the ones still waiting.
    for (Item& i : items_) left.push_back(std::move(i));
    items_ = std::move(left);
    if (!items_.empty()) wake_.wait_for(lock, poll_, [&] { return stop_; });
  }
}

}  // namespace tg::detail
