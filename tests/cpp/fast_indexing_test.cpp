// The fast CPU gather / scatter (row copies, fast_indexing.cpp) against the reference
// interpreter, bit for bit: axes (negative too), index dtypes and negative indices, scalar and
// multi-dim indices, several dtypes, duplicate scatter targets (the last update wins); the
// cases it leaves to the reference (out-of-range indices, other modes, batch dims); and the
// in-place update of a sole-owned scatter input, which must never touch a shared one.
#include <gtest/gtest.h>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/reference.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

const detail::Node& node_of(const Graph& g, Tensor t) {
  return g.impl().nodes[static_cast<size_t>(t.op().id())];
}

bool fast(const Graph& g, Tensor t, const std::vector<TensorData>& in, TensorData& got) {
  std::vector<TensorData> out;
  if (!detail::cpu_fast_eval(g.impl(), node_of(g, t), in, out)) return false;
  got = out.at(0);
  return true;
}

void expect_equal(const TensorData& got, const TensorData& want, const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i) ASSERT_EQ(got.at(i), want.at(i)) << what << " at " << i;
}

TensorData ints(Shape s, DType t, std::vector<double> v) {
  return TensorData::from_vector(std::move(s), t, v);
}

}  // namespace

TEST(FastIndexing, GatherAndScatterRowsMatchTheReference) {
  struct Case {
    Shape x;
    int64_t axis;
    TensorData idx;
  };
  const Case cases[] = {{{7, 5}, 0, ints({4}, DType::i32, {6, 0, -1, 3})},
                        {{3, 6, 4}, 1, ints({2, 2}, DType::i64, {5, -6, 2, 2})},
                        {{3, 6, 4}, -1, ints({3}, DType::i32, {3, 0, -2})},
                        {{9}, 0, ints({}, DType::i32, {4})},
                        {{2, 3, 4, 5}, 2, ints({1}, DType::i64, {1})}};
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (DType t : {DType::f32, DType::f16, DType::i8, DType::boolean, DType::f64}) {
      const std::string what = c.x.str() + " axis " + std::to_string(c.axis) + " " + dtype_name(t);
      Graph g;
      Tensor x = g.placeholder(c.x, t), i = g.placeholder(c.idx.shape(), c.idx.dtype());
      Tensor y = g.gather(x, i, c.axis);
      TensorData xv = TensorData::uniform(c.x, -3, 3, t, seed++), got;
      ASSERT_TRUE(fast(g, y, {xv, c.idx}, got)) << what;
      TensorData want = detail::reference_eval(g.impl(), node_of(g, y), {xv, c.idx}).at(0);
      expect_equal(got, want, "gather " + what);
      Tensor u = g.placeholder(y.shape(), t);
      Tensor s = g.scatter(x, i, u, c.axis);
      TensorData uv = TensorData::uniform(y.shape(), -3, 3, t, seed++);
      ASSERT_TRUE(fast(g, s, {xv, c.idx, uv}, got)) << what;
      want = detail::reference_eval(g.impl(), node_of(g, s), {xv, c.idx, uv}).at(0);
      expect_equal(got, want, "scatter " + what);  // incl. the duplicate 2, 2: last update wins
    }
}

TEST(FastIndexing, LeavesOtherCasesToTheReference) {
  Graph g;
  Tensor x = g.placeholder({4, 3}, DType::f32), i = g.placeholder({2}, DType::i32),
         u = g.placeholder({2, 3}, DType::f32);
  TensorData xv = TensorData::uniform({4, 3}, -1, 1, DType::f32, 9),
             uv = TensorData::uniform({2, 3}, -1, 1, DType::f32, 10);
  TensorData bad = ints({2}, DType::i32, {1, 4}), got;
  EXPECT_FALSE(fast(g, g.gather(x, i), {xv, bad}, got));  // out of range: the reference reports it
  EXPECT_THROW(detail::cpu_eval(g.impl(), node_of(g, g.gather(x, i)), {xv, bad}, nullptr), Error);
  EXPECT_FALSE(
      fast(g, g.scatter(x, i, u, 0, ScatterMode::add), {xv, ints({2}, DType::i32, {1, 2}), uv}, got));
}

TEST(FastIndexing, ScatterWritesInPlaceOnlyIntoASoleOwner) {
  Graph g;
  Tensor x = g.placeholder({4, 3}, DType::f32), i = g.placeholder({1}, DType::i32),
         u = g.placeholder({1, 3}, DType::f32);
  Tensor s = g.scatter(x, i, u);
  TensorData uv = TensorData::from_vector({1, 3}, DType::f32, {7, 8, 9});
  TensorData idx = ints({1}, DType::i32, {2});
  // Shared: the caller's tensor keeps its values and the result has its own bytes.
  TensorData shared = TensorData::zeros({4, 3});
  TensorData got;
  ASSERT_TRUE(fast(g, s, {shared, idx, uv}, got));
  EXPECT_NE(got.data(), shared.data());
  for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(shared.at(k), 0.0);
  EXPECT_EQ(got.at(7), 8.0);
  // Sole owner (moved into the inputs): the same bytes come back, updated.
  std::vector<TensorData> in{TensorData::zeros({4, 3}), idx, uv};
  const void* bytes = in[0].data();
  std::vector<TensorData> out;
  ASSERT_TRUE(detail::cpu_fast_eval(g.impl(), node_of(g, s), in, out));
  EXPECT_EQ(out[0].data(), bytes);
  EXPECT_EQ(out[0].at(6), 7.0);
  EXPECT_EQ(out[0].at(0), 0.0);
}
