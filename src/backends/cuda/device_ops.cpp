// Which kernel family runs each op on the device. Ops not listed here run as generated
// elementwise kernels when they are elementwise (fusion.h), as cuBLASLt matmuls, as control
// flow in the executor, or on the CPU as a fallback.
#include "backends/cuda/cuda_ops.h"

namespace tg::detail {

DeviceOp device_op_for(OpKind k) {
  switch (k) {
    case OpKind::ReduceSum: case OpKind::ReduceMean: case OpKind::ReduceProd: case OpKind::ReduceMax:
    case OpKind::ReduceMin: case OpKind::ReduceAll: case OpKind::ReduceAny: case OpKind::ReduceVariance:
    case OpKind::ReduceLogSumExp: case OpKind::ArgMax: case OpKind::ArgMin: case OpKind::SumToLike:
    case OpKind::Softmax: case OpKind::LogSoftmax:
      return cuda_reduce;
    case OpKind::Conv2d: case OpKind::Conv3d: case OpKind::ConvTranspose2d: case OpKind::Conv2dDataGrad:
    case OpKind::Conv2dWeightGrad: case OpKind::Conv3dDataGrad: case OpKind::Conv3dWeightGrad:
      return cudnn_conv;
    case OpKind::MaxPool2d: case OpKind::AvgPool2d: case OpKind::MaxPool2dGrad: case OpKind::AvgPool2dGrad:
      return cudnn_pool;
    default:
      return nullptr;
  }
}

}  // namespace tg::detail
