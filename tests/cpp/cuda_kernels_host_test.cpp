// The host-checkable parts of the indexing / sort / random device kernels (no GPU needed):
// the multiply-shift division, the radix keys that order values as the reference sorts
// them, and the Philox generator and block counts that must equal the CPU reference's.
#ifdef TGRAPH_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu/ref_util.h"
#include "backends/cuda/kernels_indexing.h"
#include "backends/cuda/kernels_random.h"
#include "backends/cuda/kernels_sort.h"
#include "core/half.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;

TEST(CudaKernelsHost, FastDivIsExactForEvery32BitNumerator) {
  std::mt19937_64 gen(1);
  std::vector<uint32_t> divisors{1, 2, 3, 5, 7, 10, 64, 100, 255, 256, 641, 1000, 65535, 65536, 6700417,
                                 0x7fffffffu, 0x80000000u, 0x80000001u, 0xfffffffeu, 0xffffffffu};
  for (int i = 0; i < 200; ++i) divisors.push_back(static_cast<uint32_t>(gen() >> (gen() % 32)) | 1u);
  for (uint32_t d : divisors) {
    FastDiv32 f(d);
    std::vector<uint32_t> ns{0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 0xffffffffu, 0xfffffffeu, 0x80000000u};
    for (int i = 0; i < 2000; ++i) ns.push_back(static_cast<uint32_t>(gen()));
    for (uint32_t n : ns) ASSERT_EQ(f.div(n), n / d) << n << " / " << d;
  }
}

namespace {

// The reference's order (ref_reduce.cpp): NaN above everything, -0 == +0.
bool ref_less(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); }

template <class U, class ToDouble>
void expect_keys_order(const std::vector<U>& bits, U inf_bits, ToDouble value, const char* what) {
  for (size_t i = 0; i < bits.size(); ++i)
    for (size_t j = 0; j < bits.size(); ++j) {
      double a = value(bits[i]), b = value(bits[j]);
      U ka = float_sort_key<U>(bits[i], inf_bits), kb = float_sort_key<U>(bits[j], inf_bits);
      ASSERT_EQ(ka < kb, ref_less(a, b)) << what << " " << a << " vs " << b;
      ASSERT_EQ(ka == kb, !ref_less(a, b) && !ref_less(b, a)) << what << " " << a << " vs " << b;
    }
}

}  // namespace

TEST(CudaKernelsHost, SortKeysOrderValuesAsTheReference) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::vector<double> vals{0.0, -0.0, 1.0, -1.0, 2.5, -2.5, inf, -inf, nan, -nan, 1e-40, -1e-40, 3e38, -3e38, 1e-300};
  std::mt19937_64 gen(2);
  std::uniform_real_distribution<double> u(-100, 100);
  for (int i = 0; i < 60; ++i) vals.push_back(i % 3 ? u(gen) : std::round(u(gen) / 30));  // ties too
  std::vector<uint32_t> b32;
  std::vector<uint64_t> b64;
  std::vector<uint16_t> b16, bb16;
  for (double v : vals) {
    float f = static_cast<float>(v);
    uint32_t w;
    std::memcpy(&w, &f, 4);
    b32.push_back(w);
    uint64_t d;
    std::memcpy(&d, &v, 8);
    b64.push_back(d);
    b16.push_back(float_to_half(f));
    bb16.push_back(float_to_bf16(f));
  }
  b32.push_back(0xffc00001u);  // a negative NaN with a payload
  expect_keys_order<uint32_t>(b32, 0x7f800000u, [](uint32_t w) { return static_cast<double>(bits_to_float(w)); }, "f32");
  expect_keys_order<uint64_t>(b64, 0x7ff0000000000000ull, [](uint64_t w) {
    double d;
    std::memcpy(&d, &w, 8);
    return d;
  }, "f64");
  expect_keys_order<uint16_t>(b16, 0x7c00u, [](uint16_t h) { return static_cast<double>(half_to_float(h)); }, "f16");
  expect_keys_order<uint16_t>(bb16, 0x7f80u, [](uint16_t h) { return static_cast<double>(bf16_to_float(h)); }, "bf16");
  for (int a = -128; a < 128; ++a)
    for (int b = -128; b < 128; ++b)
      ASSERT_EQ(signed_sort_key<uint8_t>(static_cast<uint8_t>(a)) < signed_sort_key<uint8_t>(static_cast<uint8_t>(b)),
                a < b);
  const int64_t i64s[] = {std::numeric_limits<int64_t>::min(), -5, -1, 0, 1, 7, std::numeric_limits<int64_t>::max()};
  for (int64_t a : i64s)
    for (int64_t b : i64s)
      ASSERT_EQ(signed_sort_key<uint64_t>(static_cast<uint64_t>(a)) < signed_sort_key<uint64_t>(static_cast<uint64_t>(b)),
                a < b);
}

TEST(CudaKernelsHost, PhiloxBlocksAreTheReferences) {
  const uint64_t seeds[] = {0, 1, 42, 0x123456789abcdefull, ~0ull};
  const uint64_t counters[] = {0, 5, 0xfffffffeull, (1ull << 40) + 3};
  for (uint64_t seed : seeds)
    for (uint64_t counter : counters)
      for (uint64_t b : {0ull, 1ull, 2ull, 1000ull}) {
        const uint64_t c = counter + b;
        auto want = ref::philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0},
                                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
        PhiloxWords got = philox_block(seed, counter, b);
        for (int k = 0; k < 4; ++k) ASSERT_EQ(got.w[k], want[static_cast<size_t>(k)]) << seed << " " << counter << " " << b;
      }
  EXPECT_EQ(philox_u24(0xffffffffu), 1.0 - 0x1.0p-24);
  EXPECT_EQ(philox_u53(0xffffffffu, 0xffffffffu), 1.0 - 0x1.0p-53);
}

TEST(CudaKernelsHost, RandomBlockCountsAdvanceTheStateAsTheReference) {
  for (Distribution dist : {Distribution::uniform, Distribution::normal, Distribution::truncated_normal})
    for (DType t : {f32, f16, bf16, f64, i32, u8})
      for (int64_t n : {0, 1, 2, 3, 5, 8, 13}) {
        if (dist != Distribution::uniform && !is_float(t)) continue;
        Graph g;
        auto [y, next] = g.random(g.random_state(7), {.shape = {n}, .dtype = t, .distribution = dist, .a = 0, .b = 4});
        auto out = g.compile({}, {next}, {}, {.device = Device::cpu()}).run({});
        EXPECT_EQ(static_cast<uint64_t>(out[0].at(1)),
                  random_blocks(static_cast<RandomDist>(dist), t, static_cast<uint64_t>(n)))
            << dtype_name(t) << " n=" << n << " dist " << static_cast<int>(dist);
      }
}

#endif  // TGRAPH_HAVE_CUDA
