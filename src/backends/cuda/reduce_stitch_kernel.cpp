// The generated kernel of a stitched reduction (reduce_stitch_kernel.h): planning (layout,
// operand access, launch shape) and the NVRTC source.
#include "backends/cuda/reduce_stitch_kernel.h"

#include <algorithm>
#include <sstream>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// How an operand's element is found from the element index i, the output index o and the index
// within the output's reduction r.
enum class Access { flat, scalar, out, red, broadcast };

// Operand k of shape t against the geometry's shape s (reduced dims red): its access, and its
// strides into a when broadcast; false when it does not broadcast to s.
bool classify(const Shape& t, const Shape& s, const std::vector<bool>& red, int k, ReduceStitchArgs& a, Access& acc) {
  const int64_t rank = s.rank(), tr = t.rank();
  if (tr > rank) return false;
  bool all = true, none = true, kept = true, reduced = true;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t td = d - (rank - tr);
    const int64_t dim = td >= 0 ? t[td] : 1;
    if (dim != 1 && dim != s[d]) return false;
    if (s[d] == 1) continue;
    const bool present = dim == s[d];
    all &= present;
    none &= !present;
    kept &= present == !red[static_cast<size_t>(d)];
    reduced &= present == red[static_cast<size_t>(d)];
  }
  acc = all ? Access::flat : none ? Access::scalar : kept ? Access::out : reduced ? Access::red : Access::broadcast;
  if (acc != Access::broadcast) return true;
  long long stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    const int64_t td = d - (rank - tr);
    const int64_t dim = td >= 0 ? t[td] : 1;
    a.gstride[k][d] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return true;
}

std::string offset(Access acc, int k) {
  switch (acc) {
    case Access::flat: return "i";
    case Access::scalar: return "0";
    case Access::out: return "io";
    case Access::red: return "ir";
    case Access::broadcast: return "tg_boff(a, " + std::to_string(k) + ", i)";
  }
  return "i";
}

struct Red {
  OpKind kind;
  DType out;
  int plane;          // its first plane
};

bool is_var(OpKind k) { return k == OpKind::ReduceVariance; }
std::string init_of(OpKind k) {
  if (k == OpKind::ReduceProd) return "1.0";
  if (k == OpKind::ReduceMax) return "-1.0/0.0";
  if (k == OpKind::ReduceMin) return "1.0/0.0";
  return "0.0";
}
// Combining accumulators p and q of a plane of reduction kind k.
std::string combine(OpKind k, const std::string& p, const std::string& q) {
  if (k == OpKind::ReduceProd) return p + " * " + q;
  if (k == OpKind::ReduceMax) return "((" + p + " != " + p + " || " + q + " != " + q + ") ? " + p + " + " + q + " : (" + q + " > " + p + " ? " + q + " : " + p + "))";
  if (k == OpKind::ReduceMin) return "((" + p + " != " + p + " || " + q + " != " + q + ") ? " + p + " + " + q + " : (" + q + " < " + p + " ? " + q + " : " + p + "))";
  return p + " + " + q;
}

class Writer {
 public:
  Writer(const GraphImpl& g, const ReduceStitch& s, const std::vector<bool>& loaded, const std::vector<Access>& access,
         const std::vector<TensorType>& types,
         const std::vector<Red>& reds, size_t planes, bool column, bool general, int T)
      : g_(g), s_(s), loaded_(loaded), access_(access), types_(types), reds_(reds), planes_(planes), column_(column), general_(general), T_(T) {
    // What each accumulator plane combines with: a variance's two planes are sums.
    plane_kinds_.assign(planes, OpKind::ReduceSum);
    for (const Red& r : reds_)
      if (!is_var(r.kind)) plane_kinds_[static_cast<size_t>(r.plane)] = r.kind;
  }

  std::string source() {
    os_ << elementwise_prelude();
    os_ << "struct RSArgs { const void* in[" << kMaxOperands << "]; void* out[" << kStitchOutputs
        << "]; void* part; long long outer, inner, split; int grank; long long gdims[" << kMaxRank
        << "]; long long gstride[" << kMaxOperands << "][" << kMaxRank << "]; int krank, rrank; long long kdims["
        << kMaxRank << "], kstrides[" << kMaxRank << "], rdims[" << kMaxRank << "], rstrides[" << kMaxRank << "]; };\n";
    if (general_)
      os_ << "__device__ __forceinline__ long long tg_doff(int rank, const long long* dims, const long long* strides, long long j) {\n"
             "  long long o = 0;\n  for (int d = rank - 1; d >= 0; --d) { o += (j % dims[d]) * strides[d]; j /= dims[d]; }\n  return o;\n}\n";
    if (std::find(access_.begin(), access_.end(), Access::broadcast) != access_.end())
      os_ << "__device__ __forceinline__ long long tg_boff(const RSArgs& a, int k, long long i) {\n"
             "  long long o = 0;\n"
             "  for (int d = a.grank - 1; d >= 0; --d) { const long long n = a.gdims[d]; o += (i % n) * a.gstride[k][d]; i /= n; }\n"
             "  return o;\n}\n";
    eval();
    if (column_) {
      column_partial();
      column_final();
    } else {
      row();
    }
    return os_.str();
  }

 private:
  std::string plane_kind_combine(size_t p, const std::string& x, const std::string& y) const {
    return combine(plane_kinds_[p], x, y);
  }

  // tg_eval: every reduction's input at element i (output io, index ir within it), as doubles.
  void eval() {
    os_ << "__device__ __forceinline__ void tg_eval(const RSArgs& a, long long i, long long io, long long ir, double* v) {\n"
        << "  (void)io; (void)ir;\n";
    std::unordered_map<int32_t, std::string> names;
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      if (!loaded_[k]) continue;  // read by the epilogue only
      const int32_t v = s_.inputs[k];
      names[v] = "p" + std::to_string(k);
      const DType t = types_[k].dtype;
      os_ << "  const " << codegen_compute_type(t) << " " << names[v] << " = "
          << codegen_load(t, "a.in[" + std::to_string(k) + "]", offset(access_[k], static_cast<int>(k))) << ";\n";
    }
    os_ << elementwise_members(g_, s_.prologue, names, "  ");
    for (size_t r = 0; r < reds_.size(); ++r)
      os_ << "  v[" << r << "] = (double)" << names.at(g_.nodes[static_cast<size_t>(s_.reductions[r])].inputs[0]) << ";\n";
    os_ << "}\n";
  }

  // The accumulators, each at its kind's identity.
  void accumulators(const std::string& indent) {
    os_ << indent << "double acc[" << planes_ << "];\n";
    for (size_t p = 0; p < planes_; ++p) os_ << indent << "acc[" << p << "] = " << init_of(plane_kinds_[p]) << ";\n";
  }
  // The variances' shifts K: the reductions' inputs at element `first` (output io).
  void shifts(const std::string& first, const std::string& io) {
    os_ << "    double K[" << reds_.size() << "];\n";
    if (std::any_of(reds_.begin(), reds_.end(), [](const Red& r) { return is_var(r.kind); }))
      os_ << "    tg_eval(a, " << first << ", " << io << ", 0, K);\n";
  }
  void accumulate(const std::string& v) {
    for (size_t k = 0; k < reds_.size(); ++k) {
      const Red& r = reds_[k];
      const std::string x = v + "[" + std::to_string(k) + "]", acc = "acc[" + std::to_string(r.plane) + "]";
      if (is_var(r.kind)) {
        os_ << "      { const double d = " << x << " - K[" << k << "]; " << acc << " += d; acc[" << r.plane + 1
            << "] += d * d; }\n";
      } else {
        os_ << "      " << acc << " = " << combine(r.kind, acc, x) << ";\n";
      }
    }
  }
  // Stores every reduction's result R<k> at output index `o` from the planes' totals t[], then
  // computes and stores the epilogue there, reading each result as stored (rounded to its dtype).
  void finish(const std::string& o, const std::string& indent) {
    std::unordered_map<int32_t, std::string> names;
    for (size_t k = 0; k < reds_.size(); ++k) {
      const Red& r = reds_[k];
      const std::string R = "R" + std::to_string(k);
      const std::string t = "t[" + std::to_string(r.plane) + "]";
      if (is_var(r.kind)) {  // E[(x-K)^2] - E[x-K]^2, never below 0
        const std::string t2 = "t[" + std::to_string(r.plane + 1) + "]";
        os_ << indent << "double " << R << " = " << t2 << " / (double)a.inner - (" << t << " / (double)a.inner) * (" << t
            << " / (double)a.inner); if (" << R << " < 0.0) " << R << " = 0.0;\n";
      } else {
        os_ << indent << "const double " << R << " = " << (r.kind == OpKind::ReduceMean ? t + " / (double)a.inner" : t)
            << ";\n";
      }
      os_ << indent << "((" << codegen_storage_type(r.out) << "*)a.out[" << k << "])[" << o
          << "] = " << codegen_store(r.out, R) << ";\n";
      const char* C = codegen_compute_type(r.out);
      names[s_.outputs[k]] = "E" + std::to_string(k);
      os_ << indent << "const " << C << " E" << k << " = " << codegen_round_to(r.out, std::string("(") + C + ")" + R) << ";\n";
    }
    if (s_.epilogue.nodes.empty()) return;
    for (const auto& [v, k] : s_.aliases) names[v] = "E" + std::to_string(k);
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      const int32_t v = s_.inputs[k];
      if (names.count(v) || std::find(s_.epilogue.inputs.begin(), s_.epilogue.inputs.end(), v) == s_.epilogue.inputs.end())
        continue;
      names[v] = "f" + std::to_string(k);
      const DType t = types_[k].dtype;
      os_ << indent << "const " << codegen_compute_type(t) << " " << names[v] << " = "
          << codegen_load(t, "a.in[" + std::to_string(k) + "]", types_[k].shape.num_elements() == 1 ? "0" : o) << ";\n";
    }
    os_ << elementwise_members(g_, s_.epilogue, names, indent);
    for (size_t m = 0; m < s_.epilogue.outputs.size(); ++m) {
      const int32_t v = s_.epilogue.outputs[m];
      os_ << indent << "((" << codegen_storage_type(g_.type(v).dtype) << "*)a.out[" << reds_.size() + m << "])[" << o
          << "] = " << codegen_store(g_.type(v).dtype, names.at(v)) << ";\n";
    }
  }

  // Column layout, pass 1: a block is 32 columns x 8 row phases; blockIdx.y takes every split-th
  // group of 8 rows; four rows in flight per thread.
  void column_partial() {
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_partial(const RSArgs a) {\n"
        << "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n"
        << "  const long long c = (long long)blockIdx.x * 32 + tx;\n";
    accumulators_guarded();
    os_ << "  __shared__ double sh[8][33];\n  double* part = (double*)a.part;\n";
    for (size_t p = 0; p < planes_; ++p)
      os_ << "  sh[ty][tx] = acc[" << p << "]; __syncthreads();\n"
          << "  if (ty == 0 && c < a.outer) { double t = acc[" << p << "]; for (int k = 1; k < 8; ++k) t = "
          << plane_kind_combine(p, "t", "sh[k][tx]") << "; part[(" << p << "LL * a.split + blockIdx.y) * a.outer + c] = t; }\n"
          << "  __syncthreads();\n";
    os_ << "}\n";
  }
  void accumulators_guarded() {
    // The accumulators live outside the guard (every thread joins the block's combine).
    accumulators("  ");
    os_ << "  if (c < a.outer) {\n";
    shifts("c", "c");
    os_ << "    const long long st = (long long)gridDim.y * 8; long long r = (long long)blockIdx.y * 8 + ty;\n"
        << "    for (; r + 3 * st < a.inner; r += 4 * st) {\n"
        << "      double v0[" << reds_.size() << "], v1[" << reds_.size() << "], v2[" << reds_.size() << "], v3["
        << reds_.size() << "];\n"
        << "      tg_eval(a, r * a.outer + c, c, r, v0); tg_eval(a, (r + st) * a.outer + c, c, r + st, v1);\n"
        << "      tg_eval(a, (r + 2 * st) * a.outer + c, c, r + 2 * st, v2); tg_eval(a, (r + 3 * st) * a.outer + c, c, r + 3 * st, v3);\n";
    for (const char* v : {"v0", "v1", "v2", "v3"}) accumulate(v);
    os_ << "    }\n"
        << "    for (; r < a.inner; r += st) {\n      double v0[" << reds_.size() << "]; tg_eval(a, r * a.outer + c, c, r, v0);\n";
    accumulate("v0");
    os_ << "    }\n  }\n";
  }
  // Column layout, pass 2: a block per 32 columns; its 8 warps each combine every 8th partial
  // of a column in split order (many loads in flight), then warp 0 the eight, in order.
  void column_final() {
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_final(const RSArgs a) {\n"
        << "  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n"
        << "  const long long c = (long long)blockIdx.x * 32 + tx;\n"
        << "  const double* part = (const double*)a.part;\n  __shared__ double sh[8][33];\n"
        << "  double t[" << planes_ << "];\n";
    for (size_t p = 0; p < planes_; ++p) {
      const std::string tp = "t[" + std::to_string(p) + "]";
      os_ << "  " << tp << " = " << init_of(plane_kinds_[p]) << ";\n"
          << "  if (c < a.outer) {\n#pragma unroll 4\n    for (long long s = ty; s < a.split; s += 8) { const double q = part[("
          << p << "LL * a.split + s) * a.outer + c]; " << tp << " = " << plane_kind_combine(p, tp, "q") << "; } }\n"
          << "  sh[ty][tx] = " << tp << "; __syncthreads();\n"
          << "  if (ty == 0) for (int k = 1; k < 8; ++k) " << tp << " = " << plane_kind_combine(p, tp, "sh[k][tx]") << ";\n"
          << "  __syncthreads();\n";
    }
    os_ << "  if (ty != 0 || c >= a.outer) return;\n";
    finish("c", "  ");
    os_ << "}\n";
  }

  // Row layout: T threads per output (a warp, or the block), each output's elements contiguous.
  void row() {
    const bool block = T_ == 256;
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_row(const RSArgs a) {\n"
        << "  const int T = " << T_ << "; const int lane = threadIdx.x % T; const long long per_block = 256 / T;\n";
    if (block) os_ << "  __shared__ double sh[8];\n";
    os_ << "  for (long long o = (long long)blockIdx.x * per_block + threadIdx.x / T; o < a.outer; o += (long long)gridDim.x * per_block) {\n";
    const std::string elem = general_ ? "base + tg_doff(a.rrank, a.rdims, a.rstrides, j)" : "base + j";
    os_ << "    const long long base = " << (general_ ? "tg_doff(a.krank, a.kdims, a.kstrides, o)" : "o * a.inner") << ";\n";
    accumulators("    ");
    shifts("base", "o");
    os_ << "    for (long long j = lane; j < a.inner; j += T) {\n"
        << "      double v0[" << reds_.size() << "]; tg_eval(a, " << elem << ", o, j, v0);\n";
    accumulate("v0");
    os_ << "    }\n    double t[" << planes_ << "];\n";
    for (size_t p = 0; p < planes_; ++p) {
      const std::string tp = "t[" + std::to_string(p) + "]";
      os_ << "    { double x = acc[" << p << "];\n"
          << "      for (int s = 16; s > 0; s >>= 1) { const double y = __shfl_xor_sync(0xffffffffu, x, s); x = "
          << plane_kind_combine(p, "x", "y") << "; }\n";
      if (block)
        os_ << "      if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = x; __syncthreads();\n"
            << "      x = sh[0]; for (int w = 1; w < 8; ++w) x = " << plane_kind_combine(p, "x", "sh[w]") << ";\n"
            << "      __syncthreads();\n";
      os_ << "      " << tp << " = x; }\n";
    }
    os_ << "    if (lane == 0) {\n";
    finish("o", "      ");
    os_ << "    }\n  }\n}\n";
  }

  const GraphImpl& g_;
  const ReduceStitch& s_;
  const std::vector<bool>& loaded_;
  const std::vector<Access>& access_;
  const std::vector<TensorType>& types_;
  const std::vector<Red>& reds_;
  const size_t planes_;
  const bool column_, general_;
  const int T_;
  std::vector<OpKind> plane_kinds_;
  std::ostringstream os_;
};

}  // namespace

std::optional<ReduceStitchLaunch> prepare_reduce_stitch(const GraphImpl& g, const ReduceStitch& s,
                                                        const std::vector<TensorType>& types, int sm_count) {
  if (s.reductions.empty() || s.reductions.size() > static_cast<size_t>(kStitchReductions) ||
      s.outputs.size() > static_cast<size_t>(kStitchOutputs) || s.inputs.size() > static_cast<size_t>(kMaxOperands) ||
      types.size() != s.inputs.size())
    return std::nullopt;
  // The step was planned for static types; a run of others goes piece by piece.
  for (size_t k = 0; k < types.size(); ++k)
    if (!(types[k] == g.type(s.inputs[k]))) return std::nullopt;
  if (!s.prologue.nodes.empty() && !elementwise_supported(g, s.prologue)) return std::nullopt;
  if (!s.epilogue.nodes.empty() && !elementwise_supported(g, s.epilogue)) return std::nullopt;
  const Node& first = g.nodes[static_cast<size_t>(s.reductions[0])];
  const Shape& xs = g.type(first.inputs[0]).shape;
  const std::vector<bool> red = reduced_dims(first, xs, g.type(first.outputs[0]).shape);
  if (xs.rank() > kMaxRank) return std::nullopt;

  ReduceStitchLaunch l;
  ReduceStitchArgs& a = l.args;
  // Layout: reduced dims all before the kept ones (column) or all after (row), size-1 dims aside.
  bool kept_then_red = true, red_then_kept = true, seen_kept = false, seen_red = false;
  a.outer = 1;
  a.inner = 1;
  for (int64_t d = 0; d < xs.rank(); ++d) {
    if (xs[d] == 1) continue;
    if (red[static_cast<size_t>(d)]) {
      a.inner *= xs[d];
      red_then_kept &= !seen_kept;
      seen_red = true;
    } else {
      a.outer *= xs[d];
      kept_then_red &= !seen_red;
      seen_kept = true;
    }
  }
  if (a.inner < 2) return std::nullopt;  // nothing reduced: the plain kernels copy
  l.column = red_then_kept && a.outer > 1;
  l.general = !l.column && !kept_then_red;
  a.grank = static_cast<int>(xs.rank());
  long long stride = 1;
  for (int64_t d = xs.rank() - 1; d >= 0; --d) {
    a.gdims[d] = xs[d];
    stride *= xs[d];
  }
  for (int64_t d = 0; d < xs.rank(); ++d) {
    stride /= xs[d];  // now dim d's element stride
    if (xs[d] == 1) continue;
    if (red[static_cast<size_t>(d)]) {
      a.rdims[a.rrank] = xs[d];
      a.rstrides[a.rrank++] = stride;
    } else {
      a.kdims[a.krank] = xs[d];
      a.kstrides[a.krank++] = stride;
    }
  }

  // The inputs the prologue or a reduction reads are loaded per element; the others are the
  // epilogue's, loaded per output (or once).
  std::vector<bool> loaded(s.inputs.size(), false);
  std::vector<Access> access(s.inputs.size(), Access::scalar);
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    const int32_t v = s.inputs[k];
    loaded[k] = std::find(s.prologue.inputs.begin(), s.prologue.inputs.end(), v) != s.prologue.inputs.end();
    for (int32_t id : s.reductions) loaded[k] = loaded[k] || g.nodes[static_cast<size_t>(id)].inputs[0] == v;
    if (loaded[k] && !classify(types[k].shape, xs, red, static_cast<int>(k), a, access[k])) return std::nullopt;
  }
  std::vector<Red> reds;
  size_t planes = 0;
  for (int32_t id : s.reductions) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    const TensorType& in = g.type(n.inputs[0]);
    if (!(in.shape == xs) || reduced_dims(n, in.shape, g.type(n.outputs[0]).shape) != red) return std::nullopt;
    const OpKind k = n.kind == OpKind::SumToLike ? OpKind::ReduceSum : n.kind;
    reds.push_back(Red{k, g.type(n.outputs[0]).dtype, static_cast<int>(planes)});
    planes += is_var(k) ? 2 : 1;
    l.output_types.push_back(g.type(n.outputs[0]));
  }
  for (int32_t v : s.epilogue.outputs) l.output_types.push_back(g.type(v));
  l.planes = planes;

  if (l.column) {
    const long long col_blocks = (a.outer + 31) / 32;
    const long long target = std::max(1, sm_count) * 8LL;  // about one wave of 256-thread blocks
    a.split = std::clamp<long long>((target + col_blocks - 1) / col_blocks, 1, std::max<long long>(1, a.inner / 64));
    a.split = std::min<long long>(a.split, 65535);
    if (col_blocks > 2147483647LL) return std::nullopt;
    l.grid_x = static_cast<unsigned>(col_blocks);
    l.grid_y = static_cast<unsigned>(a.split);
  } else {
    l.threads_per_output = a.inner >= 2048 ? 256 : 32;
    const long long per_block = 256 / l.threads_per_output;
    l.grid_x = static_cast<unsigned>(std::min<long long>((a.outer + per_block - 1) / per_block, 65535LL * 8));
    a.split = 1;
  }
  l.source = Writer(g, s, loaded, access, types, reds, planes, l.column, l.general, l.threads_per_output).source();
  return l;
}

void launch_reduce_stitch(ReduceStitchLaunch& l, const std::vector<const void*>& ins,
                          const std::vector<void*>& outs, void* workspace, cudaStream_t stream, int device) {
  ReduceStitchArgs a = l.args;
  for (size_t k = 0; k < ins.size(); ++k) a.in[k] = ins[k];
  for (size_t k = 0; k < outs.size(); ++k) a.out[k] = outs[k];
  a.part = workspace;
  void* params[] = {&a};
  if (!l.first.kernel) {
    l.first = nvrtc_kernel(l.source, l.column ? "tg_rs_partial" : "tg_rs_row", device);
    if (l.column) l.second = nvrtc_kernel(l.source, "tg_rs_final", device);
  }
  if (l.column) {
    TG_CUDA(cudaLaunchKernel(l.first.fn(), dim3(l.grid_x, l.grid_y), dim3(256), params, 0, stream));
    TG_CUDA(cudaLaunchKernel(l.second.fn(), dim3(l.grid_x), dim3(256), params, 0, stream));
  } else {
    TG_CUDA(cudaLaunchKernel(l.first.fn(), dim3(l.grid_x), dim3(256), params, 0, stream));
  }
}

}  // namespace tg::detail
