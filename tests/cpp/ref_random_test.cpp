// Reference interpreter: Philox4x32-10 random ops, their word layout, state threading, dropout.
#include <cmath>

#include "backends/cpu/ref_util.h"
#include "ref_test_util.h"

using namespace reftest;
using tg::TensorData;
using tg::detail::ref::philox4x32_10;

namespace {

TensorData state(int64_t seed, int64_t counter) {
  TensorData s({2}, tg::i64);
  s.ptr<int64_t>()[0] = seed;
  s.ptr<int64_t>()[1] = counter;
  return s;
}

// Word w of the stream of (seed, counter): word w % 4 of block counter + w / 4.
uint32_t word(uint64_t seed, uint64_t counter, uint64_t w) {
  uint64_t c = counter + w / 4;
  return philox4x32_10({uint32_t(c), uint32_t(c >> 32), 0, 0}, {uint32_t(seed), uint32_t(seed >> 32)})[w % 4];
}

std::vector<TensorData> draw(const tg::RandomDesc& d, const TensorData& st) {
  tg::Graph g;
  auto s = g.placeholder({2}, tg::i64);
  return eval_all(g, g.random(s, d).first, {st});
}

double mean(const TensorData& t) {
  double s = 0;
  for (double v : t.to_vector()) s += v;
  return s / static_cast<double>(t.num_elements());
}

double stddev(const TensorData& t) {
  double m = mean(t), s = 0;
  for (double v : t.to_vector()) s += (v - m) * (v - m);
  return std::sqrt(s / static_cast<double>(t.num_elements()));
}

}  // namespace

TEST(RefRandom, PhiloxKnownAnswers) {
  // Random123's published known-answer vectors for philox4x32-10.
  using A = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (A{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}), (A{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (A{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(RefRandom, RandomStateAndUniformWordLayout) {
  tg::Graph g;
  TensorData st = eval(g, g.random_state(42), {});
  EXPECT_EQ(st.ptr<int64_t>()[0], 42);
  EXPECT_EQ(st.ptr<int64_t>()[1], 0);
  auto out = draw({{2, 3}, tg::f32, tg::Distribution::uniform, -1, 3}, state(42, 5));
  expect_shape(out[0], {2, 3});
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(out[0].at(i), static_cast<float>(-1 + 4 * (word(42, 5, i) >> 8) * 0x1.0p-24)) << i;
  EXPECT_EQ(out[1].ptr<int64_t>()[0], 42);
  EXPECT_EQ(out[1].ptr<int64_t>()[1], 7);  // 6 words = 2 blocks
  auto wide = draw({{3}, tg::f64, tg::Distribution::uniform, 0, 1}, state(7, 0));
  for (int i = 0; i < 3; ++i) {
    uint64_t bits = (uint64_t(word(7, 0, 2 * i)) << 32 | word(7, 0, 2 * i + 1)) >> 11;
    EXPECT_EQ(wide[0].at(i), static_cast<double>(bits) * 0x1.0p-53);
  }
  EXPECT_EQ(wide[1].ptr<int64_t>()[1], 2);
}

TEST(RefRandom, ThreadedStatesContinueTheStream) {
  tg::RandomDesc d{{8}, tg::f32, tg::Distribution::uniform, 0, 1};
  auto first = draw(d, state(3, 0));
  auto second = draw(d, first[1]);
  tg::RandomDesc d16 = d;
  d16.shape = {16};
  auto both = draw(d16, state(3, 0));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(both[0].at(i), first[0].at(i));
    EXPECT_EQ(both[0].at(8 + i), second[0].at(i));
  }
  EXPECT_EQ(draw(d, state(3, 0))[0].to_vector(), first[0].to_vector());  // reproducible
  EXPECT_NE(draw(d, state(4, 0))[0].to_vector(), first[0].to_vector());  // the seed matters
}

TEST(RefRandom, UniformStatisticsAndIntegers) {
  auto u = draw({{20000}, tg::f32, tg::Distribution::uniform, 2, 4}, state(1, 0));
  EXPECT_NEAR(mean(u[0]), 3, 0.02);
  for (double v : u[0].to_vector()) ASSERT_TRUE(v >= 2 && v < 4) << v;
  auto n = draw({{1000}, tg::i32, tg::Distribution::uniform, -2, 3}, state(1, 0));
  std::vector<int> hist(5, 0);
  for (double v : n[0].to_vector()) {
    ASSERT_TRUE(v >= -2 && v <= 2) << v;
    ++hist[static_cast<size_t>(v + 2)];
  }
  for (int h : hist) EXPECT_GT(h, 150);
  EXPECT_TG_ERROR(draw({{2}, tg::i32, tg::Distribution::uniform, 0.2, 0.7}, state(1, 0)), "[random]", "no integer");
}

TEST(RefRandom, NormalBoxMuller) {
  auto z = draw({{5}, tg::f32, tg::Distribution::normal, 0, 1}, state(9, 2));
  for (int p = 0; p < 3; ++p) {
    double u1 = (word(9, 2, 2 * p) >> 8) * 0x1.0p-24, u2 = (word(9, 2, 2 * p + 1) >> 8) * 0x1.0p-24;
    double r = std::sqrt(-2 * std::log(1 - u1)), th = 2 * M_PI * u2;
    EXPECT_NEAR(z[0].at(2 * p), r * std::cos(th), 1e-6);
    if (p < 2) EXPECT_NEAR(z[0].at(2 * p + 1), r * std::sin(th), 1e-6);
  }
  EXPECT_EQ(z[1].ptr<int64_t>()[1], 2 + 2);  // 3 pairs of words = 6 words = 2 blocks
  auto big = draw({{20000}, tg::f64, tg::Distribution::normal, 1, 2}, state(5, 0));
  EXPECT_NEAR(mean(big[0]), 1, 0.05);
  EXPECT_NEAR(stddev(big[0]), 2, 0.05);
  EXPECT_EQ(big[1].ptr<int64_t>()[1], 10000);  // one block per pair in f64
}

TEST(RefRandom, TruncatedNormal) {
  auto t = draw({{20000}, tg::f32, tg::Distribution::truncated_normal, -1, 0.5}, state(11, 0));
  for (double v : t[0].to_vector()) ASSERT_TRUE(v >= -2 && v <= 0) << v;
  EXPECT_NEAR(mean(t[0]), -1, 0.02);
  EXPECT_NEAR(stddev(t[0]), 0.5 * 0.8796, 0.01);  // the std of a normal truncated at 2 sigma
  EXPECT_EQ(t[1].ptr<int64_t>()[1], 16 * 20000);  // 16 attempts reserved per element
}

TEST(RefRandom, Dropout) {
  tg::Graph g;
  auto x = g.placeholder({4000}, tg::f32), s = g.placeholder({2}, tg::i64);
  TensorData ones = TensorData::full({4000}, 1.0);
  auto out = eval_all(g, g.dropout(x, s, 0.25).first, {ones, state(2, 10)});
  int kept = 0;
  for (int i = 0; i < 4000; ++i) {
    bool keep = (word(2, 10, i) >> 8) * 0x1.0p-24 >= 0.25;
    ASSERT_EQ(out[0].at(i), keep ? static_cast<float>(1 / 0.75) : 0.0f) << i;
    kept += keep;
  }
  EXPECT_NEAR(kept / 4000.0, 0.75, 0.03);
  EXPECT_EQ(out[1].ptr<int64_t>()[1], 10 + 1000);
  TensorData id = eval(g, g.dropout(x, s, 0.0).first, {ones, state(2, 10)});
  expect_values(id, ones.to_vector());
}
