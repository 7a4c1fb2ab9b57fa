#pragma once
// Offsets for blocks whose lifetimes are known before any is placed (a recorded run's
// allocations, replayed by a capture): unlike ArenaAllocator, which places each block as it
// comes, the largest blocks are placed first, each at the lowest offset clear of every block
// placed so far whose lifetime overlaps its own ("greedy by size"). Online best fit left a
// ResNet-50 training step's captured graph 16% above the most bytes it ever held at once.
#include <cstdint>
#include <vector>

namespace tg::detail {

struct Lifetime {
  int64_t size = 0;
  int64_t start = 0, end = 0;  // [start, end) on any clock; end = INT64_MAX: alive to the end
};

/// Offsets (multiples of `align`) of `blocks`, in their order; `total` gets the arena's size.
std::vector<int64_t> place_by_lifetime(const std::vector<Lifetime>& blocks, int64_t align, int64_t& total);

/// Bytes of an input the caller donated to a run (its contents are not needed after the run),
/// usable by the run's own buffers once the run has let go of it: from `from` on the blocks'
/// clock. Addresses are absolute, [lo, hi).
struct DonatedBytes {
  int64_t lo = 0, hi = 0;
  int64_t from = INT64_MAX;
};

/// Places the blocks that die within the run (end < INT64_MAX) inside donated bytes where they
/// fit, largest first: at an address (a multiple of `align`) clear of the donated bytes not yet
/// let go when the block starts and of the blocks placed there alive with it. Donated inputs
/// that touch or overlap make one span (a block may cross from one into the next). Returns per
/// block its address, or -1 for a block left to the run's own memory (place_by_lifetime).
std::vector<int64_t> place_in_donated(const std::vector<Lifetime>& blocks, const std::vector<DonatedBytes>& donated,
                                      int64_t align);

/// The most bytes (each block rounded up to `align`) alive at once: what any placement needs.
int64_t live_peak_bytes(const std::vector<Lifetime>& blocks, int64_t align);

}  // namespace tg::detail
