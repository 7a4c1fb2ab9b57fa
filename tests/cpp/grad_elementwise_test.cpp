// Gradients of elementwise ops against finite differences (f64).
#include "grad_check.h"
#include "test_util.h"

using namespace tg;
using gradcheck::check;
using gradcheck::u;

namespace {
using UnaryFn = Tensor (Graph::*)(Tensor);
struct Unary {
  const char* name;
  UnaryFn fn;
  double lo, hi;
};
}  // namespace

TEST(GradElementwise, Unary) {
  const Unary ops[] = {
      {"identity", &Graph::identity, -2, 2}, {"neg", &Graph::neg, -2, 2},
      {"abs", &Graph::abs, 0.1, 2},          {"exp", &Graph::exp, -2, 2},
      {"exp2", &Graph::exp2, -2, 2},         {"log", &Graph::log, 0.2, 3},
      {"log2", &Graph::log2, 0.2, 3},        {"log1p", &Graph::log1p, -0.5, 3},
      {"expm1", &Graph::expm1, -2, 2},       {"sqrt", &Graph::sqrt, 0.2, 3},
      {"rsqrt", &Graph::rsqrt, 0.2, 3},      {"reciprocal", &Graph::reciprocal, 0.3, 3},
      {"square", &Graph::square, -2, 2},     {"sin", &Graph::sin, -3, 3},
      {"cos", &Graph::cos, -3, 3},           {"tan", &Graph::tan, -1, 1},
      {"sinh", &Graph::sinh, -2, 2},         {"cosh", &Graph::cosh, -2, 2},
      {"tanh", &Graph::tanh, -2, 2},         {"asin", &Graph::asin, -0.8, 0.8},
      {"acos", &Graph::acos, -0.8, 0.8},     {"atan", &Graph::atan, -2, 2},
      {"asinh", &Graph::asinh, -2, 2},       {"acosh", &Graph::acosh, 1.2, 3},
      {"atanh", &Graph::atanh, -0.8, 0.8},   {"erf", &Graph::erf, -2, 2},
      {"sigmoid", &Graph::sigmoid, -3, 3},   {"relu", &Graph::relu, 0.1, 2},
      {"gelu", &Graph::gelu, -3, 3},         {"gelu_tanh", &Graph::gelu_tanh, -3, 3},
      {"silu", &Graph::silu, -3, 3},         {"softplus", &Graph::softplus, -3, 3},
      {"floor", &Graph::floor, 0.1, 0.9},
  };
  for (const Unary& op : ops)
    check(op.name, [&](Graph& g, const std::vector<Tensor>& x) { return std::vector{(g.*op.fn)(x[0])}; },
          {u({2, 3}, op.lo, op.hi, 7)});
  // Both sides of the kinks.
  check("relu both sides", [](Graph& g, auto& x) { return std::vector{g.relu(x[0])}; },
        {TensorData::from_vector({4}, f64, {-1.5, -0.2, 0.3, 2.0})});
  check("leaky_relu", [](Graph& g, auto& x) { return std::vector{g.leaky_relu(x[0], 0.2)}; },
        {TensorData::from_vector({4}, f64, {-1.5, -0.2, 0.3, 2.0})});
  check("elu", [](Graph& g, auto& x) { return std::vector{g.elu(x[0], 0.7)}; },
        {TensorData::from_vector({4}, f64, {-1.5, -0.2, 0.3, 2.0})});
  check("hard_sigmoid", [](Graph& g, auto& x) { return std::vector{g.hard_sigmoid(x[0])}; },
        {TensorData::from_vector({4}, f64, {-4.0, -0.2, 0.3, 4.0})});
  check("cast f64->f32->f64", [](Graph& g, auto& x) { return std::vector{g.cast(g.cast(x[0], f32), f64)}; },
        {u({3}, -1, 1, 3)}, 1e-3, 1e-4, false, 1e-2);
}

TEST(GradElementwise, BinaryWithBroadcast) {
  auto a = u({2, 3}, 0.5, 2, 1), b = u({3}, 0.5, 2, 2), bcol = u({2, 1}, 0.5, 2, 3);
  check("add", [](Graph& g, auto& x) { return std::vector{g.add(x[0], x[1])}; }, {a, b});
  check("sub", [](Graph& g, auto& x) { return std::vector{g.sub(x[0], x[1])}; }, {a, bcol});
  check("mul", [](Graph& g, auto& x) { return std::vector{g.mul(x[0], x[1])}; }, {a, b});
  check("div", [](Graph& g, auto& x) { return std::vector{g.div(x[0], x[1])}; }, {a, bcol});
  check("div_no_nan", [](Graph& g, auto& x) { return std::vector{g.div_no_nan(x[0], x[1])}; }, {a, b});
  check("pow", [](Graph& g, auto& x) { return std::vector{g.pow(x[0], x[1])}; }, {a, b});
  check("maximum", [](Graph& g, auto& x) { return std::vector{g.maximum(x[0], x[1])}; }, {a, b});
  check("minimum", [](Graph& g, auto& x) { return std::vector{g.minimum(x[0], x[1])}; }, {a, bcol});
  check("atan2", [](Graph& g, auto& x) { return std::vector{g.atan2(x[0], x[1])}; }, {a, b});
  // Its second derivative: what a gradient of a gradient of gelu_tanh needs.
  check("gelu_tanh_grad", [](Graph& g, auto& x) { return std::vector{g.gelu_tanh_grad(x[0], x[1])}; },
        {u({2, 3}, -2, 2, 11), u({2, 3}, -3, 3, 12)});
  check("relu_grad", [](Graph& g, auto& x) { return std::vector{g.relu_grad(x[0], x[1])}; },
        {u({4}, -2, 2, 13), TensorData::from_vector({4}, f64, {-1.5, -0.2, 0.3, 2.0})});
  check("mod", [](Graph& g, auto& x) { return std::vector{g.mod(x[0], x[1])}; },
        {u({4}, 2.1, 2.9, 4), u({4}, 0.9, 1.0, 5)});
  check("floor_mod", [](Graph& g, auto& x) { return std::vector{g.floor_mod(x[0], x[1])}; },
        {u({4}, -2.9, -2.1, 4), u({4}, 0.9, 1.0, 5)});
  check("select", [](Graph& g, auto& x) {
    return std::vector{g.select(g.greater(x[0], g.scalar(1.2, f64)), x[0], x[1])};
  }, {a, b});
  check("clamp", [](Graph& g, auto& x) { return std::vector{g.clamp(x[0], x[1], g.add(x[1], g.scalar(0.5, f64)))}; },
        {u({6}, 0, 3, 8), u({6}, 0.9, 1.1, 9)});
  check("same value used twice", [](Graph& g, auto& x) { return std::vector{g.mul(x[0], g.exp(x[0]))}; },
        {u({5}, -1, 1, 6)});
}

TEST(GradElementwise, DynamicShapesUnbroadcastAtRunTime) {
  check("add dynamic", [](Graph& g, auto& x) { return std::vector{g.mul(g.add(x[0], x[1]), x[0])}; },
        {u({3, 4}, -1, 1, 1), u({4}, -1, 1, 2)}, 1e-5, 1e-6, /*dynamic=*/true);
  check("reduce dynamic", [](Graph& g, auto& x) { return std::vector{g.reduce_mean(g.square(x[0]), {1})}; },
        {u({3, 4}, -1, 1, 1)}, 1e-5, 1e-6, true);
}

TEST(GradElementwise, StopGradientAndUnreachable) {
  Graph g;
  Tensor x = g.placeholder({3}, f64, "x"), z = g.placeholder({3}, f64, "z");
  Tensor y = g.reduce_sum(g.mul(x, g.stop_gradient(x)));
  auto gr = g.gradients(y, {x, z});
  Executable e = g.compile({{x, x.type()}, {z, z.type()}}, {gr[x], gr[z]}, {}, {.device = Device::cpu()});
  auto r = e.run({TensorData::from_vector({3}, f64, {1, 2, 3}), TensorData::zeros({3}, f64)});
  EXPECT_EQ(r[0].to_vector(), (std::vector<double>{1, 2, 3}));  // only the unstopped factor
  EXPECT_EQ(r[1].to_vector(), (std::vector<double>{0, 0, 0}));
  // Second-order gradients through the pooling gradient op have no rule (yet).
  Tensor x4 = g.placeholder({1, 2, 2, 1}, f64);
  EXPECT_TG_ERROR(g.gradients(g.reduce_sum(g.avg_pool2d_grad(x4, x4, PoolDesc{{1, 1}})), {x4}),
                  "[gradients] no gradient rule for op");
  EXPECT_TG_ERROR(g.gradients(g.argmax(x, 0), {x}), "[gradients] y must be floating point");
}
