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

// Blocks placed in donated bytes: only blocks that die within the run, only inside donated
// bytes every one of which was let go before the block starts, aligned, and never sharing a byte
// with another block alive at the same time there.
TEST(LifetimePlan, DonatedBytesServeOnlyBlocksStartingAfterTheyAreLetGo) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Lifetime> b;
    const int count = 1 + static_cast<int>(rng() % 150);
    for (int i = 0; i < count; ++i) {
      const int64_t start = static_cast<int64_t>(rng() % 400);
      const int64_t end = rng() % 8 == 0 ? INT64_MAX : start + 1 + static_cast<int64_t>(rng() % 60);
      b.push_back({static_cast<int64_t>(1 + rng() % 5000), start, end});
    }
    std::vector<DonatedBytes> d;
    int64_t at = 1 << 20;
    for (int k = 0; k < 6; ++k) {
      const int64_t size = 256 * static_cast<int64_t>(1 + rng() % 40);
      if (rng() % 3 == 0) at += 512;  // a gap: another span
      d.push_back({at, at + size, static_cast<int64_t>(rng() % 400)});
      at += size;
    }
    const std::vector<int64_t> where = place_in_donated(b, d, 256);
    ASSERT_EQ(where.size(), b.size());
    auto n = [&](size_t i) { return (b[i].size + 255) / 256 * 256; };
    for (size_t i = 0; i < b.size(); ++i) {
      if (where[i] < 0) continue;
      EXPECT_NE(b[i].end, INT64_MAX);
      EXPECT_EQ(where[i] % 256, 0);
      // every byte in donated bytes let go before the block starts
      int64_t covered = 0;
      for (const DonatedBytes& r : d) {
        const int64_t lo = std::max(r.lo, where[i]), hi = std::min(r.hi, where[i] + n(i));
        if (lo >= hi) continue;
        EXPECT_LT(r.from, b[i].start) << "block " << i << " in bytes let go at " << r.from;
        covered += hi - lo;
      }
      EXPECT_EQ(covered, n(i)) << "block " << i << " outside the donated bytes";
      for (size_t j = i + 1; j < b.size(); ++j) {
        if (where[j] < 0) continue;
        const bool alive_together = b[i].start < b[j].end && b[j].start < b[i].end;
        const bool share = where[i] < where[j] + n(j) && where[j] < where[i] + n(i);
        ASSERT_FALSE(alive_together && share) << "blocks " << i << " and " << j;
      }
    }
  }
}

// A backward's shape: each gradient starts after the activation it reads was let go, and fits
// in it; so every gradient lands in donated bytes, and nothing alive past the run does.
TEST(LifetimePlan, GradientsLandInTheActivationsTheBackwardIsDoneWith) {
  std::vector<DonatedBytes> acts;
  std::vector<Lifetime> b;
  int64_t t = 0, at = 4096;
  for (int l = 0; l < 10; ++l) {
    acts.push_back({at, at + 1024 * (l + 1), t++});
    at += 1024 * (l + 1);
  }
  for (int l = 9; l >= 0; --l) b.push_back({1024 * l, t++, t + 2});  // a gradient, a step later dropped
  b.push_back({1024, t++, INT64_MAX});                                // an output
  const std::vector<int64_t> where = place_in_donated(b, acts, 256);
  for (size_t i = 0; i + 1 < b.size(); ++i) EXPECT_GE(where[i], 0) << "gradient " << i;
  EXPECT_EQ(where.back(), -1);
}
