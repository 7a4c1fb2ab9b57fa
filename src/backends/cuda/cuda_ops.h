#pragma once
// Device kernels the CUDA executor calls for single ops. Each takes device operands with
// their concrete types and a preallocated output, enqueues work on `stream`, and returns
// false (having done nothing) when it does not cover the op, dtype, layout or shape, so the
// executor can fall back.
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "ir/graph_impl.h"

namespace tg::detail {

struct DevArg {
  const void* ptr;
  TensorType type;
};
struct DevOut {
  void* ptr;
  TensorType type;
};

/// cuDNN convolution: conv2d / conv3d forward, conv2d_data_grad, conv2d_weight_grad,
/// conv_transpose2d (f32, f16, bf16; NHWC/NCHW data, HWIO/OIHW weights; groups, dilation).
bool cudnn_conv(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device);
/// cuDNN pooling: max_pool2d, avg_pool2d and their gradients.
bool cudnn_pool(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device);
/// Generated reductions (reduce_sum/mean/max/min/prod/variance/logsumexp/all/any, argmax/min,
/// sum_to_like) and softmax / log_softmax.
bool cuda_reduce(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                 cudaStream_t stream, int device);

/// A device kernel family: enqueues `n` on `stream` into preallocated outputs and returns true,
/// or returns false having done nothing (the executor then falls back to the CPU).
using DeviceOp = bool (*)(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                          const std::vector<DevOut>& out, cudaStream_t stream, int device);
/// The kernel family that covers op kind `k` on the device, or nullptr (device_ops.cpp: the
/// one table of which op runs where; add a line there when a family gains an op).
DeviceOp device_op_for(OpKind k);

/// Source of the generated reduction / softmax kernel (exposed so tests can compile it
/// without a device).
std::string reduce_source(OpKind k, DType in, DType out, bool block_per_output);

}  // namespace tg::detail
