#pragma once
// The instructions of a fused CPU loop (fused_elementwise.cpp): each runs one op over a tile
// of registers (float arrays; bools are 0 / 1, f16 / bf16 values are held widened and rounded
// back after every op that yields them).
#include <cstdint>

#include "ir/graph_impl.h"

namespace tg::detail::fused {

enum class Code : uint8_t {
  // computed in f32, exactly the unfused result
  copy,
  neg,
  abs,
  sign,
  square,
  relu,
  sqrt,
  add,
  sub,
  mul,
  div,
  div_no_nan,
  minimum,
  maximum,
  minimum_nan,
  maximum_nan,
  eq,
  ne,
  lt,
  le,
  gt,
  ge,
  logical_not,
  logical_and,
  logical_or,
  logical_xor,
  is_nan,
  is_inf,
  is_finite,
  select,
  relu_grad,  // a where b > 0, else 0
  clamp,
  to_bool,
  // computed in double and rounded once (transcendental ops), as the reference does
  unary_double,
  binary_double,
  // batch_norm_training's output from x: (x - mean) * scale + shift, per-element parameters
  // in aux[3 * i .. 3 * i + 2] for instruction aux index i
  batch_norm,
};

/// How a result is rounded after the op: kept as f32, or rounded to f16 / bf16.
enum class Round : uint8_t { none, f16, bf16 };

struct Instr {
  Code code = Code::copy;
  Round round = Round::none;
  int16_t d = 0, a = 0, b = 0, c = 0;  // registers: destination and operands
  int16_t aux = 0;                     // batch_norm: which parameter set
  OpKind kind = OpKind::Identity;      // unary_double / binary_double: which op
  double alpha = 0, beta = 0;          // leaky_relu / elu / hard_sigmoid parameters
};

/// Runs `count` instructions in order over the first n elements of their registers (d never
/// aliases a, b, c); `aux` holds the batch_norm parameter tiles.
void exec(const Instr* code, size_t count, float* const* regs, const double* const* aux, int n);
/// acc[j] += x[j] for j < n (reductions sum in double).
void accumulate(double* acc, const float* x, int n);

}  // namespace tg::detail::fused
