#include "backends/cuda/matmul_lt.h"

#include <cublasLt.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/profile.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_matmul.h"
#include "backends/cuda/library_plans.h"
#include "core/env.h"
#include "runtime/device_code.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

void lt_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(std::string("[matmul] cuBLASLt ") + what + " failed (status " + std::to_string(s) + ")");
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f64: return CUDA_R_64F;
    default: throw Error(std::string("[matmul] no cuBLASLt path for ") + dtype_name(t));
  }
}

// A cached plan: descriptors and the chosen algorithm for one shape.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = true;  // false: no algorithm for this epilogue (only cached for epilogues)
};

using Key = std::tuple<long long, long long, long long, long long, long long, long long, bool, bool, int, bool, int, int>;

constexpr size_t kEpilogueKinds = static_cast<size_t>(MatmulShape::Epilogue::count);
std::atomic<long long> epilogue_launches[kEpilogueKinds]{};

cublasLtEpilogue_t lt_epilogue(MatmulShape::Epilogue e) {
  switch (e) {
    case MatmulShape::Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case MatmulShape::Epilogue::relu_bias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case MatmulShape::Epilogue::gelu_tanh_bias: return CUBLASLT_EPILOGUE_GELU_BIAS;  // cuBLASLt's GELU is the tanh form
    case MatmulShape::Epilogue::gelu_tanh_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case MatmulShape::Epilogue::relu_aux_bias: return CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    case MatmulShape::Epilogue::drelu: return CUBLASLT_EPILOGUE_DRELU;
    // The derivative of the tanh form times the product; its aux is GELU_AUX_BIAS's (the gelu input).
    case MatmulShape::Epilogue::dgelu_tanh: return CUBLASLT_EPILOGUE_DGELU;
    // cuBLAS sees our b first (its "A", n x k column-major): the sum of b over k is its BGRADA.
    case MatmulShape::Epilogue::bias_grad: return CUBLASLT_EPILOGUE_BGRADA;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

void set_batch(cublasLtMatrixLayout_t l, long long batch, long long stride) {
  int32_t b = static_cast<int32_t>(batch);
  lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b), "layout batch");
  int64_t s = stride;
  lt_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s), "layout stride");
}

// Sets the epilogue's pointers on a plan's descriptor; false when this cuBLASLt refuses one.
bool set_pointers(const MatmulShape& s, cublasLtMatmulDesc_t desc, const void* bias, const void* aux) {
  if (s.uses_bias() &&
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) != CUBLAS_STATUS_SUCCESS)
    return false;
  return !s.uses_aux() || cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                         sizeof aux) == CUBLAS_STATUS_SUCCESS;
}

// An algorithm saved with an executable (library_plans.h): the heuristic is not asked again.
struct Saved {
  cublasLtMatmulAlgo_t algo{};
  bool found = true;
};

Plan make_plan(const MatmulShape& s, const void* bias, const void* aux, DeviceContext& ctx, const Saved* saved) {
  // Row-major C[m,n] = op(A) op(B) is column-major C^T[n,m] = op(B)^T-view times op(A)^T-view:
  // cuBLAS sees the B operand first, then A, with m and n swapped.
  Plan p;
  cudaDataType_t dt = data_type(s.dtype);
  // f32 is exact fp32 unless tf32 is allowed; f16 / bf16 operands (autocast) are multiplied
  // on tensor cores and accumulated in fp32 (CUBLAS_COMPUTE_32F, never COMPUTE_16F).
  cublasComputeType_t ct = s.dtype == DType::f64 ? CUBLAS_COMPUTE_64F
                           : (s.dtype == DType::f32 && s.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                               : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = s.dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
  lt_check(cublasLtMatmulDescCreate(&p.desc, ct, scale), "desc");
  cublasOperation_t op_first = s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t op_second = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first), "transa");
  lt_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second), "transb");
  if (s.epilogue != MatmulShape::Epilogue::none) {
    // In cuBLAS's column-major view D is n x m: a bias of length n broadcast over columns is our
    // bias broadcast over rows; stride 0 shares it between batches. The aux matrix is laid out
    // as D (our row-major m x n: leading dimension n, in elements; relu's mask counts bits). The
    // heuristic reads the pointers' alignment, so the first call's are set here (every buffer
    // is equally aligned).
    cublasLtEpilogue_t e = lt_epilogue(s.epilogue);
    int32_t bt = dt;
    int64_t bstride = 0, aux_ld = s.n, aux_stride = s.m * s.n;
    bool ok = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e) ==
                  CUBLAS_STATUS_SUCCESS &&
              set_pointers(s, p.desc, bias, aux);
    if (ok && s.uses_bias())
      ok = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) ==
               CUBLAS_STATUS_SUCCESS &&
           cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bstride, sizeof bstride) ==
               CUBLAS_STATUS_SUCCESS;
    if (ok && s.uses_aux())
      ok = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld) ==
               CUBLAS_STATUS_SUCCESS &&
           cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &aux_stride,
                                          sizeof aux_stride) == CUBLAS_STATUS_SUCCESS;
    if (!ok || (saved && !saved->found)) {
      p.found = false;  // this cuBLASLt does not take the epilogue: run it unfused
      return p;
    }
  }
  // First operand (B): stored row-major [k,n] (or [n,k] transposed) = column-major n x k view.
  uint64_t rows_b = s.transpose_b ? s.k : s.n, cols_b = s.transpose_b ? s.n : s.k;
  uint64_t rows_a = s.transpose_a ? s.m : s.k, cols_a = s.transpose_a ? s.k : s.m;
  lt_check(cublasLtMatrixLayoutCreate(&p.la, dt, rows_b, cols_b, static_cast<int64_t>(rows_b)), "layout B");
  lt_check(cublasLtMatrixLayoutCreate(&p.lb, dt, rows_a, cols_a, static_cast<int64_t>(rows_a)), "layout A");
  lt_check(cublasLtMatrixLayoutCreate(&p.lc, dt, s.n, s.m, s.n), "layout C");
  if (s.batch > 1) {
    set_batch(p.la, s.batch, s.stride_b);
    set_batch(p.lb, s.batch, s.stride_a);
    set_batch(p.lc, s.batch, s.m * s.n);
  }
  // A saved algorithm (a loaded executable's, the disk cache's) is checked against this
  // problem first: one this cuBLASLt does not take for it is asked for again.
  if (saved && saved->found) {
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(ctx.cublaslt()), p.desc, p.la, p.lb, p.lc, p.lc,
                                &saved->algo, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= ctx.workspace_bytes()) {
      p.algo = saved->algo;
      return p;
    }
  }
  cublasLtMatmulPreference_t pref;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  size_t ws = ctx.workspace_bytes();
  lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace");
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(ctx.cublaslt()), p.desc, p.la,
                                                     p.lb, p.lc, p.lc, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if ((st != CUBLAS_STATUS_SUCCESS || found == 0) && s.epilogue != MatmulShape::Epilogue::none) {
    p.found = false;
    return p;
  }
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    throw Error("[matmul] cuBLASLt has no algorithm for m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                " k=" + std::to_string(s.k) + " " + dtype_name(s.dtype));
  p.algo = res.algo;
  return p;
}

std::mutex& plans_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<Key, Plan>& plans() {
  static std::map<Key, Plan> p;
  return p;
}
std::map<Key, Saved>& saved_plans() {  // guarded by plans_mutex
  static std::map<Key, Saved> p;
  return p;
}

// Saved choices handed over by a load whose kernels no warm-up has loaded yet, per device
// (matmul_lt_saved_warm_calls). Guarded by plans_mutex.
std::map<int, std::vector<std::pair<Key, Saved>>>& unwarmed() {
  static std::map<int, std::vector<std::pair<Key, Saved>>> u;
  return u;
}

// The plans whose kernel has run in this process (CUDA loads a kernel at its first launch): by
// launch() and by the warm-up calls. Guarded by plans_mutex.
std::set<Key>& launched() {
  static std::set<Key> l;
  return l;
}

std::atomic<long long> stand_in_calls{0};
constexpr double kStandInFlops = 4294967296.0;  // the largest call tgraph's kernel stands in for (stand_in)
constexpr long long kStandInDepth = 8192;  // and the deepest: a block walks all of k (no split)

void free_plan(Plan& p) {
  if (p.la) cublasLtMatrixLayoutDestroy(p.la);
  if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
  if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p = Plan{};
}

// c = op(a) op(b) through plan `p` on `stream` with workspace `ws` (cuBLAS sees the B operand
// first: make_plan says why).
cublasStatus_t run_plan(const MatmulShape& s, const Plan& p, const DeviceContext& ctx, const void* a, const void* b,
                        void* c, void* ws, size_t ws_bytes, cudaStream_t stream) {
  float one_f = 1.f, zero_f = 0.f;
  double one_d = 1.0, zero_d = 0.0;
  const void* alpha = s.dtype == DType::f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = s.dtype == DType::f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  return cublasLtMatmul(static_cast<cublasLtHandle_t>(ctx.cublaslt()), p.desc, alpha, b, p.la, a, p.lb, beta, c, p.lc,
                        c, p.lc, &p.algo, ws, ws_bytes, stream);
}

// The key without its device, as text: what a saved file holds.
std::string problem_of(const Key& k) {
  const auto& [m, n, kk, batch, sa, sb, ta, tb, dt, tf32, device, epi] = k;
  (void)device;
  std::string out;
  for (long long v : {m, n, kk, batch, sa, sb, static_cast<long long>(ta), static_cast<long long>(tb),
                      static_cast<long long>(dt), static_cast<long long>(tf32), static_cast<long long>(epi)})
    out += std::to_string(v) + ",";
  return out;
}

// A plan's choice as an executable's file and the disk cache hold it: "<found> <hex of the
// algorithm's bytes>".
std::string saved_text(const Plan& p) {
  static const char* hex = "0123456789abcdef";
  std::string v = p.found ? "1 " : "0 ";
  const auto* b = reinterpret_cast<const unsigned char*>(&p.algo);
  for (size_t i = 0; i < sizeof p.algo; ++i) v += hex[b[i] >> 4], v += hex[b[i] & 15];
  return v;
}

// The choice in `value` (saved_text); false when malformed.
bool parse_saved(const std::string& value, Saved& sv) {
  if (value.size() != 2 + 2 * sizeof sv.algo || (value[0] != '0' && value[0] != '1')) return false;
  sv.found = value[0] == '1';
  auto* b = reinterpret_cast<unsigned char*>(&sv.algo);
  for (size_t i = 0; i < sizeof sv.algo; ++i) {
    auto nib = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = nib(value[2 + 2 * i]), lo = nib(value[3 + 2 * i]);
    if (hi < 0 || lo < 0) return false;
    b[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

// A choice's key in an executable's file and the disk cache (library_plans.h).
std::string saved_key(const Key& key) { return library_signature(std::get<10>(key)) + "|lt|" + problem_of(key); }

// Key's problem with algorithm sv run once on scratch memory (their values do not matter: the
// layouts' extents, the bias (n) and an aux matrix as large as the result), through a plan of
// its own (the cached ones' descriptors are shared under the device's lock): a warm-up call
// that loads the algorithm's kernel for the run that follows.
void first_launch(const Key& key, const Saved& sv, cudaStream_t stream) {
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    if (launched().count(key)) return;  // loaded meanwhile (a load's calls and a first run's both ask)
  }
  const auto& [m, n, k, batch, sa, sb, ta, tb, dt, tf32, device, epi] = key;
  MatmulShape s{m, n, k, batch, sa, sb, ta, tb, static_cast<DType>(dt), tf32};
  s.epilogue = static_cast<MatmulShape::Epilogue>(epi);
  if (s.epilogue >= MatmulShape::Epilogue::count) return;
  DeviceContext& ctx = DeviceContext::get(device);
  const size_t es = dtype_size(s.dtype);
  const size_t na = static_cast<size_t>(sa > 0 ? batch * sa : m * k), nb = static_cast<size_t>(sb > 0 ? batch * sb : k * n);
  const size_t nc = static_cast<size_t>(batch * m * n);
  DeviceBuffer a = ctx.allocate(na * es, stream), b = ctx.allocate(nb * es, stream), c = ctx.allocate(nc * es, stream);
  DeviceBuffer bias = ctx.allocate(static_cast<size_t>(n) * es, stream);
  DeviceBuffer aux = s.uses_aux() ? ctx.allocate(static_cast<size_t>(m * n) * es, stream) : DeviceBuffer();
  DeviceBuffer ws = ctx.allocate(ctx.workspace_bytes(), stream);
  Plan p = make_plan(s, bias.get(), aux.get(), ctx, &sv);
  const bool ran = p.found &&
                   run_plan(s, p, ctx, a.get(), b.get(), c.get(), ws.get(), ctx.workspace_bytes(), stream) == CUBLAS_STATUS_SUCCESS;
  free_plan(p);
  if (!ran) return;
  std::lock_guard<std::mutex> lock(plans_mutex());
  launched().insert(key);
}

// tgraph's kernel's form of the call, when it computes it (kernels_matmul.h): f16 / bf16 / f32
// / f64, no epilogue or a forward one without an aux matrix (the aux and backward forms keep
// cuBLASLt's own formats, which a later run's cuBLASLt call would read).
std::optional<MatmulKernelArgs> kernel_args(const MatmulShape& s, const void* a, const void* b, const void* bias,
                                            void* c) {
  MatmulKernelArgs k;
  switch (s.dtype) {
    case DType::f16: k.type = MatmulKernelArgs::Type::f16; break;
    case DType::bf16: k.type = MatmulKernelArgs::Type::bf16; break;
    case DType::f32: k.type = MatmulKernelArgs::Type::f32; break;
    case DType::f64: k.type = MatmulKernelArgs::Type::f64; break;
    default: return std::nullopt;
  }
  switch (s.epilogue) {
    case MatmulShape::Epilogue::none: k.epilogue = MatmulKernelArgs::Epilogue::none; break;
    case MatmulShape::Epilogue::bias: k.epilogue = MatmulKernelArgs::Epilogue::bias; break;
    case MatmulShape::Epilogue::relu_bias: k.epilogue = MatmulKernelArgs::Epilogue::relu_bias; break;
    case MatmulShape::Epilogue::gelu_tanh_bias: k.epilogue = MatmulKernelArgs::Epilogue::gelu_tanh_bias; break;
    default: return std::nullopt;
  }
  k.a = a, k.b = b, k.bias = bias, k.c = c;
  k.m = s.m, k.n = s.n, k.k = s.k, k.batch = s.batch, k.stride_a = s.stride_a, k.stride_b = s.stride_b;
  k.ta = s.transpose_a, k.tb = s.transpose_b;
  return k;
}

// A first run (ProvisionalChoices installed: nothing captures it) meeting a plan whose kernel
// has not run in this process computes the call with tgraph's kernel and puts the plan's first
// launch off to the warm-up threads that ask the run's put-off questions after it: the next
// run waits for them and finds the kernel loaded (that run is captured). A cuBLASLt kernel's
// first launch loads its module (0.3-19 ms per BERT shape on the H200, through torch). Only
// under TGRAPH_INTERIM_MATMUL: `loaded`, for the plans an executable's file saved (a loaded
// BERT-base f16's first run 202 -> 140-154 ms, session 36), `1` everywhere (cold batch sizes:
// no gain, and their second call pays the capture: session 35). Off by default: a loaded
// first run's values would differ in the last bits from the saving process's and later runs'.
bool stand_in(const MatmulShape& s, const Key& key, const Plan& p, const void* a, const void* b, const void* bias,
              void* c, cudaStream_t stream) {
  ProvisionalChoices* later = ProvisionalChoices::current();
  const MatmulStandIn mode = matmul_stand_in_mode();
  if (!later || mode == MatmulStandIn::off) return false;
  // Only calls tgraph's kernel finishes well inside a kernel's load (CUDA cores, ~10 TFLOP/s:
  // 4.3 GFLOP in well under a millisecond): a large one run on it, a layer after layer, would
  // cost more than the load it avoids.
  if (2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k) * static_cast<double>(s.batch) >
          kStandInFlops ||
      s.k > kStandInDepth)
    return false;
  // TF32 is a promise about the error, which exact f32 keeps, but a test (and a user comparing
  // precisions) sees a first run in another error class than the rest: cuBLASLt computes it.
  if (s.dtype == DType::f32 && s.tf32) return false;
  const std::optional<MatmulKernelArgs> args = kernel_args(s, a, b, bias, c);
  if (!args) return false;
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    if (launched().count(key)) return false;
    if (mode == MatmulStandIn::loaded && !saved_plans().count(key)) return false;
  }
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return false;
  }
  if (launch_matmul(*args, stream) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  ++stand_in_calls;
  if (profiling_first_runs()) cpu_profile_add("cuda first run: matmul: tgraph's kernel stood in (cuBLASLt's not loaded)", 0);
  Saved sv;
  sv.algo = p.algo;
  later->put_off("lt|" + std::to_string(std::get<10>(key)) + "|" + problem_of(key),
                 [key, sv](cudaStream_t st) { first_launch(key, sv, st); });
  return true;
}

}  // namespace

void matmul_lt_provide(const std::string& problem, const std::string& value, int device) {
  std::vector<long long> f;
  for (size_t at = 0; at < problem.size();) {
    const size_t comma = problem.find(',', at);
    if (comma == std::string::npos) return;
    try {
      f.push_back(std::stoll(problem.substr(at, comma - at)));
    } catch (const std::exception&) {
      return;
    }
    at = comma + 1;
  }
  Saved sv;
  if (f.size() != 11 || !parse_saved(value, sv)) return;
  Key key{f[0], f[1], f[2], f[3], f[4], f[5], f[6] != 0, f[7] != 0, static_cast<int>(f[8]), f[9] != 0, device,
          static_cast<int>(f[10])};
  std::lock_guard<std::mutex> lock(plans_mutex());
  if (saved_plans().try_emplace(key, sv).second && sv.found) unwarmed()[device].emplace_back(key, sv);
}

std::vector<WarmCall> matmul_lt_saved_warm_calls(int device) {
  std::vector<std::pair<Key, Saved>> todo;
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    todo.swap(unwarmed()[device]);
  }
  std::vector<WarmCall> calls;
  for (const auto& [key, sv] : todo) calls.push_back([key, sv](cudaStream_t stream) { first_launch(key, sv, stream); });
  return calls;
}

void check_cuda_precision(Precision p, int device) {
  if (p != Precision::f32 && p != Precision::tf32 && p != Precision::bf16 && p != Precision::f16)
    throw Error("[compile] unknown precision " + std::to_string(static_cast<int>(p)) +
                " (expected f32, tf32, bf16 or f16)");
  if (p != Precision::bf16) return;
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    throw Error("[compile] cannot query the compute capability of cuda:" + std::to_string(device));
  }
  if (major < 8)
    throw Error("[compile] precision bf16 needs a GPU of compute capability 8.0 or newer; cuda:" +
                std::to_string(device) + " is " + std::to_string(major) + "." + std::to_string(minor) +
                " (f16 works there)");
}

namespace {

// Looks up (or makes) the plan and launches it; false when an epilogue has no algorithm.
bool launch(const MatmulShape& s, const void* a, const void* b, const void* bias, const void* aux, void* c,
            cudaStream_t stream, int device) {
  DeviceContext& ctx = DeviceContext::get(device);
  Key key{s.m, s.n, s.k, s.batch, s.stride_a, s.stride_b, s.transpose_a, s.transpose_b, static_cast<int>(s.dtype), s.tf32, device,
          static_cast<int>(s.epilogue)};
  Plan p;
  bool made_now = false;
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    auto it = plans().find(key);
    if (it == plans().end()) {
      made_now = true;
      // A choice saved with a loaded executable, or made by an earlier process on this machine
      // (the disk cache), else the heuristic's, written to the disk cache.
      // A refusal ("0") is never taken from either: an epilogue refused may have been the
      // first call's pointers' alignment.
      auto sv = saved_plans().find(key);
      Saved from_disk;
      const Saved* known = sv != saved_plans().end() ? &sv->second
                           : parse_saved(library_choice_from_disk(saved_key(key)), from_disk) ? &from_disk
                                                                                               : nullptr;
      if (known && !known->found) known = nullptr;
      std::optional<CpuProfileScope> timed;
      if (profiling_first_runs())
        timed.emplace(known ? "cuda first run: matmul: cuBLASLt saved algorithm taken"
                            : "cuda first run: matmul: cuBLASLt heuristic asked");
      it = plans().emplace(key, make_plan(s, bias, aux, ctx, known)).first;
      // Filed when the heuristic found one: asked (nothing known, or what was known failed
      // cublasLtMatmulAlgoCheck in make_plan and was replaced).
      const bool replaced = known && std::memcmp(&known->algo, &it->second.algo, sizeof known->algo) != 0;
      if ((!known || replaced) && it->second.found) library_choice_to_disk(saved_key(key), saved_text(it->second));
    }
    p = it->second;
  }
  if (current_device_code() && p.found) record_library_plan(saved_key(key), saved_text(p));  // a run being saved
  if (!p.found) return false;
  if (stand_in(s, key, p, a, b, bias, c, stream)) {
    if (s.epilogue != MatmulShape::Epilogue::none) ++epilogue_launches[static_cast<size_t>(s.epilogue)];
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(ctx.library_mutex());  // one workspace per device
    // A plan's first launch in this process loads its kernel (unless a warm-up did).
    std::optional<CpuProfileScope> timed;
    if (made_now && profiling_first_runs()) timed.emplace("cuda first run: matmul: a plan's first cublasLtMatmul");
    if (s.epilogue != MatmulShape::Epilogue::none) {
      // The desc is per device: set under its lock. A refusal here or at launch (nothing runs)
      // sends the caller back to the unfused ops.
      if (!set_pointers(s, p.desc, bias, aux) ||
          run_plan(s, p, ctx, a, b, c, ctx.workspace(), ctx.workspace_bytes(), stream) != CUBLAS_STATUS_SUCCESS)
        return false;
      ++epilogue_launches[static_cast<size_t>(s.epilogue)];
    } else {
      lt_check(run_plan(s, p, ctx, a, b, c, ctx.workspace(), ctx.workspace_bytes(), stream), "matmul");
    }
  }
  std::lock_guard<std::mutex> plans_lock(plans_mutex());  // (op-by-op runs only: replays do not come here)
  launched().insert(key);  // its kernel is loaded now
  return true;
}

}  // namespace

void matmul_lt(const MatmulShape& s, const void* a, const void* b, void* c, cudaStream_t stream, int device) {
  if (s.epilogue != MatmulShape::Epilogue::none) throw Error("[matmul] matmul_lt called with an epilogue");
  launch(s, a, b, nullptr, nullptr, c, stream, device);
}

bool matmul_lt_epilogue(const MatmulShape& s, const void* a, const void* b, const void* bias, void* aux, void* c,
                        cudaStream_t stream, int device) {
  return launch(s, a, b, bias, aux, c, stream, device);
}

MatmulStandIn matmul_stand_in_mode() {
  if (!library_warmup_enabled() || env_flag("TGRAPH_NO_PROVISIONAL_CHOICES")) return MatmulStandIn::off;
  const char* v = env_value("TGRAPH_INTERIM_MATMUL");
  if (!v) return MatmulStandIn::off;
  return std::strcmp(v, "1") == 0 ? MatmulStandIn::everywhere
         : std::strcmp(v, "loaded") == 0 ? MatmulStandIn::loaded
                                          : MatmulStandIn::off;
}

bool matmul_stand_in_enabled() { return matmul_stand_in_mode() != MatmulStandIn::off; }

long long matmul_stand_ins() { return stand_in_calls.load(); }

long long matmul_epilogue_launches(MatmulShape::Epilogue kind) {
  if (kind != MatmulShape::Epilogue::none) return epilogue_launches[static_cast<size_t>(kind)].load();
  long long all = 0;
  for (const auto& n : epilogue_launches) all += n.load();
  return all;
}

}  // namespace tg::detail
