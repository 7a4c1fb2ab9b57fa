// Gradients of normalisation, softmax, losses and attention against finite differences (f64).
#include "grad_check.h"

using namespace tg;
using gradcheck::check;
using gradcheck::u;

namespace {
using Ts = std::vector<Tensor>;
}

TEST(GradNn, BatchNorm) {
  check("batch_norm channels last",
        [](Graph& g, const Ts& a) { return Ts{g.batch_norm(a[0], a[1], a[2], a[3], a[4])}; },
        {u({2, 3, 4}, -1, 1, 1), u({4}, -0.5, 0.5, 2), u({4}, 0.5, 1.5, 3), u({4}, 0.5, 1.5, 4), u({4}, -1, 1, 5)});
  check("batch_norm axis 1",
        [](Graph& g, const Ts& a) { return Ts{g.batch_norm(a[0], a[1], a[2], a[3], a[4], 1, 1e-3)}; },
        {u({2, 3, 2, 2}, -1, 1, 6), u({3}, -0.5, 0.5, 7), u({3}, 0.5, 1.5, 8), u({3}, 0.5, 1.5, 9), u({3}, -1, 1, 10)});
  check("batch_norm_training", [](Graph& g, const Ts& a) { return Ts{g.batch_norm_training(a[0], a[1], a[2])[0]}; },
        {u({3, 2, 4}, -1, 1, 11), u({4}, 0.5, 1.5, 12), u({4}, -1, 1, 13)});
  // The batch statistics are outputs too; their gradients flow back to x.
  check("batch_norm_training all outputs axis 1",
        [](Graph& g, const Ts& a) { return g.batch_norm_training(a[0], a[1], a[2], 1); },
        {u({2, 3, 2, 2}, -1, 1, 14), u({3}, 0.5, 1.5, 15), u({3}, -1, 1, 16)});
}

TEST(GradNn, LayerAndGroupNorm) {
  check("layer_norm last", [](Graph& g, const Ts& a) { return Ts{g.layer_norm(a[0], a[1], a[2])}; },
        {u({3, 5}, -1, 1, 21), u({5}, 0.5, 1.5, 22), u({5}, -1, 1, 23)});
  check("layer_norm two dims", [](Graph& g, const Ts& a) { return Ts{g.layer_norm(a[0], a[1], a[2], 1)}; },
        {u({2, 3, 4}, -1, 1, 24), u({3, 4}, 0.5, 1.5, 25), u({3, 4}, -1, 1, 26)});
  check("group_norm nhwc", [](Graph& g, const Ts& a) { return Ts{g.group_norm(a[0], a[1], a[2], 2)}; },
        {u({2, 2, 3, 4}, -1, 1, 27), u({4}, 0.5, 1.5, 28), u({4}, -1, 1, 29)});
  check("group_norm nchw", [](Graph& g, const Ts& a) { return Ts{g.group_norm(a[0], a[1], a[2], 3, 1)}; },
        {u({2, 6, 2, 2}, -1, 1, 30), u({6}, 0.5, 1.5, 31), u({6}, -1, 1, 32)});
}

TEST(GradNn, SoftmaxAndLosses) {
  auto x = u({3, 4}, -2, 2, 41);
  check("softmax", [](Graph& g, const Ts& a) { return Ts{g.softmax(a[0])}; }, {x});
  check("softmax axis 0", [](Graph& g, const Ts& a) { return Ts{g.softmax(a[0], 0)}; }, {x});
  check("log_softmax", [](Graph& g, const Ts& a) { return Ts{g.log_softmax(a[0])}; }, {x});
  check("log_softmax axis 0", [](Graph& g, const Ts& a) { return Ts{g.log_softmax(a[0], 0)}; }, {x});
  auto labels = u({3, 4}, 0.1, 1, 42);
  for (LossReduction r : {LossReduction::none, LossReduction::sum, LossReduction::mean}) {
    check("softmax_cross_entropy", [&](Graph& g, const Ts& a) { return Ts{g.softmax_cross_entropy(a[0], a[1], -1, r)}; },
          {x, labels});
    check("softmax_cross_entropy axis 0",
          [&](Graph& g, const Ts& a) { return Ts{g.softmax_cross_entropy(a[0], a[1], 0, r)}; }, {x, labels});
    check("mse", [&](Graph& g, const Ts& a) { return Ts{g.mse(a[0], a[1], r)}; }, {x, labels});
  }
  check("mse broadcast", [](Graph& g, const Ts& a) { return Ts{g.mse(a[0], a[1])}; }, {x, u({4}, -1, 1, 43)});
  check("softmax dynamic", [](Graph& g, const Ts& a) { return Ts{g.softmax(a[0])}; }, {x}, 1e-5, 1e-6, true);
  check("cross entropy mean dynamic", [](Graph& g, const Ts& a) { return Ts{g.softmax_cross_entropy(a[0], a[1])}; },
        {x, labels}, 1e-5, 1e-6, true);
  check("mse mean dynamic", [](Graph& g, const Ts& a) { return Ts{g.mse(a[0], a[1])}; }, {x, labels}, 1e-5, 1e-6, true);
}

TEST(GradNn, Attention) {
  auto q = u({2, 3, 4}, -1, 1, 51), k = u({2, 5, 4}, -1, 1, 52), v = u({2, 5, 3}, -1, 1, 53);
  check("attention", [](Graph& g, const Ts& a) { return Ts{g.scaled_dot_product_attention(a[0], a[1], a[2])}; },
        {q, k, v});
  check("attention scale causal",
        [](Graph& g, const Ts& a) {
          return Ts{g.scaled_dot_product_attention(a[0], a[1], a[2], std::nullopt, {0.7, true})};
        },
        {q, k, v});
  check("attention float mask broadcast",
        [](Graph& g, const Ts& a) { return Ts{g.scaled_dot_product_attention(a[0], a[1], a[2], a[3])}; },
        {q, k, v, u({3, 5}, -1, 1, 54)});
  check("attention float mask causal",
        [](Graph& g, const Ts& a) {
          return Ts{g.scaled_dot_product_attention(a[0], a[1], a[2], a[3], {0, true})};
        },
        {u({1, 2, 4, 3}, -1, 1, 55), u({1, 2, 4, 3}, -1, 1, 56), u({1, 2, 4, 2}, -1, 1, 57), u({1, 2, 4, 4}, -1, 1, 58)});
  // A bool mask with a fully masked query row (output 0, no gradient).
  check("attention bool mask",
        [](Graph& g, const Ts& a) {
          TensorData m = TensorData::from_vector({3, 5}, f64, {1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1});
          return Ts{g.scaled_dot_product_attention(a[0], a[1], a[2], g.cast(g.constant(m), boolean))};
        },
        {q, k, v});
  check("attention broadcast batch", [](Graph& g, const Ts& a) {
    return Ts{g.scaled_dot_product_attention(a[0], a[1], a[2])};
  }, {u({2, 2, 3, 4}, -1, 1, 59), u({1, 5, 4}, -1, 1, 60), u({2, 1, 5, 3}, -1, 1, 61)});
}
