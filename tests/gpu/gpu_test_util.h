#pragma once
// Comparisons shared by the GPU tests (each compares a CUDA run with the CPU backend).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tgraph/tensor_data.h"

namespace gputest {

/// Element by element: NaN must meet NaN, infinities must be equal, tol == 0 means exact,
/// otherwise |got - want| <= tol * (1 + |want|).
inline void expect_close(const tg::TensorData& got, const tg::TensorData& want, double tol, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.at(i), g = got.at(i);
    if (std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << what << " at " << i;
      continue;
    }
    if (std::isinf(w) || tol == 0) {
      ASSERT_EQ(g, w) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(g, w, tol * (1 + std::abs(w))) << what << " at " << i;
  }
}

}  // namespace gputest
