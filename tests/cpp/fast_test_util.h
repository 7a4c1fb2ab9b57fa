#pragma once
// Helpers shared by the fast CPU kernel tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "backends/cpu/fast_kernels.h"
#include "tgraph/tensor_data.h"

namespace fasttest {

/// Uniform f32 in [lo, hi) with no exact zeros.
inline tg::TensorData rnd(tg::Shape s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  tg::TensorData t = tg::TensorData::uniform(s, lo, hi, tg::f32, seed);
  for (int64_t i = 0; i < t.num_elements(); ++i)
    if (t.ptr<float>()[i] == 0.0f) t.ptr<float>()[i] = 0.5f;
  return t;
}

/// Same shape and dtype; |got - want| <= rtol * max(1, max |want|) element by element.
inline void expect_close(const tg::TensorData& got, const tg::TensorData& want, double rtol) {
  ASSERT_EQ(got.shape().dims(), want.shape().dims());
  ASSERT_EQ(got.dtype(), want.dtype());
  double scale = 1.0;
  for (int64_t i = 0; i < want.num_elements(); ++i) scale = std::max(scale, std::fabs(want.at(i)));
  int bad = 0;
  for (int64_t i = 0; i < want.num_elements() && bad < 5; ++i) {
    double g = got.at(i), w = want.at(i);
    if (std::isnan(w)) {
      if (!std::isnan(g)) ++bad, ADD_FAILURE() << "at " << i << ": " << g << " is not NaN";
    } else if (!(std::fabs(g - w) <= rtol * scale)) {
      ++bad, ADD_FAILURE() << "at " << i << ": got " << g << ", want " << w;
    }
  }
}

/// Runs the fast kernel of node n from 4 threads, 20 times each; the last result of each thread.
inline std::vector<tg::TensorData> concurrent_fast_eval(const tg::detail::GraphImpl& g, const tg::detail::Node& n,
                                                        const std::vector<tg::TensorData>& in) {
  std::vector<tg::TensorData> got(4);
  std::vector<std::thread> ts;
  for (size_t t = 0; t < got.size(); ++t)
    ts.emplace_back([&, t] {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<tg::TensorData> out;
        if (tg::detail::cpu_fast_eval(g, n, in, out)) got[t] = out[0];
      }
    });
  for (auto& t : ts) t.join();
  return got;
}

}  // namespace fasttest
