#pragma once
// Loop-carried buffer donation. A captured loop keeps the values it carries from one trip to
// the next in fixed state buffers, and each trip used to end by copying the body's results
// into them: a kernel launch per trip, and for a small body a good part of the trip's cost.
// This analysis finds the results that may instead be computed straight into their state
// buffer by the generated elementwise kernel that produces them, and the value whose kernel
// can set the loop's condition itself (so no control kernel runs at all when every result is
// donated). It is pure analysis of the fusion plans; the CUDA backend applies it
// (cuda_run_control.cpp, Run::group) and copies whatever it does not donate.
#include <cstdint>
#include <vector>

#include "passes/fusion.h"

namespace tg::detail {

struct LoopDonation {
  /// Per state: the value whose elementwise kernel may write the state buffer in place, or -1
  /// (the result is copied at the end of the trip as before).
  std::vector<int32_t> into;
  /// Per state: the body values that hold the state's contents from the start of the trip
  /// (its parameter and views of it). The producing kernel may read them only element for
  /// element (same shape as its output), which is what makes writing in place safe.
  std::vector<std::vector<int32_t>> old;
  /// The value that decides the next trip, traced back to where the body computes it (-1 when
  /// the loop has no predicate result or the body does not compute it).
  int32_t predicate = -1;
};

/// One trip runs `blocks` in order with `plans` (their fusion plans). State k enters as
/// params[first_param + k] of blocks[0]; each later block's params are the previous block's
/// results; state k leaves as results[first_result + k] of the last block, whose results[0] is
/// the predicate when first_result == 1. With `allow_in_place` false (the trip reorders steps
/// or assigns variables) nothing is donated; the predicate is still traced.
LoopDonation plan_loop_donation(const GraphImpl& g, const std::vector<int32_t>& blocks,
                                const std::vector<const FusionPlan*>& plans, size_t first_param,
                                size_t first_result, bool allow_in_place);

}  // namespace tg::detail
