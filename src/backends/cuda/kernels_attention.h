#pragma once
// tgraph's own fused attention kernel (kernels_attention.cu): softmax(q k^T * scale + bias) v in
// one pass over the keys (an online softmax), compiled with the library for any batch, heads and
// lengths. It stands in for cuDNN's fused attention while cuDNN builds its plan for a shape no
// process on the machine ran (a run-time kernel compile of 0.1-0.8 s on the H200): the tiered
// path of attention_tiers.cpp. Not tuned to cuDNN's speed; correct for every call cuDNN takes.
#include <cuda_runtime_api.h>

namespace tg::detail {

/// One call: q [b, h, lq, dqk], k [b, h, lk, dqk], v [b, h, lk, dv] and o [b, h, lq, dv], dense,
/// f16 or bf16 (`bf16`); an optional additive bias of the same dtype read at
/// bias[bi * bias_strides[0] + hi * bias_strides[1] + i * bias_strides[2] + j] (stride 0 for a
/// broadcast dim; keys dense). Causal: query i sees keys j <= i (top-left, as cuDNN's). A query
/// that sees no key (every score -inf) gives 0.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* bias = nullptr;
  void* o = nullptr;
  long long batch = 0, heads = 0, lq = 0, lk = 0, dqk = 0, dv = 0;
  long long bias_strides[3] = {0, 0, 0};
  float scale = 1.0f;
  bool causal = false;
  bool bf16 = false;
};

/// True when the kernel takes head dims dqk and dv: multiples of 8 from 8 to 256 (cuDNN's range).
bool attention_kernel_takes(long long dqk, long long dv);

/// Enqueues the call on `stream`; cudaErrorInvalidValue for dims it does not take (or a grid
/// beyond CUDA's limits).
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream);

}  // namespace tg::detail
