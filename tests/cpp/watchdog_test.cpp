// The watchdog of a communicator's device collectives (distributed/watchdog.h), with fake work:
// finished items are released and nothing fires; an item not done by its deadline, or an engine
// failure, fires once (the owner aborts) and releases everything; a fired watchdog watches
// nothing more; destruction releases what is left without firing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/watchdog.h"

using tg::detail::Watchdog;
using namespace std::chrono_literals;

namespace {

// Waits (at most 10 s) until pred holds.
template <class P>
bool eventually(P pred) {
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

struct Fires {
  std::atomic<int> count{0};
  std::string why;  // written once, before count
};

}  // namespace

TEST(Watchdog, FinishedWorkIsReleasedAndNothingFires) {
  Fires f;
  std::atomic<int> released{0};
  std::vector<std::shared_ptr<std::atomic<bool>>> done;
  {
    Watchdog w([] { return std::string(); }, [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
    for (int i = 0; i < 5; ++i) {
      done.push_back(std::make_shared<std::atomic<bool>>(false));
      w.watch([d = done.back()] { return d->load(); }, 30, [&] { ++released; });
    }
    EXPECT_EQ(w.watching(), 5u);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(released.load(), 0);  // not done: still watched
    for (auto& d : done) *d = true;
    EXPECT_TRUE(eventually([&] { return released.load() == 5; }));
    EXPECT_EQ(w.watching(), 0u);
    EXPECT_EQ(w.fired(), "");
  }
  EXPECT_EQ(f.count.load(), 0);
}

TEST(Watchdog, WorkPastItsDeadlineFiresOnceAndEndsTheWatch) {
  Fires f;
  std::atomic<int> released{0};
  Watchdog w([] { return std::string(); }, [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
  const auto start = std::chrono::steady_clock::now();
  w.watch([] { return false; }, 0.05, [&] { ++released; });  // a peer that never answers
  w.watch([] { return false; }, 30, [&] { ++released; });    // the next step, waiting behind it
  ASSERT_TRUE(eventually([&] { return f.count.load() == 1; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_NE(f.why.find("did not finish within 0.05 s"), std::string::npos) << f.why;
  EXPECT_TRUE(eventually([&] { return released.load() == 2; }));  // everything watched is over
  EXPECT_EQ(w.fired(), f.why);
  w.watch([] { return false; }, 30, [&] { ++released; });  // after firing: released at once
  EXPECT_EQ(released.load(), 3);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(f.count.load(), 1);
}

TEST(Watchdog, AnEngineFailureFiresBeforeTheDeadline) {
  Fires f;
  std::atomic<bool> broken{false};
  Watchdog w([&] { return broken ? std::string("NCCL: remote process exited") : std::string(); },
             [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
  std::atomic<int> released{0};
  w.watch([] { return false; }, 300, [&] { ++released; });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(f.count.load(), 0);
  broken = true;
  ASSERT_TRUE(eventually([&] { return f.count.load() == 1; }));
  EXPECT_EQ(f.why, "NCCL: remote process exited");
  EXPECT_TRUE(eventually([&] { return released.load() == 1; }));
}

TEST(Watchdog, DestructionReleasesWhatIsLeftWithoutFiring) {
  Fires f;
  std::atomic<int> released{0};
  {
    Watchdog w([] { return std::string(); }, [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
    for (int i = 0; i < 3; ++i) w.watch([] { return false; }, 300, [&] { ++released; });
  }
  EXPECT_EQ(released.load(), 3);
  EXPECT_EQ(f.count.load(), 0);
}

// Work queued behind other work gets its full time from when the work before it finished: a
// step waiting behind a slow (healthy) one does not fire.
TEST(Watchdog, WorkQueuedBehindFinishedWorkGetsItsOwnTime) {
  Fires f;
  Watchdog w([] { return std::string(); }, [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
  auto first = std::make_shared<std::atomic<bool>>(false), second = std::make_shared<std::atomic<bool>>(false);
  std::atomic<int> released{0};
  w.watch([first] { return first->load(); }, 2, [&] { ++released; });
  w.watch([second] { return second->load(); }, 2, [&] { ++released; });  // queued behind the first
  std::this_thread::sleep_for(500ms);
  *first = true;  // done well before its deadline; the second has only now begun
  ASSERT_TRUE(eventually([&] { return released.load() == 1; }));
  std::this_thread::sleep_for(1800ms);  // past the second's own deadline counted from its watch
  EXPECT_EQ(f.count.load(), 0) << f.why;
  *second = true;
  EXPECT_TRUE(eventually([&] { return released.load() == 2; }));
  EXPECT_EQ(f.count.load(), 0);
}

// Shutting down with work unfinished fires (the owner aborts what would otherwise be waited for
// forever); with nothing watched it does not.
TEST(Watchdog, AbandonFiresOnlyWhenWorkIsUnfinished) {
  Fires f;
  Watchdog w([] { return std::string(); }, [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
  EXPECT_FALSE(w.abandon("shut down"));
  std::atomic<int> released{0};
  w.watch([] { return false; }, 300, [&] { ++released; });
  EXPECT_TRUE(w.abandon("shut down"));
  EXPECT_EQ(f.count.load(), 1);
  EXPECT_EQ(f.why, "shut down");
  EXPECT_TRUE(eventually([&] { return released.load() == 1; }));
  EXPECT_FALSE(w.abandon("again"));
  EXPECT_EQ(f.count.load(), 1);
}

// An item that hangs is not kept alive by items watched after it that keep finishing (other
// streams' steps): it fires at its own deadline.
TEST(Watchdog, AHungItemIsNotKeptAliveByLaterItemsFinishing) {
  Fires f;
  Watchdog w([] { return std::string(); }, [&](const std::string& why) { f.why = why, ++f.count; }, 1ms);
  const auto start = std::chrono::steady_clock::now();
  w.watch([] { return false; }, 0.2);  // hangs
  std::atomic<bool> stop{false};
  std::thread feeder([&] {  // a finished item every few milliseconds
    while (!stop) {
      w.watch([] { return true; }, 0.2);
      std::this_thread::sleep_for(3ms);
    }
  });
  const bool fired = eventually([&] { return f.count.load() == 1; });
  stop = true;
  feeder.join();
  ASSERT_TRUE(fired);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}
