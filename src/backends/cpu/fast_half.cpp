// bf16 / f16 matmul and convolution on the CPU (what the autocast pass makes): the half
// operands are widened to f32 (exactly), the f32 oneDNN kernel multiplies and accumulates in
// f32, and the result is rounded once to the half dtype. That is the arithmetic of cuBLASLt and
// cuDNN with half data and fp32 accumulation (a product of two 8- or 11-bit mantissas is exact
// in f32), at oneDNN's f32 speed instead of the reference interpreter's. Also the f32 <-> bf16 /
// f16 casts around them.
#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "core/half.h"

namespace tg::detail::fast {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

void widen(const TensorData& x, TensorData& y) {
  const uint16_t* p = x.ptr<uint16_t>();
  float* q = y.ptr<float>();
  const int64_t n = x.num_elements();
  if (x.dtype() == DType::bf16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) q[i] = bf16_to_float(p[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) q[i] = half_to_float(p[i]);
  }
}

void narrow(const TensorData& x, TensorData& y) {
  const float* p = x.ptr<float>();
  uint16_t* q = y.ptr<uint16_t>();
  const int64_t n = x.num_elements();
  if (y.dtype() == DType::bf16) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) q[i] = float_to_bf16(p[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) q[i] = float_to_half(p[i]);
  }
}

TensorData to_f32(const TensorData& x) {
  TensorData y(x.shape(), DType::f32);
  widen(x, y);
  return y;
}

}  // namespace

bool half_op(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  if (n.kind == OpKind::Cast) {
    if (in.size() != 1) return false;
    const DType from = in[0].dtype(), to = std::get<CastDesc>(n.attr).to;
    if (!(from == DType::f32 && is_half(to)) && !(is_half(from) && to == DType::f32)) return false;
    TensorData y = cpu_output(0, in[0].shape(), to);
    if (to == DType::f32)
      widen(in[0], y);
    else
      narrow(in[0], y);
    out.assign(1, std::move(y));
    return true;
  }
  using Kernel = bool (*)(const Node&, const std::vector<TensorData>&, std::vector<TensorData>&);
  Kernel kernel = nullptr;
  switch (n.kind) {
    case OpKind::MatMul:  // widened copies too
      kernel = [](const Node& c, const std::vector<TensorData>& i, std::vector<TensorData>& o) { return matmul(c, i, o); };
      break;
    case OpKind::Conv2d:  // widened copies: never a graph constant's bytes, so no packing
      kernel = [](const Node& c, const std::vector<TensorData>& i, std::vector<TensorData>& o) { return conv2d(c, i, o); };
      break;
    case OpKind::Conv2dDataGrad:
    case OpKind::Conv2dWeightGrad: kernel = conv2d_grad; break;
    default: return false;
  }
  if (in.size() != 2 || !is_half(in[0].dtype()) || in[1].dtype() != in[0].dtype()) return false;
  std::vector<TensorData> wide{to_f32(in[0]), to_f32(in[1])}, res;
  // The f32 kernel's output cannot take this op's planned (half) memory, so it allocates.
  if (!kernel(n, wide, res) || res.size() != 1) return false;
  TensorData y = cpu_output(0, res[0].shape(), in[0].dtype());
  narrow(res[0], y);
  out.assign(1, std::move(y));
  return true;
}

}  // namespace tg::detail::fast
