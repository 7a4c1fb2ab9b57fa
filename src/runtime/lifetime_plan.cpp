#include "runtime/lifetime_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace tg::detail {
namespace {

int64_t rounded(int64_t n, int64_t align) { return (std::max<int64_t>(n, 1) + align - 1) / align * align; }
bool overlap(const Lifetime& a, const Lifetime& b) { return a.start < b.end && b.start < a.end; }

}  // namespace

std::vector<int64_t> place_by_lifetime(const std::vector<Lifetime>& blocks, int64_t align, int64_t& total) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return blocks[a].size != blocks[b].size ? blocks[a].size > blocks[b].size : blocks[a].start < blocks[b].start;
  });
  std::vector<int64_t> offset(blocks.size(), 0);
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, end) of the placed blocks alive with this one
  total = 0;
  for (size_t i : order) {
    const int64_t n = rounded(blocks[i].size, align);
    taken.clear();
    for (size_t j : placed)
      if (overlap(blocks[i], blocks[j])) taken.emplace_back(offset[j], offset[j] + rounded(blocks[j].size, align));
    std::sort(taken.begin(), taken.end());
    int64_t at = 0;  // the lowest gap of n bytes between the taken ranges
    for (const auto& [lo, hi] : taken) {
      if (lo - at >= n) break;
      at = std::max(at, hi);
    }
    offset[i] = at;
    total = std::max(total, at + n);
    placed.push_back(i);
  }
  return offset;
}

int64_t live_peak_bytes(const std::vector<Lifetime>& blocks, int64_t align) {
  std::vector<std::pair<int64_t, int64_t>> events;  // (time, +bytes / -bytes); frees first at a tie
  for (const Lifetime& b : blocks) {
    events.emplace_back(b.start, rounded(b.size, align));
    events.emplace_back(b.end, -rounded(b.size, align));
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto& [t, d] : events) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace tg::detail
