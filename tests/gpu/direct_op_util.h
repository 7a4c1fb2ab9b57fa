#pragma once
// Calls one device kernel family (a DeviceOp of cuda_ops.h: cuDNN, our pooling kernels...)
// directly on one node, outside any executable: for tests that must know which family covered
// a case rather than only that the executable's numbers are right.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_context.h"
#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

namespace gputest {

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes == 0 ? 1 : bytes), cudaSuccess); }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
};

/// Runs a node of `kind` with attribute `attr` on `inputs` through `op`; returns whether `op`
/// covered it and, if so, its result (of `out_type`) in `got`. The output starts as all-ones
/// bytes — NaN in every float type — so an element the op does not write shows.
inline bool run_direct(tg::detail::DeviceOp op, tg::detail::OpKind kind, const tg::detail::Attr& attr,
                       const std::vector<tg::TensorData>& inputs, const tg::TensorType& out_type,
                       tg::TensorData& got) {
  using namespace tg::detail;
  GraphImpl g;
  Node n;
  n.kind = kind;
  n.attr = attr;
  std::vector<std::unique_ptr<DevMem>> bufs;
  std::vector<DevArg> args;
  for (const tg::TensorData& t : inputs) {
    bufs.push_back(std::make_unique<DevMem>(t.nbytes()));
    EXPECT_EQ(cudaMemcpy(bufs.back()->p, t.data(), t.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    args.push_back(DevArg{bufs.back()->p, t.type()});
  }
  tg::TensorData host(out_type.shape, out_type.dtype);
  DevMem o(host.nbytes());
  EXPECT_EQ(cudaMemset(o.p, 0xFF, host.nbytes()), cudaSuccess);
  // The copies and the memset above run on the legacy default stream, which does not order
  // against the context's non-blocking stream: finish them before the op is enqueued there.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = DeviceContext::get(0).stream();
  std::vector<DevOut> outs{DevOut{o.p, out_type}};
  const bool covered = op(g, n, args, outs, stream, 0);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  if (covered) {
    EXPECT_EQ(cudaMemcpy(host.data(), o.p, host.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    got = host;
  }
  return covered;
}

}  // namespace gputest
