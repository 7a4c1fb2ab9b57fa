// scaled_matmul on FP8 tensor cores: cuBLASLt with 8-bit operands, f32 accumulation and the
// per-tensor scales read on the device (A_SCALE / B_SCALE pointers), so a captured CUDA graph
// sees new scales without being captured again.
//
// Hopper's FP8 kernels take one layout: in cuBLAS's column-major terms "TN", both operands
// k-major. tgraph's row-major C[m,n] = a[m,k] b^T (b stored [n,k]) is column-major
// C^T[n,m] = op_T(b as k x n) op_N(a as k x m): cuBLAS's A is our b, its B our a.
// lower_cuda_scaled_matmul puts every kept node in that form first.
#include "backends/cuda/matmul_fp8.h"

#include <cublasLt.h>

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "passes/rewrite.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    case DType::f8e5m2: return CUDA_R_8F_E5M2;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

struct Fp8Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
};

// m, n, k, a's type, b's type, the result's type, device.
using Fp8Key = std::tuple<long long, long long, long long, int, int, int, int>;

bool ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }

std::atomic<long long> launches{0};

// The plan for one shape; found == false when this cuBLASLt has no FP8 kernel for it.
Fp8Plan make_plan(long long m, long long n, long long k, DType ta, DType tb, DType to, DeviceContext& ctx) {
  Fp8Plan p;
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  if (!ok(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
      !ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t)) ||
      !ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n)) ||
      !ok(cublasLtMatrixLayoutCreate(&p.la, lt_type(tb), k, n, k)) ||
      !ok(cublasLtMatrixLayoutCreate(&p.lb, lt_type(ta), k, m, k)) ||
      !ok(cublasLtMatrixLayoutCreate(&p.lc, lt_type(to), n, m, n)))
    return p;
  cublasLtMatmulPreference_t pref;
  if (!ok(cublasLtMatmulPreferenceCreate(&pref))) return p;
  size_t ws = ctx.workspace_bytes();
  cublasLtMatmulHeuristicResult_t res{};
  int count = 0;
  p.found = ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) &&
            ok(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(ctx.cublaslt()), p.desc, p.la, p.lb,
                                              p.lc, p.lc, pref, 1, &res, &count)) &&
            count > 0;
  cublasLtMatmulPreferenceDestroy(pref);
  p.algo = res.algo;
  return p;
}

// In the TN form lower_cuda_scaled_matmul leaves: a [m, k], b [n, k] with transpose_b.
bool tn_form(const ScaledMatmulDesc& d) { return !d.transpose_a && d.transpose_b; }

}  // namespace

bool cuda_has_fp8(int device) {
  const auto [major, minor] = nvrtc_arch(device);
  return major > 8 || (major == 8 && minor >= 9);
}

bool cuda_keeps_scaled_matmul(const GraphImpl& g, const Node& n, int device) {
  if (n.kind != OpKind::ScaledMatMul || !cuda_has_fp8(device)) return false;
  const Shape &a = g.type(n.inputs[0]).shape, &b = g.type(n.inputs[1]).shape;
  if (!a.ranked() || !b.ranked() || !a.is_static() || !b.is_static()) return false;
  const auto& d = std::get<ScaledMatmulDesc>(n.attr);
  const int64_t k = d.transpose_a ? a[0] : a[1], cols = d.transpose_b ? b[0] : b[1];
  return k % 16 == 0 && cols % 16 == 0 && k > 0 && cols > 0 && (d.transpose_a ? a[1] : a[0]) > 0;
}

bool lower_cuda_scaled_matmul(Module& m) {
  return rewrite_nodes(m, [](Graph& g, const Node& n, const std::vector<Tensor>& in) {
    if (n.kind != OpKind::ScaledMatMul) return std::vector<Tensor>{};
    const auto& d = std::get<ScaledMatmulDesc>(n.attr);
    if (tn_form(d)) return std::vector<Tensor>{};
    Tensor a = d.transpose_a ? g.transpose(in[0], {1, 0}) : in[0];
    Tensor b = d.transpose_b ? in[1] : g.transpose(in[1], {1, 0});
    return std::vector<Tensor>{g.scaled_matmul(a, b, in[2], in[3], d.out, false, true)};
  });
}

bool cuda_scaled_matmul(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                        const std::vector<DevOut>& out, cudaStream_t stream, int device) {
  const auto& d = std::get<ScaledMatmulDesc>(n.attr);
  if (!tn_form(d) || in.size() != 4 || out.size() != 1 || !cuda_has_fp8(device)) return false;
  const Shape &a = in[0].type.shape, &b = in[1].type.shape;
  const long long m = a[0], k = a[1], cols = b[0];
  if (k <= 0 || k % 16 != 0 || cols % 16 != 0) return false;  // an empty sum: the unfused path writes zeros
  if (m == 0 || cols == 0) return true;  // nothing to compute
  DeviceContext& ctx = DeviceContext::get(device);
  static std::mutex mu;
  static std::map<Fp8Key, Fp8Plan> plans;
  const Fp8Key key{m, cols, k, static_cast<int>(in[0].type.dtype), static_cast<int>(in[1].type.dtype),
                   static_cast<int>(out[0].type.dtype), device};
  Fp8Plan p;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = plans.find(key);
    if (it == plans.end())
      it = plans.emplace(key, make_plan(m, cols, k, in[0].type.dtype, in[1].type.dtype, out[0].type.dtype, ctx)).first;
    p = it->second;
  }
  if (!p.found) return false;
  // cuBLAS's A is our b: its scale is scale_b. The desc is shared: set and launch under the
  // device's library lock.
  const void* scale_first = in[3].ptr;
  const void* scale_second = in[2].ptr;
  const float one = 1.f, zero = 0.f;
  std::lock_guard<std::mutex> lock(ctx.library_mutex());
  const bool launched = ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_first,
                                           sizeof scale_first)) &&
         ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_second,
                                           sizeof scale_second)) &&
         ok(cublasLtMatmul(static_cast<cublasLtHandle_t>(ctx.cublaslt()), p.desc, &one, in[1].ptr, p.la, in[0].ptr,
                           p.lb, &zero, out[0].ptr, p.lc, out[0].ptr, p.lc, &p.algo, ctx.workspace(),
                           ctx.workspace_bytes(), stream));
  if (launched) ++launches;
  return launched;
}

long long fp8_matmul_launches() { return launches.load(); }

}  // namespace tg::detail
