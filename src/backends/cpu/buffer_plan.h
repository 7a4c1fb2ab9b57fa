#pragma once
// Buffer planning: every intermediate of the top-level block with a static size gets an
// offset in one arena (not targets, which are returned, nor values that may outlive their
// readers: variable writes and control-flow operands). Buffers whose lifetimes do not overlap share bytes, and an
// elementwise op may write over an input that dies at that op (in-place).
#include <cstdint>
#include <vector>

#include "passes/module.h"

namespace tg::detail {

struct BufferPlan {
  std::vector<int64_t> offset;  // per value id; -1 when not in the arena
  std::vector<char> in_place;   // per value id: shares its input's bytes
  int64_t arena_bytes = 0;      // peak of the arena
  int64_t naive_bytes = 0;      // sum of all planned intermediates
};

/// Per value id, 1 for the values that outlive their last reader: targets (returned to the
/// caller), values written to variables (a later read_variable returns them) and control-flow
/// operands (a loop or branch may hand them back as its own result). Neither plan (this one,
/// the fused schedule's) gives them arena bytes.
std::vector<char> pinned_values(const Module& m);

/// Plans the arena of a module (aligned to 64 bytes).
BufferPlan plan_buffers(const Module& m);

}  // namespace tg::detail
