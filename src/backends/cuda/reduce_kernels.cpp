// Reductions and softmax on the GPU with NVRTC-generated kernels. A reduction is seen as
// `outer` output elements, each reducing `inner` input elements; offsets come from the kept
// and reduced dims' strides, so any set of axes works without a transpose. A warp (or, for
// long reductions, a whole block) reduces one output; sums accumulate in double. When the kept
// dims are the innermost ones (batch-norm statistics over N, H, W of NHWC: a column sum of a
// [rows, cols] matrix) that layout reads with a stride of `cols` per thread, so such reductions
// take column kernels instead: threads of a warp read neighbouring columns (coalesced), the rows
// split over the grid into partial results in a workspace, a second kernel combines each
// column's partials in a fixed order (deterministic). Integer
// sum / prod / max / min and argmax / argmin compute exactly in long long (sums and products
// wrap, as the reference's int64 arithmetic does; the store truncates to the dtype).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "runtime/device_code.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

constexpr int kR = 8;
struct ReduceArgs {
  const void* x;
  void* y;
  long long outer, inner;
  int kept_rank, red_rank;
  long long kept_dims[kR], kept_strides[kR], red_dims[kR], red_strides[kR];
  long long out_axis_stride;  // softmax: stride of the axis in the output (same layout as x)
};

const char* storage(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::f16: return "__half";
    case DType::bf16: return "__nv_bfloat16";
    case DType::i8: return "signed char";
    case DType::i16: return "short";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::u8: return "unsigned char";
    case DType::boolean: return "unsigned char";
    default: return nullptr;
  }
}
std::string load_expr(DType t, const std::string& e) {
  if (t == DType::f16) return "(double)__half2float(" + e + ")";
  if (t == DType::bf16) return "(double)__bfloat162float(" + e + ")";
  return "(double)(" + e + ")";
}
std::string store_expr(DType t, const std::string& v) {
  if (t == DType::f16) return "__float2half_rn((float)(" + v + "))";
  if (t == DType::bf16) return "__float2bfloat16_rn((float)(" + v + "))";
  if (t == DType::boolean) return "(unsigned char)((" + v + ") != 0)";
  if (t == DType::i32) return "(int)(" + v + ")";
  if (t == DType::i64) return "(long long)(" + v + ")";
  return "(" + std::string(storage(t)) + ")(" + v + ")";
}

// The body pieces per op: identity, combine, finish. Values are doubles (exact for every
// float dtype), or long long for integers (int_recipe).
struct Recipe {
  std::string init;
  std::string combine;  // acc, v
  std::string finish;   // acc, n
};

bool is_int(DType t) { return t == DType::i8 || t == DType::i16 || t == DType::i32 || t == DType::i64 || t == DType::u8; }

// The smallest / largest value of integer dtype t as a long long literal.
std::string int_lo(DType t) {
  switch (t) {
    case DType::i8: return "-128LL";
    case DType::i16: return "-32768LL";
    case DType::i32: return "-2147483648LL";
    case DType::u8: return "0LL";
    default: return "(-9223372036854775807LL - 1)";
  }
}
std::string int_hi(DType t) {
  switch (t) {
    case DType::i8: return "127LL";
    case DType::i16: return "32767LL";
    case DType::i32: return "2147483647LL";
    case DType::u8: return "255LL";
    default: return "9223372036854775807LL";
  }
}

// Integer reductions in long long: two's complement sums and products (through unsigned, no
// overflow UB), max / min from the dtype's extremes (an empty max is the dtype's lowest).
bool int_recipe(OpKind k, DType t, Recipe& r) {
  switch (k) {
    case OpKind::ReduceSum: case OpKind::SumToLike:
      r = {"0LL", "(long long)((unsigned long long)acc + (unsigned long long)v)", "acc"};
      return true;
    case OpKind::ReduceProd:
      r = {"1LL", "(long long)((unsigned long long)acc * (unsigned long long)v)", "acc"};
      return true;
    case OpKind::ReduceMax: r = {int_lo(t), "(v > acc ? v : acc)", "acc"}; return true;
    case OpKind::ReduceMin: r = {int_hi(t), "(v < acc ? v : acc)", "acc"}; return true;
    default: return false;
  }
}

bool recipe(OpKind k, Recipe& r) {
  switch (k) {
    case OpKind::ReduceSum: case OpKind::SumToLike: r = {"0.0", "acc + v", "acc"}; return true;
    case OpKind::ReduceMean: r = {"0.0", "acc + v", "acc / (double)n"}; return true;
    case OpKind::ReduceProd: r = {"1.0", "acc * v", "acc"}; return true;
    case OpKind::ReduceMax: r = {"-1.0/0.0", "(acc != acc || v != v) ? (acc + v) : (v > acc ? v : acc)", "acc"}; return true;
    case OpKind::ReduceMin: r = {"1.0/0.0", "(acc != acc || v != v) ? (acc + v) : (v < acc ? v : acc)", "acc"}; return true;
    case OpKind::ReduceAll: r = {"1.0", "((acc != 0.0) && (v != 0.0)) ? 1.0 : 0.0", "acc"}; return true;
    case OpKind::ReduceAny: r = {"0.0", "((acc != 0.0) || (v != 0.0)) ? 1.0 : 0.0", "acc"}; return true;
    default: return false;
  }
}

}  // namespace

std::string reduce_source(OpKind k, DType in, DType out, int lanes) {
  const bool block_per_output = lanes == 256;
  Recipe r{};
  const bool two_pass = k == OpKind::ReduceVariance || k == OpKind::ReduceLogSumExp;
  const bool softmax = k == OpKind::Softmax || k == OpKind::LogSoftmax;
  const bool arg = k == OpKind::ArgMax || k == OpKind::ArgMin;
  // Integer inputs of sum / prod / max / min / argmax / argmin load exact long longs.
  const bool ints = is_int(in) && (arg || int_recipe(k, in, r));
  if (!two_pass && !softmax && !arg && !ints) recipe(k, r);
  std::ostringstream os;
  os << "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
  os << "struct A { const void* x; void* y; long long outer, inner; int kept_rank, red_rank; long long kept_dims[8], "
        "kept_strides[8], red_dims[8], red_strides[8]; long long out_axis_stride; };\n";
  os << "typedef " << (ints ? "long long" : "double") << " V;\n";
  const int T = lanes == 1 || block_per_output ? lanes : 32;
  const std::string elem = "((const " + std::string(storage(in)) + "*)a.x)[off]";
  os << "__device__ __forceinline__ V ld(const A& a, long long off) { return "
     << (ints ? "(long long)(" + elem + ")" : load_expr(in, elem)) << "; }\n";
  os << "__device__ __forceinline__ long long red_off(const A& a, long long j) { long long o = 0; for (int d = a.red_rank - 1; d >= 0; --d) { o += (j % a.red_dims[d]) * a.red_strides[d]; j /= a.red_dims[d]; } return o; }\n";
  // Combine across the T threads of one output: warp shuffles, then shared memory for blocks.
  os << "template <class W, class F> __device__ __forceinline__ W all_reduce(W v, F f) {\n";
  if (T > 1) os << "  for (int s = 16; s > 0; s >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, s));\n";
  if (block_per_output)
    os << "  __shared__ W sh[8]; __shared__ W res; int w = threadIdx.x / 32;\n"
          "  if ((threadIdx.x & 31) == 0) sh[w] = v; __syncthreads();\n"
          "  if (threadIdx.x == 0) { double t = sh[0]; for (int i = 1; i < 8; ++i) t = f(t, sh[i]); res = t; }\n"
          "  __syncthreads(); v = res; __syncthreads();\n";
  os << "  return v; }\n";
  os << "extern \"C\" __global__ void __launch_bounds__(256) tg_reduce(const A a) {\n"
     << "  const int T = " << T << "; const int lane = threadIdx.x % T;\n"
     << "  const long long per_block = 256 / T;\n"
     << "  for (long long o = (long long)blockIdx.x * per_block + threadIdx.x / T; o < a.outer; o += (long long)gridDim.x * per_block) {\n"
     << "    long long base = 0; { long long r = o; for (int d = a.kept_rank - 1; d >= 0; --d) { base += (r % a.kept_dims[d]) * a.kept_strides[d]; r /= a.kept_dims[d]; } }\n"
     << "    const long long n = a.inner;\n";
  auto sum = "[](double p, double q) { return p + q; }";
  auto mx = "[](double p, double q) { return (p != p || q != q) ? p + q : (q > p ? q : p); }";
  if (softmax) {
    os << "    double m = -1.0/0.0; for (long long j = lane; j < n; j += T) { double v = ld(a, base + red_off(a, j)); m = (m != m || v != v) ? m + v : (v > m ? v : m); }\n"
       << "    m = all_reduce(m, " << mx << ");\n"
       << "    double s = 0.0; for (long long j = lane; j < n; j += T) s += exp(ld(a, base + red_off(a, j)) - m);\n"
       << "    s = all_reduce(s, " << sum << ");\n"
       << "    for (long long j = lane; j < n; j += T) { long long off = base + red_off(a, j); double v = ld(a, off) - m; double r = "
       << (k == OpKind::Softmax ? "exp(v) / s" : "v - log(s)") << "; ((" << storage(out) << "*)a.y)[off] = "
       << store_expr(out, "r") << "; }\n";
  } else if (arg) {
    const char* better = k == OpKind::ArgMax ? ">" : "<";
    // (value, index): NaN counts as the extreme; ties keep the smaller index.
    os << "    V bv = 0; long long bi = -1;\n"
       << "    for (long long j = lane; j < n; j += T) { V v = ld(a, base + red_off(a, j));\n"
       << "      bool take = bi < 0 || (v != v && bv == bv) || (bv == bv && v " << better << " bv);\n"
       << "      if (take) { bv = v; bi = j; } }\n"
       << "    for (int s = (T > 1 ? 16 : 0); s > 0; s >>= 1) { V ov = __shfl_xor_sync(0xffffffffu, bv, s); long long oi = __shfl_xor_sync(0xffffffffu, bi, s);\n"
       << "      bool take = oi >= 0 && (bi < 0 || (ov != ov && bv == bv) || (bv == bv && ov " << better << " bv) || ((ov == bv || (ov != ov && bv != bv)) && oi < bi));\n"
       << "      if (take) { bv = ov; bi = oi; } }\n";
    if (block_per_output)
      os << "    __shared__ V sv[8]; __shared__ long long si[8]; if ((threadIdx.x & 31) == 0) { sv[threadIdx.x / 32] = bv; si[threadIdx.x / 32] = bi; } __syncthreads();\n"
         << "    if (threadIdx.x == 0) { for (int w = 1; w < 8; ++w) { V ov = sv[w]; long long oi = si[w]; bool take = oi >= 0 && (bi < 0 || (ov != ov && bv == bv) || (bv == bv && ov " << better << " bv) || ((ov == bv || (ov != ov && bv != bv)) && oi < bi)); if (take) { bv = ov; bi = oi; } } }\n"
         << "    __syncthreads();\n";
    os << "    if (lane == 0) ((int*)a.y)[o] = (int)bi;\n";
  } else if (two_pass) {
    if (k == OpKind::ReduceVariance) {
      os << "    double s = 0.0; for (long long j = lane; j < n; j += T) s += ld(a, base + red_off(a, j));\n"
         << "    double mean = all_reduce(s, " << sum << ") / (double)n;\n"
         << "    double q = 0.0; for (long long j = lane; j < n; j += T) { double d = ld(a, base + red_off(a, j)) - mean; q += d * d; }\n"
         << "    double r = all_reduce(q, " << sum << ") / (double)n;\n";
    } else {
      os << "    double m = -1.0/0.0; for (long long j = lane; j < n; j += T) { double v = ld(a, base + red_off(a, j)); m = (m != m || v != v) ? m + v : (v > m ? v : m); }\n"
         << "    m = all_reduce(m, " << mx << ");\n"
         << "    double s = 0.0; if (m == m && m != 1.0/0.0 && m != -1.0/0.0) for (long long j = lane; j < n; j += T) s += exp(ld(a, base + red_off(a, j)) - m);\n"
         << "    s = all_reduce(s, " << sum << ");\n"
         << "    double r = (m != m || m == 1.0/0.0 || m == -1.0/0.0) ? m : m + log(s);\n";
    }
    os << "    if (lane == 0) ((" << storage(out) << "*)a.y)[o] = " << store_expr(out, "r") << ";\n";
  } else {
    os << "    V acc = " << r.init << ";\n"
       << "    for (long long j = lane; j < n; j += T) { V v = ld(a, base + red_off(a, j)); acc = " << r.combine << "; }\n"
       << "    acc = all_reduce(acc, [](V acc, V v) -> V { return " << r.combine << "; });\n"
       << "    if (lane == 0) ((" << storage(out) << "*)a.y)[o] = " << store_expr(out, r.finish) << ";\n";
  }
  os << "  }\n}\n";
  return os.str();
}

// ---- Column reductions: x viewed as [rows, cols], reduced over rows ----

struct ColumnArgs {
  const void* x;
  void* y;
  void* part;  // [split][cols] partials (variance: two such planes)
  long long cols, rows, split;
};

std::string column_source(OpKind k, DType in, DType out) {
  const bool var = k == OpKind::ReduceVariance;
  Recipe r{};
  const bool ints = is_int(in) && int_recipe(k, in, r);
  if (!ints && !var) recipe(k, r);
  std::ostringstream os;
  os << "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n";
  os << "struct C { const void* x; void* y; void* part; long long cols, rows, split; };\n";
  os << "typedef " << (ints ? "long long" : "double") << " V;\n";
  const std::string elem = "((const " + std::string(storage(in)) + "*)x)[off]";
  os << "__device__ __forceinline__ V ld(const void* x, long long off) { return "
     << (ints ? "(long long)(" + elem + ")" : load_expr(in, elem)) << "; }\n";
  // Pass 1: block (32 columns) x (8 row phases); blockIdx.y picks every split-th group of 8 rows.
  os << "extern \"C\" __global__ void __launch_bounds__(256) tg_col_partial(const C a) {\n"
     << "  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;\n"
     << "  const long long c = (long long)blockIdx.x * 32 + tx;\n"
     << "  V* part = (V*)a.part;\n";
  if (var) {
    // Sums of x - K and (x - K)^2 with K the column's first element (shifted data: no
    // cancellation when the mean is large against the spread); the partials add up.
    os << "  __shared__ V s1[8][33], s2[8][33];\n"
       << "  V p = 0.0, q = 0.0;\n"
       << "  if (c < a.cols) { const V k = ld(a.x, c);\n"
       << "    const long long st = (long long)gridDim.y * 8; long long r = (long long)blockIdx.y * 8 + ty;\n"
       << "    for (; r + 3 * st < a.rows; r += 4 * st) {\n"
       << "      const V d0 = ld(a.x, r * a.cols + c) - k, d1 = ld(a.x, (r + st) * a.cols + c) - k,\n"
       << "              d2 = ld(a.x, (r + 2 * st) * a.cols + c) - k, d3 = ld(a.x, (r + 3 * st) * a.cols + c) - k;\n"
       << "      p += (d0 + d1) + (d2 + d3); q += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3); }\n"
       << "    for (; r < a.rows; r += st) { const V d = ld(a.x, r * a.cols + c) - k; p += d; q += d * d; } }\n"
       << "  s1[ty][tx] = p; s2[ty][tx] = q; __syncthreads();\n"
       << "  if (ty == 0 && c < a.cols) { for (int i = 1; i < 8; ++i) { p += s1[i][tx]; q += s2[i][tx]; }\n"
       << "    part[blockIdx.y * a.cols + c] = p; part[(a.split + blockIdx.y) * a.cols + c] = q; }\n}\n";
  } else {
    os << "  __shared__ V sh[8][33];\n"
       << "  V acc = " << r.init << ";\n"
       << "  if (c < a.cols) {\n"
       << "    const long long st = (long long)gridDim.y * 8; long long r = (long long)blockIdx.y * 8 + ty;\n"
       << "    for (; r + 3 * st < a.rows; r += 4 * st) {\n"
       << "      const V u0 = ld(a.x, r * a.cols + c), u1 = ld(a.x, (r + st) * a.cols + c),\n"
       << "              u2 = ld(a.x, (r + 2 * st) * a.cols + c), u3 = ld(a.x, (r + 3 * st) * a.cols + c);\n"
       << "      { const V v = u0; acc = " << r.combine << "; } { const V v = u1; acc = " << r.combine << "; }\n"
       << "      { const V v = u2; acc = " << r.combine << "; } { const V v = u3; acc = " << r.combine << "; } }\n"
       << "    for (; r < a.rows; r += st) { const V v = ld(a.x, r * a.cols + c); acc = " << r.combine << "; } }\n"
       << "  sh[ty][tx] = acc; __syncthreads();\n"
       << "  if (ty == 0 && c < a.cols) { for (int i = 1; i < 8; ++i) { const V v = sh[i][tx]; acc = " << r.combine
       << "; }\n"
       << "    part[blockIdx.y * a.cols + c] = acc; }\n}\n";
  }
  // Pass 2: a block per 32 columns; its 8 warps each combine every 8th partial of a column in
  // split order (loads in flight: one thread walking all of them in a dependent chain took
  // 0.14 ms for 132 partials of 256 columns), then warp 0 combines the eight in order.
  os << "extern \"C\" __global__ void __launch_bounds__(256) tg_col_final(const C a) {\n"
     << "  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;\n"
     << "  const long long c = (long long)blockIdx.x * 32 + tx;\n"
     << "  const V* part = (const V*)a.part; const long long n = a.rows; (void)n;\n"
     << "  __shared__ V sh[8][33];\n";
  if (var)
    os << "  V p = 0.0, q = 0.0;\n"
       << "  if (c < a.cols) {\n#pragma unroll 4\n    for (long long s = ty; s < a.split; s += 8) { p += part[s * a.cols + c]; "
          "q += part[(a.split + s) * a.cols + c]; } }\n"
       << "  sh[ty][tx] = p; __syncthreads(); if (ty == 0) for (int i = 1; i < 8; ++i) p += sh[i][tx]; __syncthreads();\n"
       << "  sh[ty][tx] = q; __syncthreads(); if (ty == 0) for (int i = 1; i < 8; ++i) q += sh[i][tx];\n"
       << "  if (ty != 0 || c >= a.cols) return;\n"
       << "  const double m = p / (double)n; double v = q / (double)n - m * m; if (v < 0.0) v = 0.0;\n"
       << "  ((" << storage(out) << "*)a.y)[c] = " << store_expr(out, "v") << ";\n}\n";
  else
    os << "  V acc = " << r.init << ";\n"
       << "  if (c < a.cols) {\n#pragma unroll 4\n    for (long long s = ty; s < a.split; s += 8) { const V v = part[s * a.cols + c]; acc = "
       << r.combine << "; } }\n"
       << "  sh[ty][tx] = acc; __syncthreads();\n"
       << "  if (ty != 0 || c >= a.cols) return;\n"
       << "  for (int i = 1; i < 8; ++i) { const V v = sh[i][tx]; acc = " << r.combine << "; }\n"
       << "  ((" << storage(out) << "*)a.y)[c] = " << store_expr(out, r.finish) << ";\n}\n";
  return os.str();
}

namespace {

// Runs the column kernels when the kept dims of `a` are a contiguous suffix of x's layout (the
// reduced dims all before them, size-1 dims aside); false otherwise (nothing launched).
bool column_reduce(OpKind k, DType dt, DType ot, const ReduceArgs& a, const Shape& s, const std::vector<bool>& red,
                   cudaStream_t stream, int device) {
  if (k != OpKind::ReduceVariance) {
    Recipe r{};
    if (!(is_int(dt) ? int_recipe(k, dt, r) : recipe(k, r))) return false;
  } else if (!is_float(dt)) {
    return false;
  }
  bool kept_seen = false;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (s[d] == 1) continue;
    if (!red[static_cast<size_t>(d)]) kept_seen = true;
    else if (kept_seen) return false;
  }
  if (a.outer < 2 || a.inner < 2) return false;
  const long long cols = a.outer, rows = a.inner, col_blocks = (cols + 31) / 32;
  // About 1,024 blocks in flight, each block's threads reading at least 8 rows apiece.
  long long split = std::max<long long>(1, std::min<long long>((1024 + col_blocks - 1) / col_blocks, rows / 64));
  split = std::min<long long>(split, 65535);
  if (col_blocks > 2147483647LL) return false;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int>, std::pair<CompiledKernel, CompiledKernel>> cache;
  std::pair<CompiledKernel, CompiledKernel> kern;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(static_cast<int>(k), static_cast<int>(dt), static_cast<int>(ot), device);
    auto it = cache.find(key);
    if (it == cache.end()) {
      const std::string src = column_source(k, dt, ot);
      it = cache.emplace(key, std::make_pair(nvrtc_kernel(src, "tg_col_partial", device),
                                             nvrtc_kernel(src, "tg_col_final", device)))
               .first;
    } else if (current_device_code()) {  // an executable records the device code it uses
      nvrtc_note_use(column_source(k, dt, ot), device);
    }
    kern = it->second;
  }
  const size_t planes = k == OpKind::ReduceVariance ? 2 : 1;
  DeviceBuffer ws = op_workspace(planes * static_cast<size_t>(split * cols) * 8, stream, device);
  ColumnArgs c{a.x, a.y, ws.get(), cols, rows, split};
  void* params[] = {&c};
  TG_CUDA(cudaLaunchKernel(kern.first.fn(), dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(split)),
                           dim3(256), params, 0, stream));
  TG_CUDA(cudaLaunchKernel(kern.second.fn(), dim3(static_cast<unsigned>(col_blocks)), dim3(256), params, 0, stream));
  return true;
}

}  // namespace

bool cuda_reduce(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                 cudaStream_t stream, int device) {
  const OpKind k = n.kind;
  const bool softmax = k == OpKind::Softmax || k == OpKind::LogSoftmax;
  Recipe r{};
  if (!softmax && !recipe(k, r) && k != OpKind::ReduceVariance && k != OpKind::ReduceLogSumExp && k != OpKind::ArgMax &&
      k != OpKind::ArgMin)
    return false;
  const DType dt = in[0].type.dtype, ot = out[0].type.dtype;
  Recipe ir;
  const bool ints = is_int(dt) && (k == OpKind::ArgMax || k == OpKind::ArgMin || int_recipe(k, dt, ir));
  if (!storage(dt) || !storage(ot) || (dt == DType::i64 && !ints)) return false;
  const Shape& s = in[0].type.shape;
  const int rank = static_cast<int>(s.rank());
  if (rank > kR) return false;
  // Which input dims are reduced.
  std::vector<bool> red(static_cast<size_t>(rank), false);
  if (softmax) {
    auto ax = normalize_axis(std::get<AxisDesc>(n.attr).axis, rank);
    if (!ax) return false;
    red[static_cast<size_t>(*ax)] = true;
  } else if (k == OpKind::SumToLike) {
    const Shape& like = out[0].type.shape;
    int lead = rank - static_cast<int>(like.rank());
    for (int d = 0; d < rank; ++d) red[static_cast<size_t>(d)] = d < lead || (like[d - lead] == 1 && s[d] != 1);
  } else {
    const auto& d = std::get<ReduceDesc>(n.attr);
    if (d.axes.empty()) std::fill(red.begin(), red.end(), true);
    for (int64_t a : d.axes) {
      auto ax = normalize_axis(a, rank);
      if (!ax) return false;
      red[static_cast<size_t>(*ax)] = true;
    }
  }
  ReduceArgs a{};
  a.x = in[0].ptr;
  a.y = out[0].ptr;
  a.outer = 1;
  a.inner = 1;
  long long stride = 1;
  std::vector<long long> strides(static_cast<size_t>(rank));
  for (int d = rank - 1; d >= 0; --d) {
    strides[static_cast<size_t>(d)] = stride;
    stride *= s[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (red[static_cast<size_t>(d)]) {
      a.red_dims[a.red_rank] = s[d];
      a.red_strides[a.red_rank++] = strides[static_cast<size_t>(d)];
      a.inner *= s[d];
    } else {
      a.kept_dims[a.kept_rank] = s[d];
      a.kept_strides[a.kept_rank++] = strides[static_cast<size_t>(d)];
      a.outer *= s[d];
    }
  }
  if (a.outer == 0) return true;
  // Empty reductions and argmax over nothing follow the reference's rules there.
  if (a.inner == 0 && (softmax || k == OpKind::ArgMax || k == OpKind::ArgMin || (!is_float(dt) && !ints))) return false;
  if (!softmax && k != OpKind::ArgMax && k != OpKind::ArgMin && k != OpKind::ReduceLogSumExp &&
      column_reduce(k, dt, ot, a, s, red, stream, device))
    return true;
  // Where the innermost dim of x is kept (a global average pool over H, W of NHWC: [N, C] from
  // [N, H, W, C]) the reduced elements of one output lie a row apart, so a warp per output
  // reads a sector per element; a thread per output reads them as neighbouring threads read
  // neighbouring outputs' (coalesced), given outputs enough to fill the GPU and few elements
  // each (a thread walks its output's elements one after another). Else a warp per output, or
  // a block for long reductions.
  const bool inner_kept = a.kept_rank > 0 && a.kept_strides[a.kept_rank - 1] == 1 && a.kept_dims[a.kept_rank - 1] >= 32;
  const int lanes = inner_kept && a.outer >= 16384 && a.inner <= 256 ? 1 : a.inner >= 2048 ? 256 : 32;
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int, int>, CompiledKernel> cache;
  CompiledKernel kern;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto key = std::make_tuple(static_cast<int>(k), static_cast<int>(dt), static_cast<int>(ot), lanes, device);
    auto it = cache.find(key);
    if (it == cache.end())
      it = cache.emplace(key, nvrtc_kernel(reduce_source(k, dt, ot, lanes), "tg_reduce", device)).first;
    else if (current_device_code())
      nvrtc_note_use(reduce_source(k, dt, ot, lanes), device);
    kern = it->second;
  }
  const long long per_block = 256 / lanes;
  long long blocks = std::min<long long>((a.outer + per_block - 1) / per_block, 65535LL * 8);
  void* params[] = {&a};
  TG_CUDA(cudaLaunchKernel(kern.fn(), dim3(static_cast<unsigned>(blocks)), dim3(256), params, 0, stream));
  return true;
}

}  // namespace tg::detail
