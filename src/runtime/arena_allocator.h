#pragma once
// Offsets in a per-run arena: best fit among freed blocks (neighbours merged), else the arena
// grows. Used by the compile-time buffer plan and by the CPU fusion planner's own plan.
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace tg::detail {

class ArenaAllocator {
 public:
  /// The offset of a new block of `size` bytes.
  int64_t place(int64_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    if (best == free_.end()) {
      int64_t off = bytes_;
      bytes_ += size;
      return off;
    }
    int64_t off = best->first, rest = best->second - size;
    free_.erase(best);
    if (rest > 0) free_.emplace(off + size, rest);
    return off;
  }
  /// Returns a block to the free list, merged with free neighbours.
  void release(int64_t off, int64_t size) {
    auto it = free_.emplace(off, size).first;
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  /// Releases the blocks of `live` ((value, last step) pairs) whose last step is <= `step` and
  /// drops them from it: the planners' "free what dies at this step". `offset[v]` and
  /// `size_of(v)` give a value's block.
  template <class Size>
  void release_dead(std::vector<std::pair<int32_t, int32_t>>& live, int32_t step, const std::vector<int64_t>& offset,
                    Size size_of) {
    std::erase_if(live, [&](const std::pair<int32_t, int32_t>& e) {
      if (e.second > step) return false;
      release(offset[static_cast<size_t>(e.first)], size_of(e.first));
      return true;
    });
  }
  /// The arena's size so far: the end of the highest block ever placed.
  int64_t bytes() const { return bytes_; }

 private:
  std::map<int64_t, int64_t> free_;  // offset -> size
  int64_t bytes_ = 0;
};

}  // namespace tg::detail
