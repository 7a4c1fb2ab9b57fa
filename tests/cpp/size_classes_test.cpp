// The size classes a dynamic executable prepares ahead (runtime/size_classes.h): which classes
// of dynamic dims are 1, the neighbouring classes' feed types, and the background thread's
// order and errors (issue 22).
#include "runtime/size_classes.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "tgraph/graph.h"

using namespace tg;
using namespace tg::detail;

namespace {

std::vector<TensorType> types(std::initializer_list<Shape> shapes, DType t = DType::i64) {
  std::vector<TensorType> out;
  for (const Shape& s : shapes) out.emplace_back(s, t);
  return out;
}

TEST(SizeClasses, ABitPerIndexOfDynamicDimsWhereEveryOneIsOne) {
  const auto bert = types({{-1, -1}, {-1, -1}});  // ids and mask: batch, length
  EXPECT_EQ(size_class(bert, types({{16, 16}, {16, 16}})), 0u);
  EXPECT_EQ(size_class(bert, types({{1, 128}, {1, 128}})), 1u);
  EXPECT_EQ(size_class(bert, types({{16, 1}, {16, 1}})), 2u);
  EXPECT_EQ(size_class(bert, types({{1, 1}, {1, 1}})), 3u);
  // Static dims of 1 are no class; a class is 1 only where all its dims are.
  const auto image = types({{-1, 1, 28, -1}, {-1}}, DType::f32);
  EXPECT_EQ(size_class(image, types({{1, 1, 28, 5}, {1}}, DType::f32)), 1u);
  EXPECT_EQ(size_class(image, types({{1, 1, 28, 5}, {3}}, DType::f32)), 0u);
  EXPECT_EQ(size_class(image, types({{4, 1, 28, 1}, {4}}, DType::f32)), 8u);
  // Static feeds, or ranks other than declared: no class.
  EXPECT_EQ(size_class(types({{2, 3}}), types({{2, 3}})), 0u);
}

TEST(SizeClasses, NeighboursFlipOneClassBetweenOneAndNotOne) {
  const auto bert = types({{-1, -1}, {-1, -1}});
  auto near = neighbour_sizes(bert, types({{16, 128}, {16, 128}}));
  ASSERT_EQ(near.size(), 2u);
  EXPECT_EQ(near[0].first, 1u);
  EXPECT_EQ(near[0].second, types({{1, 128}, {1, 128}}));
  EXPECT_EQ(near[1].first, 2u);
  EXPECT_EQ(near[1].second, types({{16, 1}, {16, 1}}));
  near = neighbour_sizes(bert, types({{1, 128}, {1, 128}}));
  ASSERT_EQ(near.size(), 2u);
  EXPECT_EQ(near[0].first, 0u);  // batch 1 -> a batch of several
  EXPECT_EQ(near[0].second, types({{8, 128}, {8, 128}}));
  EXPECT_EQ(near[1].first, 3u);
  EXPECT_EQ(near[1].second, types({{1, 1}, {1, 1}}));
  for (const auto& [c, t] : near) EXPECT_EQ(size_class(bert, t), c);
  // Only dynamic dims move; dtypes stay.
  const auto image = types({{-1, 3, 224, 224}}, DType::f16);
  near = neighbour_sizes(image, types({{32, 3, 224, 224}}, DType::f16));
  ASSERT_EQ(near.size(), 1u);
  EXPECT_EQ(near[0].second, types({{1, 3, 224, 224}}, DType::f16));
  EXPECT_TRUE(neighbour_sizes(types({{2, 3}}), types({{2, 3}})).empty());
}

TEST(SizeClasses, BackgroundJobsRunInOrderPastAFailure) {
  std::vector<int> order;
  std::atomic<int> ran{0};
  run_in_background([&] { order.push_back(1), ++ran; });
  run_in_background([&] {
    ++ran;
    throw std::runtime_error("a job that fails");
  });
  run_in_background([&] { order.push_back(3), ++ran; });
  background_jobs_wait();
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
}

TEST(SizeClasses, CompilingAheadIsPerThreadAndNests) {
  EXPECT_FALSE(compiling_ahead());
  {
    CompilingAhead a;
    EXPECT_TRUE(compiling_ahead());
    {
      CompilingAhead b;
      EXPECT_TRUE(compiling_ahead());
    }
    EXPECT_TRUE(compiling_ahead());
    bool seen_elsewhere = true;
    run_in_background([&] { seen_elsewhere = compiling_ahead(); });
    background_jobs_wait();
    EXPECT_FALSE(seen_elsewhere);
  }
  EXPECT_FALSE(compiling_ahead());
}

}  // namespace
