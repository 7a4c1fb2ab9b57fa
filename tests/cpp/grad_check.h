#pragma once
// Gradient checking: the gradients Graph::gradients builds, run on the CPU in f64, against
// central finite differences of the same compiled loss.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tgraph/tgraph.h"

namespace gradcheck {

using Build = std::function<std::vector<tg::Tensor>(tg::Graph&, const std::vector<tg::Tensor>&)>;

/// Builds L = sum_i sum(out_i * W_i) (W_i random, so every output element matters), takes
/// dL/dx for every input, and compares with (L(x+h) - L(x-h)) / 2h element by element.
/// `dynamic` compiles with every dim fed as -1 (disable_type_inference); `step` is the
/// relative finite-difference step (larger where the graph rounds through f32).
inline void check(const std::string& what, const Build& build, const std::vector<tg::TensorData>& xs,
                  double rtol = 1e-5, double atol = 1e-6, bool dynamic = false,
                  double step = 1e-6) {
  SCOPED_TRACE(what);
  tg::Graph g;
  std::vector<tg::Tensor> ph;
  std::vector<std::pair<tg::Tensor, tg::TensorType>> feeds;
  for (size_t i = 0; i < xs.size(); ++i) {
    tg::Shape s = xs[i].shape();
    if (dynamic) s = tg::Shape(std::vector<int64_t>(static_cast<size_t>(s.rank()), -1));
    ph.push_back(g.placeholder(s, xs[i].dtype(), "x" + std::to_string(i)));
    feeds.emplace_back(ph.back(), tg::TensorType(s, xs[i].dtype()));
  }
  std::vector<tg::Tensor> outs = build(g, ph);
  tg::Tensor loss;
  uint64_t seed = 1000;
  for (const tg::Tensor& o : outs) {
    if (!tg::is_float(o.dtype())) continue;
    tg::Tensor w = dynamic ? g.broadcast_like(g.scalar(0.75, o.dtype()), o)
                           : g.constant(tg::TensorData::uniform(o.shape(), 0.5, 1.5, o.dtype(), seed++));
    tg::Tensor term = g.reduce_sum(g.mul(o, w));
    loss = loss.valid() ? g.add(loss, term) : term;
  }
  ASSERT_TRUE(loss.valid()) << "no float output";
  auto grads = g.gradients(loss, ph);
  std::vector<tg::Tensor> targets{loss};
  for (const tg::Tensor& p : ph) targets.push_back(grads.at(p));
  tg::Executable exe = g.compile(feeds, targets, {},
                                 {.device = tg::Device::cpu(), .disable_type_inference = dynamic});
  std::vector<tg::TensorData> base;
  for (const auto& x : xs) base.push_back(x.clone());
  std::vector<tg::TensorData> r = exe.run(base);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!tg::is_float(xs[i].dtype())) continue;
    ASSERT_EQ(r[i + 1].shape(), xs[i].shape()) << "gradient of input " << i;
    for (int64_t e = 0; e < xs[i].num_elements(); ++e) {
      double v = base[i].at(e);
      double h = step * std::max(1.0, std::abs(v));
      base[i].set(e, v + h);
      double lp = exe.run(base)[0].at(0);
      base[i].set(e, v - h);
      double lm = exe.run(base)[0].at(0);
      base[i].set(e, v);
      double numeric = (lp - lm) / (2 * h), analytic = r[i + 1].at(e);
      ASSERT_NEAR(analytic, numeric, atol + rtol * std::abs(numeric))
          << "input " << i << " element " << e << " (x = " << v << ")";
    }
  }
}

/// Uniform f64 values in [lo, hi).
inline tg::TensorData u(tg::Shape s, double lo, double hi, uint64_t seed) {
  return tg::TensorData::uniform(std::move(s), lo, hi, tg::f64, seed);
}

}  // namespace gradcheck
