#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "passes/module.h"

namespace tg::detail {

/// The single value every element of value v has, when v is a constant (or a broadcast of
/// one; with `through_layout`, also through transposes and value views such as reshape), and
/// it has one.
std::optional<double> splat(const GraphImpl& g, int32_t v, bool through_layout = false);

/// Whether a transpose by `perm` swaps the last two dims and keeps the others: what a matmul
/// reads through its transpose flags.
bool swaps_last_two_dims(const std::vector<int64_t>& perm);

/// Algebraic identities: x*1, 1*x, x/1, x+0, 0+x, x-0, identity(x), cast to the same type,
/// reshape/broadcast_to to the same static shape, a strided slice that keeps every element,
/// select on a condition known throughout, transpose(transpose(x)) (composed, or
/// removed when the result is the identity permutation), reshape(reshape(x)), a half value
/// cast to f32 and back; a narrowing cast of a transpose or reshape read by nothing else moves
/// before it (the layout op then moves half the bytes).
/// Only rewrites that keep the value's type exactly.
struct AlgebraicSimplify : Pass {
  const char* name() const override { return "algebraic_simplify"; }
  bool run(Module& m) override;
};

}  // namespace tg::detail
