// Reference interpreter: normalisations, softmax, losses and attention.
#include <cmath>

#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;

namespace {
TensorData vec(const std::vector<double>& v) { return TensorData::from_vector({static_cast<int64_t>(v.size())}, tg::f64, v); }
}  // namespace

TEST(RefNn, BatchNormInference) {
  tg::Graph g;
  auto x = g.placeholder({2, 2}, tg::f64), m = g.placeholder({2}, tg::f64), v = g.placeholder({2}, tg::f64);
  auto ga = g.placeholder({2}, tg::f64), be = g.placeholder({2}, tg::f64);
  TensorData tx = TensorData::from_vector({2, 2}, tg::f64, {1, 2, 3, 4});
  std::vector<TensorData> p = {tx, vec({1, 2}), vec({4, 0.25}), vec({2, 3}), vec({10, 20})};
  // channel axis -1: (x - mean) / sqrt(var + eps) * gamma + beta per column
  TensorData y = eval(g, g.batch_norm(x, m, v, ga, be, -1, 0.0), p);
  expect_values(y, {10, 20, 12, 32});
  TensorData y0 = eval(g, g.batch_norm(x, m, v, ga, be, 0, 0.0), p);  // per row
  expect_values(y0, {10, 11, 26, 32});
}

TEST(RefNn, BatchNormTrainingStatistics) {
  tg::Graph g;
  auto x = g.placeholder({4, 3, 2}, tg::f64), ga = g.placeholder({3}, tg::f64), be = g.placeholder({3}, tg::f64);
  TensorData tx = TensorData::randn({4, 3, 2}, tg::f64, 1);
  auto out = eval_all(g, g.batch_norm_training(x, ga, be, 1, 1e-3)[0], {tx, vec({1, 2, 3}), vec({0, 1, 2})});
  ASSERT_EQ(out.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    double s = 0, ss = 0;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 2; ++k) s += tx.at(n * 6 + c * 2 + k);
    double mean = s / 8;
    for (int n = 0; n < 4; ++n)
      for (int k = 0; k < 2; ++k) ss += std::pow(tx.at(n * 6 + c * 2 + k) - mean, 2);
    EXPECT_NEAR(out[1].at(c), mean, 1e-12);
    EXPECT_NEAR(out[2].at(c), ss / 8, 1e-12);  // biased (population) variance
    EXPECT_NEAR(out[0].at(c * 2), (tx.at(c * 2) - mean) / std::sqrt(ss / 8 + 1e-3) * (c + 1) + c, 1e-12);
  }
}

TEST(RefNn, LayerNormOverTrailingDims) {
  tg::Graph g;
  auto x = g.placeholder({2, 3, 4}, tg::f64), ga = g.placeholder({3, 4}, tg::f64), be = g.placeholder({3, 4}, tg::f64);
  TensorData tx = TensorData::randn({2, 3, 4}, tg::f64, 2), tg_ = TensorData::randn({3, 4}, tg::f64, 3);
  TensorData tb = TensorData::randn({3, 4}, tg::f64, 4);
  TensorData y = eval(g, g.layer_norm(x, ga, be, 1, 1e-5), {tx, tg_, tb});
  for (int n = 0; n < 2; ++n) {
    double m = 0, v = 0;
    for (int i = 0; i < 12; ++i) m += tx.at(n * 12 + i) / 12;
    for (int i = 0; i < 12; ++i) v += std::pow(tx.at(n * 12 + i) - m, 2) / 12;
    for (int i = 0; i < 12; ++i)
      EXPECT_NEAR(y.at(n * 12 + i), (tx.at(n * 12 + i) - m) / std::sqrt(v + 1e-5) * tg_.at(i) + tb.at(i), 1e-12);
  }
  auto ga1 = g.placeholder({4}, tg::f64), be1 = g.placeholder({4}, tg::f64);
  TensorData ones = TensorData::full({4}, 1.0, tg::f64), zeros = TensorData::zeros({4}, tg::f64);
  TensorData row = eval(g, g.layer_norm(x, ga1, be1, -1, 0.0), {tx, ones, zeros});
  double m = 0;
  for (int i = 0; i < 4; ++i) m += row.at(i);
  EXPECT_NEAR(m, 0, 1e-12);
}

TEST(RefNn, GroupNormNCHW) {
  tg::Graph g;
  auto x = g.placeholder({2, 4, 3}, tg::f64), ga = g.placeholder({4}, tg::f64), be = g.placeholder({4}, tg::f64);
  TensorData tx = TensorData::randn({2, 4, 3}, tg::f64, 5);
  TensorData y = eval(g, g.group_norm(x, ga, be, 2, 1, 0.0), {tx, vec({1, 2, 3, 4}), vec({0, 0, 1, 1})});
  for (int n = 0; n < 2; ++n)
    for (int grp = 0; grp < 2; ++grp) {
      int base = n * 12 + grp * 6;  // channels 2*grp, 2*grp+1 are 6 consecutive elements
      double m = 0, v = 0;
      for (int i = 0; i < 6; ++i) m += tx.at(base + i) / 6;
      for (int i = 0; i < 6; ++i) v += std::pow(tx.at(base + i) - m, 2) / 6;
      for (int i = 0; i < 6; ++i) {
        int ch = grp * 2 + i / 3;
        EXPECT_NEAR(y.at(base + i), (tx.at(base + i) - m) / std::sqrt(v) * (ch + 1) + (ch >= 2), 1e-12);
      }
    }
}

TEST(RefNn, SoftmaxStableAndAxes) {
  tg::Graph g;
  auto x = g.placeholder({2, 2}, tg::f64);
  TensorData big = TensorData::from_vector({2, 2}, tg::f64, {1000, 1001, -kInf, 0});
  double e = std::exp(1.0);
  expect_values(eval(g, g.softmax(x), {big}), {1 / (1 + e), e / (1 + e), 0, 1}, 1e-12);
  expect_values(eval(g, g.log_softmax(x), {big}), {-std::log1p(e), 1 - std::log1p(e), -kInf, 0}, 1e-12);
  TensorData t = TensorData::from_vector({2, 2}, tg::f64, {0, 1, std::log(3.0), 1});
  expect_values(eval(g, g.softmax(x, 0), {t}), {0.25, 0.5, 0.75, 0.5}, 1e-12);
  expect_values(eval(g, g.softmax(x), {TensorData::from_vector({2, 2}, tg::f64, {-kInf, -kInf, 1, 1})}),
                {kNaN, kNaN, 0.5, 0.5});
}

TEST(RefNn, SoftmaxCrossEntropyReductions) {
  tg::Graph g;
  auto lo = g.placeholder({2, 2}, tg::f64), la = g.placeholder({2, 2}, tg::f64);
  TensorData logits = TensorData::from_vector({2, 2}, tg::f64, {0, 0, 0, std::log(3.0)});
  TensorData labels = TensorData::from_vector({2, 2}, tg::f64, {1, 0, 0.5, 0.5});
  double l0 = std::log(2.0), l1 = -0.5 * std::log(0.25) - 0.5 * std::log(0.75);
  expect_values(eval(g, g.softmax_cross_entropy(lo, la, -1, tg::LossReduction::none), {logits, labels}), {l0, l1}, 1e-12);
  expect_values(eval(g, g.softmax_cross_entropy(lo, la, -1, tg::LossReduction::sum), {logits, labels}), {l0 + l1}, 1e-12);
  TensorData m = eval(g, g.softmax_cross_entropy(lo, la), {logits, labels});
  expect_shape(m, {});
  expect_values(m, {(l0 + l1) / 2}, 1e-12);
  // axis 0: columns are the rows; a zero label at a -inf logit contributes nothing.
  TensorData lg = TensorData::from_vector({2, 2}, tg::f64, {0, -kInf, 0, 0});
  TensorData lb = TensorData::from_vector({2, 2}, tg::f64, {1, 0, 0, 1});
  expect_values(eval(g, g.softmax_cross_entropy(lo, la, 0, tg::LossReduction::none), {lg, lb}), {std::log(2.0), 0}, 1e-12);
}

TEST(RefNn, Mse) {
  tg::Graph g;
  auto a = g.placeholder({3}, tg::f32), b = g.placeholder({3}, tg::f32);
  TensorData ta = TensorData::from_vector({3}, tg::f32, {1, 2, 3}), tb = TensorData::from_vector({3}, tg::f32, {1, 4, 0});
  expect_values(eval(g, g.mse(a, b, tg::LossReduction::none), {ta, tb}), {0, 4, 9});
  expect_values(eval(g, g.mse(a, b, tg::LossReduction::sum), {ta, tb}), {13});
  expect_values(eval(g, g.mse(a, b), {ta, tb}), {13.0 / 3});
}

namespace {
// softmax(q k^T * scale + bias) v for one [L, D] head, bias -inf where masked (plain loops).
std::vector<double> naive_attention(const TensorData& q, const TensorData& k, const TensorData& v, int64_t qo,
                                    int64_t ko, int64_t L, int64_t S, int64_t D, double scale,
                                    const std::function<double(int64_t, int64_t)>& bias) {
  std::vector<double> out(static_cast<size_t>(L * D), 0.0);
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> p(static_cast<size_t>(S));
    double z = 0;
    for (int64_t j = 0; j < S; ++j) {
      double s = 0;
      for (int64_t e = 0; e < D; ++e) s += q.at(qo + i * D + e) * k.at(ko + j * D + e);
      p[static_cast<size_t>(j)] = std::exp(s * scale + bias(i, j));
      z += p[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < S; ++j)
      for (int64_t e = 0; e < D; ++e) out[static_cast<size_t>(i * D + e)] += p[static_cast<size_t>(j)] / z * v.at(ko + j * D + e);
  }
  return out;
}
}  // namespace

TEST(RefNn, AttentionMatchesNaive) {
  tg::Graph g;
  auto q = g.placeholder({2, 3, 4}, tg::f64), k = g.placeholder({2, 5, 4}, tg::f64), v = g.placeholder({2, 5, 4}, tg::f64);
  TensorData tq = TensorData::randn({2, 3, 4}, tg::f64, 1), tk = TensorData::randn({2, 5, 4}, tg::f64, 2);
  TensorData tv = TensorData::randn({2, 5, 4}, tg::f64, 3);
  TensorData y = eval(g, g.scaled_dot_product_attention(q, k, v), {tq, tk, tv});
  expect_shape(y, {2, 3, 4});
  for (int b = 0; b < 2; ++b) {
    auto e = naive_attention(tq, tk, tv, b * 12, b * 20, 3, 5, 4, 0.5, [](int64_t, int64_t) { return 0.0; });
    for (int i = 0; i < 12; ++i) EXPECT_NEAR(y.at(b * 12 + i), e[static_cast<size_t>(i)], 1e-12);
  }
  TensorData c = eval(g, g.scaled_dot_product_attention(q, k, v, std::nullopt, {.scale = 0.1, .causal = true}), {tq, tk, tv});
  auto e = naive_attention(tq, tk, tv, 12, 20, 3, 5, 4, 0.1, [](int64_t i, int64_t j) { return j > i ? -kInf : 0.0; });
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(c.at(12 + i), e[static_cast<size_t>(i)], 1e-12);
}

TEST(RefNn, AttentionMasksAndBroadcast) {
  tg::Graph g;
  auto q = g.placeholder({-1, 2, 3}, tg::f64), k = g.placeholder({-1, 2, 3}, tg::f64), v = g.placeholder({-1, 2, 3}, tg::f64);
  auto fm = g.placeholder({2, 2}, tg::f64), bm = g.placeholder({2}, tg::boolean);
  TensorData tq = TensorData::randn({2, 2, 3}, tg::f64, 4), tk = TensorData::randn({1, 2, 3}, tg::f64, 5);
  TensorData tv = TensorData::randn({1, 2, 3}, tg::f64, 6);
  double s = 1 / std::sqrt(3.0);
  TensorData add = TensorData::from_vector({2, 2}, tg::f64, {0.5, -1, 2, 0});
  TensorData y = eval(g, g.scaled_dot_product_attention(q, k, v, fm), {tq, tk, tv, add});
  for (int b = 0; b < 2; ++b) {  // k and v broadcast over the batch at run time
    auto e = naive_attention(tq, tk, tv, b * 6, 0, 2, 2, 3, s, [&](int64_t i, int64_t j) { return add.at(i * 2 + j); });
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.at(b * 6 + i), e[static_cast<size_t>(i)], 1e-12);
  }
  TensorData keep = TensorData::from_vector({2}, tg::boolean, {0, 1});  // true = attend; broadcasts over rows
  TensorData yb = eval(g, g.scaled_dot_product_attention(q, k, v, bm), {tq, tk, tv, keep});
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 2; ++i)
      for (int e = 0; e < 3; ++e) EXPECT_NEAR(yb.at(b * 6 + i * 3 + e), tv.at(3 + e), 1e-12);
  TensorData none = TensorData::from_vector({2}, tg::boolean, {0, 0});
  expect_values(eval(g, g.scaled_dot_product_attention(q, k, v, bm), {tq, tk, tv, none}), std::vector<double>(12, 0.0));
}
