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
    case OpKind::MaxPool2d: case OpKind::MaxPool2dGrad: case OpKind::MaxPool2dWithIndices:
      return cuda_max_pool;
    case OpKind::AvgPool2d: case OpKind::AvgPool2dGrad:
      return cuda_avg_pool;
    case OpKind::Stencil:
      return cuda_stencil;
    case OpKind::Transpose: case OpKind::Concat: case OpKind::Split: case OpKind::StridedSlice:
    case OpKind::SliceUpdate: case OpKind::Pad: case OpKind::Tile: case OpKind::Reverse: case OpKind::ShapeOf:
    case OpKind::Arange: case OpKind::SpaceToDepth: case OpKind::DepthToSpace: case OpKind::Resize:
    case OpKind::BandPart: case OpKind::CumSum: case OpKind::CumProd: case OpKind::CumMax: case OpKind::CumMin:
      return cuda_layout;
    case OpKind::Gather: case OpKind::GatherNd: case OpKind::GatherAlongAxis: case OpKind::Scatter:
    case OpKind::ScatterNd: case OpKind::ScatterAlongAxis: case OpKind::OneHot:
      return cuda_indexing;
    case OpKind::TopK: case OpKind::Sort: case OpKind::ArgSort:
      return cuda_sort;
    case OpKind::RandomState: case OpKind::Random: case OpKind::Dropout:
      return cuda_random;
    case OpKind::ScaledMatMul:  // kept whole only in the form matmul_fp8.cpp takes
      return cuda_scaled_matmul;
    case OpKind::Attention:  // kept whole only where attention_lowering.cpp found cuDNN takes it
      return cudnn_attention;
    default:
      return nullptr;
  }
}

WarmProbe device_op_warm_probe(OpKind k) {
  switch (k) {
    case OpKind::Conv2d: case OpKind::Conv3d: case OpKind::ConvTranspose2d: case OpKind::Conv2dDataGrad:
    case OpKind::Conv2dWeightGrad: case OpKind::Conv3dDataGrad: case OpKind::Conv3dWeightGrad:
      return cudnn_conv_cold;
    case OpKind::Attention:
      return cudnn_attention_cold;
    default:
      return nullptr;
  }
}

}  // namespace tg::detail
