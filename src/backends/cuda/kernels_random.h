#pragma once
// Launchers of the Philox4x32-10 kernels in kernels_random.cu. They reproduce the CPU
// reference (src/backends/cpu/ref_random.cpp, docs/ops-semantics.md) number for number: the
// same counter blocks feed the same elements. Plain header: the generator below is
// host-testable against the reference.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backends/cuda/host_device.h"
#include "tgraph/dtype.h"

namespace tg::detail {

/// The four 32-bit words of counter block `b` of the stream (seed, counter): Philox4x32-10
/// keyed by the seed's low and high words, counter {lo, hi} of counter + b.
struct PhiloxWords {
  uint32_t w[4];
};
TG_HD inline PhiloxWords philox_block(uint64_t seed, uint64_t counter, uint64_t b) {
  const uint64_t c = counter + b;
  uint32_t c0 = static_cast<uint32_t>(c), c1 = static_cast<uint32_t>(c >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0, p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
  }
  return {{c0, c1, c2, c3}};
}

/// [0, 1) from the top 24 bits of one word, or the top 53 bits of two.
TG_HD inline double philox_u24(uint32_t w) { return static_cast<double>(w >> 8) * 0x1.0p-24; }
TG_HD inline double philox_u53(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((static_cast<uint64_t>(hi) << 32) | lo) >> 11) * 0x1.0p-53;
}

/// Distributions, as tg::Distribution.
enum class RandomDist : int { uniform, normal, truncated_normal };

/// Counter blocks a draw of n elements of dtype t consumes (the next state's advance).
uint64_t random_blocks(RandomDist d, DType t, uint64_t n);

/// random: y (n elements of t) from the stream in `state` (device i64 [2]: seed, counter);
/// next_state = {seed, counter + random_blocks}. a / b as RandomDesc (integer uniforms are
/// given as lo = ceil(a), hi = ceil(b)).
cudaError_t launch_random(const int64_t* state, RandomDist d, DType t, double a, double b, void* y, uint64_t n,
                          int64_t* next_state, int sm_count, cudaStream_t stream);
/// dropout: y = u24(word i) >= rate ? x / (1 - rate) : 0 for floats x (n elements of t).
cudaError_t launch_dropout(const int64_t* state, double rate, DType t, const void* x, void* y, uint64_t n,
                           int64_t* next_state, int sm_count, cudaStream_t stream);
/// random_state: {seed, 0}.
cudaError_t launch_random_state(int64_t seed, int64_t* state, cudaStream_t stream);

}  // namespace tg::detail
