// launch_permute (src/backends/cuda/kernels_layout.cu), which cuDNN convolutions use to move
// weights between their layout and cuDNN's: every element size, ranks 1 to 5, permutations that
// are batched 2-D transposes after merging dims (the tiled kernel: sizes not multiples of the
// 32 x 32 tile, size-1 dims) and those that are not (the gathering kernel), against the host.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels_layout.h"

namespace {

void check(std::vector<long long> dims, std::vector<int> perm, int esize) {
  const int rank = static_cast<int>(dims.size());
  std::string what = "dims";
  for (long long d : dims) what += " " + std::to_string(d);
  what += " perm";
  for (int p : perm) what += " " + std::to_string(p);
  what += " esize " + std::to_string(esize);
  SCOPED_TRACE(what);
  long long n = 1;
  for (long long d : dims) n *= d;
  std::vector<unsigned char> host(static_cast<size_t>(n * esize)), got(host.size(), 0xAB), want(host.size());
  std::mt19937 rng(static_cast<unsigned>(n * 31 + esize));
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  // want[out index] = host[in index]
  std::vector<long long> in_strides(dims.size());
  long long st = 1;
  for (int d = rank - 1; d >= 0; --d) in_strides[static_cast<size_t>(d)] = st, st *= dims[static_cast<size_t>(d)];
  std::vector<long long> od(dims.size());
  for (int d = 0; d < rank; ++d) od[static_cast<size_t>(d)] = dims[static_cast<size_t>(perm[static_cast<size_t>(d)])];
  for (long long i = 0; i < n; ++i) {
    long long rest = i, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const long long c = rest % od[static_cast<size_t>(d)];
      rest /= od[static_cast<size_t>(d)];
      src += c * in_strides[static_cast<size_t>(perm[static_cast<size_t>(d)])];
    }
    std::memcpy(&want[static_cast<size_t>(i * esize)], &host[static_cast<size_t>(src * esize)], static_cast<size_t>(esize));
  }
  void *din = nullptr, *dout = nullptr;
  ASSERT_EQ(cudaMalloc(&din, host.size() + 1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, host.size() + 1), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(din, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dout, 0xAB, host.size()), cudaSuccess);
  ASSERT_EQ(tg::detail::launch_permute(din, dout, rank, dims.data(), perm.data(), esize, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), dout, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(din);
  cudaFree(dout);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "byte " << i;
}

}  // namespace

TEST(CudaPermute, MatchesTheHost) {
  for (int esize : {1, 2, 4, 8}) {
    check({3, 3, 64, 70}, {3, 0, 1, 2}, esize);   // HWIO -> KRSC: [576, 70] -> [70, 576]
    check({70, 3, 3, 64}, {1, 2, 3, 0}, esize);   // and back
    check({7, 7, 3, 64}, {3, 0, 1, 2}, esize);    // the stem's weights
    check({5, 33, 65}, {0, 2, 1}, esize);         // batched, ragged tiles
    check({1, 40, 1, 31}, {3, 1, 2, 0}, esize);   // size-1 dims around a transpose
    check({4, 5, 6}, {1, 0, 2}, esize);           // the innermost dim stays: gathered
    check({2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}, esize);  // tiled, three other dims
    check({64, 3, 7, 7}, {2, 3, 1, 0}, esize);    // OIHW -> HWIO: the innermost moves, not a swap
    check({40, 35, 3, 3}, {0, 2, 3, 1}, esize);   // OIHW -> KRSC (PyTorch's weights for cuDNN)
    check({64, 600, 3, 3}, {0, 2, 3, 1}, esize);  // the same, rows of b over three blocks
    check({9, 300, 16}, {0, 2, 1}, esize);        // the widest short innermost dim
    check({17, 3}, {1, 0}, esize);                // a short innermost dim, no other dims
    check({3, 2, 33, 2, 34, 4}, {0, 1, 3, 2, 4, 5}, esize);  // space-to-depth: gathered runs
    check({3, 40, 5, 36}, {3, 1, 0, 2}, esize);   // tiled, the rest not in input order
    check({17}, {0}, esize);
    check({6, 7}, {0, 1}, esize);                 // identity
    check({40, 35, 1, 1}, {0, 2, 3, 1}, esize);   // only size-1 dims move: a copy
  }
}
