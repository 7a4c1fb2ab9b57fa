// The generated kernel of a stitched reduction (reduce_stitch_kernel.h): planning (layout,
// operand access, launch shape) and the NVRTC source.
#include "backends/cuda/reduce_stitch_kernel.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "core/env.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// How an operand's element is found from the element index i, the output index o, the index
// within the output's reduction r, and (columns in batches) the column within its batch.
enum class Access { flat, scalar, out, red, col, broadcast };

// Operand k of shape t against the geometry's shape s (reduced dims red): its access, and its
// strides into a when broadcast; false when it does not broadcast to s.
// `cols`: the kept dims after the reduced ones in a column layout whose kept dims come in
// batches (an operand on those alone is read at the column within the batch).
bool classify(const Shape& t, const Shape& s, const std::vector<bool>& red, const std::vector<bool>& cols, int k,
              ReduceStitchArgs& a, Access& acc) {
  const int64_t rank = s.rank(), tr = t.rank();
  if (tr > rank) return false;
  bool all = true, none = true, kept = true, reduced = true, col = true;
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
    col &= present == cols[static_cast<size_t>(d)];
  }
  acc = all ? Access::flat : none ? Access::scalar : kept ? Access::out : reduced ? Access::red
      : col ? Access::col : Access::broadcast;
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
    case Access::col: return "icc";
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
         const std::vector<Red>& reds, size_t planes, bool column, bool general, bool runs, bool row_split, int T,
         int vec, int tx, int vrows, int stages, size_t stage_bytes)
      : g_(g), s_(s), loaded_(loaded), access_(access), types_(types), reds_(reds), planes_(planes), column_(column),
        general_(general), runs_(runs), row_split_(row_split), T_(T), vec_(vec), tx_(tx), vrows_(vrows), stages_(stages), stage_bytes_(stage_bytes) {
    // What each accumulator plane combines with: a variance's two planes are sums.
    plane_kinds_.assign(planes, OpKind::ReduceSum);
    for (const Red& r : reds_)
      if (!is_var(r.kind)) plane_kinds_[static_cast<size_t>(r.plane)] = r.kind;
  }

  std::string source() {
    os_ << elementwise_prelude();
    os_ << "struct RSArgs { const void* in[" << kMaxOperands << "]; void* out[" << kStitchOutputs
        << "]; void* part; long long outer, inner, split, cols; int grank; long long gdims[" << kMaxRank
        << "]; long long gstride[" << kMaxOperands << "][" << kMaxRank << "]; int krank, rrank; long long kdims["
        << kMaxRank << "], kstrides[" << kMaxRank << "], rdims[" << kMaxRank << "], rstrides[" << kMaxRank
        << "]; unsigned run_mul, run_shift; int fcols; };\n";
    if (general_)
      os_ << "__device__ __forceinline__ long long tg_doff(int rank, const long long* dims, const long long* strides, long long j) {\n"
             "  long long o = 0;\n  for (int d = rank - 1; d >= 0; --d) { o += (j % dims[d]) * strides[d]; j /= dims[d]; }\n  return o;\n}\n";
    if (runs_)  // the offset of index j within the reduction: its run's, then j's place in it
      os_ << "__device__ __forceinline__ long long tg_roff(const RSArgs& a, long long j) {\n"
             "  const unsigned u = (unsigned)j, m = (__umulhi(u, a.run_mul) + u) >> a.run_shift;\n"
             "  const long long in_run = (long long)(u - m * (unsigned)a.rdims[a.rrank - 1]);\n"
             "  return (a.rrank == 2 ? (long long)m * a.rstrides[0] : tg_doff(a.rrank - 1, a.rdims, a.rstrides, m)) + in_run;\n}\n";
    if (std::find(access_.begin(), access_.end(), Access::broadcast) != access_.end())
      os_ << "__device__ __forceinline__ long long tg_boff(const RSArgs& a, int k, long long i) {\n"
             "  long long o = 0;\n"
             "  for (int d = a.grank - 1; d >= 0; --d) { const long long n = a.gdims[d]; o += (i % n) * a.gstride[k][d]; i /= n; }\n"
             "  return o;\n}\n";
    eval();
    if (column_) {
      column_partial();
      if (vec_ > 1) {
        eval_vec();
        column_partial_vec();
      }
      column_final();
    } else {
      row();
      if (row_split_) {
        row_partial();
        column_final();
      }
    }
    return os_.str();
  }

 private:
  std::string plane_kind_combine(size_t p, const std::string& x, const std::string& y) const {
    return combine(plane_kinds_[p], x, y);
  }

  // tg_eval: every reduction's input at element i (output io, index ir within it), as doubles.
  void eval() {
    os_ << "__device__ __forceinline__ void tg_eval(const RSArgs& a, long long i, long long io, long long ir, long long icc, double* v) {\n"
        << "  (void)io; (void)ir; (void)icc;\n";
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

  // tg_loadv / tg_mathv: the same for `vec_` neighbouring columns from element i (output io,
  // index ir), as floats, in two steps: the loads (one vector per operand read along the
  // columns, a scalar for the others) into a tg_rows, then the prologue from it. The column
  // loop issues every row's loads before any row's arithmetic: with the loads and the math in
  // one call per row the two-operand sums of a batch-norm backward had half the bytes in flight
  // of the one-operand statistics (2.5 against 4.1 TB/s). tg_evalv is both, for the shifts.
  // The operands that do not change from row to row load once, by tg_loadc, before the loop.
  void eval_vec() {
    const std::string V = std::to_string(vec_);
    os_ << "template <class T, int V> struct alignas(sizeof(T) * V) tg_pack { T v[V]; };\n";
    std::vector<bool> lanes(s_.inputs.size(), false);
    os_ << "struct tg_rows {\n";
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      if (!loaded_[k]) continue;
      const DType t = types_[k].dtype;
      const std::string K = std::to_string(k);
      lanes[k] = access_[k] == Access::flat || access_[k] == Access::out || access_[k] == Access::col;
      if (lanes[k])
        os_ << "  tg_pack<" << codegen_storage_type(t) << ", " << V << "> x" << K << ";\n";
      else
        os_ << "  " << codegen_compute_type(t) << " s" << K << ";\n";
    }
    os_ << "};\n"
        << "__device__ __forceinline__ void tg_loadv(const RSArgs& a, long long i, long long io, long long ir, long long icc, tg_rows& L) {\n"
        << "  (void)a; (void)i; (void)io; (void)ir; (void)icc;\n";
    load_lanes(lanes, true);
    os_ << "}\n"
        << "__device__ __forceinline__ void tg_loadc(const RSArgs& a, long long io, long long icc, tg_rows& L) {\n"
        << "  (void)a; (void)io; (void)icc; (void)L;\n";
    load_lanes(lanes, false);
    os_ << "}\n";
    if (stages_ > 0) stage_functions(lanes);
    os_ << "__device__ __forceinline__ void tg_mathv(const tg_rows& L, float (*v)[" << V << "]) {\n  (void)L;\n"
        << "#pragma unroll\n  for (int j = 0; j < " << V << "; ++j) {\n";
    std::unordered_map<int32_t, std::string> names;
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      if (!loaded_[k]) continue;
      const int32_t v = s_.inputs[k];
      const DType t = types_[k].dtype;
      names[v] = "p" + std::to_string(k);
      os_ << "    const " << codegen_compute_type(t) << " " << names[v] << " = "
          << (lanes[k] ? codegen_from_storage(t, "L.x" + std::to_string(k) + ".v[j]") : "L.s" + std::to_string(k))
          << ";\n";
    }
    os_ << elementwise_members(g_, s_.prologue, names, "    ");
    for (size_t r = 0; r < reds_.size(); ++r)
      os_ << "    v[" << r << "][j] = (float)" << names.at(g_.nodes[static_cast<size_t>(s_.reductions[r])].inputs[0])
          << ";\n";
    os_ << "  }\n}\n"
        << "__device__ __forceinline__ void tg_evalv(const RSArgs& a, long long i, long long io, long long ir, long long icc, float (*v)["
        << V << "]) {\n  tg_rows L; tg_loadc(a, io, icc, L); tg_loadv(a, i, io, ir, icc, L); tg_mathv(L, v);\n}\n";
  }

  // The loads of tg_loadv (rows: the operands that change from row to row, read along the
  // columns or once per row) or of tg_loadc (the others: a thread's columns are fixed, so a
  // per-column or scalar operand is loaded once before the row loop, not with every row).
  void load_lanes(const std::vector<bool>& lanes, bool rows) {
    const std::string V = std::to_string(vec_);
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      if (!loaded_[k] || per_row(access_[k]) != rows) continue;
      const DType t = types_[k].dtype;
      const char* S = codegen_storage_type(t);
      const std::string K = std::to_string(k);
      if (lanes[k])
        os_ << "  L.x" << K << " = *(const tg_pack<" << S << ", " << V << ">*)((const " << S << "*)a.in[" << K
            << "] + " << offset(access_[k], static_cast<int>(k)) << ");\n";
      else
        os_ << "  L.s" << K << " = " << codegen_load(t, "a.in[" + K + "]", offset(access_[k], static_cast<int>(k)))
            << ";\n";
    }
  }
  static bool per_row(Access acc) { return acc == Access::flat || acc == Access::red; }

  // The staged form of tg_loadv (stages_ > 0): the operands read along the rows are copied into
  // shared memory by cp.async, `stages_` rows ahead of their use (tg_issue), and read back from
  // there (tg_fetch); the others load as in tg_loadv. The copies hold no registers, so a thread
  // has several rows of every operand in flight: with plain loads the compiler placed each row's
  // loads beside its arithmetic (2 x 16 bytes in flight a thread), and the batch-norm backward's
  // sums ran at 2.2-2.5 TB/s with the SMs mostly waiting.
  void stage_functions(const std::vector<bool>& lanes) {
    const std::string V = std::to_string(vec_);
    os_ << "__device__ __forceinline__ void tg_cp16(void* dst, const void* src) {\n"
           "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" :: \"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(src) : \"memory\");\n}\n"
        << "__device__ __forceinline__ void tg_issue(const RSArgs& a, long long i, unsigned char* sm, int slot) {\n";
    size_t off = 0;
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      if (!loaded_[k] || !lanes[k] || access_[k] != Access::flat) continue;
      const DType t = types_[k].dtype;
      const char* S = codegen_storage_type(t);
      const size_t bytes = dtype_size(t) * static_cast<size_t>(vec_);
      for (size_t h = 0; h < bytes; h += 16)
        os_ << "  tg_cp16(sm + " << off << " + ((size_t)slot * 256 + threadIdx.x) * " << bytes << " + " << h
            << ", (const char*)((const " << S << "*)a.in[" << k << "] + i) + " << h << ");\n";
      off += bytes * 256 * static_cast<size_t>(stages_);
    }
    os_ << "}\n__device__ __forceinline__ void tg_fetch(const RSArgs& a, long long i, long long io, long long ir, long long icc, const unsigned char* sm, int slot, tg_rows& L) {\n"
        << "  (void)a; (void)i; (void)io; (void)ir; (void)icc;\n";
    off = 0;
    for (size_t k = 0; k < s_.inputs.size(); ++k) {
      if (!loaded_[k]) continue;
      const DType t = types_[k].dtype;
      const char* S = codegen_storage_type(t);
      const std::string K = std::to_string(k);
      if (lanes[k] && access_[k] == Access::flat) {
        const size_t bytes = dtype_size(t) * static_cast<size_t>(vec_);
        os_ << "  L.x" << K << " = *(const tg_pack<" << S << ", " << V << ">*)(sm + " << off
            << " + ((size_t)slot * 256 + threadIdx.x) * " << bytes << ");\n";
        off += bytes * 256 * static_cast<size_t>(stages_);
      } else if (!per_row(access_[k])) {
        continue;  // loaded once, by tg_loadc
      } else if (lanes[k]) {
        os_ << "  L.x" << K << " = *(const tg_pack<" << S << ", " << V << ">*)((const " << S << "*)a.in[" << K
            << "] + " << offset(access_[k], static_cast<int>(k)) << ");\n";
      } else {
        os_ << "  L.s" << K << " = " << codegen_load(t, "a.in[" + K + "]", offset(access_[k], static_cast<int>(k)))
            << ";\n";
      }
    }
    os_ << "}\n";
  }

  // The accumulators, each at its kind's identity.
  void accumulators(const std::string& indent) {
    os_ << indent << "double acc[" << planes_ << "];\n";
    for (size_t p = 0; p < planes_; ++p) os_ << indent << "acc[" << p << "] = " << init_of(plane_kinds_[p]) << ";\n";
  }
  // The variances' shifts K: the reductions' inputs at element `first` (output io).
  void shifts(const std::string& first, const std::string& io, const std::string& icc) {
    os_ << "    double K[" << reds_.size() << "];\n";
    if (std::any_of(reds_.begin(), reds_.end(), [](const Red& r) { return is_var(r.kind); }))
      os_ << "    tg_eval(a, " << first << ", " << io << ", 0, " << icc << ", K);\n";
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
    column_base();
    shifts("base", "c", "icc");
    os_ << "    const long long st = (long long)gridDim.y * 8; long long r = (long long)blockIdx.y * 8 + ty;\n"
        << "    for (; r + 3 * st < a.inner; r += 4 * st) {\n"
        << "      double v0[" << reds_.size() << "], v1[" << reds_.size() << "], v2[" << reds_.size() << "], v3["
        << reds_.size() << "];\n"
        << "      tg_eval(a, base + r * a.cols, c, r, icc, v0); tg_eval(a, base + (r + st) * a.cols, c, r + st, icc, v1);\n"
        << "      tg_eval(a, base + (r + 2 * st) * a.cols, c, r + 2 * st, icc, v2); tg_eval(a, base + (r + 3 * st) * a.cols, c, r + 3 * st, icc, v3);\n";
    for (const char* v : {"v0", "v1", "v2", "v3"}) accumulate(v);
    os_ << "    }\n"
        << "    for (; r < a.inner; r += st) {\n      double v0[" << reds_.size() << "]; tg_eval(a, base + r * a.cols, c, r, icc, v0);\n";
    accumulate("v0");
    os_ << "    }\n  }\n";
  }
  // The element of column c (its batch's block, then the column in it) in row 0.
  void column_base() {
    os_ << "    const long long cb = c / a.cols, icc = c - cb * a.cols, base = cb * a.inner * a.cols + icc;\n";
  }

  // Column layout, pass 1, vec_ columns per thread: a block is tx_ threads across columns x
  // 256 / tx_ row phases; blockIdx.y takes every split-th group of rows; vrows_ rows in flight
  // per thread (a memory-bound loop needs ~32 KB of loads in flight per SM: two 16-byte rows of
  // one operand at two blocks an SM gave 16 KB, and 2.4 TB/s). Each thread accumulates its rows in float (a ResNet-50 batch of 256 gives it 12 to 100
  // rows: the grid splits the rows over a wave of blocks), the block's rows are combined in
  // double, one column per thread, in row order. Double arithmetic per element (its conversions
  // run at 1/16 of the float rate) had made batch-norm statistics 8x slower than their reads.
  void column_partial_vec() {
    const int TY = 256 / tx_;
    const std::string V = std::to_string(vec_), R = std::to_string(reds_.size());
    const size_t combine = static_cast<size_t>(TY) * static_cast<size_t>(tx_ * vec_ + 1) * 8;
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_vpartial(const RSArgs a) {\n"
        << "  __shared__ __align__(16) unsigned char tg_sm[" << std::max(combine, stage_bytes_) << "];\n"
        << "  const int tx = threadIdx.x % " << tx_ << ", ty = threadIdx.x / " << tx_ << ";\n"
        << "  const long long c = ((long long)blockIdx.x * " << tx_ << " + tx) * " << V << ";\n"
        << "  float acc[" << planes_ << "][" << V << "];\n";
    for (size_t p = 0; p < planes_; ++p)
      os_ << "  for (int j = 0; j < " << V << "; ++j) acc[" << p << "][j] = " << init_of(plane_kinds_[p]) << ";\n";
    os_ << "  if (c < a.outer) {\n";
    column_base();
    os_ << "    float K[" << R << "][" << V << "];\n";
    if (std::any_of(reds_.begin(), reds_.end(), [](const Red& r) { return is_var(r.kind); }))
      os_ << "    tg_evalv(a, base, c, 0, icc, K);\n";
    os_ << "    const long long st = (long long)gridDim.y * " << TY << "; long long r = (long long)blockIdx.y * " << TY
        << " + ty;\n"
        << "    tg_rows C; tg_loadc(a, c, icc, C);\n";
    if (stages_ > 0) {
      const std::string NS = std::to_string(stages_);
      // Rows r, r + st, ...: row k's copies are issued (NS - 1) rows ahead into slot k % NS, the
      // slot the row before it was read from; a group of copies per row, empty past the end.
      os_ << "#pragma unroll\n    for (int s = 0; s < " << NS << " - 1; ++s) {\n"
          << "      if (r + s * st < a.inner) tg_issue(a, base + (r + s * st) * a.cols, tg_sm, s);\n"
          << "      asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n    }\n"
          << "    for (int slot = 0; r < a.inner; r += st, slot = slot == " << stages_ - 1 << " ? 0 : slot + 1) {\n"
          << "      const long long rn = r + " << stages_ - 1 << " * st;\n"
          << "      if (rn < a.inner) tg_issue(a, base + rn * a.cols, tg_sm, slot == 0 ? " << stages_ - 1 << " : slot - 1);\n"
          << "      asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"
          << "      asm volatile(\"cp.async.wait_group " << stages_ - 1 << ";\\n\" ::: \"memory\");\n"
          << "      tg_rows L = C; tg_fetch(a, base + r * a.cols, c, r, icc, tg_sm, slot, L);\n"
          << "      float v[" << R << "][" << V << "]; tg_mathv(L, v);\n";
      accumulate_vec("v");
      os_ << "    }\n  }\n  asm volatile(\"cp.async.wait_group 0;\\n\" ::: \"memory\");\n  __syncthreads();\n";
    } else {
      os_ << "    for (; r + " << vrows_ - 1 << " * st < a.inner; r += " << vrows_ << " * st) {\n";
      for (int k = 0; k < vrows_; ++k)
        os_ << "      tg_rows L" << k << " = C; tg_loadv(a, base + (r + " << k << " * st) * a.cols, c, r + " << k
            << " * st, icc, L" << k << ");\n";
      for (int k = 0; k < vrows_; ++k) {
        os_ << "      { float v[" << R << "][" << V << "]; tg_mathv(L" << k << ", v);\n";
        accumulate_vec("v");
        os_ << "      }\n";
      }
      os_ << "    }\n"
          << "    for (; r < a.inner; r += st) {\n      tg_rows L = C; tg_loadv(a, base + r * a.cols, c, r, icc, L);\n"
          << "      float v0[" << R << "][" << V << "]; tg_mathv(L, v0);\n";
      accumulate_vec("v0");
      os_ << "    }\n  }\n";
    }
    const int W = tx_ * vec_;  // columns per block
    os_ << "  double (*sh)[" << W + 1 << "] = (double (*)[" << W + 1 << "])tg_sm;\n  double* part = (double*)a.part;\n"
        << "  const long long c0 = (long long)blockIdx.x * " << W << ";\n";
    for (size_t p = 0; p < planes_; ++p) {
      os_ << "  for (int j = 0; j < " << V << "; ++j) sh[ty][tx * " << V << " + j] = (double)acc[" << p << "][j];\n"
          << "  __syncthreads();\n"
          << "  for (int q = threadIdx.x; q < " << W << "; q += 256) {\n"
          << "    if (c0 + q >= a.outer) break;\n"
          << "    double t = sh[0][q];\n    for (int k = 1; k < " << TY << "; ++k) t = "
          << plane_kind_combine(p, "t", "sh[k][q]") << ";\n"
          << "    part[(" << p << "LL * a.split + blockIdx.y) * a.outer + c0 + q] = t;\n  }\n"
          << "  __syncthreads();\n";
    }
    os_ << "}\n";
  }
  void accumulate_vec(const std::string& v) {
    os_ << "#pragma unroll\n      for (int j = 0; j < " << vec_ << "; ++j) {\n";
    for (size_t k = 0; k < reds_.size(); ++k) {
      const Red& r = reds_[k];
      const std::string x = v + "[" + std::to_string(k) + "][j]", acc = "acc[" + std::to_string(r.plane) + "][j]";
      if (is_var(r.kind))
        os_ << "        { const float d = " << x << " - K[" << k << "][j]; " << acc << " += d; acc[" << r.plane + 1
            << "][j] += d * d; }\n";
      else
        os_ << "        " << acc << " = " << combine(r.kind, acc, x) << ";\n";
    }
    os_ << "      }\n";
  }

  // Column layout, pass 2: a block per a.fcols columns (a power of two, chosen at launch from
  // the split: ~4 partials a phase); its 256 / fcols row phases each combine every phase-th
  // partial of a column in split order, then a fixed tree over the phases. Eight columns a
  // block with 32 phases had walked a thousand partials a column (one wave of pass 1 over 64
  // channels) 33 deep in 8 blocks: 8 us a launch, 108 launches a ResNet-50 step. Every plane
  // in one walk and one tree (the planes one after another had waited for each plane's loads
  // and 8 barriers in turn: 9.5 us a launch reading almost nothing).
  void column_final() {
    const std::string NP = std::to_string(planes_);
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_final(const RSArgs a) {\n"
        << "  const int F = a.fcols, P = 256 / F;\n"
        << "  const int tx = threadIdx.x % F, ty = threadIdx.x / F;\n"
        << "  const long long c = (long long)blockIdx.x * F + tx;\n"
        << "  const double* part = (const double*)a.part;\n  __shared__ double sh[" << NP << "][256];\n"
        << "  double t[" << NP << "];\n";
    for (size_t p = 0; p < planes_; ++p) os_ << "  t[" << p << "] = " << init_of(plane_kinds_[p]) << ";\n";
    os_ << "  if (c < a.outer) {\n#pragma unroll 4\n    for (long long s = ty; s < a.split; s += P) {\n";
    for (size_t p = 0; p < planes_; ++p)
      os_ << "      const double q" << p << " = part[(" << p << "LL * a.split + s) * a.outer + c];\n";
    for (size_t p = 0; p < planes_; ++p) {
      const std::string tp = "t[" + std::to_string(p) + "]";
      os_ << "      " << tp << " = " << plane_kind_combine(p, tp, "q" + std::to_string(p)) << ";\n";
    }
    os_ << "    }\n  }\n";
    for (size_t p = 0; p < planes_; ++p) os_ << "  sh[" << p << "][threadIdx.x] = t[" << p << "];\n";
    os_ << "  __syncthreads();\n  for (int h = P / 2; h > 0; h >>= 1) {\n    if (ty < h) {\n";
    for (size_t p = 0; p < planes_; ++p) {
      const std::string me = "sh[" + std::to_string(p) + "][threadIdx.x]";
      os_ << "      " << me << " = " << plane_kind_combine(p, me, "sh[" + std::to_string(p) + "][threadIdx.x + h * F]")
          << ";\n";
    }
    os_ << "    }\n    __syncthreads();\n  }\n"
        << "  if (ty != 0 || c >= a.outer) return;\n";
    for (size_t p = 0; p < planes_; ++p) os_ << "  t[" << p << "] = sh[" << p << "][tx];\n";
    finish("c", "  ");
    os_ << "}\n";
  }

  // Row layout: the offset of output o's first element, and of its element j from there.
  const char* row_base() const { return general_ ? "tg_doff(a.krank, a.kdims, a.kstrides, o)" : "o * a.inner"; }
  std::string row_element() const {
    return runs_ ? "base + tg_roff(a, j)" : general_ ? "base + tg_doff(a.rrank, a.rdims, a.rstrides, j)" : "base + j";
  }

  // Row layout: T threads per output (a warp, or the block), each output's elements contiguous.
  void row() {
    const bool block = T_ == 256;
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_row(const RSArgs a) {\n"
        << "  const int T = " << T_ << "; const int lane = threadIdx.x % T; const long long per_block = 256 / T;\n";
    if (block) os_ << "  __shared__ double sh[8];\n";
    os_ << "  for (long long o = (long long)blockIdx.x * per_block + threadIdx.x / T; o < a.outer; o += (long long)gridDim.x * per_block) {\n";
    const std::string elem = row_element();
    os_ << "    const long long base = " << row_base() << ";\n";
    accumulators("    ");
    shifts("base", "o", "0");
    os_ << "    for (long long j = lane; j < a.inner; j += T) {\n"
        << "      double v0[" << reds_.size() << "]; tg_eval(a, " << elem << ", o, j, 0, v0);\n";
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

  // Row layout, few long rows (fewer blocks than the GPU holds): pass 1, blockIdx.y takes a
  // contiguous slice of row blockIdx.x; the block's partial goes to the column layout's partials,
  // whose pass 2 (tg_rs_final) combines and finishes them. The shift K is the row's first
  // element in every slice, so the slices' variance sums add up.
  void row_partial() {
    os_ << "extern \"C\" __global__ void __launch_bounds__(256) tg_rs_rpartial(const RSArgs a) {\n"
        << "  const long long o = blockIdx.x;\n  __shared__ double sh[8];\n";
    const std::string elem = row_element();
    os_ << "  const long long base = " << row_base() << ";\n";
    accumulators("  ");
    os_ << "  {\n";
    shifts("base", "o", "0");
    os_ << "    const long long per = (a.inner + gridDim.y - 1) / gridDim.y, lo = (long long)blockIdx.y * per;\n"
        << "    const long long hi = lo + per < a.inner ? lo + per : a.inner;\n"
        << "    for (long long j = lo + threadIdx.x; j < hi; j += 256) {\n"
        << "      double v0[" << reds_.size() << "]; tg_eval(a, " << elem << ", o, j, 0, v0);\n";
    accumulate("v0");
    os_ << "    }\n  }\n  double* part = (double*)a.part;\n";
    for (size_t p = 0; p < planes_; ++p)
      os_ << "  { double x = acc[" << p << "];\n"
          << "    for (int s = 16; s > 0; s >>= 1) { const double y = __shfl_xor_sync(0xffffffffu, x, s); x = "
          << plane_kind_combine(p, "x", "y") << "; }\n"
          << "    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = x; __syncthreads();\n"
          << "    if (threadIdx.x == 0) { x = sh[0]; for (int w = 1; w < 8; ++w) x = " << plane_kind_combine(p, "x", "sh[w]")
          << "; part[(" << p << "LL * a.split + blockIdx.y) * a.outer + o] = x; }\n"
          << "    __syncthreads(); }\n";
    os_ << "}\n";
  }

  const GraphImpl& g_;
  const ReduceStitch& s_;
  const std::vector<bool>& loaded_;
  const std::vector<Access>& access_;
  const std::vector<TensorType>& types_;
  const std::vector<Red>& reds_;
  const size_t planes_;
  const bool column_, general_, runs_, row_split_;
  const int T_, vec_, tx_, vrows_, stages_;
  const size_t stage_bytes_;
  std::vector<OpKind> plane_kinds_;
  std::ostringstream os_;
};

// Plans tg_rs_vpartial for a column layout (l.vec stays 1 where it does not apply): float
// reductions (sum, mean, variance, max, min) of operands read along the columns or once per row,
// none 64-bit, the columns of a batch a multiple of the vector.
void plan_vector_columns(const GraphImpl& g, const ReduceStitch& s, const std::vector<TensorType>& types,
                         const std::vector<bool>& loaded, const std::vector<Access>& access, int sm_count,
                         int sm_major, ReduceStitchLaunch& l) {
  const ReduceStitchArgs& a = l.args;
  for (int32_t id : s.reductions) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    const OpKind k = n.kind;
    if (k != OpKind::ReduceSum && k != OpKind::ReduceMean && k != OpKind::ReduceVariance && k != OpKind::ReduceMax &&
        k != OpKind::ReduceMin && k != OpKind::SumToLike)
      return;
    const DType t = g.type(n.inputs[0]).dtype;
    if (t != DType::f32 && t != DType::f16 && t != DType::bf16) return;
  }
  for (size_t k = 0; k < types.size(); ++k)
    if (loaded[k] && (access[k] == Access::broadcast || dtype_size(types[k].dtype) > 4)) return;
  int vec = 1;
  for (int v : {8, 4, 2})
    if (a.cols % v == 0) {
      vec = v;
      break;
    }
  if (vec == 1) return;
  l.vec_align.assign(types.size(), 0);
  size_t row_bytes = 0;  // what a thread loads per row from operands read along the rows
  for (size_t k = 0; k < types.size(); ++k)
    if (loaded[k] && (access[k] == Access::flat || access[k] == Access::out || access[k] == Access::col)) {
      l.vec_align[k] = dtype_size(types[k].dtype) * static_cast<size_t>(vec);
      if (access[k] == Access::flat) row_bytes += l.vec_align[k];  // the others: a column's, cached
    }
  l.vrows = row_bytes <= 16 ? 4 : 2;
  // Rows staged through shared memory by cp.async (sm_80 and later): every operand read along
  // the rows a vector of 16 or 32 bytes; 4 rows ahead, fewer where that passes 32 KB a block.
  bool stage = row_bytes > 0 && sm_major >= 8;
  for (size_t k = 0; k < types.size(); ++k)
    if (loaded[k] && access[k] == Access::flat) stage &= l.vec_align[k] == 16 || l.vec_align[k] == 32;
  l.stages = 0;
  if (stage) {
    l.stages = 4;
    while (l.stages > 2 && row_bytes * 256 * static_cast<size_t>(l.stages) > 32768) --l.stages;
    if (row_bytes * 256 * static_cast<size_t>(l.stages) > 32768) l.stages = 0;
  }
  if (const char* e = env_value("TGRAPH_RS_STAGES"); e && *e && l.stages > 0) {
    l.stages = std::clamp(std::atoi(e), 0, 8);
    if (l.stages == 1) l.stages = 2;  // one row ahead is two slots
    while (l.stages > 2 && row_bytes * 256 * static_cast<size_t>(l.stages) > 40960) --l.stages;
  }
  l.stage_bytes = row_bytes * 256 * static_cast<size_t>(l.stages);
  int tx = 1;  // threads across columns: enough for the columns, at most a warp
  while (tx < 32 && static_cast<long long>(tx) * vec < a.outer) tx *= 2;
  const long long ty = 256 / tx, col_blocks = (a.outer + tx * vec - 1) / (tx * vec);
  // About one wave of blocks, at least 16 rows per thread.
  const long long target = std::max(1, sm_count) * 8LL;
  const long long split = std::clamp<long long>((target + col_blocks - 1) / col_blocks, 1,
                                                std::min<long long>(65535, std::max<long long>(1, a.inner / (ty * 16))));
  if (col_blocks > 2147483647LL) return;
  l.vec = vec;
  l.vtx = tx;
  l.sm_count = std::max(1, sm_count);
  l.vgrid_x = static_cast<unsigned>(col_blocks);
  l.vgrid_y = static_cast<unsigned>(split);
}

}  // namespace

std::optional<ReduceStitchLaunch> prepare_reduce_stitch(const GraphImpl& g, const ReduceStitch& s,
                                                        const std::vector<TensorType>& types, int sm_count,
                                                        int sm_major) {
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
  // Layout, size-1 dims aside: kept dims after the reduced ones, and maybe a batch of kept dims
  // before them (column: [batch, inner, cols]), or every reduced dim after the kept ones (row).
  bool kept_then_red = true, seen_red = false, prev_red = false;
  int runs = 0;  // runs of neighbouring reduced dims
  a.outer = 1;
  a.inner = 1;
  a.cols = 1;  // the kept dims after the last reduced one
  for (int64_t d = 0; d < xs.rank(); ++d) {
    if (xs[d] == 1) continue;
    const bool r = red[static_cast<size_t>(d)];
    if (r) {
      a.inner *= xs[d];
      runs += !prev_red;
      a.cols = 1;
      seen_red = true;
    } else {
      a.outer *= xs[d];
      kept_then_red &= !seen_red;
      a.cols *= xs[d];
    }
    prev_red = r;
  }
  if (a.inner < 2) return std::nullopt;  // nothing reduced: the plain kernels copy
  l.column = runs == 1 && a.cols > 1;
  l.general = !l.column && !kept_then_red;
  a.grank = static_cast<int>(xs.rank());
  long long stride = 1;
  for (int64_t d = xs.rank() - 1; d >= 0; --d) {
    a.gdims[d] = xs[d];
    stride *= xs[d];
  }
  // Reduced and kept dims, each run of neighbours merged into one (NCHW's H and W: one dim).
  bool prev_reduced = false, any = false;
  for (int64_t d = 0; d < xs.rank(); ++d) {
    stride /= xs[d];  // now dim d's element stride
    if (xs[d] == 1) continue;
    const bool r = red[static_cast<size_t>(d)];
    int& rank = r ? a.rrank : a.krank;
    long long* dims = r ? a.rdims : a.kdims;
    long long* strides = r ? a.rstrides : a.kstrides;
    if (any && r == prev_reduced) {
      dims[rank - 1] *= xs[d];
      strides[rank - 1] = stride;
    } else {
      dims[rank] = xs[d];
      strides[rank++] = stride;
    }
    prev_reduced = r;
    any = true;
  }
  if (l.general && a.rrank >= 2 && a.rstrides[a.rrank - 1] == 1 && a.inner < (1LL << 31)) {
    l.runs = true;
    const FastDivisor f = fast_divisor(static_cast<uint32_t>(a.rdims[a.rrank - 1]));
    a.run_mul = f.mul;
    a.run_shift = f.shift;
  }

  // The inputs the prologue or a reduction reads are loaded per element; the others are the
  // epilogue's, loaded per output (or once).
  std::vector<bool> loaded(s.inputs.size(), false);
  std::vector<Access> access(s.inputs.size(), Access::scalar);
  std::vector<bool> cols(static_cast<size_t>(xs.rank()), false);  // the kept dims after the last reduced one
  if (l.column)
    for (int64_t d = xs.rank() - 1; d >= 0 && !red[static_cast<size_t>(d)]; --d) cols[static_cast<size_t>(d)] = xs[d] != 1;
  for (size_t k = 0; k < s.inputs.size(); ++k) {
    const int32_t v = s.inputs[k];
    loaded[k] = std::find(s.prologue.inputs.begin(), s.prologue.inputs.end(), v) != s.prologue.inputs.end();
    for (int32_t id : s.reductions) loaded[k] = loaded[k] || g.nodes[static_cast<size_t>(id)].inputs[0] == v;
    if (loaded[k] && !classify(types[k].shape, xs, red, cols, static_cast<int>(k), a, access[k])) return std::nullopt;
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

  if (l.column) plan_vector_columns(g, s, types, loaded, access, sm_count, sm_major, l);
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
    // A block per row and fewer rows than a wave of blocks (batch-norm statistics of NCHW: 64 to
    // 2048 rows of up to millions): each row in slices of at least 2048 elements.
    const long long target = std::max(1, sm_count) * 8LL;
    if (l.threads_per_output == 256 && a.outer < target && a.outer <= 2147483647LL) {
      l.row_split = std::clamp<long long>((target + a.outer - 1) / a.outer, 1, std::min<long long>(65535, a.inner / 2048));
    }
  }
  l.source =
      Writer(g, s, loaded, access, types, reds, planes, l.column, l.general, l.runs, l.row_split > 1,
             l.threads_per_output, l.vec, l.vtx, l.vrows, l.stages, l.stage_bytes)
          .source();
  return l;
}

void ready_reduce_stitch(ReduceStitchLaunch& l, int device) {
  if (!l.first.kernel) {  // one module: the source compiles once
    l.first = nvrtc_kernel(l.source, l.column ? "tg_rs_partial" : "tg_rs_row", device);
    if (l.column || l.row_split > 1) l.second = nvrtc_kernel(l.source, "tg_rs_final", device);
    if (l.vec > 1) l.vfirst = nvrtc_kernel(l.source, "tg_rs_vpartial", device);
    if (l.row_split > 1) l.vfirst = nvrtc_kernel(l.source, "tg_rs_rpartial", device);
  }
  if (l.row_split <= 1 && l.vec > 1 && !l.vgrid_sized) {
    // One wave: as many blocks as stay resident (the plan's count assumed 8 an SM; a kernel
    // with many accumulators fits 2, and 4 waves of short blocks each paid the start-up (the
    // shift's loads) and the block's combine again). Fewer partials for the final pass, too.
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, l.vfirst.fn(), 256, 0) != cudaSuccess || b < 1) {
      (void)cudaGetLastError();
      b = 8;
    }
    const long long wave = static_cast<long long>(l.sm_count) * b;
    l.vgrid_y = static_cast<unsigned>(
        std::clamp<long long>((wave + l.vgrid_x - 1) / l.vgrid_x, 1, static_cast<long long>(l.vgrid_y)));
    l.vgrid_sized = true;
  }
}

void launch_reduce_stitch(ReduceStitchLaunch& l, const std::vector<const void*>& ins,
                          const std::vector<void*>& outs, void* workspace, cudaStream_t stream, int device) {
  ready_reduce_stitch(l, device);
  ReduceStitchArgs a = l.args;
  for (size_t k = 0; k < ins.size(); ++k) a.in[k] = ins[k];
  for (size_t k = 0; k < outs.size(); ++k) a.out[k] = outs[k];
  a.part = workspace;
  // Pass 2's shape from the split of pass 1: ~4 partials per phase, 1 to 32 columns a block.
  auto shape_final = [&] {
    int f = 1;
    while (f < 32 && static_cast<long long>(256 / (2 * f)) * 4 >= a.split) f *= 2;
    a.fcols = f;
    l.final_x = static_cast<unsigned>((a.outer + f - 1) / f);
  };
  void* params[] = {&a};
  if (l.row_split > 1) {
    a.split = l.row_split;
    shape_final();
    TG_CUDA(cudaLaunchKernel(l.vfirst.fn(), dim3(static_cast<unsigned>(a.outer), static_cast<unsigned>(l.row_split)),
                             dim3(256), params, 0, stream));
    TG_CUDA(cudaLaunchKernel(l.second.fn(), dim3(l.final_x), dim3(256), params, 0, stream));
    return;
  }
  bool vec = l.vec > 1;
  for (size_t k = 0; k < ins.size() && vec; ++k)
    vec = k >= l.vec_align.size() || l.vec_align[k] == 0 || reinterpret_cast<uintptr_t>(ins[k]) % l.vec_align[k] == 0;
  if (vec) {
    a.split = l.vgrid_y;
    shape_final();
    TG_CUDA(cudaLaunchKernel(l.vfirst.fn(), dim3(l.vgrid_x, l.vgrid_y), dim3(256), params, 0, stream));
    TG_CUDA(cudaLaunchKernel(l.second.fn(), dim3(l.final_x), dim3(256), params, 0, stream));
  } else if (l.column) {
    shape_final();
    TG_CUDA(cudaLaunchKernel(l.first.fn(), dim3(l.grid_x, l.grid_y), dim3(256), params, 0, stream));
    TG_CUDA(cudaLaunchKernel(l.second.fn(), dim3(l.final_x), dim3(256), params, 0, stream));
  } else {
    TG_CUDA(cudaLaunchKernel(l.first.fn(), dim3(l.grid_x), dim3(256), params, 0, stream));
  }
}

}  // namespace tg::detail
