#pragma once
// Comparisons shared by the GPU tests (each compares a CUDA run with the CPU backend).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executable_impl.h"
#include "tgraph/descriptors.h"
#include "tgraph/executable.h"
#include "tgraph/graph.h"
#include "tgraph/tensor_data.h"

namespace gputest {

/// A convolution's descriptor: layouts, stride, dilation, padding style (explicit by default,
/// then its values), groups.
inline tg::ConvDesc conv_desc(tg::Layout data, tg::Layout weights, std::vector<int64_t> stride = {},
                              std::vector<int64_t> dil = {}, tg::PaddingStyle p = tg::PaddingStyle::explicit_,
                              std::vector<int64_t> pad = {}, int64_t groups = 1) {
  tg::ConvDesc d;
  d.data_layout = data;
  d.weights_layout = weights;
  d.stride = std::move(stride);
  d.dilation = std::move(dil);
  d.padding = p;
  d.explicit_padding = std::move(pad);
  d.groups = groups;
  return d;
}

/// The library choices a loaded executable carries (runtime/device_code.h's plans).
inline std::map<std::string, std::string> library_plans_of(const tg::Executable& e) {
  std::lock_guard<std::mutex> lock(e.impl().device_code->mu);
  return e.impl().device_code->plans;
}

/// TGRAPH_CACHE_DIR pointed at a fresh, empty directory while in scope (the compile cache is
/// per machine: kernels, attention plans and library choices an earlier run of a test left
/// there would change what a first run does), then restored and the directory removed.
class FreshCacheDir {
 public:
  explicit FreshCacheDir(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() /
             ("tgraph-" + name + "-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()))) {
    if (const char* b = std::getenv("TGRAPH_CACHE_DIR")) before_ = b, had_ = true;
    ::setenv("TGRAPH_CACHE_DIR", dir_.c_str(), 1);
  }
  ~FreshCacheDir() {
    if (had_) ::setenv("TGRAPH_CACHE_DIR", before_.c_str(), 1);
    else ::unsetenv("TGRAPH_CACHE_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  FreshCacheDir(const FreshCacheDir&) = delete;
  FreshCacheDir& operator=(const FreshCacheDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string before_;
  bool had_ = false;
};

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

/// One placeholder per input ("in0", "in1", ...; every dim -1 when `dynamic`) and the feed
/// list compile() takes for them.
inline std::pair<std::vector<tg::Tensor>, std::vector<std::pair<tg::Tensor, tg::TensorType>>> placeholders_for(
    tg::Graph& g, const std::vector<tg::TensorData>& inputs, bool dynamic = false) {
  std::vector<tg::Tensor> ph;
  std::vector<std::pair<tg::Tensor, tg::TensorType>> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tg::Shape s = inputs[i].shape();
    if (dynamic) s = tg::Shape(std::vector<int64_t>(static_cast<size_t>(s.rank()), -1));
    ph.push_back(g.placeholder(s, inputs[i].dtype(), "in" + std::to_string(i)));
    feeds.emplace_back(ph.back(), tg::TensorType(s, inputs[i].dtype()));
  }
  return {std::move(ph), std::move(feeds)};
}

/// Builds the graph once, compiles it for both devices, runs the GPU twice (the second run
/// replays the captured CUDA graph) and compares every target with the CPU's. `capturable`:
/// the run must have been captured and replayed (an op without a device kernel falls back to
/// the CPU, copies to the host and prevents capture); otherwise it must not have been.
template <class Build>
void differential(const std::string& what, Build build, const std::vector<tg::TensorData>& inputs, double tol,
                  bool capturable = true) {
  SCOPED_TRACE(what);
  tg::Graph g;
  auto [ph, feeds] = placeholders_for(g, inputs);
  std::vector<tg::Tensor> outs = build(g, ph);
  auto want = g.compile(feeds, outs, {}, {.device = tg::Device::cpu()}).run(inputs);
  tg::Executable e = g.compile(feeds, outs, {}, {.device = tg::Device::cuda(0)});
  for (int run = 0; run < 2; ++run) {
    auto got = e.run(inputs);
    for (size_t i = 0; i < outs.size(); ++i)
      expect_close(got[i], want[i], tol, what + " run " + std::to_string(run) + " output " + std::to_string(i));
  }
  auto stats = tg::detail::cuda_graph_stats(e.impl());
  if (capturable) {
    EXPECT_EQ(stats.captures, 1) << what << ": " << stats.error;
    EXPECT_EQ(stats.replays, 1) << what << ": " << stats.error;
    EXPECT_TRUE(stats.error.empty()) << what << ": " << stats.error;
  } else {
    EXPECT_EQ(stats.captures, 0) << what;
  }
}

/// Uniform values in [-scale, scale) from `seed`, rounded to `t` (a half type).
inline tg::TensorData half_data(tg::Shape s, tg::DType t, uint64_t seed, double scale = 1.0) {
  tg::TensorData f = tg::TensorData::uniform(std::move(s), -scale, scale, tg::DType::f32, seed);
  tg::TensorData h = tg::TensorData::zeros(f.shape(), t);
  for (int64_t i = 0; i < f.num_elements(); ++i) h.set(i, f.at(i));
  return h;
}

/// An additive f16 padding mask [b, 1, 1, len] (BERT's form when an attention_mask is passed):
/// values in [-2, 2), and the last 3*i keys of batch i (all but the first) at -10000.
inline tg::TensorData padding_mask(int64_t b, int64_t len, uint64_t seed) {
  tg::TensorData mask = half_data({b, 1, 1, len}, tg::DType::f16, seed, 2.0);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = std::max<int64_t>(1, len - 3 * i); j < len; ++j) mask.set(i * len + j, -10000.0);
  return mask;
}

/// BERT-style masked attention over dynamic sizes: q, k, v [b, 4, L, 64] and an additive
/// padding mask [b, 1, 1, L], f16, compiled for the CPU and for CUDA (one graph).
struct MaskedAttention {
  tg::Graph g;
  tg::Executable cpu, gpu;
  MaskedAttention() {
    const tg::Shape qs({-1, 4, -1, 64}), ms({-1, 1, 1, -1});
    tg::Tensor q = g.placeholder(qs, tg::DType::f16, "q"), k = g.placeholder(qs, tg::DType::f16, "k"),
               v = g.placeholder(qs, tg::DType::f16, "v"), m = g.placeholder(ms, tg::DType::f16, "m");
    tg::Tensor y = g.scaled_dot_product_attention(q, k, v, m);
    const std::vector<std::pair<tg::Tensor, tg::TensorType>> feeds{
        {q, tg::TensorType(qs, tg::DType::f16)}, {k, tg::TensorType(qs, tg::DType::f16)},
        {v, tg::TensorType(qs, tg::DType::f16)}, {m, tg::TensorType(ms, tg::DType::f16)}};
    cpu = g.compile(feeds, {y}, {}, {.device = tg::Device::cpu()});
    gpu = g.compile(feeds, {y}, {}, {.device = tg::Device::cuda(0)});
  }
  /// Its inputs at batch b and length len (the mask a padding mask).
  static std::vector<tg::TensorData> inputs(int64_t b, int64_t len, uint64_t seed) {
    return {half_data({b, 4, len, 64}, tg::DType::f16, seed + 1), half_data({b, 4, len, 64}, tg::DType::f16, seed + 2),
            half_data({b, 4, len, 64}, tg::DType::f16, seed + 3), padding_mask(b, len, seed)};
  }
};

}  // namespace gputest
