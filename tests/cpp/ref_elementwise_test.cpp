// Reference interpreter: elementwise ops, their rounding / NaN / integer rules, broadcasting.
#include <cmath>
#include <cstdint>
#include <functional>

#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {

// Applies a unary builder to the given f64 values.
TensorData unary(const std::function<tg::Tensor(tg::Graph&, tg::Tensor)>& op,
                 const std::vector<double>& xs, tg::DType t = tg::f64) {
  tg::Graph g;
  auto x = g.placeholder({static_cast<int64_t>(xs.size())}, t);
  return eval(g, op(g, x), {TensorData::from_vector({static_cast<int64_t>(xs.size())}, t, xs)});
}

// Applies a binary builder elementwise to two equal-length vectors.
TensorData binary(const std::function<tg::Tensor(tg::Graph&, tg::Tensor, tg::Tensor)>& op,
                  const std::vector<double>& a, const std::vector<double>& b, tg::DType t) {
  tg::Graph g;
  int64_t n = static_cast<int64_t>(a.size());
  auto x = g.placeholder({n}, t), y = g.placeholder({n}, t);
  return eval(g, op(g, x, y), {TensorData::from_vector({n}, t, a), TensorData::from_vector({n}, t, b)});
}

}  // namespace

TEST(RefElementwise, UnaryMatchesLibmOnRandomInput) {
  tg::Graph g;
  auto x = g.placeholder({3, 4}, tg::f32);
  TensorData in = TensorData::uniform({3, 4}, 0.1, 2.0, tg::f32, 3);
  struct Case { tg::Tensor t; double (*f)(double); };
  std::vector<Case> cases = {{g.exp(x), [](double v) { return std::exp(v); }},
                             {g.log(x), [](double v) { return std::log(v); }},
                             {g.sqrt(x), [](double v) { return std::sqrt(v); }},
                             {g.rsqrt(x), [](double v) { return 1 / std::sqrt(v); }},
                             {g.tanh(x), [](double v) { return std::tanh(v); }},
                             {g.erf(x), [](double v) { return std::erf(v); }},
                             {g.log1p(x), [](double v) { return std::log(1 + v); }},
                             {g.exp2(x), [](double v) { return std::pow(2.0, v); }}};
  for (const Case& k : cases) {
    TensorData y = eval(g, k.t, {in});
    ASSERT_EQ(y.dtype(), tg::f32);
    std::vector<double> e;
    for (int64_t i = 0; i < 12; ++i) e.push_back(k.f(in.at(i)));
    expect_values(y, e, 1e-6);
  }
}

TEST(RefElementwise, RoundingRules) {
  std::vector<double> xs = {2.5, -2.5, 3.5, 0.5, -0.5, 1.4, -1.6};
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.round(x); }, xs),
                {3, -3, 4, 1, -1, 1, -2});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.rint(x); }, xs),
                {2, -2, 4, 0, -0, 1, -2});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.trunc(x); }, xs),
                {2, -2, 3, 0, 0, 1, -1});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.floor(x); }, xs),
                {2, -3, 3, 0, -1, 1, -2});
}

TEST(RefElementwise, SignAndNaNPropagation) {
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.sign(x); }, {-3, 0, 2.5, kNaN}),
                {-1, 0, 1, kNaN});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.sign(x); }, {-3, 0, 7}, tg::i32),
                {-1, 0, 1});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.relu(x); }, {-1, 2, kNaN}),
                {0, 2, kNaN});
  TensorData p = unary([](tg::Graph& g, tg::Tensor x) { return g.is_nan(x); }, {kNaN, 1, kInf});
  EXPECT_EQ(p.dtype(), tg::boolean);
  expect_values(p, {1, 0, 0});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.is_inf(x); }, {kNaN, 1, -kInf}), {0, 0, 1});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.is_finite(x); }, {kNaN, 1, -kInf}), {0, 1, 0});
}

TEST(RefElementwise, Activations) {
  auto f = [](auto op, std::vector<double> xs) { return unary(op, xs); };
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.gelu(x); }, {1, -0.5}),
                {0.8413447460685429, -0.15426876936299344}, 1e-12);
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.gelu_tanh(x); }, {1, -0.5}),
                {0.8411919906082768, -0.15428599017485606}, 1e-12);
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.softplus(x); }, {0, 100, -100, 800}),
                {0.6931471805599453, 100, 3.720075976020836e-44, 800}, 1e-12);
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.hard_sigmoid(x); }, {-4, 0, 1, 4}),
                {0, 0.5, 0.5 + 1.0 / 6, 1}, 1e-12);
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.elu(x, 2.0); }, {-1, 3}),
                {2 * -0.6321205588285577, 3}, 1e-12);
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.leaky_relu(x, 0.1); }, {-2, 3}), {-0.2, 3});
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.sigmoid(x); }, {-800, 0, 800}), {0, 0.5, 1});
  expect_values(f([](tg::Graph& g, tg::Tensor x) { return g.silu(x); }, {1}), {0.7310585786300049}, 1e-12);
  // dy * gelu_tanh'(x); the expected values are PyTorch's gelu(approximate='tanh') backward in f64.
  expect_values(binary([](tg::Graph& g, tg::Tensor dy, tg::Tensor x) { return g.gelu_tanh_grad(dy, x); },
                       {2, -1, 0.5}, {1, -0.5, 3}, tg::f64),
                {2.165928167691565, -0.13263009646535764, 0.5057920833154848}, 1e-12);
  expect_values(binary([](tg::Graph& g, tg::Tensor dy, tg::Tensor y) { return g.relu_grad(dy, y); },
                       {2, -1, 0.5, 3}, {0.25, 0, -1, kNaN}, tg::f32),
                {2, 0, 0, 0});
}

TEST(RefElementwise, ModAndFloorMod) {
  auto mod = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.mod(a, b); };
  auto fmod = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.floor_mod(a, b); };
  std::vector<double> a = {-7, 7, 7, -7.5, 6}, b = {3, -3, 3, 2, 3};
  expect_values(binary(mod, a, b, tg::f32), {-1, 1, 1, -1.5, 0});
  expect_values(binary(fmod, a, b, tg::f32), {2, -2, 1, 0.5, 0});
  expect_values(binary(mod, {-7, 7, 7, 5}, {3, -3, 3, 0}, tg::i32), {-1, 1, 1, 0});
  expect_values(binary(fmod, {-7, 7, 7, 5}, {3, -3, 3, 0}, tg::i32), {2, -2, 1, 0});
  expect_values(binary(mod, {1}, {0}, tg::f32), {kNaN});
}

TEST(RefElementwise, IntegerDivisionTruncatesAndWraps) {
  auto div = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.div(a, b); };
  expect_values(binary(div, {-7, 7, -7, 5}, {2, 2, -2, 0}, tg::i32), {-3, 3, 3, 0});
  expect_values(binary(div, {-7}, {2}, tg::f32), {-3.5});
  expect_values(binary(div, {INT32_MIN}, {-1}, tg::i32), {INT32_MIN});
  auto add = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.add(a, b); };
  expect_values(binary(add, {127, -128}, {1, -1}, tg::i8), {-128, 127});
  expect_values(binary(add, {250}, {10}, tg::u8), {4});
  auto mul = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.mul(a, b); };
  expect_values(binary(mul, {65536}, {65536}, tg::i32), {0});
}

TEST(RefElementwise, DivNoNanAndPow) {
  auto dnn = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.div_no_nan(a, b); };
  expect_values(binary(dnn, {1, kNaN, 6, 0}, {0, 0, 3, 0}, tg::f32), {0, 0, 2, 0});
  expect_values(binary(dnn, {5, 6}, {0, -4}, tg::i32), {0, -1});
  auto pow = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.pow(a, b); };
  expect_values(binary(pow, {2, 3, 2, -1, 1, 0}, {10, 3, -1, -3, -5, 0}, tg::i32), {1024, 27, 0, -1, 1, 1});
  expect_values(binary(pow, {2, 4, -8}, {-1, 0.5, 1.0 / 3}, tg::f64), {0.5, 2, kNaN});
}

TEST(RefElementwise, MinMaxNaNRules) {
  auto mn = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.minimum(a, b); };
  auto mx = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.maximum(a, b); };
  auto mnn = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.minimum_nan(a, b); };
  auto mxn = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.maximum_nan(a, b); };
  std::vector<double> a = {kNaN, 1, 3, kNaN}, b = {1, kNaN, 2, kNaN};
  expect_values(binary(mn, a, b, tg::f32), {1, 1, 2, kNaN});
  expect_values(binary(mx, a, b, tg::f32), {1, 1, 3, kNaN});
  expect_values(binary(mnn, a, b, tg::f32), {kNaN, kNaN, 2, kNaN});
  expect_values(binary(mxn, a, b, tg::f32), {kNaN, kNaN, 3, kNaN});
}

TEST(RefElementwise, BitwiseAndShifts) {
  auto sl = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.shift_left(a, b); };
  auto sr = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.shift_right(a, b); };
  expect_values(binary(sl, {1, 3, 1, 5}, {31, 2, 32, -1}, tg::i32), {INT32_MIN, 12, 0, 0});
  expect_values(binary(sr, {-8, 8, -1, 5}, {1, 3, 40, 32}, tg::i32), {-4, 1, -1, 0});
  expect_values(binary(sr, {200}, {2}, tg::u8), {50});
  expect_values(binary(sl, {200}, {1}, tg::u8), {144});
  auto band = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.bitwise_and(a, b); };
  auto bor = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.bitwise_or(a, b); };
  auto bxor = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.bitwise_xor(a, b); };
  expect_values(binary(band, {12, -1}, {10, 7}, tg::i16), {8, 7});
  expect_values(binary(bor, {12, -8}, {10, 3}, tg::i16), {14, -5});
  expect_values(binary(bxor, {12}, {10}, tg::i16), {6});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.bitwise_not(x); }, {5}, tg::u8), {250});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.bitwise_not(x); }, {5, -1}, tg::i32), {-6, 0});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.bitwise_not(x); }, {1, 0}, tg::boolean), {0, 1});
}

TEST(RefElementwise, LogicalAndCompare) {
  auto land = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.logical_and(a, b); };
  auto lxor = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.logical_xor(a, b); };
  expect_values(binary(land, {1, 1, 0, 0}, {1, 0, 1, 0}, tg::boolean), {1, 0, 0, 0});
  expect_values(binary(lxor, {1, 1, 0, 0}, {1, 0, 1, 0}, tg::boolean), {0, 1, 1, 0});
  auto eq = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.equal(a, b); };
  auto ne = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.not_equal(a, b); };
  auto le = [](tg::Graph& g, tg::Tensor a, tg::Tensor b) { return g.less_equal(a, b); };
  expect_values(binary(eq, {kNaN, 1, 2}, {kNaN, 1, 3}, tg::f32), {0, 1, 0});
  expect_values(binary(ne, {kNaN, 1, 2}, {kNaN, 1, 3}, tg::f32), {1, 0, 1});
  expect_values(binary(le, {kNaN, 1, 2}, {1, 1, 1}, tg::f32), {0, 1, 0});
  // i64 values above 2^53 compare exactly, not through double.
  tg::Graph g;
  auto a = g.placeholder({1}, tg::i64), b = g.placeholder({1}, tg::i64);
  TensorData ta({1}, tg::i64), tb({1}, tg::i64);
  ta.ptr<int64_t>()[0] = (int64_t{1} << 53) + 1;
  tb.ptr<int64_t>()[0] = int64_t{1} << 53;
  expect_values(eval(g, g.equal(a, b), {ta, tb}), {0});
  TensorData s = eval(g, g.sub(a, b), {ta, tb});
  EXPECT_EQ(s.ptr<int64_t>()[0], 1);
}

TEST(RefElementwise, RuntimeBroadcasting) {
  tg::Graph g;
  auto a = g.placeholder({-1, -1}, tg::f32), b = g.placeholder({-1}, tg::f32);
  auto y = g.sub(a, b);
  TensorData ta = TensorData::from_vector({2, 1}, tg::f32, {10, 20});
  TensorData tb = TensorData::from_vector({3}, tg::f32, {1, 2, 3});
  TensorData r = eval(g, y, {ta, tb});
  expect_shape(r, {2, 3});
  expect_values(r, {9, 8, 7, 19, 18, 17});
  EXPECT_TG_ERROR(eval(g, y, {TensorData::zeros({2, 2}), TensorData::zeros({3})}), "[sub]");
}

TEST(RefElementwise, SelectAndClamp) {
  tg::Graph g;
  auto c = g.placeholder({-1, 1}, tg::boolean), a = g.placeholder({-1, -1}, tg::f32);
  auto b = g.placeholder({-1, -1}, tg::f32);
  auto s = g.select(c, a, b);
  TensorData r = eval(g, s, {TensorData::from_vector({2, 1}, tg::boolean, {1, 0}),
                             TensorData::from_vector({1, 2}, tg::f32, {1, 2}),
                             TensorData::from_vector({2, 2}, tg::f32, {5, 6, 7, 8})});
  expect_values(r, {1, 2, 7, 8});
  auto x = g.placeholder({4}, tg::f32);
  auto cl = g.clamp(x, g.scalar(0), g.scalar(1));
  expect_values(eval(g, cl, {TensorData::from_vector({4}, tg::f32, {-1, 0.5, 2, kNaN}),
                             TensorData::from_vector({4}, tg::f32, {0, 0, 0, 0}),
                             TensorData::from_vector({4}, tg::f32, {1, 1, 1, 1})}),
                {0, 0.5, 1, kNaN});
}

TEST(RefElementwise, CastAndBitcast) {
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.cast(x, tg::i32); },
                      {2.7, -2.7, 1e10, -1e10, kNaN}),
                {2, -2, INT32_MAX, INT32_MIN, 0});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.cast(x, tg::i8); }, {300, -129}, tg::i32),
                {44, 127});
  expect_values(unary([](tg::Graph& g, tg::Tensor x) { return g.cast(x, tg::boolean); }, {0, -0.5, kNaN}),
                {0, 1, 1});
  TensorData b = unary([](tg::Graph& g, tg::Tensor x) { return g.bitcast(x, tg::i32); }, {1.0, -2.0}, tg::f32);
  EXPECT_EQ(b.ptr<int32_t>()[0], 0x3f800000);
  EXPECT_EQ(static_cast<uint32_t>(b.ptr<int32_t>()[1]), 0xc0000000u);
}

TEST(RefElementwise, HalfOutputAndEmpty) {
  TensorData h = unary([](tg::Graph& g, tg::Tensor x) { return g.exp(x); }, {1.5}, tg::f16);
  EXPECT_EQ(h.dtype(), tg::f16);
  EXPECT_EQ(h.at(0), 4.48046875);  // exp(1.5) = 4.4817 rounded once to half
  tg::Graph g;
  auto a = g.placeholder({-1, 3}, tg::f32);
  TensorData r = eval(g, g.mul(a, a), {TensorData::zeros({0, 3}), TensorData::zeros({0, 3})});
  expect_shape(r, {0, 3});
}

TEST(RefElementwise, ConstantAndExecutorOps) {
  tg::Graph g;
  auto c = g.constant(TensorData::from_vector({2}, tg::f32, {3, 4}));
  expect_values(eval(g, c, {}), {3, 4});
  auto p = g.placeholder({2}, tg::f32, "p");
  EXPECT_TG_ERROR(eval(g, p, {}), "[placeholder]");
}
