#pragma once
// Helpers of the reference-interpreter tests: evaluate the node behind a tensor and compare.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/reference.h"
#include "test_util.h"
#include "tgraph/graph.h"

namespace reftest {

/// Evaluates the node that produced t on the given inputs.
inline std::vector<tg::TensorData> eval_all(const tg::Graph& g, tg::Tensor t,
                                            const std::vector<tg::TensorData>& in) {
  tg::detail::GraphImpl& impl = g.impl();
  return tg::detail::reference_eval(impl, impl.nodes[static_cast<size_t>(t.op().id())], in);
}

/// The first output of eval_all.
inline tg::TensorData eval(const tg::Graph& g, tg::Tensor t, const std::vector<tg::TensorData>& in) {
  return eval_all(g, t, in).at(0);
}

/// Expects t to hold `expected` (NaN matches NaN, infinities match exactly) within tol.
inline void expect_values(const tg::TensorData& t, const std::vector<double>& expected,
                          double tol = 1e-6) {
  ASSERT_EQ(t.num_elements(), static_cast<int64_t>(expected.size())) << t.str();
  for (size_t i = 0; i < expected.size(); ++i) {
    double v = t.at(static_cast<int64_t>(i)), e = expected[i];
    if (std::isnan(e)) EXPECT_TRUE(std::isnan(v)) << "at " << i << ": " << v << " is not NaN";
    else if (std::isinf(e)) EXPECT_EQ(v, e) << "at " << i;
    else EXPECT_NEAR(v, e, tol * std::max(1.0, std::fabs(e))) << "at " << i;
  }
}

/// Expects t's shape to be `shape`.
inline void expect_shape(const tg::TensorData& t, const std::vector<int64_t>& shape) {
  EXPECT_EQ(t.shape().dims(), shape) << t.str();
}

inline const double kNaN = std::nan("");
inline const double kInf = INFINITY;

}  // namespace reftest
