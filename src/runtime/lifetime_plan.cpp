#include "runtime/lifetime_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace tg::detail {
namespace {

int64_t rounded(int64_t n, int64_t align) { return (std::max<int64_t>(n, 1) + align - 1) / align * align; }
bool overlap(const Lifetime& a, const Lifetime& b) { return a.start < b.end && b.start < a.end; }

// The blocks' indices, largest first (earliest first among equals): the order both placements
// take them in.
std::vector<size_t> largest_first(const std::vector<Lifetime>& blocks) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return blocks[a].size != blocks[b].size ? blocks[a].size > blocks[b].size : blocks[a].start < blocks[b].start;
  });
  return order;
}

}  // namespace

std::vector<int64_t> place_by_lifetime(const std::vector<Lifetime>& blocks, int64_t align, int64_t& total) {
  const std::vector<size_t> order = largest_first(blocks);
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

std::vector<int64_t> place_in_donated(const std::vector<Lifetime>& blocks, const std::vector<DonatedBytes>& donated,
                                      int64_t align) {
  std::vector<int64_t> at(blocks.size(), -1);
  if (donated.empty()) return at;
  // Spans of donated bytes that touch or overlap, each with its members.
  std::vector<size_t> by_lo(donated.size());
  std::iota(by_lo.begin(), by_lo.end(), size_t{0});
  std::sort(by_lo.begin(), by_lo.end(), [&](size_t a, size_t b) { return donated[a].lo < donated[b].lo; });
  struct Span {
    int64_t lo, hi;
    std::vector<size_t> members;
    std::vector<size_t> placed;
  };
  std::vector<Span> spans;
  for (size_t d : by_lo) {
    if (donated[d].hi <= donated[d].lo) continue;
    if (spans.empty() || donated[d].lo > spans.back().hi) spans.push_back({donated[d].lo, donated[d].hi, {}, {}});
    spans.back().hi = std::max(spans.back().hi, donated[d].hi);
    spans.back().members.push_back(d);
  }
  auto up = [&](int64_t a) { return (a + align - 1) / align * align; };
  const std::vector<size_t> order = largest_first(blocks);
  std::vector<std::pair<int64_t, int64_t>> taken;
  for (size_t i : order) {
    if (blocks[i].end == INT64_MAX) continue;  // outlives the run: its own memory
    const int64_t n = rounded(blocks[i].size, align);
    Span* best = nullptr;
    int64_t best_at = 0;
    for (Span& s : spans) {
      if (s.hi - s.lo < n || (best && s.hi - s.lo >= best->hi - best->lo)) continue;  // best fit by span
      taken.clear();
      for (size_t d : s.members)
        if (donated[d].from >= blocks[i].start) taken.emplace_back(donated[d].lo, donated[d].hi);
      for (size_t j : s.placed)
        if (overlap(blocks[i], blocks[j])) taken.emplace_back(at[j], at[j] + rounded(blocks[j].size, align));
      std::sort(taken.begin(), taken.end());
      int64_t a = up(s.lo);
      for (const auto& [lo, hi] : taken) {
        if (lo - a >= n) break;
        a = std::max(a, up(hi));
      }
      if (a + n <= s.hi) {
        best = &s;
        best_at = a;
      }
    }
    if (best) {
      at[i] = best_at;
      best->placed.push_back(i);
    }
  }
  return at;
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
