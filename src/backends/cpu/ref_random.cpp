// Reference random ops: Philox4x32-10 keyed by the state's seed, one 128-bit counter block at
// a time starting at the state's counter. Which words feed which element is fixed (see
// docs/ops-semantics.md), so every backend can reproduce the same numbers in parallel.
#include <algorithm>
#include <cmath>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key[0] += W0;
      key[1] += W1;
    }
    uint64_t p0 = static_cast<uint64_t>(M0) * ctr[0], p1 = static_cast<uint64_t>(M1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

namespace {

constexpr int64_t kTruncatedAttempts = 16;

// The 32-bit word stream of a state: word w is word w % 4 of block counter + w / 4.
struct Stream {
  uint64_t seed, counter;
  uint32_t word(uint64_t w) const { return block(w / 4)[w % 4]; }
  std::array<uint32_t, 4> block(uint64_t b) const {
    uint64_t c = counter + b;
    return philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0},
                         {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  }
};

// [0, 1) from the top 24 bits of one word, or the top 53 bits of two.
double u24(uint32_t w) { return static_cast<double>(w >> 8) * 0x1.0p-24; }
double u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1.0p-53;
}

Stream stream_of(const TensorData& state) {
  return {static_cast<uint64_t>(load_int(state, 0)), static_cast<uint64_t>(load_int(state, 1))};
}

TensorData next_state(const Stream& s, uint64_t blocks) {
  TensorData t(Shape{2}, DType::i64);
  store_int(t, 0, static_cast<int64_t>(s.seed));
  store_int(t, 1, static_cast<int64_t>(s.counter + blocks));
  return t;
}

// Box-Muller from two uniforms: radius from 1 - u1 (in (0, 1]), angle 2*pi*u2.
double box_muller(double u1, double u2, bool sine) {
  double r = std::sqrt(-2.0 * std::log(1.0 - u1)), th = 2.0 * M_PI * u2;
  return r * (sine ? std::sin(th) : std::cos(th));
}

std::vector<TensorData> random(const Ctx& c) {
  const auto& d = c.attr<RandomDesc>();
  const Stream s = stream_of(c.in[0]);
  TensorData y = c.output(0);
  const uint64_t n = static_cast<uint64_t>(y.num_elements());
  const bool wide = d.dtype == DType::f64 || is_integer(d.dtype);  // 53-bit uniforms
  uint64_t blocks = 0;
  if (d.distribution == Distribution::uniform) {
    blocks = ((wide ? 2 : 1) * n + 3) / 4;
    double lo = d.a, hi = d.b;
    if (is_integer(d.dtype)) {  // integers in [ceil(a), ceil(b))
      lo = std::ceil(d.a);
      hi = std::ceil(d.b);
      if (hi <= lo) c.fail("no integer lies in [" + std::to_string(d.a) + ", " + std::to_string(d.b) + ")");
    }
    for (uint64_t i = 0; i < n; ++i) {
      double u = wide ? u53(s.word(2 * i), s.word(2 * i + 1)) : u24(s.word(i));
      double v = is_integer(d.dtype) ? lo + std::floor(u * (hi - lo)) : lo + (hi - lo) * u;
      y.set(static_cast<int64_t>(i), v);
    }
  } else if (d.distribution == Distribution::normal) {
    // Pair p of elements (2p, 2p+1) is the cos and sin of one Box-Muller draw.
    const uint64_t pairs = (n + 1) / 2;
    blocks = wide ? pairs : (pairs + 1) / 2;
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t p = i / 2;
      double z = wide ? box_muller(u53(s.word(4 * p), s.word(4 * p + 1)), u53(s.word(4 * p + 2), s.word(4 * p + 3)), i % 2)
                      : box_muller(u24(s.word(2 * p)), u24(s.word(2 * p + 1)), i % 2);
      y.set(static_cast<int64_t>(i), d.a + d.b * z);
    }
  } else {
    // Truncated normal: attempt k of element i is the cos draw of block k * n + i; the first
    // within 2 standard deviations is kept (the last attempt is clamped, p ~ 1e-22).
    blocks = kTruncatedAttempts * n;
    for (uint64_t i = 0; i < n; ++i) {
      double z = 0;
      for (int64_t k = 0; k < kTruncatedAttempts; ++k) {
        auto w = s.block(static_cast<uint64_t>(k) * n + i);
        z = wide ? box_muller(u53(w[0], w[1]), u53(w[2], w[3]), false) : box_muller(u24(w[0]), u24(w[1]), false);
        if (std::fabs(z) <= 2.0) break;
      }
      y.set(static_cast<int64_t>(i), d.a + d.b * std::clamp(z, -2.0, 2.0));
    }
  }
  return {y, next_state(s, blocks)};
}

// Element i is kept when the 24-bit uniform of word i is >= rate (probability 1 - rate).
std::vector<TensorData> dropout(const Ctx& c) {
  const double rate = c.attr<DropoutDesc>().rate;
  const TensorData& x = c.in[0];
  const Stream s = stream_of(c.in[1]);
  TensorData y = c.output(0);
  const uint64_t n = static_cast<uint64_t>(x.num_elements());
  for (uint64_t i = 0; i < n; ++i) {
    int64_t k = static_cast<int64_t>(i);
    y.set(k, u24(s.word(i)) >= rate ? x.at(k) / (1.0 - rate) : 0.0);
  }
  return {y, next_state(s, (n + 3) / 4)};
}

}  // namespace

std::vector<TensorData> eval_random(const Ctx& c) {
  switch (c.kind()) {
    case OpKind::RandomState: {
      TensorData t(Shape{2}, DType::i64);
      store_int(t, 0, c.attr<SeedDesc>().seed);
      store_int(t, 1, 0);
      return {t};
    }
    case OpKind::Random: return random(c);
    default: return dropout(c);
  }
}

}  // namespace tg::detail::ref
