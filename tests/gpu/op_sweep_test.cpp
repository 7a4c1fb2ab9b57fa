// Every op of op_list.h on CUDA against the CPU backend, in every dtype it takes among f32,
// f16, bf16, f64 (and the integer / bool dtypes for integer and logical ops), on random
// inputs inside each op's domain. The case table below is the one place that lists ops:
// OpSweepTable.EveryOpHasACase fails when an op of op_list.h has no case, so a new op needs
// a GPU case. Each case graph is built twice (one per device: variables live in the graph),
// compiled unoptimised (so arange / shape_of / identity reach the executor as built) and run
// twice on each device (recording + captured replay), comparing every target run by run.
//
// A CUDA run that had to copy data to the host (an op without a device kernel ran on the CPU)
// cannot be captured into a CUDA graph; that is noted, not failed, and one summary line at
// the end lists the ops that still fall back. Mismatches fail.
//
// TG_SWEEP_CPU_ONLY=1 checks the table itself without a GPU: the CPU executable against the
// reference interpreter (src/backends/cpu/reference.h) run node by node; cases with state or
// control flow are skipped there.
//
// TG_SWEEP_DYNAMIC=1 (the CPU binary tgraph_sweep_cpu, ctest op_sweep_dynamic, issue 22): each
// case built again with every input dim dynamic (-1) and compiled once without type inference
// (disable_type_inference) must give the static build's results on the CPU, run dynamic
// (TGRAPH_NO_SPECIALIZE) and as the copy it compiles for the run's sizes (specialize.cpp). A case whose
// builder or compile refuses dynamic dims (an op that needs a static size) is listed, not
// failed; a dynamic build that compiles and then fails or differs fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/reference.h"
#include "gpu/op_sweep_inputs.h"
#include "ir/graph_impl.h"
#include "ops/op_def.h"
#include "runtime/executable_impl.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace op_sweep;
using K = detail::OpKind;

namespace {

using Ts = std::vector<Tensor>;

/// What a case computes: tensors to compare and operations to run (assign).
struct Targets {
  Ts tensors;
  std::vector<Operation> ops;
  Targets() = default;
  Targets(Ts t, std::vector<Operation> o = {})
      : tensors(std::move(t)), ops(std::move(o)) {}  // NOLINT: implicit
};
/// Builds the case's graph from placeholders x (one per input) for case dtype t.
using Build = std::function<Targets(Graph& g, const Ts& x, DType t)>;

struct Case {
  std::string label;          // the test's name: unique, [a-z0-9_]
  std::vector<K> ops;         // the ops it covers; each must be in the built graph
  std::vector<DType> dtypes;  // run once per dtype
  std::vector<Gen> inputs;    // one placeholder each
  Build build;
  double tol = 1;      // multiplies the float tolerance of each output's dtype
  bool exact = false;  // float outputs must be equal too (data movement)
  // Its ops appear only where the graph is built with dynamic dims (sized_op: sizes known when
  // built give the plain op), so only the dynamic sweep finds them in the graph.
  bool dynamic_only = false;
};

std::vector<DType> dts(std::initializer_list<std::vector<DType>> parts) {
  std::vector<DType> r;
  for (const auto& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}
const std::vector<DType> kF{f32, f16, bf16, f64};
const std::vector<DType> kI{i32, i64};
const std::vector<DType> kFI = dts({kF, kI});
const std::vector<DType> kBits{i8, i32, i64, u8, boolean};
const std::vector<DType> kAll = dts({kF, kBits});  // data movement: every dtype class
const std::vector<DType> kBool{boolean};

std::string name_of(K k) { return detail::op_name(k); }

// ---- the case table -----------------------------------------------------------------------------

using Un = Tensor (Graph::*)(Tensor);
using Bin = Tensor (Graph::*)(Tensor, Tensor);
template <class Fn>
using Ops = std::initializer_list<std::pair<K, Fn>>;

void unary(std::vector<Case>& cs, K k, Un fn, std::vector<DType> types, Gen in, double tol = 1) {
  cs.push_back({.label = name_of(k),
                .ops = {k},
                .dtypes = std::move(types),
                .inputs = {std::move(in)},
                .build = [fn = fn](Graph& g, const Ts& x, DType) { return Ts{(g.*fn)(x[0])}; },
                .tol = tol});
}

void binary(std::vector<Case>& cs, K k, Bin fn, std::vector<DType> types, Gen a, Gen b, double tol = 1) {
  cs.push_back({.label = name_of(k),
                .ops = {k},
                .dtypes = std::move(types),
                .inputs = {std::move(a), std::move(b)},
                .build = [fn = fn](Graph& g, const Ts& x, DType) { return Ts{(g.*fn)(x[0], x[1])}; },
                .tol = tol});
}

void state_and_unary_cases(std::vector<Case>& cs) {
  const Shape s{5, 17};
  cs.push_back({.label = "constant",
                .ops = {K::Placeholder, K::Constant, K::Add},
                .dtypes = kFI,
                .inputs = {U(s, -4, 4)},
                .build = [](Graph& g, const Ts& x, DType t) {
                  return Ts{g.add(x[0], g.constant(U(Shape{5, 17}, -4, 4)(t, 77)))};
                }});
  // Reads w at the start (before), assigns, reads the new value (after); run twice, the
  // second run sees the first run's write.
  cs.push_back({.label = "assign",
                .ops = {K::Variable, K::ReadVariable, K::Assign},
                .dtypes = dts({kF, {i32}}),
                .inputs = {U(s, -2, 2)},
                .build = [](Graph& g, const Ts& x, DType t) {
                  Tensor w = g.variable(U(Shape{5, 17}, -2, 2)(t, 78), "w");
                  Tensor before = g.mul(w, x[0]);
                  Operation a = g.assign(w, g.add(w, x[0]));
                  Ts after = g.control_dependency({a}, [&] { return Ts{g.read_variable(w)}; });
                  return Targets({before, after[0]}, {a});
                }});

  const std::vector<DType> signed_types = dts({kF, {i8, i32, i64}});
  for (auto [k, fn] : Ops<Un>{{K::Identity, &Graph::identity},
                              {K::StopGradient, &Graph::stop_gradient},
                              {K::Square, &Graph::square}})
    unary(cs, k, fn, signed_types, U(s, -6, 6));
  // NaN and infinities: sign(NaN) = NaN, relu keeps NaN.
  for (auto [k, fn] : Ops<Un>{
           {K::Neg, &Graph::neg}, {K::Abs, &Graph::abs}, {K::Sign, &Graph::sign}, {K::Relu, &Graph::relu}})
    unary(cs, k, fn, signed_types, Specials(s, -6, 6));

  struct Float1 {
    K k;
    Un fn;
    double lo, hi;  // inside the domain, away from poles
  };
  const Float1 floats[] = {{K::Exp, &Graph::exp, -4, 4},
                           {K::Exp2, &Graph::exp2, -4, 4},
                           {K::Log, &Graph::log, 0.05, 5},
                           {K::Log2, &Graph::log2, 0.05, 5},
                           {K::Log1p, &Graph::log1p, -0.9, 4},
                           {K::Expm1, &Graph::expm1, -3, 3},
                           {K::Sqrt, &Graph::sqrt, 0, 5},
                           {K::Rsqrt, &Graph::rsqrt, 0.05, 5},
                           {K::Sin, &Graph::sin, -5, 5},
                           {K::Cos, &Graph::cos, -5, 5},
                           {K::Tan, &Graph::tan, -1.3, 1.3},
                           {K::Sinh, &Graph::sinh, -3, 3},
                           {K::Cosh, &Graph::cosh, -3, 3},
                           {K::Tanh, &Graph::tanh, -4, 4},
                           {K::Asin, &Graph::asin, -0.99, 0.99},
                           {K::Acos, &Graph::acos, -0.99, 0.99},
                           {K::Atan, &Graph::atan, -5, 5},
                           {K::Asinh, &Graph::asinh, -5, 5},
                           {K::Acosh, &Graph::acosh, 1.01, 5},
                           {K::Atanh, &Graph::atanh, -0.95, 0.95},
                           {K::Erf, &Graph::erf, -3, 3},
                           {K::Floor, &Graph::floor, -5, 5},
                           {K::Ceil, &Graph::ceil, -5, 5},
                           {K::Trunc, &Graph::trunc, -5, 5},
                           {K::Sigmoid, &Graph::sigmoid, -8, 8},
                           {K::Gelu, &Graph::gelu, -4, 4},
                           {K::GeluTanh, &Graph::gelu_tanh, -4, 4},
                           {K::Silu, &Graph::silu, -6, 6},
                           {K::Softplus, &Graph::softplus, -8, 8}};
  for (const Float1& f : floats) unary(cs, f.k, f.fn, kF, U(s, f.lo, f.hi));
  unary(cs, K::Reciprocal, &Graph::reciprocal, kF, Divisor(s));
  // Ties (x.5) are where round (half away from zero) and rint (half to even) differ.
  for (auto [k, fn] : Ops<Un>{{K::Round, &Graph::round}, {K::Rint, &Graph::rint}})
    cs.push_back({.label = name_of(k),
                  .ops = {k},
                  .dtypes = kF,
                  .inputs = {U(s, -5, 5), Halves(s)},
                  .build = [fn = fn](Graph& g, const Ts& x, DType) {
                    return Ts{(g.*fn)(x[0]), (g.*fn)(x[1])};
                  }});
  cs.push_back({.label = "exp_100k",
                .ops = {K::Exp},
                .dtypes = {f32, f16, bf16},
                .inputs = {U(Shape{100003}, -4, 4)},
                .build = [](Graph& g, const Ts& x, DType) { return Ts{g.exp(x[0])}; }});

  cs.push_back({.label = "leaky_relu",
                .ops = {K::LeakyRelu},
                .dtypes = kF,
                .inputs = {U(s, -4, 4)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.leaky_relu(x[0], 0.1), g.leaky_relu(x[0])};
                }});
  cs.push_back({.label = "elu",
                .ops = {K::Elu},
                .dtypes = kF,
                .inputs = {U(s, -4, 4)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.elu(x[0], 0.7), g.elu(x[0])};
                }});
  cs.push_back({.label = "hard_sigmoid",
                .ops = {K::HardSigmoid},
                .dtypes = kF,
                .inputs = {U(s, -5, 5)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.hard_sigmoid(x[0]), g.hard_sigmoid(x[0], 0.2, 0.4)};
                }});
  for (auto [k, fn] :
       Ops<Un>{{K::IsNan, &Graph::is_nan}, {K::IsInf, &Graph::is_inf}, {K::IsFinite, &Graph::is_finite}})
    unary(cs, k, fn, kF, Specials(s));
  unary(cs, K::LogicalNot, &Graph::logical_not, kBool, U(s, 0, 2));
  unary(cs, K::BitwiseNot, &Graph::bitwise_not, kBits, FullRange(s));

  // Every conversion out of every dtype: floats beyond the integer ranges saturate, NaN -> 0
  // (integers) or true (bool); integers wrap.
  cs.push_back({.label = "cast",
                .ops = {K::Cast},
                .dtypes = kAll,
                .inputs = {Either(Specials(s, -300, 300), FullRange(s))},
                .build = [](Graph& g, const Ts& x, DType t) {
                  Ts r;
                  for (DType to : kAll)
                    if (to != t) r.push_back(g.cast(x[0], to));
                  return r;
                }});
  cs.push_back({.label = "cast_100k",
                .ops = {K::Cast},
                .dtypes = {f32},
                .inputs = {U(Shape{100003}, -300, 300)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.cast(x[0], f16), g.cast(x[0], bf16), g.cast(x[0], i32), g.cast(x[0], u8)};
                }});
  cs.push_back({.label = "bitcast",
                .ops = {K::Bitcast},
                .dtypes = {f32, f16, bf16, f64, i8, i32, i64, u8},
                .inputs = {FullRange(s)},
                .build =
                    [](Graph& g, const Ts& x, DType t) {
                      Ts r;
                      switch (t) {
                        case DType::f32: r = {g.bitcast(x[0], i32)}; break;
                        case DType::f16: r = {g.bitcast(x[0], i16), g.bitcast(x[0], bf16)}; break;
                        case DType::bf16: r = {g.bitcast(x[0], i16), g.bitcast(x[0], f16)}; break;
                        case DType::f64: r = {g.bitcast(x[0], i64)}; break;
                        case DType::i8: r = {g.bitcast(x[0], u8)}; break;
                        case DType::i32: r = {g.bitcast(x[0], f32)}; break;  // some are NaN patterns
                        case DType::i64: r = {g.bitcast(x[0], f64)}; break;
                        default: r = {g.bitcast(x[0], i8)}; break;
                      }
                      return r;
                    },
                .exact = true});
}

void binary_cases(std::vector<Case>& cs) {
  const Shape s{5, 17};
  binary(cs, K::Add, &Graph::add, dts({kF, {i8, i32, i64, u8}}), U(s, -10, 10), U(s, -10, 10));
  // Operands of different shapes: the builder's broadcast_to feeds a strided (non-flat) kernel.
  cs.push_back({.label = "add_broadcast",
                .ops = {K::Add, K::BroadcastTo},
                .dtypes = dts({kF, {i32}}),
                .inputs = {U(s, -10, 10), U(Shape{17}, -10, 10), U(Shape{5, 1}, -10, 10)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.add(x[0], x[1]), g.add(x[2], x[1])};
                }});
  cs.push_back({.label = "add_100k",
                .ops = {K::Add},
                .dtypes = {f32, f16, bf16},
                .inputs = {U(Shape{100003}, -10, 10), U(Shape{100003}, -10, 10)},
                .build = [](Graph& g, const Ts& x, DType) { return Ts{g.add(x[0], x[1])}; }});
  binary(cs, K::Sub, &Graph::sub, kFI, U(s, -10, 10), U(s, -10, 10));
  binary(cs, K::Mul, &Graph::mul, kFI, U(s, -10, 10), U(s, -10, 10));
  cs.push_back({.label = "integer_wrap",
                .ops = {K::Add, K::Sub, K::Mul},
                .dtypes = {i8, i32, i64, u8},
                .inputs = {FullRange(s), FullRange(s)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.add(x[0], x[1]), g.sub(x[0], x[1]), g.mul(x[0], x[1])};
                }});
  // Integer divisors include 0 (x / 0 = 0, x mod 0 = 0); float divisors stay away from it.
  binary(cs, K::Div, &Graph::div, kFI, U(s, -10, 10), Divisor(s));
  binary(cs, K::DivNoNan, &Graph::div_no_nan, kFI, U(s, -10, 10), Divisor(s, true, true));
  binary(cs, K::Mod, &Graph::mod, kFI, U(s, -10, 10), Divisor(s));
  binary(cs, K::FloorMod, &Graph::floor_mod, kFI, U(s, -10, 10), Divisor(s));
  binary(cs, K::Pow, &Graph::pow, kF, U(s, 0.2, 3), U(s, -2, 2));
  // Integer powers: exact with wrap-around; negative exponents truncate 1 / a^|b|.
  cs.push_back({.label = "pow_int",
                .ops = {K::Pow},
                .dtypes = {i8, i32, i64},
                .inputs = {SmallInts(s, 4), Idx(s, -1, 7)},
                .build = [](Graph& g, const Ts& x, DType t) { return Ts{g.pow(x[0], g.cast(x[1], t))}; }});
  for (auto [k, fn] : Ops<Bin>{{K::Minimum, &Graph::minimum},
                               {K::Maximum, &Graph::maximum},
                               {K::MinimumNan, &Graph::minimum_nan},
                               {K::MaximumNan, &Graph::maximum_nan}})
    binary(cs, k, fn, kFI, Specials(s), U(s, -3, 3));
  binary(cs, K::Atan2, &Graph::atan2, kF, U(s, -2, 2), U(s, -2, 2));
  binary(cs, K::GeluTanhGrad, &Graph::gelu_tanh_grad, kF, U(s, -3, 3), U(s, -4, 4));
  binary(cs, K::ReluGrad, &Graph::relu_grad, kF, U(s, -3, 3), Specials(s));

  // Small integers make equal operands common; a third operand brings NaN and infinities.
  for (auto [k, fn] : Ops<Bin>{{K::Equal, &Graph::equal},
                               {K::NotEqual, &Graph::not_equal},
                               {K::Less, &Graph::less},
                               {K::LessEqual, &Graph::less_equal},
                               {K::Greater, &Graph::greater},
                               {K::GreaterEqual, &Graph::greater_equal}})
    cs.push_back({.label = name_of(k),
                  .ops = {k},
                  .dtypes = dts({kF, {i32, i64, u8, boolean}}),
                  .inputs = {SmallInts(s, 2), SmallInts(s, 2), Specials(s, -2, 2)},
                  .build = [fn = fn](Graph& g, const Ts& x, DType) {
                    return Ts{(g.*fn)(x[0], x[1]), (g.*fn)(x[2], x[0])};
                  }});
  for (auto [k, fn] : Ops<Bin>{{K::LogicalAnd, &Graph::logical_and},
                               {K::LogicalOr, &Graph::logical_or},
                               {K::LogicalXor, &Graph::logical_xor}})
    binary(cs, k, fn, kBool, U(s, 0, 2), U(s, 0, 2));
  for (auto [k, fn] : Ops<Bin>{{K::BitwiseAnd, &Graph::bitwise_and},
                               {K::BitwiseOr, &Graph::bitwise_or},
                               {K::BitwiseXor, &Graph::bitwise_xor}})
    binary(cs, k, fn, kBits, FullRange(s), FullRange(s));
  for (auto [k, fn] : Ops<Bin>{{K::ShiftLeft, &Graph::shift_left}, {K::ShiftRight, &Graph::shift_right}})
    binary(cs, k, fn, kBits, FullRange(s), ShiftAmount(s));

  cs.push_back(
      {.label = "select",
       .ops = {K::Select},
       .dtypes = kAll,
       .inputs = {As(boolean, U(s, 0, 2)), FullRange(s), FullRange(s), As(boolean, U(Shape{17}, 0, 2))},
       .build = [](Graph& g, const Ts& x, DType) {
         return Ts{g.select(x[0], x[1], x[2]), g.select(x[3], x[1], x[2])};
       }});
  cs.push_back({.label = "clamp",
                .ops = {K::Clamp},
                .dtypes = kFI,
                .inputs = {U(s, -10, 10), U(Shape{17}, -6, 0), U(Shape{5, 1}, 0, 6), Specials(s)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.clamp(x[0], x[1], x[2]), g.clamp(x[3], x[1], x[2])};
                }});
}

void reduction_cases(std::vector<Case>& cs) {
  const Shape s{4, 6, 5};
  auto axes_variants = [](Tensor (Graph::*fn)(Tensor, std::vector<int64_t>, bool)) {
    return [fn = fn](Graph& g, const Ts& x, DType) {
      return Ts{(g.*fn)(x[0], {}, false), (g.*fn)(x[0], {1}, false), (g.*fn)(x[0], {0, 2}, true),
                (g.*fn)(x[0], {-1}, false)};
    };
  };
  cs.push_back({.label = "reduce_sum",
                .ops = {K::ReduceSum},
                .dtypes = kFI,
                .inputs = {U(s, -10, 10)},
                .build = axes_variants(&Graph::reduce_sum),
                .tol = 2});
  cs.push_back({.label = "reduce_sum_100k",
                .ops = {K::ReduceSum},
                .dtypes = kF,
                .inputs = {U(Shape{3, 40000}, -1, 1), U(Shape{40000, 3}, -1, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.reduce_sum(x[0], {1}), g.reduce_sum(x[1], {0}), g.reduce_sum(x[0])};
                    },
                .tol = 5});
  cs.push_back({.label = "reduce_prod",
                .ops = {K::ReduceProd},
                .dtypes = kFI,
                .inputs = {Either(U(s, 0.7, 1.4), SmallInts(s, 2))},
                .build = axes_variants(&Graph::reduce_prod),
                .tol = 2});
  cs.push_back({.label = "reduce_max",
                .ops = {K::ReduceMax},
                .dtypes = kFI,
                .inputs = {U(s, -10, 10)},
                .build = axes_variants(&Graph::reduce_max)});
  cs.push_back({.label = "reduce_min",
                .ops = {K::ReduceMin},
                .dtypes = kFI,
                .inputs = {U(s, -10, 10)},
                .build = axes_variants(&Graph::reduce_min)});
  // A NaN anywhere in a line gives NaN.
  cs.push_back({.label = "reduce_max_min_nan",
                .ops = {K::ReduceMax, K::ReduceMin},
                .dtypes = kF,
                .inputs = {Specials(s)},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.reduce_max(x[0], {2}), g.reduce_min(x[0], {0}), g.reduce_max(x[0])};
                }});
  cs.push_back({.label = "reduce_mean",
                .ops = {K::ReduceMean},
                .dtypes = kF,
                .inputs = {U(s, -3, 3)},
                .build = axes_variants(&Graph::reduce_mean),
                .tol = 2});
  cs.push_back({.label = "reduce_variance",
                .ops = {K::ReduceVariance},
                .dtypes = kF,
                .inputs = {U(s, -3, 3)},
                .build = axes_variants(&Graph::reduce_variance),
                .tol = 4});
  cs.push_back({.label = "reduce_logsumexp",
                .ops = {K::ReduceLogSumExp},
                .dtypes = kF,
                .inputs = {U(s, -3, 3)},
                .build = axes_variants(&Graph::reduce_logsumexp),
                .tol = 2});
  cs.push_back({.label = "reduce_all",
                .ops = {K::ReduceAll},
                .dtypes = kBool,
                .inputs = {Bools(s, 0.9)},
                .build = axes_variants(&Graph::reduce_all)});
  cs.push_back({.label = "reduce_any",
                .ops = {K::ReduceAny},
                .dtypes = kBool,
                .inputs = {Bools(s, 0.1)},
                .build = axes_variants(&Graph::reduce_any)});
  // Distinct values: the first extreme is unambiguous.
  for (auto [k, fn] : Ops<Tensor (Graph::*)(Tensor, int64_t, bool)>{{K::ArgMax, &Graph::argmax},
                                                                    {K::ArgMin, &Graph::argmin}})
    cs.push_back({.label = name_of(k),
                  .ops = {k},
                  .dtypes = dts({kF, {i32, i64, u8}}),
                  .inputs = {Perm(Shape{6, 17})},
                  .build = [fn = fn](Graph& g, const Ts& x, DType) {
                    return Ts{(g.*fn)(x[0], 1, false), (g.*fn)(x[0], 0, true), (g.*fn)(x[0], -1, true)};
                  }});
  cs.push_back({.label = "argmax_100k",
                .ops = {K::ArgMax, K::ArgMin},
                .dtypes = {f32, i32},
                .inputs = {Perm(Shape{3, 40000})},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.argmax(x[0], 1), g.argmin(x[0], 1)};
                }});

  using Scan = Tensor (Graph::*)(Tensor, int64_t, bool, bool);
  for (auto [k, fn] : Ops<Scan>{{K::CumSum, &Graph::cumsum},
                                {K::CumProd, &Graph::cumprod},
                                {K::CumMax, &Graph::cummax},
                                {K::CumMin, &Graph::cummin}}) {
    const Shape x{4, 9};
    Gen in = k == K::CumProd ? Either(U(x, 0.7, 1.4), SmallInts(x, 2)) : U(x, -10, 10);
    cs.push_back({.label = name_of(k),
                  .ops = {k},
                  .dtypes = kFI,
                  .inputs = {in},
                  .build =
                      [fn = fn](Graph& g, const Ts& v, DType) {
                        return Ts{(g.*fn)(v[0], 1, false, false), (g.*fn)(v[0], 0, true, false),
                                  (g.*fn)(v[0], 1, false, true), (g.*fn)(v[0], -1, true, true)};
                      },
                  .tol = 2});
  }
  cs.push_back({.label = "top_k",
                .ops = {K::TopK},
                .dtypes = kFI,
                .inputs = {Perm(Shape{6, 17})},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      auto [v1, i1] = g.top_k(x[0], 4, -1, true);
                      auto [v2, i2] = g.top_k(x[0], 3, 0, false);
                      return Ts{v1, i1, v2, i2};
                    },
                .exact = true});
  cs.push_back({.label = "sort",
                .ops = {K::Sort},
                .dtypes = kFI,
                .inputs = {Perm(Shape{6, 17})},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.sort(x[0]), g.sort(x[0], 0, true)};
                    },
                .exact = true});
  cs.push_back({.label = "argsort",
                .ops = {K::ArgSort},
                .dtypes = kFI,
                .inputs = {Perm(Shape{6, 17})},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.argsort(x[0]), g.argsort(x[0], 0, true)};
                }});
  // Many ties: the sorts are stable, so the order of equal values is defined.
  cs.push_back({.label = "sort_stable",
                .ops = {K::Sort, K::ArgSort, K::TopK},
                .dtypes = kFI,
                .inputs = {SmallInts(Shape{6, 17}, 2)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      auto [v, i] = g.top_k(x[0], 5, -1, true);
                      return Ts{g.sort(x[0], -1, true), g.argsort(x[0]), g.argsort(x[0], 0, true), v, i};
                    },
                .exact = true});
  cs.push_back({.label = "sort_100k",
                .ops = {K::Sort, K::ArgSort, K::TopK},
                .dtypes = {f32, i32},
                .inputs = {Perm(Shape{100000})},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      auto [v, i] = g.top_k(x[0], 10);
                      return Ts{g.sort(x[0]), g.argsort(x[0], -1, true), v, i};
                    },
                .exact = true});
}

void linalg_conv_pool_cases(std::vector<Case>& cs) {
  cs.push_back({.label = "matmul",
                .ops = {K::MatMul},
                .dtypes = kF,
                .inputs = {U(Shape{7, 32}, -1, 1), U(Shape{32, 9}, -1, 1), U(Shape{32, 7}, -1, 1),
                           U(Shape{9, 32}, -1, 1), U(Shape{3, 5, 16}, -1, 1), U(Shape{16, 6}, -1, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.matmul(x[0], x[1]), g.matmul(x[2], x[3], true, true),
                                g.matmul(x[0], x[3], false, true), g.matmul(x[4], x[5])};
                    },
                .tol = 4});
  cs.push_back({.label = "matmul_broadcast_batch",
                .ops = {K::MatMul},
                .dtypes = kF,
                .inputs = {U(Shape{2, 1, 4, 8}, -1, 1), U(Shape{3, 8, 5}, -1, 1)},
                .build = [](Graph& g, const Ts& x, DType) { return Ts{g.matmul(x[0], x[1])}; },
                .tol = 4});
  // The 8-bit operands cast from the case's f32 inputs; the first product in the layout FP8
  // kernels take (on cuBLASLt), the others widened (a transpose, or n = 7 not a multiple of 16).
  cs.push_back({.label = "scaled_matmul_fp8",
                .ops = {K::ScaledMatMul},
                .dtypes = {f32},
                .inputs = {U(Shape{24, 32}, -3, 3), U(Shape{48, 32}, -3, 3), U(Shape{32, 7}, -3, 3),
                           U(Shape{}, 0.5, 2), U(Shape{1}, 0.5, 2)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      Tensor a = g.cast(x[0], f8e4m3), bt = g.cast(x[1], f8e4m3), b = g.cast(x[2], f8e5m2);
                      return Ts{g.scaled_matmul(a, bt, x[3], x[4], bf16, false, true),
                                g.scaled_matmul(a, b, x[3], x[4], f32), g.scaled_matmul(bt, a, x[4], x[3], f16, false, true)};
                    },
                .tol = 4});
  cs.push_back({.label = "band_part",
                .ops = {K::BandPart},
                .dtypes = kAll,
                .inputs = {FullRange(Shape{3, 6, 7})},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.band_part(x[0], -1, 0), g.band_part(x[0], 0, -1), g.band_part(x[0], 1, 2),
                                g.band_part(x[0], 0, 0)};
                    },
                .exact = true});

  // cuDNN may pick FFT or Winograd algorithms, whose error scales with the largest value.
  constexpr double kConvTol = 8;
  const ConvDesc same{.padding = PaddingStyle::same};
  const ConvDesc grouped{.stride = {2, 2},
                         .dilation = {1, 2},
                         .padding = PaddingStyle::explicit_,
                         .explicit_padding = {1, 0, 2, 1},
                         .data_layout = Layout::nchw,
                         .weights_layout = Layout::oihw,
                         .groups = 2};
  const ConvDesc same2{.stride = {2, 2}, .padding = PaddingStyle::same};
  cs.push_back({.label = "conv2d",
                .ops = {K::Conv2d},
                .dtypes = kF,
                .inputs = {U(Shape{2, 7, 6, 3}, -1, 1), U(Shape{3, 3, 3, 4}, -1, 1),
                           U(Shape{2, 4, 9, 8}, -1, 1), U(Shape{6, 2, 3, 3}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv2d(x[0], x[1], same), g.conv2d(x[2], x[3], grouped),
                                g.conv2d(x[0], x[1], same2)};
                    },
                .tol = kConvTol});
  cs.push_back({.label = "conv3d",
                .ops = {K::Conv3d},
                .dtypes = kF,
                .inputs = {U(Shape{1, 4, 5, 6, 2}, -1, 1), U(Shape{2, 3, 2, 2, 3}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv3d(x[0], x[1], same), g.conv3d(x[0], x[1])};
                    },
                .tol = kConvTol});
  const ConvDesc up{.stride = {2, 2}, .padding = PaddingStyle::explicit_, .explicit_padding = {1, 1, 1, 1}};
  const ConvDesc up_nchw{.stride = {2, 2},
                         .padding = PaddingStyle::explicit_,
                         .explicit_padding = {1, 1, 1, 1},
                         .data_layout = Layout::nchw,
                         .weights_layout = Layout::oihw,
                         .output_padding = {1, 1}};
  cs.push_back({.label = "conv_transpose2d",
                .ops = {K::ConvTranspose2d},
                .dtypes = kF,
                .inputs = {U(Shape{2, 4, 5, 3}, -1, 1), U(Shape{3, 3, 2, 3}, -1, 1),
                           U(Shape{1, 3, 4, 4}, -1, 1), U(Shape{3, 2, 3, 3}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv_transpose2d(x[0], x[1], up), g.conv_transpose2d(x[2], x[3], up_nchw)};
                    },
                .tol = kConvTol});
  cs.push_back({.label = "conv2d_data_grad",
                .ops = {K::Conv2dDataGrad},
                .dtypes = kF,
                .inputs = {U(Shape{2, 4, 3, 4}, -1, 1), U(Shape{3, 3, 3, 4}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv2d_data_grad(x[0], x[1], Shape{2, 7, 6, 3}, same2)};
                    },
                .tol = kConvTol});
  cs.push_back({.label = "conv2d_weight_grad",
                .ops = {K::Conv2dWeightGrad},
                .dtypes = kF,
                .inputs = {U(Shape{2, 4, 3, 4}, -1, 1), U(Shape{2, 7, 6, 3}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv2d_weight_grad(x[0], x[1], Shape{3, 3, 3, 4}, same2)};
                    },
                .tol = kConvTol});
  cs.push_back({.label = "conv3d_data_grad",
                .ops = {K::Conv3dDataGrad},
                .dtypes = kF,
                .inputs = {U(Shape{1, 4, 5, 6, 3}, -1, 1), U(Shape{2, 3, 2, 2, 3}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv3d_data_grad(x[0], x[1], Shape{1, 4, 5, 6, 2}, same)};
                    },
                .tol = kConvTol});
  cs.push_back({.label = "conv3d_weight_grad",
                .ops = {K::Conv3dWeightGrad},
                .dtypes = kF,
                .inputs = {U(Shape{1, 4, 5, 6, 3}, -1, 1), U(Shape{1, 4, 5, 6, 2}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.conv3d_weight_grad(x[0], x[1], Shape{2, 3, 2, 2, 3}, same)};
                    },
                .tol = kConvTol});

  const PoolDesc p2{};  // 2x2, stride 2, nhwc
  const PoolDesc p3{
      .kernel = {3, 3}, .stride = {2, 2}, .padding = PaddingStyle::same, .data_layout = Layout::nchw};
  const PoolDesc pad{.kernel = {3, 3},
                     .stride = {2, 2},
                     .padding = PaddingStyle::explicit_,
                     .explicit_padding = {1, 1, 1, 1}};
  PoolDesc pad_incl = pad;
  pad_incl.count_include_pad = true;
  const PoolDesc ceiled{.kernel = {2, 2}, .stride = {2, 2}, .data_layout = Layout::nchw, .ceil_mode = true};
  const Shape xn{2, 8, 7, 3}, xc{2, 3, 9, 8};
  cs.push_back({.label = "max_pool2d",
                .ops = {K::MaxPool2d},
                .dtypes = kF,
                .inputs = {U(xn, -3, 3), U(xc, -3, 3)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.max_pool2d(x[0], p2), g.max_pool2d(x[1], p3), g.max_pool2d(x[1], ceiled)};
                    },
                .exact = true});
  cs.push_back({.label = "max_pool2d_with_indices",
                .ops = {K::MaxPool2dWithIndices},
                .dtypes = kF,
                .inputs = {U(xn, -3, 3), U(xc, -3, 3)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      auto [y1, i1] = g.max_pool2d_with_indices(x[0], p2);
                      auto [y2, i2] = g.max_pool2d_with_indices(x[1], p3);
                      return Ts{y1, i1, y2, i2};
                    },
                .exact = true});
  cs.push_back({.label = "avg_pool2d",
                .ops = {K::AvgPool2d},
                .dtypes = kF,
                .inputs = {U(xn, -3, 3), U(xc, -3, 3)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.avg_pool2d(x[0], p2), g.avg_pool2d(x[0], pad), g.avg_pool2d(x[0], pad_incl),
                                g.avg_pool2d(x[1], ceiled), g.avg_pool2d(x[1], p3)};
                    },
                .tol = 2});
  // Distinct x: each window's maximum (where dy goes) is unambiguous.
  cs.push_back({.label = "max_pool2d_grad",
                .ops = {K::MaxPool2dGrad},
                .dtypes = kF,
                .inputs = {U(Shape{2, 4, 3, 3}, -1, 1), Perm(xn), U(Shape{2, 3, 5, 4}, -1, 1), Perm(xc)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.max_pool2d_grad(x[0], x[1], p2), g.max_pool2d_grad(x[2], x[3], p3)};
                    },
                .tol = 2});
  cs.push_back({.label = "avg_pool2d_grad",
                .ops = {K::AvgPool2dGrad},
                .dtypes = kF,
                .inputs = {U(Shape{2, 4, 3, 3}, -1, 1), U(xn, -1, 1), U(Shape{2, 4, 4, 3}, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.avg_pool2d_grad(x[0], x[1], p2), g.avg_pool2d_grad(x[2], x[1], pad),
                                g.avg_pool2d_grad(x[2], x[1], pad_incl)};
                    },
                .tol = 2});
}

void nn_cases(std::vector<Case>& cs) {
  const Shape s{4, 5, 6}, s4{2, 3, 4, 5};
  // The CUDA backend decomposes the norms and losses into elementwise ops and reductions, each
  // rounded to the dtype: a few roundings more than the CPU's single one.
  cs.push_back({.label = "batch_norm",
                .ops = {K::BatchNorm},
                .dtypes = kF,
                .inputs = {U(s, -2, 2), U(Shape{6}, -1, 1), U(Shape{6}, 0.5, 2), U(Shape{6}, 0.5, 1.5),
                           U(Shape{6}, -1, 1), U(s4, -2, 2), U(Shape{3}, -1, 1), U(Shape{3}, 0.5, 2),
                           U(Shape{3}, 0.5, 1.5), U(Shape{3}, -1, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.batch_norm(x[0], x[1], x[2], x[3], x[4]),
                                g.batch_norm(x[5], x[6], x[7], x[8], x[9], 1, 1e-3)};
                    },
                .tol = 4});
  cs.push_back({.label = "batch_norm_training",
                .ops = {K::BatchNormTraining},
                .dtypes = kF,
                .inputs = {U(s, -2, 2), U(Shape{6}, 0.5, 1.5), U(Shape{6}, -1, 1), U(s4, -2, 2),
                           U(Shape{3}, 0.5, 1.5), U(Shape{3}, -1, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      Ts a = g.batch_norm_training(x[0], x[1], x[2]),
                         b = g.batch_norm_training(x[3], x[4], x[5], 1);
                      a.insert(a.end(), b.begin(), b.end());
                      return a;
                    },
                .tol = 4});
  cs.push_back({.label = "layer_norm",
                .ops = {K::LayerNorm},
                .dtypes = kF,
                .inputs = {U(s, -2, 2), U(Shape{6}, 0.5, 1.5), U(Shape{6}, -1, 1), U(Shape{5, 6}, 0.5, 1.5),
                           U(Shape{5, 6}, -1, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.layer_norm(x[0], x[1], x[2]), g.layer_norm(x[0], x[3], x[4], 1)};
                    },
                .tol = 4});
  cs.push_back({.label = "group_norm",
                .ops = {K::GroupNorm},
                .dtypes = kF,
                .inputs = {U(Shape{2, 4, 5, 6}, -2, 2), U(Shape{6}, 0.5, 1.5), U(Shape{6}, -1, 1),
                           U(Shape{2, 6, 3, 4}, -2, 2)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.group_norm(x[0], x[1], x[2], 3), g.group_norm(x[3], x[1], x[2], 2, 1)};
                    },
                .tol = 4});
  for (auto [k, fn] : Ops<Tensor (Graph::*)(Tensor, int64_t)>{{K::Softmax, &Graph::softmax},
                                                              {K::LogSoftmax, &Graph::log_softmax}})
    cs.push_back({.label = name_of(k),
                  .ops = {k},
                  .dtypes = kF,
                  .inputs = {U(Shape{6, 17}, -4, 4)},
                  .build =
                      [fn = fn](Graph& g, const Ts& x, DType) {
                        return Ts{(g.*fn)(x[0], -1), (g.*fn)(x[0], 0)};
                      },
                  .tol = 2});
  cs.push_back({.label = "softmax_100k",
                .ops = {K::Softmax, K::LogSoftmax},
                .dtypes = {f32, f16, bf16},
                .inputs = {U(Shape{3, 40000}, -4, 4)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.softmax(x[0]), g.log_softmax(x[0])};
                    },
                .tol = 2});
  cs.push_back({.label = "softmax_cross_entropy",
                .ops = {K::SoftmaxCrossEntropy},
                .dtypes = kF,
                .inputs = {U(Shape{6, 17}, -3, 3), U(Shape{6, 17}, 0, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.softmax_cross_entropy(x[0], x[1], -1, LossReduction::none),
                                g.softmax_cross_entropy(x[0], x[1], -1, LossReduction::sum),
                                g.softmax_cross_entropy(x[0], x[1]), g.softmax_cross_entropy(x[0], x[1], 0)};
                    },
                .tol = 4});
  cs.push_back({.label = "mse",
                .ops = {K::Mse},
                .dtypes = kF,
                .inputs = {U(Shape{6, 17}, -3, 3), U(Shape{6, 17}, -3, 3)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.mse(x[0], x[1], LossReduction::none), g.mse(x[0], x[1], LossReduction::sum),
                                g.mse(x[0], x[1])};
                    },
                .tol = 4});
  cs.push_back(
      {.label = "scaled_dot_product_attention",
       .ops = {K::Attention},
       .dtypes = kF,
       .inputs = {U(Shape{2, 3, 5, 8}, -1, 1), U(Shape{2, 3, 7, 8}, -1, 1), U(Shape{2, 3, 7, 6}, -1, 1),
                  As(boolean, U(Shape{5, 7}, 0, 2)), U(Shape{5, 7}, -2, 0), U(Shape{3, 7, 8}, -1, 1)},
       .build =
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.scaled_dot_product_attention(x[0], x[1], x[2]),
                       g.scaled_dot_product_attention(x[0], x[1], x[2], std::nullopt, {.causal = true}),
                       g.scaled_dot_product_attention(x[0], x[1], x[2], x[3]),
                       g.scaled_dot_product_attention(x[0], x[1], x[2], x[4], {.scale = 0.5}),
                       g.scaled_dot_product_attention(x[0], x[5], x[2])};  // k's batch broadcast
           },
       .tol = 4});
}

void shape_cases(std::vector<Case>& cs) {
  auto movement = [&cs](std::string label, K k, std::vector<Gen> in, Build b,
                        std::vector<DType> types = kAll) {
    cs.push_back({.label = std::move(label),
                  .ops = {k},
                  .dtypes = std::move(types),
                  .inputs = std::move(in),
                  .build = std::move(b),
                  .exact = true});
  };
  movement("reshape", K::Reshape, {FullRange(Shape{4, 6, 5})}, [](Graph& g, const Ts& x, DType) {
    return Ts{g.reshape(x[0], {-1, 5}), g.reshape(x[0], {120}), g.reshape(x[0], {2, 3, 4, 5})};
  });
  movement("transpose", K::Transpose, {FullRange(Shape{3, 4, 5}), FullRange(Shape{2, 3, 4, 5})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.transpose(x[0], {2, 0, 1}), g.transpose(x[0], {1, 0, 2}),
                       g.transpose(x[1], {3, 1, 0, 2})};
           });
  movement("transpose_100k", K::Transpose, {FullRange(Shape{2, 300, 170})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.transpose(x[0], {0, 2, 1}), g.transpose(x[0], {2, 1, 0})};
           },
           {f32, f16, i8, f64});
  movement("broadcast_to", K::BroadcastTo, {FullRange(Shape{1, 5}), FullRange(Shape{3, 1})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.broadcast_to(x[0], {4, 3, 5}), g.broadcast_to(x[1], {3, 6})};
           });
  movement("broadcast_like", K::BroadcastLike, {FullRange(Shape{1, 5}), FullRange(Shape{4, 3, 5})},
           [](Graph& g, const Ts& x, DType) { return Ts{g.broadcast_like(x[0], x[1])}; });
  cs.push_back({.label = "sum_to_like",
                .ops = {K::SumToLike},
                .dtypes = kFI,
                .inputs = {U(Shape{4, 3, 5}, -10, 10), U(Shape{3, 1}, -1, 1), U(Shape{5}, -1, 1)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.sum_to_like(x[0], x[1]), g.sum_to_like(x[0], x[2])};
                    },
                .tol = 2});
  movement("expand_dims", K::ExpandDims, {FullRange(Shape{4, 5})}, [](Graph& g, const Ts& x, DType) {
    return Ts{g.expand_dims(x[0], {0, 2}), g.expand_dims(x[0], {-1})};
  });
  movement("squeeze", K::Squeeze, {FullRange(Shape{4, 1, 5, 1})}, [](Graph& g, const Ts& x, DType) {
    return Ts{g.squeeze(x[0], {1}), g.squeeze(x[0])};
  });
  movement("concat", K::Concat, {FullRange(Shape{3, 4}), FullRange(Shape{3, 2}), FullRange(Shape{5, 4})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.concat({x[0], x[1]}, 1), g.concat({x[0], x[2], x[0]}, 0)};
           });
  movement("split", K::Split, {FullRange(Shape{3, 10})}, [](Graph& g, const Ts& x, DType) {
    Ts a = g.split(x[0], {2, 3, 5}, 1), b = g.split(x[0], {1, 2}, 0);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  });
  movement("strided_slice", K::StridedSlice, {FullRange(Shape{6, 7, 5})}, [](Graph& g, const Ts& x, DType) {
    return Ts{
        g.strided_slice(x[0], {.begin = {1, -1}, .end = {5, 0}, .strides = {2, -2}}),
        g.strided_slice(
            x[0],
            {.begin = {0, 2, 0}, .end = {0, 5, 0}, .strides = {1, 1, 1}, .begin_mask = 1, .end_mask = 5}),
        g.strided_slice(x[0], {.begin = {3, 1}, .end = {4, 6}, .strides = {1, 2}, .squeeze_mask = 1})};
  });
  movement(
      "slice_update", K::SliceUpdate, {FullRange(Shape{6, 7}), FullRange(Shape{2, 3}), FullRange(Shape{7})},
      [](Graph& g, const Ts& x, DType) {
        return Ts{g.slice_update(x[0], x[1], {.begin = {1, 5}, .end = {4, 0}, .strides = {2, -2}}),
                  g.slice_update(x[0], x[2], {.begin = {2}, .end = {3}, .strides = {1}, .squeeze_mask = 1})};
      });
  movement("pad", K::Pad, {FullRange(Shape{3, 4, 5})}, [](Graph& g, const Ts& x, DType) {
    return Ts{g.pad(x[0], {1, 0, 2}, {2, 3, 0}, PadMode::constant, 1.5),
              g.pad(x[0], {2, 1, 1}, {1, 3, 2}, PadMode::reflect),
              g.pad(x[0], {3, 4, 0}, {2, 1, 2}, PadMode::symmetric),
              g.pad(x[0], {4, 0, 3}, {1, 5, 2}, PadMode::edge)};
  });
  movement("tile", K::Tile, {FullRange(Shape{2, 3, 4}), FullRange(Shape{5})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.tile(x[0], {2, 1, 3}), g.tile(x[1], {3})};
           });
  // Sizes computed from the inputs' sizes: a padding up to a multiple of 4, a flatten of a
  // product, a range over a dim, a slice of the second half, a tile by a dim, a broadcast.
  cs.push_back(
      {.label = "sized_op",
       .ops = {K::SizedOp},
       .dtypes = kAll,
       .inputs = {FullRange(Shape{3, 5, 6})},
       .build = [](Graph& g, const Ts& x, DType) {
         auto one = [&](int64_t v) { return g.constant(TensorData::from_vector(Shape{1}, i64, {double(v)})); };
         auto dim = [&](Tensor t, int64_t i) { return g.slice(g.shape_of(t), {i}, {i + 1}); };
         Tensor up = g.floor_mod(g.sub(one(4), g.floor_mod(dim(x[0], 1), one(4))), one(4));
         Tensor pads = g.concat({one(0), one(1), one(0), one(0), up, one(2)}, 0);
         Tensor half = g.div(dim(x[0], 2), one(2));
         Tensor n = g.reshape(dim(x[0], 0), {});
         return Ts{g.pad_sized(x[0], pads, PadMode::constant, 1.0), g.pad_sized(x[0], pads, PadMode::edge),
                   g.reshape_sized(x[0], g.concat({g.mul(dim(x[0], 0), dim(x[0], 1)), dim(x[0], 2)}, 0)),
                   g.slice_sized(x[0], half, one(INT64_MAX), one(1), {2}),
                   g.slice_sized(x[0], g.sub(dim(x[0], 1), one(1)), one(-100), one(-2), {1}),
                   g.tile_sized(x[0], g.concat({one(1), dim(x[0], 0), one(1)}, 0)),
                   g.broadcast_to_sized(x[0], g.concat({one(2), one(1), one(1), dim(x[0], 2)}, 0)),
                   g.arange_sized(g.scalar(1.0, i64), g.cast(n, i64), g.scalar(1.0, i64), i32)};
       },
       .exact = true,
       .dynamic_only = true});
  movement("reverse", K::Reverse, {FullRange(Shape{3, 4, 5})}, [](Graph& g, const Ts& x, DType) {
    return Ts{g.reverse(x[0], {0, 2}), g.reverse(x[0], {-1})};
  });
  // The collectives in a one-rank world (no tg::distributed::init): copies on every backend;
  // the multi-rank values are tested across processes (tests/python/test_distributed.py).
  cs.push_back({.label = "collectives_one_rank",
                .ops = {K::AllReduce, K::AllGather, K::ReduceScatter, K::Broadcast},
                .dtypes = dts({kF, {i32, i64}}),
                .inputs = {FullRange(Shape{4, 3})},
                .build = [](Graph& g, const Ts& x, DType t) {
                  Ts out{g.all_reduce(x[0]), g.all_gather(x[0]), g.reduce_scatter(x[0]), g.broadcast(x[0]),
                         g.all_reduce(x[0], CollectiveReduce::max)};
                  if (is_float(t)) out.push_back(g.all_reduce(x[0], CollectiveReduce::mean));
                  return out;
                },
                .exact = true});
  movement("shape_of", K::ShapeOf, {FullRange(Shape{3, 4, 5}), FullRange(Shape{})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.shape_of(x[0]), g.shape_of(x[1])};
           });
  cs.push_back({.label = "arange",
                .ops = {K::Arange},
                .dtypes = dts({kF, {i8, i32, i64, u8}}),
                .inputs = {},
                .build = [](Graph& g, const Ts&, DType t) {
                  return Ts{g.arange(0, 50, 1, t), g.arange(7.5, -3, -0.75, t), g.arange(-2, 2, 0.3, t)};
                }});
  // Indices in [-depth, -1] count from the end; others give a line of off values.
  cs.push_back({.label = "one_hot",
                .ops = {K::OneHot},
                .dtypes = dts({kF, {i32, i64, u8}}),
                .inputs = {Idx(Shape{4, 5}, -8, 9, i64), Idx(Shape{6}, 0, 6)},
                .build =
                    [](Graph& g, const Ts& x, DType t) {
                      return Ts{g.one_hot(x[0], 6, -1, t, 2.5, -1), g.one_hot(x[1], 6, 0, t)};
                    },
                .exact = true});
  movement("space_to_depth", K::SpaceToDepth, {FullRange(Shape{2, 4, 6, 3}), FullRange(Shape{2, 3, 6, 9})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.space_to_depth(x[0], 2), g.space_to_depth(x[1], 3, Layout::nchw)};
           });
  movement("depth_to_space", K::DepthToSpace, {FullRange(Shape{2, 3, 5, 12}), FullRange(Shape{1, 18, 2, 3})},
           [](Graph& g, const Ts& x, DType) {
             return Ts{g.depth_to_space(x[0], 2), g.depth_to_space(x[1], 3, Layout::nchw)};
           });
  movement(
      "resize_nearest", K::Resize, {FullRange(Shape{2, 5, 7, 3}), FullRange(Shape{2, 3, 6, 5})},
      [](Graph& g, const Ts& x, DType) {
        return Ts{g.resize(x[0], {.size = {11, 4}}),
                  g.resize(x[1], {.size = {3, 13},
                                  .coordinates = CoordinateMode::align_corners,
                                  .rounding = NearestRounding::round_prefer_ceil,
                                  .data_layout = Layout::nchw}),
                  g.resize(x[0], {.size = {4, 9},
                                  .coordinates = CoordinateMode::asymmetric,
                                  .rounding = NearestRounding::floor})};
      },
      dts({kF, {i8, i32, i64, u8}}));
  cs.push_back({.label = "resize_bilinear",
                .ops = {K::Resize},
                .dtypes = kF,
                .inputs = {U(Shape{2, 5, 7, 3}, -3, 3), U(Shape{2, 3, 6, 5}, -3, 3)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.resize(x[0], {.size = {11, 4}, .mode = ResizeMode::bilinear}),
                                g.resize(x[1], {.size = {3, 13},
                                                .mode = ResizeMode::bilinear,
                                                .coordinates = CoordinateMode::align_corners,
                                                .data_layout = Layout::nchw}),
                                g.resize(x[0], {.size = {9, 1},
                                                .mode = ResizeMode::bilinear,
                                                .coordinates = CoordinateMode::pytorch_half_pixel})};
                    },
                .tol = 2});
}

void random_and_indexing_cases(std::vector<Case>& cs) {
  // Philox streams: the same seed gives the same numbers on both devices.
  cs.push_back(
      {.label = "random",
       .ops = {K::RandomState, K::Random},
       .dtypes = kF,
       .inputs = {},
       .build = [](Graph& g, const Ts&, DType t) {
         Tensor st = g.random_state(42);
         auto [u, s1] = g.random(st, {.shape = {5, 17}, .dtype = t, .a = -2, .b = 3});
         auto [n, s2] = g.random(
             s1, {.shape = {4, 9}, .dtype = t, .distribution = Distribution::normal, .a = 1, .b = 2});
         auto [tn, s3] =
             g.random(s2, {.shape = {3, 7}, .dtype = t, .distribution = Distribution::truncated_normal});
         return Ts{st, u, n, tn, s3};
       }});
  cs.push_back(
      {.label = "random_int",
       .ops = {K::RandomState, K::Random},
       .dtypes = {i8, i32, i64},
       .inputs = {},
       .build = [](Graph& g, const Ts&, DType t) {
         auto [u, s1] = g.random(g.random_state(-7), {.shape = {5, 17}, .dtype = t, .a = -5, .b = 10});
         return Ts{u, s1};
       }});
  cs.push_back({.label = "random_100k",
                .ops = {K::Random},
                .dtypes = {f32, f16, f64},
                .inputs = {},
                .build = [](Graph& g, const Ts&, DType t) {
                  auto [u, s1] = g.random(g.random_state(3), {.shape = {100003}, .dtype = t});
                  auto [n, s2] =
                      g.random(s1, {.shape = {100003}, .dtype = t, .distribution = Distribution::normal});
                  return Ts{u, n, s2};
                }});
  cs.push_back({.label = "dropout",
                .ops = {K::Dropout},
                .dtypes = kF,
                .inputs = {U(Shape{5, 17}, -2, 2)},
                .build = [](Graph& g, const Ts& x, DType) {
                  auto [y, s1] = g.dropout(x[0], g.random_state(7), 0.3);
                  auto [z, s2] = g.dropout(x[0], s1, 0.6);
                  return Ts{y, z, s2};
                }});

  auto exact = [&cs](std::string label, K k, std::vector<Gen> in, Build b, std::vector<DType> types = kAll) {
    cs.push_back({.label = std::move(label),
                  .ops = {k},
                  .dtypes = std::move(types),
                  .inputs = std::move(in),
                  .build = std::move(b),
                  .exact = true});
  };
  // Negative indices count from the end.
  exact("gather", K::Gather,
        {FullRange(Shape{7, 5}), Idx(Shape{4, 3}, -7, 7), Idx(Shape{2, 2}, -5, 5), FullRange(Shape{3, 6, 4}),
         Idx(Shape{3, 5}, 0, 6, i64)},
        [](Graph& g, const Ts& x, DType) {
          return Ts{g.gather(x[0], x[1]), g.gather(x[0], x[2], 1), g.gather(x[3], x[4], 1, 1)};
        });
  exact("gather_nd", K::GatherNd,
        {FullRange(Shape{5, 6, 3}), Idx(Shape{4, 2}, 0, 5), FullRange(Shape{3, 5, 4}),
         Idx(Shape{3, 2, 1}, -5, 5)},
        [](Graph& g, const Ts& x, DType) {
          return Ts{g.gather_nd(x[0], x[1]), g.gather_nd(x[2], x[3], 1)};
        });
  exact("gather_along_axis", K::GatherAlongAxis,
        {FullRange(Shape{5, 6}), Idx(Shape{5, 4}, 0, 6), Idx(Shape{3, 6}, -5, 5, i64)},
        [](Graph& g, const Ts& x, DType) {
          return Ts{g.gather_along_axis(x[0], x[1], 1), g.gather_along_axis(x[0], x[2], 0)};
        });
  // set without duplicate indices (with duplicates the last update wins, which a parallel
  // scatter need not reproduce in the same way for every mode).
  exact("scatter", K::Scatter,
        {FullRange(Shape{7, 5}), UniqueIdx(Shape{3}, 7), FullRange(Shape{3, 5}), UniqueIdx(Shape{2}, 5, i64),
         FullRange(Shape{7, 2})},
        [](Graph& g, const Ts& x, DType) {
          return Ts{g.scatter(x[0], x[1], x[2]), g.scatter(x[0], x[3], x[4], 1)};
        });
  cs.push_back(
      {.label = "scatter_accumulate",
       .ops = {K::Scatter},
       .dtypes = kFI,
       .inputs = {U(Shape{7, 5}, -10, 10), Idx(Shape{6}, 0, 7), U(Shape{6, 5}, -10, 10)},
       .build =
           [](Graph& g, const Ts& x, DType) {
             Ts r;
             for (ScatterMode m : {ScatterMode::add, ScatterMode::sub, ScatterMode::min, ScatterMode::max})
               r.push_back(g.scatter(x[0], x[1], x[2], 0, m));
             return r;
           },
       .tol = 2});
  cs.push_back({.label = "scatter_mul_div",
                .ops = {K::Scatter},
                .dtypes = kFI,
                .inputs = {Either(U(Shape{7, 5}, 0.5, 2), U(Shape{7, 5}, -50, 50)), UniqueIdx(Shape{4}, 7),
                           Either(U(Shape{4, 5}, 0.5, 2), Divisor(Shape{4, 5}))},
                .build = [](Graph& g, const Ts& x, DType) {
                  return Ts{g.scatter(x[0], x[1], x[2], 0, ScatterMode::mul),
                            g.scatter(x[0], x[1], x[2], 0, ScatterMode::div)};
                }});
  exact("scatter_nd", K::ScatterNd,
        {FullRange(Shape{5, 6, 3}), UniqueRows(4, {5, 6}), FullRange(Shape{4, 3})},
        [](Graph& g, const Ts& x, DType) { return Ts{g.scatter_nd(x[0], x[1], x[2])}; });
  cs.push_back({.label = "scatter_nd_add",
                .ops = {K::ScatterNd},
                .dtypes = kFI,
                .inputs = {U(Shape{5, 6, 3}, -10, 10), Idx(Shape{6, 2}, 0, 5), U(Shape{6, 3}, -10, 10)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.scatter_nd(x[0], x[1], x[2], ScatterMode::add),
                                g.scatter_nd(x[0], x[1], x[2], ScatterMode::max)};
                    },
                .tol = 2});
  exact("scatter_along_axis", K::ScatterAlongAxis,
        {FullRange(Shape{5, 6}), UniquePerRow(5, 3, 6), FullRange(Shape{5, 3})},
        [](Graph& g, const Ts& x, DType) { return Ts{g.scatter_along_axis(x[0], x[1], x[2], 1)}; });
  cs.push_back({.label = "scatter_along_axis_add",
                .ops = {K::ScatterAlongAxis},
                .dtypes = kFI,
                .inputs = {U(Shape{5, 6}, -10, 10), Idx(Shape{5, 4}, 0, 6), U(Shape{5, 4}, -10, 10)},
                .build =
                    [](Graph& g, const Ts& x, DType) {
                      return Ts{g.scatter_along_axis(x[0], x[1], x[2], 1, ScatterMode::add),
                                g.scatter_along_axis(x[0], x[1], x[2], 1, ScatterMode::min)};
                    },
                .tol = 2});
  exact("non_zero_indices", K::NonZeroIndices, {Sparse(Shape{4, 6, 5}), Sparse(Shape{11})},
        [](Graph& g, const Ts& x, DType) {
          return Ts{g.non_zero_indices(x[0]), g.non_zero_indices(x[1])};
        });

  // Stencil windows over the last 4 dims; weights [1, 3, 3, 1].
  const Shape src{2, 5, 6, 3}, w{1, 3, 3, 1};
  auto desc = [](Reduction r, Boundary b) {
    StencilDesc d;
    d.reduction = r;
    d.boundary = b;
    d.padding_constant = 0.7;
    return d;
  };
  StencilDesc strided = desc(Reduction::sum, Boundary::symmetric);
  strided.padding_style = PaddingStyle::explicit_;
  strided.explicit_padding = {0, 0, 1, 1, 2, 0, 0, 0};
  strided.strides = {1, 2, 1, 1};
  strided.dilation_rates = {1, 1, 2, 1};
  cs.push_back({.label = "stencil",
                .ops = {K::Stencil},
                .dtypes = kF,
                .inputs = {U(src, -2, 2), U(w, -1, 1)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.stencil(x[0], x[1]),
                                g.stencil(x[0], x[1], desc(Reduction::sum, Boundary::reflect)),
                                g.stencil(x[0], x[1], desc(Reduction::sum, Boundary::constant)),
                                g.stencil(x[0], x[1], strided)};
                    },
                .tol = 4});
  cs.push_back({.label = "stencil_min_max_product",
                .ops = {K::Stencil},
                .dtypes = kF,
                .inputs = {U(src, 0.5, 1.5), U(w, 0.5, 1.5)},
                .build =
                    [=](Graph& g, const Ts& x, DType) {
                      return Ts{g.stencil(x[0], x[1], desc(Reduction::max, Boundary::periodic)),
                                g.stencil(x[0], x[1], desc(Reduction::min, Boundary::clamp_to_edge)),
                                g.stencil(x[0], x[1], desc(Reduction::product, Boundary::anti_periodic))};
                    },
                .tol = 4});
  cs.push_back({.label = "stencil_arg",
                .ops = {K::Stencil},
                .dtypes = {f32, f64},
                .inputs = {U(src, -2, 2), U(w, 0.5, 1.5)},
                .build = [=](Graph& g, const Ts& x, DType) {
                  return Ts{g.stencil(x[0], x[1], desc(Reduction::argmax, Boundary::clamp_to_edge)),
                            g.stencil(x[0], x[1], desc(Reduction::argmin, Boundary::zero))};
                }});
}

void control_flow_cases(std::vector<Case>& cs) {
  const Shape s{5, 17};
  for (bool pred : {true, false})
    cs.push_back({.label = pred ? "if_else_then" : "if_else_else",
                  .ops = {K::IfElse},
                  .dtypes = kF,
                  .inputs = {Scalar(pred, boolean), U(s, -2, 2)},
                  .build =
                      [](Graph& g, const Ts& x, DType t) {
                        Tensor v = x[1];
                        return g.if_else(
                            x[0],
                            [&](Graph& r) {
                              return Ts{r.tanh(r.mul(v, v)), r.reduce_sum(v)};
                            },
                            [&](Graph& r) {
                              return Ts{r.mul(v, r.scalar(3.0, t)), r.reduce_max(v)};
                            });
                      },
                  .tol = 2});
  cs.push_back({.label = "for_loop",
                .ops = {K::ForLoop},
                .dtypes = kF,
                .inputs = {Scalar(5, i32), U(s, -2, 2)},
                .build =
                    [](Graph& g, const Ts& x, DType t) {
                      Tensor v = x[1];
                      return g.for_loop(x[0], Ts{v}, [v, t](Graph& r, Tensor i, Ts a) {
                        return Ts{r.add(r.mul(a[0], r.scalar(0.5, t)), r.sin(r.add(v, r.cast(i, t))))};
                      });
                    },
                .tol = 4});
  cs.push_back(
      {.label = "while_loop",
       .ops = {K::WhileLoop},
       .dtypes = kF,
       .inputs = {U(s, -2, 2)},
       .build =
           [](Graph& g, const Ts& x, DType t) {
             Tensor v = x[0];
             return g.while_loop(
                 Ts{v, g.scalar(0, i32)},
                 [](Graph& r, Ts a) {
                   return std::pair<Tensor, Ts>{r.less(a[1], r.scalar(4, i32)), a};
                 },
                 [v, t](Graph& r, Ts a) {
                   return Ts{r.add(r.mul(a[0], r.scalar(0.5, t)), r.cos(v)), r.add(a[1], r.scalar(1, i32))};
                 });
           },
       .tol = 4});
}

const std::vector<Case>& cases() {
  static const std::vector<Case> table = [] {
    std::vector<Case> cs;
    state_and_unary_cases(cs);
    binary_cases(cs);
    reduction_cases(cs);
    linalg_conv_pool_cases(cs);
    nn_cases(cs);
    shape_cases(cs);
    random_and_indexing_cases(cs);
    control_flow_cases(cs);
    return cs;
  }();
  return table;
}

// ---- running and comparing ----------------------------------------------------------------------

bool dynamic_mode() {
  const char* v = std::getenv("TG_SWEEP_DYNAMIC");
  return v && std::string(v) == "1";
}

bool cpu_only() {
  const char* v = std::getenv("TG_SWEEP_CPU_ONLY");
  return v && std::string(v) == "1";
}

double tolerance(DType t) {
  switch (t) {
    case DType::bf16: return 2e-2;
    case DType::f16: return 2e-3;
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-5;
    default: return 0;
  }
}

std::string str(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// "" when got matches want: integers and bool bit for bit, floats within tol * (1 + |want|)
// (exactly when `exact`), NaN where want is NaN, infinities equal.
std::string mismatch(const TensorData& got, const TensorData& want, double tol, bool exact) {
  if (got.type() != want.type()) return "type " + got.type().str() + ", want " + want.type().str();
  if (want.nbytes() == 0 || std::memcmp(got.data(), want.data(), want.nbytes()) == 0) return "";
  const size_t es = dtype_size(want.dtype());
  const bool fl = is_float(want.dtype());
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    bool ok;
    if (!fl) {
      ok = std::memcmp(static_cast<const char*>(got.data()) + i * es,
                       static_cast<const char*>(want.data()) + i * es, es) == 0;
    } else {
      const double w = want.at(i), g = got.at(i);
      if (std::isnan(w))
        ok = std::isnan(g);
      else if (exact || std::isinf(w))
        ok = g == w;
      else
        ok = std::abs(g - w) <= tol * (1 + std::abs(w));
    }
    if (!ok && bad++ == 0)
      first = "element " + std::to_string(i) + ": got " + str(got.at(i)) + ", want " + str(want.at(i));
  }
  if (bad == 0) return "";
  return first + " (" + std::to_string(bad) + " of " + std::to_string(want.num_elements()) +
         " elements differ; tolerance " + (exact || !fl ? std::string("exact") : str(tol)) + ")";
}

// Deterministic seeds from the label (std::hash may differ between builds).
uint64_t fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct Prepared {
  Graph g;
  std::vector<std::pair<Tensor, TensorType>> feeds;
  Targets targets;
};

Prepared prepare(const Case& c, DType t, const std::vector<TensorData>& in, bool dynamic = false) {
  Prepared p;
  Ts x;
  for (size_t i = 0; i < in.size(); ++i) {
    Shape s = in[i].shape();
    if (dynamic) s = Shape(std::vector<int64_t>(static_cast<size_t>(s.rank()), -1));
    x.push_back(p.g.placeholder(s, in[i].dtype(), "in" + std::to_string(i)));
    p.feeds.emplace_back(x.back(), TensorType(s, in[i].dtype()));
  }
  p.targets = c.build(p.g, x, t);
  return p;
}

Executable compile(Prepared& p, Device d) {
  CompileOptions o;
  o.device = d;
  o.optimize = false;  // the ops reach the executor as built (no folding of arange, shape_of...)
  return p.g.compile(p.feeds, p.targets.tensors, p.targets.ops, o);
}

// The graph evaluated node by node by the reference interpreter; nullopt when it holds state or
// control flow, which the interpreter does not run.
std::optional<std::vector<TensorData>> reference_run(const Prepared& p, const std::vector<TensorData>& in) {
  const detail::GraphImpl& G = p.g.impl();
  std::vector<TensorData> val(G.values.size());
  for (size_t i = 0; i < p.feeds.size(); ++i) val[static_cast<size_t>(p.feeds[i].first.id())] = in[i];
  for (int32_t id : G.blocks[0].nodes) {
    const detail::Node& n = G.nodes[static_cast<size_t>(id)];
    if (n.kind == K::Placeholder) continue;
    if (!n.regions.empty() || n.kind == K::Variable || n.kind == K::ReadVariable || n.kind == K::Assign)
      return std::nullopt;
    std::vector<TensorData> args;
    for (int32_t v : n.inputs) args.push_back(val[static_cast<size_t>(v)]);
    std::vector<TensorData> out = detail::reference_eval(G, n, args);
    for (size_t k = 0; k < n.outputs.size(); ++k) val[static_cast<size_t>(n.outputs[k])] = out[k];
  }
  std::vector<TensorData> r;
  for (const Tensor& t : p.targets.tensors) r.push_back(val[static_cast<size_t>(t.id())]);
  return r;
}

// What the summary line reports, per op name: dtypes that fell back, and other capture errors.
struct Summary {
  std::map<std::string, std::set<std::string>> static_only;  // dynamic mode: case -> why refused
  std::map<std::string, std::set<std::string>> fallback;
  std::map<std::string, std::set<std::string>> capture_error;  // op -> "dtype: reason"
  std::set<std::string> ran;                                   // ops whose cases ran on CUDA
  int runs = 0, skipped = 0;
};
Summary& summary() {
  static Summary s;
  return s;
}

void compare_all(const std::vector<TensorData>& got, const std::vector<TensorData>& want, const Case& c,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    std::string m = mismatch(got[i], want[i], tolerance(want[i].dtype()) * c.tol, c.exact);
    EXPECT_EQ(m, "") << what << ", output " << i << " (" << want[i].type().str() << ")";
  }
}

// The ops the CUDA backend runs on the host by design (docs/decisions.md): f64 convolution
// gradients, f64 conv3d and conv_transpose2d (cuDNN has no f64 algorithm for them), and
// non_zero_indices (its result's size is known only once the host has counted). Any other
// fallback fails its case: an op that lost its device kernel must not pass unnoticed.
bool expected_fallback(const std::string& op, DType t) {
  static const std::set<std::string> f64_only = {"conv2d_data_grad", "conv2d_weight_grad", "conv3d",
                                                 "conv3d_data_grad", "conv3d_weight_grad", "conv_transpose2d"};
  return op == "non_zero_indices" || (t == f64 && f64_only.count(op));
}

void run_case(const Case& c) {
  for (DType t : c.dtypes) {
    const std::string what = c.label + " " + dtype_name(t);
    SCOPED_TRACE(what);
    try {
      std::vector<TensorData> in;
      const uint64_t seed = fnv(what);
      for (size_t i = 0; i < c.inputs.size(); ++i) in.push_back(c.inputs[i](t, seed + 7919 * i));
      Prepared pc = prepare(c, t, in);
      if (!c.dynamic_only || dynamic_mode()) {
        Prepared built = c.dynamic_only ? prepare(c, t, in, true) : Prepared{};
        for (K k : c.ops) {
          bool found = false;
          for (const detail::Node& n : (c.dynamic_only ? built : pc).g.impl().nodes) found |= n.kind == k;
          EXPECT_TRUE(found) << what << ": the graph has no " << name_of(k) << " op";
        }
      }
      Executable cpu = compile(pc, Device::cpu());
      std::vector<TensorData> want0 = cpu.run(in), want1 = cpu.run(in);
      if (dynamic_mode()) {
        // Run dynamic (TGRAPH_NO_SPECIALIZE) and as the copy compiled for the run's sizes.
        std::optional<Executable> dyn, spec;
        Prepared pd, ps;
        try {
          CompileOptions o;
          o.device = Device::cpu();
          o.optimize = false;
          o.disable_type_inference = true;
          ps = prepare(c, t, in, true);
          spec = ps.g.compile(ps.feeds, ps.targets.tensors, ps.targets.ops, o);
          pd = prepare(c, t, in, true);
          o.switches = {{"TGRAPH_NO_SPECIALIZE", "1"}};
          dyn = pd.g.compile(pd.feeds, pd.targets.tensors, pd.targets.ops, o);
        } catch (const Error& e) {
          summary().static_only[c.label].insert(std::string(e.what()).substr(0, 120));
          continue;
        }
        compare_all(dyn->run(in), want0, c, what + ", dynamic dims vs static");
        compare_all(spec->run(in), want0, c, what + ", compiled for the run's sizes vs static");
        ++summary().runs;
        continue;
      }
      if (cpu_only()) {
        Prepared pr = prepare(c, t, in);
        auto ref = reference_run(pr, in);
        if (!ref) {
          ++summary().skipped;
          continue;
        }
        compare_all(want0, *ref, c, what + ", cpu vs reference");
        ++summary().runs;
        continue;
      }
      Prepared pg = prepare(c, t, in);
      Executable gpu = compile(pg, Device::cuda(0));
      compare_all(gpu.run(in), want0, c, what + ", run 1");
      compare_all(gpu.run(in), want1, c, what + ", run 2 (replayed)");
      ++summary().runs;
      const detail::CudaGraphStats st = detail::cuda_graph_stats(gpu.impl());
      for (K k : c.ops) {
        const std::string op = name_of(k);
        summary().ran.insert(op);
        if (st.error.find("copied data to the host") != std::string::npos) {
          summary().fallback[op].insert(dtype_name(t));
          if (!expected_fallback(op, t))
            ADD_FAILURE() << what << ": " << op << " ran on the CPU inside a CUDA executable (" << st.error << ")";
        }
        else if (!st.error.empty())
          summary().capture_error[op].insert(std::string(dtype_name(t)) + ": " + st.error.substr(0, 100));
        else if (st.captures == 0)
          summary().capture_error[op].insert(std::string(dtype_name(t)) + ": not captured");
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
}

// One line for the lead at the end of the run: the ops that still fall back to the CPU on CUDA.
class SweepSummary : public testing::Environment {
 public:
  void TearDown() override {
    const Summary& s = summary();
    if (s.runs == 0 && s.skipped == 0 && s.static_only.empty()) return;
    if (dynamic_mode()) {
      std::string line;
      for (const auto& [label, why] : s.static_only) line += "\n  " + label + ": " + *why.begin();
      std::printf("[op_sweep] dynamic dims: %d case/dtype runs matched the static build; %zu cases need static "
                  "shapes:%s\n",
                  s.runs, s.static_only.size(), line.c_str());
      return;
    }
    if (cpu_only()) {
      std::printf(
          "[op_sweep] cpu-only: %d case/dtype runs matched the reference interpreter, %d skipped (state or "
          "control flow)\n",
          s.runs, s.skipped);
      return;
    }
    std::string line;
    for (const auto& [op, types] : s.fallback) {
      line += (line.empty() ? "" : ", ") + op + "(";
      bool first = true;
      for (const std::string& t : types) line += (first ? "" : " ") + t, first = false;
      line += ")";
    }
    std::string other;
    for (const auto& [op, why] : s.capture_error) other += "; " + op + " [" + *why.begin() + "]";
    size_t clean = 0;
    for (const std::string& op : s.ran) clean += !s.fallback.count(op) && !s.capture_error.count(op);
    std::printf(
        "[op_sweep] %zu of %zu ops ran on the device in every case; CPU fallback on CUDA (%zu): %s%s%s\n",
        clean, s.ran.size(), s.fallback.size(), line.empty() ? "none" : line.c_str(),
        other.empty() ? "" : "; capture given up otherwise", other.c_str());
  }
};
[[maybe_unused]] testing::Environment* const kSummaryEnv =
    testing::AddGlobalTestEnvironment(new SweepSummary);

}  // namespace

// Every op of op_list.h has a case here (a new op fails this until it gets a GPU case), and
// every label names one test.
TEST(OpSweepTable, EveryOpHasACase) {
  std::vector<bool> covered(static_cast<size_t>(detail::kNumOps), false);
  std::set<std::string> labels;
  for (const Case& c : cases()) {
    for (K k : c.ops) covered[static_cast<size_t>(k)] = true;
    EXPECT_TRUE(labels.insert(c.label).second) << "duplicate case label " << c.label;
    EXPECT_FALSE(c.dtypes.empty()) << c.label;
  }
  std::string missing;
  for (int i = 0; i < detail::kNumOps; ++i)
    if (!covered[static_cast<size_t>(i)]) missing += name_of(static_cast<K>(i)) + " ";
  EXPECT_EQ(missing, "") << "ops of src/ops/op_list.h without a case in tests/gpu/op_sweep_test.cpp";
}

class OpSweep : public testing::TestWithParam<size_t> {};

TEST_P(OpSweep, MatchesCpu) { run_case(cases()[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(Ops, OpSweep, testing::Range<size_t>(0, cases().size()),
                         [](const testing::TestParamInfo<size_t>& i) { return cases()[i.param].label; });
