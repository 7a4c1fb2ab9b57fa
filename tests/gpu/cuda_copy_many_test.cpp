// launch_copy_many (src/backends/cuda/kernels_copy.cu), which copies a run's small outputs into
// one allocation in one launch: pieces of every size (empty, a byte, unaligned ends, several of
// the kernel's 32 KB chunks, over a megabyte), more pieces than one launch takes, byte for byte
// against the host, and nothing written outside the pieces.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "backends/cuda/kernels_copy.h"

TEST(CudaCopyMany, PiecesOfEverySizeLandWhole) {
  std::mt19937 rng(7);
  std::vector<size_t> sizes = {0, 1, 17, 4096, 32 * 1024, 32 * 1024 + 1, 100000, (1 << 20) + 3};
  for (int i = 0; i < 200; ++i) sizes.push_back(rng() % 3000);  // past kCopyManyPieces: two launches
  std::vector<size_t> src_off, dst_off;
  size_t src_total = 0, dst_total = 0;
  for (size_t s : sizes) {
    src_off.push_back(src_total + (rng() % 2 ? 0 : 3));  // some sources not 16-byte aligned
    src_total = src_off.back() + s + 16;
    dst_off.push_back((dst_total + 15) / 16 * 16);
    dst_total = dst_off.back() + s + 8;
  }
  std::vector<unsigned char> host(src_total);
  for (auto& b : host) b = static_cast<unsigned char>(rng());
  unsigned char *src = nullptr, *dst = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), src_total), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dst), dst_total), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(src, host.data(), src_total, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0xAB, dst_total), cudaSuccess);
  std::vector<const void*> srcs;
  for (size_t o : src_off) srcs.push_back(src + o);
  ASSERT_EQ(tg::detail::launch_copy_many(dst, srcs.data(), dst_off.data(), sizes.data(), static_cast<int>(sizes.size()),
                                         nullptr),
            cudaSuccess);
  std::vector<unsigned char> got(dst_total);
  ASSERT_EQ(cudaMemcpy(got.data(), dst, dst_total, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<unsigned char> want(dst_total, 0xAB);
  for (size_t k = 0; k < sizes.size(); ++k)
    for (size_t i = 0; i < sizes[k]; ++i) want[dst_off[k] + i] = host[src_off[k] + i];
  size_t bad = 0;
  for (size_t i = 0; i < dst_total; ++i) bad += got[i] != want[i];
  EXPECT_EQ(bad, 0u);
  cudaFree(src);
  cudaFree(dst);
}
