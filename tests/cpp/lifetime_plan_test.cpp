// Offsets for blocks with known lifetimes (runtime/lifetime_plan.h): no two blocks alive at
// once share a byte, and the arena stays near the most bytes ever alive at once.
#include <gtest/gtest.h>

#include <random>

#include "runtime/lifetime_plan.h"

using namespace tg::detail;

namespace {

void expect_disjoint(const std::vector<Lifetime>& b, const std::vector<int64_t>& off, int64_t align, int64_t total) {
  auto n = [&](size_t i) { return (std::max<int64_t>(b[i].size, 1) + align - 1) / align * align; };
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(off[i] % align, 0);
    EXPECT_LE(off[i] + n(i), total);
    for (size_t j = i + 1; j < b.size(); ++j) {
      const bool alive_together = b[i].start < b[j].end && b[j].start < b[i].end;
      const bool share = off[i] < off[j] + n(j) && off[j] < off[i] + n(i);
      ASSERT_FALSE(alive_together && share) << "blocks " << i << " and " << j;
    }
  }
}

}  // namespace

TEST(LifetimePlan, BlocksAliveTogetherNeverShareBytes) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Lifetime> b;
    const int count = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < count; ++i) {
      const int64_t start = static_cast<int64_t>(rng() % 400);
      const int64_t end = rng() % 10 == 0 ? INT64_MAX : start + 1 + static_cast<int64_t>(rng() % 60);
      b.push_back({static_cast<int64_t>(1 + rng() % 5000) * (rng() % 4 == 0 ? 1000 : 1), start, end});
    }
    int64_t total = 0;
    const std::vector<int64_t> off = place_by_lifetime(b, 256, total);
    ASSERT_EQ(off.size(), b.size());
    expect_disjoint(b, off, 256, total);
    const int64_t peak = live_peak_bytes(b, 256);
    EXPECT_GE(total, peak);
    EXPECT_LE(total, peak * 2) << "trial " << trial;
  }
}

// A training step's shape: activations made in the forward, read back in reverse by the
// backward, with short-lived temporaries between: placed at the live peak exactly.
TEST(LifetimePlan, ForwardBackwardStackFitsTheLivePeak) {
  std::vector<Lifetime> b;
  int64_t t = 0;
  const int layers = 20;
  std::vector<size_t> act;
  for (int l = 0; l < layers; ++l) {
    act.push_back(b.size());
    b.push_back({(layers - l) * 1000, t, 0});  // ends in the backward
    b.push_back({(layers - l) * 300, t, t + 2});  // a temporary
    t += 2;
  }
  for (int l = layers - 1; l >= 0; --l) {
    b.push_back({(layers - l) * 1000, t, t + 2});  // the gradient
    b[act[static_cast<size_t>(l)]].end = t + 1;
    t += 2;
  }
  int64_t total = 0;
  const std::vector<int64_t> off = place_by_lifetime(b, 1, total);
  expect_disjoint(b, off, 1, total);
  EXPECT_EQ(total, live_peak_bytes(b, 1));
}
