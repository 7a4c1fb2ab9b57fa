// The stencil on the GPU (cuda_stencil.h). The generated source has four parts:
//   tg_block    which tile (and which index of the flattened leading dims) a block computes;
//   tg_load     the tile plus halo into shared memory, one row (innermost dim) per warp at a
//               time, the boundary mode resolved per row and per element, the prologue applied
//               to every real source element (padding values are the stencil's, unchanged);
//   tg_compute  every output of the tile from shared memory, the taps unrolled with constant
//               offsets, the epilogue applied before the store;
//   tg_stencil  the kernel calling them (a block-wide barrier between load and compute).
// Sizes are run-time arguments; tile, window, strides, dilation, boundary and, when the weights
// are a constant, the weights themselves are compiled in (zero taps of a sum are skipped while
// the tile holds only finite values, which keeps 0 * inf = NaN exact).
#include "backends/cuda/cuda_stencil.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kSharedBytes = 48 * 1024;  // static shared memory of one block
constexpr int64_t kUnrolledTaps = 512;       // more taps: a loop over them
constexpr int64_t kRegisterWeights = 64;     // run-time weights kept in registers up to this many
constexpr int64_t kMaxTaps = 1 << 16;

using Dims = std::vector<int64_t>;

// How a prologue / epilogue operand is addressed from the group's flat index.
enum class Access { flat, scalar, broadcast };

// What one generated kernel is specialised on.
struct Config {
  DType dt = DType::f32;
  Reduction red = Reduction::sum;
  Boundary bnd = Boundary::zero;
  double pad_value = 0;
  int64_t k[4]{}, s[4]{}, d[4]{}, T[4]{}, E[4]{};
  std::vector<double> weights;  // compiled in when not empty
  int weights_operand = -1;     // a.in index of the weights (run-time weights)
  // The direct kernel: V outputs along dim 3 times R along dim sd per thread, TX threads along
  // dim 3 and 256 / TX along dim bd; F the thread's input footprint; its rows are loaded as
  // nc 4-element chunks starting lo elements before the footprint (vin) or element by element.
  bool direct = false, vin = false, vout = false;
  int64_t V = 1, R = 1, TX = 32, sd = 2, bd = 2, F[4]{}, lo = 0, nc = 1;
  int64_t min_blocks = 0;  // __launch_bounds__ blocks per SM (caps registers); 0: none
};

// The tile: output extents T per window dim. Rows of the shared tile are 32, 64 or 128
// elements wide (whole chunks of 32 lanes; wider only for wide windows); the rest is chosen to
// cut halo reads per output (L2 sectors) and idle lanes, within 48 KB of shared memory,
// penalising grids that fill few SMs.
struct TileKey {
  int64_t k[4], s[4], d[4], o[4], batch, elem;
  auto tie() const {
    return std::tie(k[0], k[1], k[2], k[3], s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3], o[0], o[1], o[2],
                    o[3], batch, elem);
  }
  bool operator<(const TileKey& x) const { return tie() < x.tie(); }
};

bool choose_tile(Config& c, const int64_t o[4], int64_t batch, int64_t elem) {
  static std::mutex mu;
  static std::map<TileKey, std::pair<bool, std::array<int64_t, 4>>> cache;
  TileKey key{{c.k[0], c.k[1], c.k[2], c.k[3]},
              {c.s[0], c.s[1], c.s[2], c.s[3]},
              {c.d[0], c.d[1], c.d[2], c.d[3]},
              {o[0], o[1], o[2], o[3]},
              batch,
              elem};
  auto extent = [&](int i, int64_t t) { return (t - 1) * c.s[i] + (c.k[i] - 1) * c.d[i] + 1; };
  auto apply = [&](const std::array<int64_t, 4>& t) {
    for (int i = 0; i < 4; ++i) {
      c.T[i] = t[static_cast<size_t>(i)];
      c.E[i] = extent(i, c.T[i]);
    }
  };
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) {
    if (it->second.first) apply(it->second.second);
    return it->second.first;
  }
  const int64_t max_row = std::max<int64_t>(128, (extent(3, 1) + 31 + 31) / 32 * 32);
  std::vector<int64_t> cand[4];
  for (int i = 0; i < 4; ++i) {
    auto add = [&](int64_t t) {
      t = std::clamp<int64_t>(t, 1, o[i]);
      if (std::find(cand[i].begin(), cand[i].end(), t) == cand[i].end()) cand[i].push_back(t);
    };
    if (i < 3) {
      for (int64_t t = 1; t <= 16; ++t) add(t);
      for (int64_t t : {24, 32, 48, 64}) add(t);
    } else {
      for (int64_t t = 1; t <= 128; t *= 2) add(t);
      for (int64_t m = 1; 32 * m <= max_row; ++m)
        if (32 * m >= extent(3, 1)) add((32 * m - extent(3, 1)) / c.s[3] + 1);
    }
  }
  double best = 0;
  std::array<int64_t, 4> bt{};
  bool found = false;
  const double total =
      static_cast<double>(batch) * static_cast<double>(o[0] * o[1]) * static_cast<double>(o[2] * o[3]);
  for (int64_t t0 : cand[0])
    for (int64_t t1 : cand[1])
      for (int64_t t2 : cand[2])
        for (int64_t t3 : cand[3]) {
          const int64_t rows = t0 * t1 * t2, e3 = extent(3, t3);
          if (rows * t3 > 8192 || t3 > 128 || e3 > max_row) continue;
          const int64_t r = extent(0, t0) * extent(1, t1) * extent(2, t2);
          if (r * e3 * elem > kSharedBytes) continue;
          double blocks = static_cast<double>(batch);
          const int64_t tt[4] = {t0, t1, t2, t3};
          for (int i = 0; i < 4; ++i) blocks *= static_cast<double>((o[i] + tt[i] - 1) / tt[i]);
          const double useful = total / blocks;
          // Elements moved through L2, a 32-byte sector more per unaligned row of loads and stores.
          const double l2 =
              static_cast<double>(r * (e3 + 32 / elem) + rows * (t3 + (t3 * elem % 128 ? 32 / elem : 0)));
          const double load_lanes = static_cast<double>(r * 32 * ((e3 + 31) / 32));
          const double compute_lanes = static_cast<double>((rows + 7) / 8 * 8 * 32 * ((t3 + 31) / 32));
          const double cost = (l2 + 0.3 * load_lanes + 0.3 * compute_lanes) / useful * (1 + 264 / blocks);
          if (!found || cost < best) {
            found = true;
            best = cost;
            bt = {t0, t1, t2, t3};
          }
        }
  cache[key] = {found, bt};
  if (found) apply(bt);
  return found;
}

// The direct kernel's shape: the measured defaults, or TGRAPH_STENCIL_CONFIG (`tile`: the
// shared-memory kernel; `v=4,r=8,tx=32,mb=3`: outputs per thread along dim 3 and the slide dim,
// threads along dim 3, blocks per SM); false when the window does not suit it (many taps, wide
// rows of footprint), and the tile kernel runs.
bool choose_direct(Config& c, const int64_t o[4], int64_t taps) {
  // Defaults measured on the H200 (bench_gpu's configuration sweep, bench/RESULTS.md): 4 outputs
  // per thread along x with 16-byte loads, 4 along the slide dim, 32 threads along x, 4 blocks
  // per SM: 5-point Laplacian 8192^2 0.142 ms (tile kernel 0.202), 7-point 512^3 0.627 ms
  // (0.742). Only for sum and product: for min / max / argmin / argmax the compare chains
  // outweigh the saved loads (3x3 max 0.334 ms vs the tile kernel's 0.306, argmax 0.430 vs
  // 0.372). Every tap of every output is unrolled (twice: the interior path and the boundary
  // one), so the default also bounds outputs x taps per thread — NVRTC takes seconds past that.
  // TGRAPH_STENCIL_CONFIG overrides ("v=4,r=8,tx=32,mb=3", any reduction) or picks the
  // shared-memory tile kernel ("tile").
  int64_t V = 4, R = 4, TX = 32, sd = -1, bd = -1, mb = 4, budget = 512;
  if (const char* e = std::getenv("TGRAPH_STENCIL_CONFIG")) {
    const std::string cfg = e;
    if (cfg == "tile") return false;
    budget = 4096;
    std::istringstream in(cfg);
    for (std::string kv; std::getline(in, kv, ',');) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string key = kv.substr(0, eq);
      const int64_t val = std::atoll(kv.c_str() + eq + 1);
      if (key == "v" && (val == 1 || val == 2 || val == 4 || val == 8)) V = val;
      if (key == "r" && val >= 1 && val <= 32) R = val;
      if (key == "tx" && val >= 1 && val <= kThreads && kThreads % val == 0) TX = val;
      if (key == "sd" && val >= 0 && val <= 2) sd = val;
      if (key == "bd" && val >= 0 && val <= 2) bd = val;
      if (key == "mb" && val >= 0 && val <= 8) mb = val;
    }
  } else if (c.red != Reduction::sum && c.red != Reduction::product) {
    return false;
  }
  if (taps > kUnrolledTaps) return false;
  // Threads stack along the innermost dim (of 0..2) with more than one output; each slides
  // along the outermost windowed one (rows reused in registers), or along the same dim.
  if (bd < 0) bd = o[2] > 1 ? 2 : o[1] > 1 ? 1 : o[0] > 1 ? 0 : 2;
  if (sd < 0)
    for (int i = 0; i < 3 && sd < 0; ++i)
      if (c.k[i] > 1) sd = i;
  if (sd < 0) sd = bd;
  while (TX > 1 && TX / 2 * V >= o[3]) TX /= 2;  // narrow rows: fewer threads along them
  R = std::max<int64_t>(1, std::min(R, o[sd]));
  auto extent = [&](int i, int64_t t) { return (t - 1) * c.s[i] + (c.k[i] - 1) * c.d[i] + 1; };
  auto rows = [&] {
    int64_t n = 1;
    for (int i = 0; i < 3; ++i) n *= extent(i, i == sd ? R : 1);
    return n;
  };
  while (R > 1 && (R * V * taps > budget || rows() > 512)) R = (R + 1) / 2;
  while (V > 1 && (R * V * taps > budget || extent(3, V) > 64)) V /= 2;
  if (R * V * taps > budget || rows() > 512 || extent(3, V) > 64) return false;
  c.direct = true;
  c.V = V;
  c.R = R;
  c.TX = TX;
  c.min_blocks = mb;
  c.sd = sd;
  c.bd = bd;
  for (int i = 0; i < 4; ++i) {
    c.T[i] = 1;
    c.F[i] = extent(i, i == 3 ? V : i == sd ? R : 1);
  }
  c.T[3] = TX * V;
  c.T[bd] = kThreads / TX * (bd == sd ? R : 1);
  if (sd != bd) c.T[sd] = R;
  for (int i = 0; i < 4; ++i) c.E[i] = extent(i, c.T[i]);  // unused by the direct kernel
  return true;
}

// A literal of the compute type.
std::string lit(double v, const char* type) {
  if (std::isnan(v)) return std::string("((") + type + ")(0.0/0.0))";
  if (std::isinf(v)) return std::string("((") + type + ")(" + (v < 0 ? "-" : "") + "1.0/0.0))";
  char b[64];
  std::snprintf(b, sizeof b, "%a", v);
  return std::string("((") + type + ")(" + b + "))";
}

// The boundary function: maps coordinate c into [0, n) (toggling flip once per anti-periodic
// wrap), or -1 when the tap reads the padding value. Same mapping as ref_stencil.cpp, in
// closed form: reflect and symmetric are periodic with period 2(n-1) and 2n.
std::string resolve_source(Boundary b) {
  std::string s =
      "__device__ __forceinline__ long long tg_res(long long c, long long n, bool& flip) {\n"
      "  if (c >= 0 && c < n) return c;\n";
  switch (b) {
    case Boundary::zero:
    case Boundary::constant: s += "  return -1;\n"; break;
    case Boundary::clamp_to_edge: s += "  return c < 0 ? 0 : n - 1;\n"; break;
    case Boundary::reflect:
      s += "  if (n == 1) return 0;\n  const long long p = 2 * (n - 1);\n  long long m = c % p;\n  if (m < "
           "0) m += p;\n"
           "  return m < n ? m : p - m;\n";
      break;
    case Boundary::symmetric:
      s += "  const long long p = 2 * n;\n  long long m = c % p;\n  if (m < 0) m += p;\n  return m < n ? m : "
           "p - 1 - m;\n";
      break;
    case Boundary::periodic: s += "  long long m = c % n;\n  return m < 0 ? m + n : m;\n"; break;
    case Boundary::anti_periodic:
      s += "  const long long q = c >= 0 ? c / n : -((-c + n - 1) / n);\n  if (q & 1) flip = !flip;\n  "
           "return c - q * n;\n";
      break;
  }
  return s + "}\n";
}

struct Operand {
  int index;  // into a.in
  Access access;
};

// Offset expression of an operand for flat group index `i`.
std::string operand_offset(const Operand& op, int side, const std::string& i) {
  switch (op.access) {
    case Access::flat: return i;
    case Access::scalar: return "0";
    case Access::broadcast:
      return "tg_boff(a, " + std::to_string(side) + ", " + std::to_string(op.index) + ", " + i + ")";
  }
  return i;
}

struct Generated {
  const GraphImpl* g = nullptr;
  const StencilStitch* s = nullptr;
  Config c;
  int32_t pro_out = -1, epi_in = -1;  // prologue result; what the epilogue reads
  std::vector<std::pair<int32_t, Operand>> pro_ops, epi_ops;
  int source_operand = -1;  // a.in index of the source (no prologue)
  bool broadcast = false;
};

// Writes the kernel source for one configuration, part by part.
class Writer {
 public:
  explicit Writer(const Generated& gen)
      : gen_(gen),
        c_(gen.c),
        g_(*gen.g),
        st_(*gen.s),
        C_(codegen_compute_type(c_.dt)),
        arg_(c_.red == Reduction::argmin || c_.red == Reduction::argmax),
        padded_(c_.bnd == Boundary::zero || c_.bnd == Boundary::constant),
        K_(c_.k[0] * c_.k[1] * c_.k[2] * c_.k[3]),
        baked_(!c_.weights.empty()),
        reg_weights_(!baked_ && K_ <= kRegisterWeights),
        unrolled_(K_ <= kUnrolledTaps),
        R_(c_.E[0] * c_.E[1] * c_.E[2]),
        nch_((c_.E[3] + 31) / 32),
        ru_(std::clamp<int64_t>(8 / nch_, 1, (R_ + 7) / 8)),
        SE_{c_.E[1] * c_.E[2] * c_.E[3], c_.E[2] * c_.E[3], c_.E[3], 1},
        pad_(lit(c_.bnd == Boundary::constant ? c_.pad_value : 0.0, C_)) {
    skip_zeros_ = c_.red == Reduction::sum && baked_ && unrolled_ &&
                  std::find(c_.weights.begin(), c_.weights.end(), 0.0) != c_.weights.end();
  }

  std::string source() {
    os_ << elementwise_prelude();
    os_ << "struct StencilArgs { const void* in[" << kStencilOperands << "]; void* out[" << kStencilOperands
        << "]; long long n[4], o[4], base[4]; long long sstride[5], ostride[5]; long long nt[4]; "
           "long long gdims[2][8]; long long gstride[2]["
        << kStencilOperands << "][8]; int grank[2]; int vec_in, vec_out; };\n"
        << "struct TgBlock { long long b, q[4], g[4]; };\n"
        << "typedef " << C_ << " TG_C;\n"
        << resolve_source(c_.bnd);
    helpers();
    if (c_.direct) {
      direct();
      return os_.str();
    }
    load();
    compute();
    kernel();
    return os_.str();
  }

 private:
  std::string operand(int index) const { return "a.in[" + std::to_string(index) + "]"; }

  // tg_boff (broadcast operands), tg_block (block -> tile origin in output (q) and source (g)
  // coordinates), tg_src (one source element, the prologue applied), tg_weights (registers).
  void helpers() {
    if (gen_.broadcast)
      os_ << "__device__ __forceinline__ long long tg_boff(const StencilArgs& a, int side, int k, long long "
             "i) {\n"
             "  long long o = 0;\n"
             "  for (int d = a.grank[side] - 1; d >= 0; --d) { const long long n = a.gdims[side][d]; "
             "o += (i % n) * a.gstride[side][k][d]; i /= n; }\n"
             "  return o;\n}\n";
    os_ << "__device__ __forceinline__ TgBlock tg_block(const StencilArgs& a, long long r) {\n  TgBlock k;\n";
    for (int i = 3; i >= 0; --i)
      os_ << "  { const long long t = r % a.nt[" << i << "]; r /= a.nt[" << i << "]; k.q[" << i << "] = t * "
          << c_.T[i] << "LL; k.g[" << i << "] = k.q[" << i << "] * " << c_.s[i] << "LL + a.base[" << i
          << "]; }\n";
    os_ << "  k.b = r;\n  return k;\n}\n";
    os_ << "__device__ __forceinline__ TG_C tg_src(const StencilArgs& a, long long i) {\n";
    if (st_.prologue.nodes.empty()) {
      os_ << "  return " << codegen_load(c_.dt, operand(gen_.source_operand), "i") << ";\n";
    } else {
      std::unordered_map<int32_t, std::string> names;
      for (const auto& [v, op] : gen_.pro_ops) {
        names[v] = "p" + std::to_string(op.index);
        os_ << "  const " << codegen_compute_type(g_.type(v).dtype) << " " << names[v] << " = "
            << codegen_load(g_.type(v).dtype, operand(op.index), operand_offset(op, 0, "i")) << ";\n";
      }
      os_ << elementwise_members(g_, st_.prologue, names, "  ") << "  return " << names.at(gen_.pro_out)
          << ";\n";
    }
    os_ << "}\n";
    if (reg_weights_)
      os_ << "__device__ __forceinline__ void tg_weights(const StencilArgs& a, TG_C* w) {\n#pragma unroll\n"
          << "  for (int t = 0; t < " << K_
          << "; ++t) w[t] = " << codegen_load(c_.dt, operand(c_.weights_operand), "t") << ";\n}\n";
  }

  // tg_load: rows of the tile (every dim but the innermost) go to warps, elements of a row to
  // lanes; `ru` rows are loaded before any is stored, so several loads are in flight per thread.
  // Rows resolve their outer coordinates once; a row inside the source along the innermost dim
  // (the block's common case) loads without per-element boundary work.
  void load() {
    const int64_t E3 = c_.E[3];
    const bool anti = c_.bnd == Boundary::anti_periodic;
    const std::string guard =
        E3 % 32 ? "        if (lane + 32 * j >= " + std::to_string(E3) + ") break;\n" : "";
    os_ << "__device__ __forceinline__ bool tg_load(const StencilArgs& a, TG_C* tile, const TgBlock& k, int "
           "tid) {\n"
        << "  bool bad = false;\n  const int lane = tid & 31, warp = tid >> 5;\n"
        << "  const long long sb = k.b * a.sstride[0];\n"
        << "  const bool in3 = k.g[3] >= 0 && k.g[3] + " << E3 << " <= a.n[3];\n"
        << "  for (int r0 = warp; r0 < " << R_ << "; r0 += " << 8 * ru_ << ") {\n"
        << "    TG_C v[" << ru_ << "][" << nch_ << "];\n"
        << "#pragma unroll\n    for (int u = 0; u < " << ru_ << "; ++u) {\n"
        << "      const int r = r0 + 8 * u;\n      if (r >= " << R_ << ") break;\n"
        << "      const int e2 = r % " << c_.E[2] << ", e1 = (r / " << c_.E[2] << ") % " << c_.E[1]
        << ", e0 = r / " << c_.E[1] * c_.E[2] << ";\n"
        << "      bool flip = false;\n";
    for (int i = 0; i < 3; ++i)
      os_ << "      const long long c" << i << " = tg_res(k.g[" << i << "] + e" << i << ", a.n[" << i
          << "], flip);\n";
    os_ << "      const long long row = sb + c0 * a.sstride[1] + c1 * a.sstride[2] + c2 * a.sstride[3];\n";
    if (padded_)
      os_ << "      if (c0 < 0 || c1 < 0 || c2 < 0) {\n#pragma unroll\n        for (int j = 0; j < " << nch_
          << "; ++j) v[u][j] = " << pad_ << ";\n        continue;\n      }\n";
    os_ << "      if (in3) {\n        const long long i0 = row + k.g[3] + lane;\n#pragma unroll\n"
        << "        for (int j = 0; j < " << nch_ << "; ++j) {\n"
        << guard << "          const TG_C x = tg_src(a, i0 + 32 * j);\n"
        << "          v[u][j] = " << (anti ? "flip ? -x : x" : "x") << ";\n        }\n"
        << "      } else {\n#pragma unroll\n        for (int j = 0; j < " << nch_ << "; ++j) {\n"
        << guard << "          bool f = flip;\n"
        << "          const long long c3 = tg_res(k.g[3] + lane + 32 * j, a.n[3], f);\n";
    if (padded_) os_ << "          if (c3 < 0) { v[u][j] = " << pad_ << "; continue; }\n";
    os_ << "          const TG_C x = tg_src(a, row + c3);\n"
        << "          v[u][j] = " << (anti ? "f ? -x : x" : "x") << ";\n        }\n      }\n    }\n"
        << "#pragma unroll\n    for (int u = 0; u < " << ru_ << "; ++u) {\n"
        << "      const int r = r0 + 8 * u;\n      if (r >= " << R_ << ") break;\n"
        << "#pragma unroll\n      for (int j = 0; j < " << nch_ << "; ++j) {\n"
        << guard << "        tile[r * " << E3 << " + lane + 32 * j] = v[u][j];\n"
        << (skip_zeros_ ? "        bad |= !isfinite(v[u][j]);\n" : "")
        << "      }\n    }\n  }\n  return bad;\n}\n";
  }

  std::string weight(int64_t t) const {
    if (baked_) return lit(c_.weights[static_cast<size_t>(t)], C_);
    if (reg_weights_) return "w[" + std::to_string(t) + "]";
    return codegen_load(c_.dt, operand(c_.weights_operand), std::to_string(t));
  }

  // The taps, unrolled with constant offsets into the tile from x (zero weights left out when
  // `skip`). min / max / argmin / argmax keep the first extreme, a NaN winning.
  std::string taps(bool skip) const {
    std::ostringstream r;
    const char* better = (c_.red == Reduction::max || c_.red == Reduction::argmax) ? ">" : "<";
    int64_t t = 0;
    for (int64_t t0 = 0; t0 < c_.k[0]; ++t0)
      for (int64_t t1 = 0; t1 < c_.k[1]; ++t1)
        for (int64_t t2 = 0; t2 < c_.k[2]; ++t2)
          for (int64_t t3 = 0; t3 < c_.k[3]; ++t3, ++t) {
            const int64_t off =
                t0 * c_.d[0] * SE_[0] + t1 * c_.d[1] * SE_[1] + t2 * c_.d[2] * SE_[2] + t3 * c_.d[3];
            const std::string x = "x[" + std::to_string(off) + "]";
            const double w = baked_ ? c_.weights[static_cast<size_t>(t)] : 2.0;
            if (skip && w == 0) continue;
            // x * 1 and x * -1 are exact: the multiply is left out.
            const std::string v = w == 1 ? x : w == -1 ? "-" + x : x + " * " + weight(t);
            if (c_.red == Reduction::sum)
              r << "        acc " << (w == -1 ? "-= " + x : "+= " + v) << ";\n";
            else if (c_.red == Reduction::product)
              r << "        acc *= " << v << ";\n";
            else if (t == 0)
              r << "        TG_C acc = " << v << ";" << (arg_ ? " int best = 0;" : "") << "\n";
            else
              r << "        { const TG_C v = " << v << "; if (acc == acc && (v != v || v " << better
                << " acc)) { acc = v;" << (arg_ ? " best = " + std::to_string(t) + ";" : "") << " } }\n";
          }
    return r.str();
  }

  // The reduction over the window starting at x, into acc (and best).
  void reduction() {
    const bool minmax = c_.red != Reduction::sum && c_.red != Reduction::product;
    if (!minmax) os_ << "        TG_C acc = (TG_C)" << (c_.red == Reduction::sum ? "0" : "1") << ";\n";
    if (unrolled_ && skip_zeros_) {
      os_ << "        if (!bad) {\n" << taps(true) << "        } else {\n" << taps(false) << "        }\n";
    } else if (unrolled_) {
      os_ << taps(false);
    } else {
      const char* better = (c_.red == Reduction::max || c_.red == Reduction::argmax) ? ">" : "<";
      if (minmax) os_ << "        TG_C acc = (TG_C)0; int best = -1;\n";
      os_ << "        for (int t = 0; t < " << K_ << "; ++t) {\n"
          << "          const int t3 = t % " << c_.k[3] << ", t2 = (t / " << c_.k[3] << ") % " << c_.k[2]
          << ", t1 = (t / " << c_.k[3] * c_.k[2] << ") % " << c_.k[1] << ", t0 = t / "
          << c_.k[3] * c_.k[2] * c_.k[1] << ";\n"
          << "          const TG_C v = x[t0 * " << c_.d[0] * SE_[0] << " + t1 * " << c_.d[1] * SE_[1]
          << " + t2 * " << c_.d[2] * SE_[2] << " + t3 * " << c_.d[3] << "] * "
          << codegen_load(c_.dt, operand(c_.weights_operand), "t") << ";\n";
      if (c_.red == Reduction::sum)
        os_ << "          acc += v;\n";
      else if (c_.red == Reduction::product)
        os_ << "          acc *= v;\n";
      else
        os_ << "          if (best < 0 || (acc == acc && (v != v || v " << better
            << " acc))) { acc = v; best = t; }\n";
      os_ << "        }\n";
    }
  }

  // tg_compute: rows of the output tile go to warps, outputs of a row to lanes; the result is
  // rounded as the unfused stencil would store it, then the epilogue runs and outputs are stored.
  void compute() {
    const int64_t TR = c_.T[0] * c_.T[1] * c_.T[2], T3 = c_.T[3];
    os_ << "__device__ __forceinline__ void tg_compute(const StencilArgs& a, const TG_C* tile, const "
           "TgBlock& k, "
           "int tid, bool bad, const TG_C* w) {\n"
        << "  const int lane = tid & 31, warp = tid >> 5;\n"
        << "  for (int rr = warp; rr < " << TR << "; rr += 8) {\n"
        << "    const int a2 = rr % " << c_.T[2] << ", a1 = (rr / " << c_.T[2] << ") % " << c_.T[1]
        << ", a0 = rr / " << c_.T[1] * c_.T[2] << ";\n"
        << "    const long long p0 = k.q[0] + a0, p1 = k.q[1] + a1, p2 = k.q[2] + a2;\n"
        << "    if (p0 >= a.o[0] || p1 >= a.o[1] || p2 >= a.o[2]) continue;\n"
        << "    const TG_C* xr = tile + a0 * " << c_.s[0] * SE_[0] << " + a1 * " << c_.s[1] * SE_[1]
        << " + a2 * " << c_.s[2] * SE_[2] << ";\n"
        << "    const long long orow = k.b * a.ostride[0] + p0 * a.ostride[1] + p1 * a.ostride[2] + p2 * "
           "a.ostride[3];\n"
        << "#pragma unroll\n    for (int m = 0; m < " << (T3 + 31) / 32 << "; ++m) {\n"
        << "      const int cc = lane + 32 * m;\n"
        << (T3 % 32 ? "      if (cc >= " + std::to_string(T3) + ") break;\n" : "")
        << "      const long long p3 = k.q[3] + cc;\n      if (p3 >= a.o[3]) break;\n"
        << "      const TG_C* x = xr + cc * " << c_.s[3] << ";\n"
        << "      const long long oo = orow + p3;\n";
    reduction();
    const DType yt = arg_ ? DType::i32 : c_.dt;
    os_ << "        const " << codegen_compute_type(yt)
        << " yv = " << (arg_ ? std::string("(long long)best") : codegen_round_to(c_.dt, "acc")) << ";\n";
    std::unordered_map<int32_t, std::string> names{{gen_.epi_in, "yv"}};
    for (const auto& [v, op] : gen_.epi_ops) {
      names[v] = "q" + std::to_string(op.index);
      os_ << "        const " << codegen_compute_type(g_.type(v).dtype) << " " << names[v] << " = "
          << codegen_load(g_.type(v).dtype, operand(op.index), operand_offset(op, 1, "oo")) << ";\n";
    }
    os_ << elementwise_members(g_, st_.epilogue, names, "        ");
    for (size_t j = 0; j < st_.outputs.size(); ++j) {
      const int32_t v = st_.outputs[j];
      const DType t = v == gen_.epi_in ? yt : g_.type(v).dtype;
      os_ << "        ((" << codegen_storage_type(t) << "*)a.out[" << j
          << "])[oo] = " << codegen_store(t, names.at(v)) << ";\n";
    }
    os_ << "    }\n  }\n}\n";
  }

  void kernel() {
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << kThreads
        << ") tg_stencil(const StencilArgs a) {\n"
        << "  __shared__ TG_C tile[" << R_ * c_.E[3] << "];\n"
        << (reg_weights_ ? "  TG_C w[" + std::to_string(K_) + "];\n  tg_weights(a, w);\n"
                         : "  const TG_C* w = nullptr;\n")
        << "  const TgBlock k = tg_block(a, (long long)blockIdx.x);\n"
        << "  bool bad = tg_load(a, tile, k, (int)threadIdx.x);\n"
        << (skip_zeros_ ? "  bad = __syncthreads_or(bad);\n" : "  __syncthreads();\n")
        << "  tg_compute(a, tile, k, (int)threadIdx.x, bad, w);\n}\n";
  }

  // ---- The direct kernel (Config::direct) ----

  // One reduction step of accumulator acc (and best) over tap t reading x, in tap order.
  std::string step(const std::string& acc, const std::string& best, const std::string& x, int64_t t) const {
    const char* better = (c_.red == Reduction::max || c_.red == Reduction::argmax) ? ">" : "<";
    const double w = baked_ ? c_.weights[static_cast<size_t>(t)] : 2.0;
    const std::string v = w == 1 ? x : w == -1 ? "-" + x : x + " * " + weight(t);
    if (c_.red == Reduction::sum) return acc + (w == -1 ? " -= " + x : " += " + v) + ";";
    if (c_.red == Reduction::product) return acc + " *= " + v + ";";
    if (t == 0) return acc + " = " + v + ";" + (arg_ ? " " + best + " = 0;" : "");
    return "{ const TG_C v = " + v + "; if (" + acc + " == " + acc + " && (v != v || v " + better + " " + acc +
           ")) { " + acc + " = v;" + (arg_ ? " " + best + " = " + std::to_string(t) + ";" : "") + " } }";
  }

  static std::string name2(char c, int64_t r, int64_t v) {
    std::string s(1, c);
    s += std::to_string(r);
    s += '_';
    s += std::to_string(v);
    return s;
  }
  std::string acc(int64_t r, int64_t v) const { return name2('a', r, v); }
  std::string best(int64_t r, int64_t v) const { return name2('b', r, v); }

  void init_accs(bool declare) {
    const char* init = c_.red == Reduction::product ? "(TG_C)1" : "(TG_C)0";
    for (int64_t r = 0; r < c_.R; ++r)
      for (int64_t v = 0; v < c_.V; ++v) {
        os_ << "  " << (declare ? "TG_C " : "") << acc(r, v) << " = " << init << ";";
        if (arg_) os_ << " " << (declare ? "int " : "") << best(r, v) << " = 0;";
        os_ << "\n";
      }
  }

  // tg_src4: four consecutive source elements from 16-byte vector loads, the prologue applied.
  void src4() {
    os_ << "__device__ __forceinline__ void tg_src4(const StencilArgs& a, long long i, TG_C* x) {\n";
    if (st_.prologue.nodes.empty()) {
      os_ << "  const float4 s = *(const float4*)((const float*)" << operand(gen_.source_operand)
          << " + i);\n  x[0] = s.x; x[1] = s.y; x[2] = s.z; x[3] = s.w;\n}\n";
      return;
    }
    for (const auto& [v, op] : gen_.pro_ops) {
      const std::string n = "p" + std::to_string(op.index);
      if (op.access == Access::flat)
        os_ << "  const float4 " << n << " = *(const float4*)((const float*)" << operand(op.index) << " + i);\n";
      else
        os_ << "  const " << codegen_compute_type(g_.type(v).dtype) << " " << n << " = "
            << codegen_load(g_.type(v).dtype, operand(op.index), "0") << ";\n";
    }
    const char* lane[] = {".x", ".y", ".z", ".w"};
    for (int j = 0; j < 4; ++j) {
      std::unordered_map<int32_t, std::string> names;
      for (const auto& [v, op] : gen_.pro_ops)
        (names[v] = "p") += std::to_string(op.index) + (op.access == Access::flat ? lane[j] : "");
      os_ << "  {\n" << elementwise_members(g_, st_.prologue, names, "    ") << "    x[" << j
          << "] = " << names.at(gen_.pro_out) << ";\n  }\n";
    }
    os_ << "}\n";
  }

  // Every footprint row (f0, f1, f2) of the thread in order, loaded into xs (element e of the
  // row at xs[lo + e]) and reduced into the outputs whose windows cross it. Walking rows in
  // order visits each output's taps in the reference's order. `fast`: the footprint is inside
  // the source (no boundary logic); `skip`: zero taps of a sum left out, every value read summed
  // into zs so that a non-finite one is noticed.
  void direct_body(bool fast, bool skip) {
    const int64_t F3 = c_.F[3], sz = 4 * c_.nc;
    const bool anti = c_.bnd == Boundary::anti_periodic;
    for (int64_t f0 = 0; f0 < c_.F[0]; ++f0)
      for (int64_t f1 = 0; f1 < c_.F[1]; ++f1)
        for (int64_t f2 = 0; f2 < c_.F[2]; ++f2) {
          const int64_t f[3] = {f0, f1, f2};
          std::vector<std::pair<int64_t, int64_t>> hits;  // (output r, first tap index of the row)
          for (int64_t r = 0; r < c_.R; ++r) {
            int64_t t = 0;
            bool ok = true;
            for (int i = 0; i < 3 && ok; ++i) {
              const int64_t x = f[i] - (i == c_.sd ? r * c_.s[i] : 0);
              ok = x >= 0 && x % c_.d[i] == 0 && x / c_.d[i] < c_.k[i];
              t = t * c_.k[i] + (ok ? x / c_.d[i] : 0);
            }
            if (ok) hits.emplace_back(r, t * c_.k[3]);
          }
          if (hits.empty()) continue;
          std::vector<bool> used(static_cast<size_t>(F3), false);
          for (int64_t v = 0; v < c_.V; ++v)
            for (int64_t t3 = 0; t3 < c_.k[3]; ++t3) used[static_cast<size_t>(v * c_.s[3] + t3 * c_.d[3])] = true;
          os_ << "  {\n    TG_C xs[" << sz << "];\n";
          if (fast) {
            os_ << "    const long long row = rb";
            for (int i = 0; i < 3; ++i)
              if (f[i]) os_ << " + " << f[i] << "LL * a.sstride[" << i + 1 << "]";
            os_ << ";\n";
            std::ostringstream scalar;
            for (int64_t e = 0; e < F3; ++e)
              if (used[static_cast<size_t>(e)])
                scalar << "      xs[" << c_.lo + e << "] = tg_src(a, row + " << e << ");\n";
            if (c_.vin) {
              os_ << "    if (a.vec_in) {\n";
              for (int64_t ch = 0; ch < c_.nc; ++ch) {
                bool any = false;
                for (int64_t e = std::max<int64_t>(0, 4 * ch - c_.lo); e < std::min(F3, 4 * ch + 4 - c_.lo); ++e)
                  any |= used[static_cast<size_t>(e)];
                if (any) os_ << "      tg_src4(a, row + " << 4 * ch - c_.lo << ", xs + " << 4 * ch << ");\n";
              }
              os_ << "    } else {\n" << scalar.str() << "    }\n";
            } else {
              os_ << scalar.str();
            }
          } else {
            os_ << "    bool flip = false;\n";
            for (int i = 0; i < 3; ++i)
              os_ << "    const long long c" << i << " = tg_res(g" << i << " + " << f[i] << ", a.n[" << i
                  << "], flip);\n";
            os_ << "    const long long row = sb + c0 * a.sstride[1] + c1 * a.sstride[2] + c2 * a.sstride[3];\n";
            if (padded_) os_ << "    const bool out = c0 < 0 || c1 < 0 || c2 < 0;\n";
            for (int64_t e = 0; e < F3; ++e) {
              if (!used[static_cast<size_t>(e)]) continue;
              os_ << "    { bool fl = flip; const long long c3 = tg_res(g3 + " << e << ", a.n[3], fl); ";
              if (padded_)
                os_ << "xs[" << c_.lo + e << "] = out || c3 < 0 ? " << pad_ << " : tg_src(a, row + c3); }\n";
              else
                os_ << "const TG_C x = tg_src(a, row + c3); xs[" << c_.lo + e << "] = " << (anti ? "fl ? -x : x" : "x")
                    << "; }\n";
            }
          }
          if (skip)
            for (int64_t e = 0; e < F3; ++e)
              if (used[static_cast<size_t>(e)]) os_ << "    zs += xs[" << c_.lo + e << "];\n";
          for (const auto& [r, tb] : hits)
            for (int64_t t3 = 0; t3 < c_.k[3]; ++t3) {
              if (skip && c_.weights[static_cast<size_t>(tb + t3)] == 0) continue;
              for (int64_t v = 0; v < c_.V; ++v)
                os_ << "    "
                    << step(acc(r, v), best(r, v), "xs[" + std::to_string(c_.lo + v * c_.s[3] + t3 * c_.d[3]) + "]",
                            tb + t3)
                    << "\n";
            }
          os_ << "  }\n";
        }
  }

  // The outputs of the thread: rounded as the unfused stencil stores them, the epilogue
  // applied, stored (four at a time where aligned and whole).
  void direct_store() {
    const DType yt = arg_ ? DType::i32 : c_.dt;
    const int64_t V = c_.V;
    os_ << "  const long long ob = b * a.ostride[0];\n";
    for (int64_t r = 0; r < c_.R; ++r) {
      auto P = [&](int i) {
        std::string s = "p";
        s += std::to_string(i);
        if (i == c_.sd && r) s += " + " + std::to_string(r);
        return s;
      };
      os_ << "  if (" << P(static_cast<int>(c_.sd)) << " < a.o[" << c_.sd << "]) {\n"
          << "    const long long orow = ob + (" << P(0) << ") * a.ostride[1] + (" << P(1) << ") * a.ostride[2] + ("
          << P(2) << ") * a.ostride[3] + p3;\n";
      if (c_.vout)
        for (size_t j = 0; j < st_.outputs.size(); ++j) os_ << "    float st" << j << "[" << V << "];\n";
      for (int64_t v = 0; v < V; ++v) {
        os_ << "    if (p3 + " << v << " < a.o[3]) {\n      const long long oo = orow + " << v << ";\n      (void)oo;\n"
            << "      const " << codegen_compute_type(yt) << " yv = "
            << (arg_ ? "(long long)" + best(r, v) : codegen_round_to(c_.dt, acc(r, v))) << ";\n";
        std::unordered_map<int32_t, std::string> names{{gen_.epi_in, "yv"}};
        for (const auto& [val, op] : gen_.epi_ops) {
          (names[val] = "q") += std::to_string(op.index);
          os_ << "      const " << codegen_compute_type(g_.type(val).dtype) << " " << names[val] << " = "
              << codegen_load(g_.type(val).dtype, operand(op.index), operand_offset(op, 1, "oo")) << ";\n";
        }
        os_ << elementwise_members(g_, st_.epilogue, names, "      ");
        for (size_t j = 0; j < st_.outputs.size(); ++j) {
          const int32_t val = st_.outputs[j];
          const DType t = val == gen_.epi_in ? yt : g_.type(val).dtype;
          if (c_.vout)
            os_ << "      st" << j << "[" << v << "] = " << names.at(val) << ";\n";
          else
            os_ << "      ((" << codegen_storage_type(t) << "*)a.out[" << j << "])[oo] = " << codegen_store(t, names.at(val))
                << ";\n";
        }
        os_ << "    }\n";
      }
      if (c_.vout) {
        os_ << "    if (a.vec_out && p3 + " << V << " <= a.o[3]) {\n";
        for (size_t j = 0; j < st_.outputs.size(); ++j)
          for (int64_t ch = 0; ch < V / 4; ++ch)
            os_ << "      *(float4*)((float*)a.out[" << j << "] + orow + " << 4 * ch << ") = make_float4(st" << j << "["
                << 4 * ch << "], st" << j << "[" << 4 * ch + 1 << "], st" << j << "[" << 4 * ch + 2 << "], st" << j
                << "[" << 4 * ch + 3 << "]);\n";
        os_ << "    } else {\n";
        for (int64_t v = 0; v < V; ++v)
          for (size_t j = 0; j < st_.outputs.size(); ++j)
            os_ << "      if (p3 + " << v << " < a.o[3]) ((float*)a.out[" << j << "])[orow + " << v << "] = st" << j
                << "[" << v << "];\n";
        os_ << "    }\n";
      }
      os_ << "  }\n";
    }
  }

  void direct() {
    const int64_t TY = kThreads / c_.TX;
    if (c_.vin) src4();
    os_ << "#define TG_DIRECT 1\n"
        << "__device__ __forceinline__ void tg_direct(const StencilArgs& a, const TG_C* w, long long blk, int tid) "
           "{\n"
        << "  unsigned r = (unsigned)blk;\n  long long q[4];\n";
    for (int i = 3; i >= 0; --i)
      os_ << "  { const unsigned n = (unsigned)a.nt[" << i << "]; q[" << i << "] = (long long)(r % n) * " << c_.T[i]
          << "LL; r /= n; }\n";
    os_ << "  const long long b = r;\n"
        << "  const int tx = tid % " << c_.TX << ", ty = tid / " << c_.TX << ";\n";
    for (int i = 0; i < 4; ++i) {
      os_ << "  const long long p" << i << " = q[" << i << "]";
      if (i == 3) os_ << " + tx * " << c_.V << "LL";
      if (i == c_.bd && i != 3) os_ << " + ty * " << (c_.bd == c_.sd ? c_.R : 1) << "LL";
      os_ << ";\n";
    }
    os_ << "  if (p3 >= a.o[3] || p" << c_.bd << " >= a.o[" << c_.bd << "]) return;\n";
    (void)TY;
    for (int i = 0; i < 4; ++i)
      os_ << "  const long long g" << i << " = p" << i << " * " << c_.s[i] << "LL + a.base[" << i << "];\n";
    os_ << "  const long long sb = b * a.sstride[0];\n  const bool inner = true";
    for (int i = 0; i < 4; ++i) os_ << " && g" << i << " >= 0 && g" << i << " + " << c_.F[i] << " <= a.n[" << i << "]";
    os_ << ";\n";
    init_accs(true);
    os_ << "  if (inner) {\n" << (skip_zeros_ ? "  TG_C zs = (TG_C)0;\n" : "")
        << "  const long long rb = sb + g0 * a.sstride[1] + g1 * a.sstride[2] + g2 * a.sstride[3] + g3;\n";
    direct_body(true, skip_zeros_);
    if (skip_zeros_) {
      os_ << "  if (!isfinite(zs)) {\n";
      init_accs(false);
      direct_body(false, false);
      os_ << "  }\n";
    }
    os_ << "  } else {\n";
    direct_body(false, false);
    os_ << "  }\n";
    direct_store();
    os_ << "}\n"
        << "extern \"C\" __global__ void __launch_bounds__(" << kThreads
        << (c_.min_blocks ? ", " + std::to_string(c_.min_blocks) : "") << ") tg_stencil(const StencilArgs a) {\n"
        << (reg_weights_ ? "  TG_C w[" + std::to_string(K_) + "];\n  tg_weights(a, w);\n" : "  const TG_C* w = nullptr;\n")
        << "  tg_direct(a, w, (long long)blockIdx.x, (int)threadIdx.x);\n}\n";
  }

  const Generated& gen_;
  const Config& c_;
  const GraphImpl& g_;
  const StencilStitch& st_;
  const char* C_;
  const bool arg_, padded_;
  const int64_t K_;
  const bool baked_, reg_weights_, unrolled_;
  bool skip_zeros_ = false;
  const int64_t R_, nch_, ru_, SE_[4];
  const std::string pad_;
  std::ostringstream os_;
};

Dims or_fill(const Dims& v, size_t n, int64_t dflt) { return v.empty() ? Dims(n, dflt) : v; }

int index_of(const std::vector<int32_t>& v, int32_t x) {
  auto it = std::find(v.begin(), v.end(), x);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

// Access kind of operand type t in a group of shape gs, and its strides (broadcast) into a.
bool classify(const TensorType& t, const Shape& gs, int k, int side, StencilArgs& a, Access& acc) {
  const int64_t n = t.shape.num_elements(), gn = gs.num_elements();
  if (n == gn) {
    acc = Access::flat;
    return true;
  }
  if (n == 1) {
    acc = Access::scalar;
    return true;
  }
  const int64_t rank = gs.rank(), tr = t.shape.rank();
  if (rank > 8 || tr > rank) return false;
  acc = Access::broadcast;
  a.grank[side] = static_cast<int>(rank);
  long long stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    a.gdims[side][d] = gs[d];
    const int64_t sd = d - (rank - tr);
    const int64_t dim = sd >= 0 ? t.shape[sd] : 1;
    if (dim != 1 && dim != gs[d]) return false;
    a.gstride[side][k][d] = (dim == 1 && gs[d] != 1) || sd < 0 ? 0 : stride;
    stride *= dim;
  }
  return true;
}

}  // namespace

StencilStitch lone_stencil(const GraphImpl& g, int32_t node) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  StencilStitch s;
  s.stencil = node;
  s.inputs.push_back(n.inputs[0]);
  if (n.inputs[1] != n.inputs[0]) s.inputs.push_back(n.inputs[1]);
  s.outputs = {n.outputs[0]};
  return s;
}

std::optional<StencilKernelPlan> plan_stencil_kernel(const GraphImpl& g, const StencilStitch& s,
                                                     const std::vector<TensorType>& in) {
  if (in.size() != s.inputs.size() || s.inputs.size() > kStencilOperands ||
      s.outputs.size() > kStencilOperands || s.outputs.empty())
    return std::nullopt;
  const Node& sn = g.nodes[static_cast<size_t>(s.stencil)];
  // Concrete types of every value of the step, inferred piece by piece.
  std::unordered_map<int32_t, TensorType> types;
  for (size_t k = 0; k < in.size(); ++k) types[s.inputs[k]] = in[k];
  auto infer = [&](int32_t id) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    std::vector<TensorType> it;
    for (int32_t v : n.inputs) {
      auto f = types.find(v);
      if (f == types.end()) return false;
      it.push_back(f->second);
    }
    InferResult r = g.infer_with(n, it);
    if (!r.ok() || r.types.size() != n.outputs.size()) return false;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!r.types[i].shape.is_static()) return false;
      types[n.outputs[i]] = r.types[i];
    }
    return true;
  };
  for (const auto* ids : {&s.prologue.nodes, &s.source_views})
    for (int32_t id : *ids)
      if (!infer(id)) return std::nullopt;
  if (!infer(s.stencil)) return std::nullopt;
  for (const auto* ids : {&s.result_views, &s.epilogue.nodes})
    for (int32_t id : *ids)
      if (!infer(id)) return std::nullopt;
  for (int32_t v : s.outputs)
    if (!types.count(v)) return std::nullopt;

  const TensorType &src = types.at(sn.inputs[0]), &wt = types.at(sn.inputs[1]), &yt = types.at(sn.outputs[0]);
  Generated gen;
  gen.g = &g;
  gen.s = &s;
  Config& c = gen.c;
  c.dt = src.dtype;
  if (c.dt != DType::f32 && c.dt != DType::f64 && c.dt != DType::f16 && c.dt != DType::bf16)
    return std::nullopt;
  if (!src.shape.is_static() || src.shape.rank() < 4 || wt.shape.rank() != 4) return std::nullopt;
  const auto& d = std::get<StencilDesc>(sn.attr);
  c.red = d.reduction;
  c.bnd = d.boundary;
  c.pad_value = d.padding_constant;
  const Dims stride = or_fill(d.strides, 4, 1), dil = or_fill(d.dilation_rates, 4, 1);
  const Dims offs = or_fill(d.offsets, 4, 0), expl = or_fill(d.explicit_padding, 8, 0);
  const size_t lead = static_cast<size_t>(src.shape.rank()) - 4;
  StencilKernelPlan plan;
  StencilArgs& a = plan.args;
  int64_t batch = 1, taps = 1, o[4];
  for (size_t i = 0; i < lead; ++i) batch *= src.shape[static_cast<int64_t>(i)];
  for (int i = 0; i < 4; ++i) {
    const int64_t n = src.shape[static_cast<int64_t>(lead) + i];
    c.k[i] = wt.shape[i];
    c.s[i] = stride[static_cast<size_t>(i)];
    c.d[i] = dil[static_cast<size_t>(i)];
    o[i] = yt.shape[static_cast<int64_t>(lead) + i];
    if (c.k[i] < 1 || c.s[i] < 1 || c.d[i] < 1) return std::nullopt;
    taps *= c.k[i];
    const int64_t ke = (c.k[i] - 1) * c.d[i] + 1;
    const int64_t total = std::max<int64_t>((o[i] - 1) * c.s[i] + ke - n, 0);
    int64_t pad = 0;
    switch (d.padding_style) {
      case PaddingStyle::explicit_:
      case PaddingStyle::explicit_offset: pad = expl[2 * static_cast<size_t>(i)]; break;
      case PaddingStyle::same: pad = total / 2; break;
      case PaddingStyle::same_lower: pad = (total + 1) / 2; break;
      case PaddingStyle::valid: break;
    }
    a.n[i] = n;
    a.o[i] = o[i];
    a.base[i] = offs[static_cast<size_t>(i)] - pad;
  }
  if (taps > kMaxTaps) return std::nullopt;
  for (int32_t v : s.outputs) plan.output_types.push_back(types.at(v));
  const int64_t outputs = yt.shape.num_elements();
  if (outputs == 0) return plan;  // nothing to launch
  for (int i = 0; i < 4; ++i)
    if (a.n[i] == 0) return std::nullopt;  // every tap reads outside an empty source: the reference's rule
  // Strides: [0] one whole window block (the flattened leading dims), [1..4] dims 0..3.
  a.sstride[4] = a.ostride[4] = 1;
  for (int i = 3; i >= 0; --i) {
    a.sstride[i] = a.sstride[i + 1] * a.n[i];
    a.ostride[i] = a.ostride[i + 1] * a.o[i];
  }

  // Weights: compiled in when they are a finite constant of few taps.
  const int32_t wv = sn.inputs[1];
  const int32_t wnode = g.values[static_cast<size_t>(wv)].node;
  if (wnode >= 0 && g.nodes[static_cast<size_t>(wnode)].kind == OpKind::Constant && taps <= kUnrolledTaps) {
    const TensorData& wd = g.nodes[static_cast<size_t>(wnode)].data;
    if (wd.num_elements() == taps) {
      for (int64_t t = 0; t < taps; ++t) c.weights.push_back(wd.at(t));
      for (double w : c.weights)
        if (!std::isfinite(w)) c.weights.clear();
    }
  }
  c.weights_operand = index_of(s.inputs, wv);

  // Prologue and epilogue operands.
  bool broadcast = false;
  if (!s.prologue.nodes.empty()) {
    if (s.prologue.outputs.size() != 1 || !elementwise_supported(g, s.prologue)) return std::nullopt;
    gen.pro_out = s.prologue.outputs[0];
    const Shape& gs = types.at(gen.pro_out).shape;
    for (int32_t id : s.prologue.nodes)
      if (types.at(g.nodes[static_cast<size_t>(id)].outputs[0]).shape.num_elements() != gs.num_elements())
        return std::nullopt;
    for (int32_t v : s.prologue.inputs) {
      Operand op{index_of(s.inputs, v), Access::flat};
      if (op.index < 0 || !classify(types.at(v), gs, op.index, 0, a, op.access)) return std::nullopt;
      broadcast |= op.access == Access::broadcast;
      gen.pro_ops.emplace_back(v, op);
    }
  } else {
    gen.source_operand = index_of(s.inputs, sn.inputs[0]);
    if (gen.source_operand < 0) return std::nullopt;
  }
  gen.epi_in =
      s.result_views.empty() ? sn.outputs[0] : g.nodes[static_cast<size_t>(s.result_views.back())].outputs[0];
  if (!s.epilogue.nodes.empty()) {
    if (!elementwise_supported(g, s.epilogue)) return std::nullopt;
    const Shape& gs = types.at(g.nodes[static_cast<size_t>(s.epilogue.nodes.back())].outputs[0]).shape;
    if (gs.num_elements() != outputs) return std::nullopt;
    for (int32_t id : s.epilogue.nodes)
      if (types.at(g.nodes[static_cast<size_t>(id)].outputs[0]).shape.num_elements() != outputs)
        return std::nullopt;
    for (int32_t v : s.epilogue.inputs) {
      if (v == gen.epi_in) continue;
      Operand op{index_of(s.inputs, v), Access::flat};
      if (op.index < 0 || !classify(types.at(v), gs, op.index, 1, a, op.access)) return std::nullopt;
      broadcast |= op.access == Access::broadcast;
      gen.epi_ops.emplace_back(v, op);
    }
  } else if (s.outputs != std::vector<int32_t>{gen.epi_in}) {
    return std::nullopt;
  }
  for (int32_t v : s.outputs)
    if (v != gen.epi_in && index_of(s.epilogue.nodes, g.values[static_cast<size_t>(v)].node) < 0)
      return std::nullopt;
  gen.broadcast = broadcast;

  const int64_t elem = c.dt == DType::f64 ? 8 : 4;
  if (choose_direct(c, o, taps)) {
    // Vector loads: f32 rows of a multiple of 4 elements, chunks starting on a 16-byte boundary
    // (the thread's first output is a multiple of V); every operand of the prologue flat f32 or
    // a scalar. a.vec_in / a.vec_out are cleared at launch for operands that are not aligned.
    c.vin = c.dt == DType::f32 && a.n[3] % 4 == 0 && c.V % 4 == 0;
    if (s.prologue.nodes.empty()) {
      plan.vec_in_operands = {gen.source_operand};
    } else {
      for (const auto& [v, op] : gen.pro_ops) {
        if (op.access == Access::broadcast || (op.access == Access::flat && types.at(v).dtype != DType::f32))
          c.vin = false;
        if (op.access == Access::flat) plan.vec_in_operands.push_back(op.index);
      }
    }
    c.lo = c.vin ? ((a.base[3] % 4) + 4) % 4 : 0;
    c.nc = (c.lo + c.F[3] + 3) / 4;
    c.vout = c.V % 4 == 0 && a.o[3] % 4 == 0 && c.red != Reduction::argmin && c.red != Reduction::argmax;
    for (const TensorType& t : plan.output_types) c.vout = c.vout && t.dtype == DType::f32;
    a.vec_in = c.vin;
    a.vec_out = c.vout;
    if (!c.vin) plan.vec_in_operands.clear();
    plan.direct = true;
  } else if (!choose_tile(c, o, batch, elem)) {
    return std::nullopt;
  }
  double blocks = static_cast<double>(batch);
  for (int i = 0; i < 4; ++i) {
    a.nt[i] = (o[i] + c.T[i] - 1) / c.T[i];
    blocks *= static_cast<double>(a.nt[i]);
  }
  if (blocks > 2147483647.0) return std::nullopt;
  plan.blocks = static_cast<long long>(blocks);
  plan.source = Writer(gen).source();
  return plan;
}

namespace {

struct Prepared {
  CompiledKernel kernel;
  StencilKernelPlan plan;
};

}  // namespace

std::optional<StencilLaunch> prepare_stencil_stitch(const GraphImpl& g, const StencilStitch& s,
                                                    const std::vector<TensorType>& in, int device,
                                                    StencilStepCache* cache) {
  if (cache)
    for (const auto& [types, launch] : cache->entries)
      if (types == in) return launch;
  std::optional<StencilLaunch> l;
  if (std::optional<StencilKernelPlan> plan = plan_stencil_kernel(g, s, in)) {
    auto p = std::make_shared<Prepared>();
    if (plan->blocks > 0) p->kernel = nvrtc_kernel(plan->source, "tg_stencil", device);
    l = StencilLaunch{plan->output_types, nullptr};
    p->plan = std::move(*plan);
    l->kernel = p;
  }
  if (cache) {
    if (cache->entries.size() >= 16)
      cache->entries.erase(cache->entries.begin());  // many shapes: keep the latest
    cache->entries.emplace_back(in, l);
  }
  return l;
}

void launch_stencil_stitch(const StencilLaunch& l, const std::vector<const void*>& in,
                           const std::vector<void*>& out, cudaStream_t stream) {
  const auto& p = *static_cast<const Prepared*>(l.kernel.get());
  if (p.plan.blocks == 0) return;
  StencilArgs a = p.plan.args;
  for (size_t k = 0; k < in.size(); ++k) a.in[k] = in[k];
  for (size_t k = 0; k < out.size(); ++k) a.out[k] = out[k];
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  for (int k : p.plan.vec_in_operands) a.vec_in = a.vec_in && aligned(a.in[k]);
  for (size_t k = 0; k < out.size(); ++k) a.vec_out = a.vec_out && aligned(a.out[k]);
  void* params[] = {&a};
  TG_CUDA(cudaLaunchKernel(p.kernel.fn(), dim3(static_cast<unsigned>(p.plan.blocks)), dim3(kThreads), params,
                           0, stream));
}

bool cuda_stencil(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                  const std::vector<DevOut>& out, cudaStream_t stream, int device) {
  const int32_t id = static_cast<int32_t>(&n - g.nodes.data());
  StencilStitch s = lone_stencil(g, id);
  std::vector<TensorType> types;
  std::vector<const void*> ptrs;
  for (int32_t v : s.inputs) {
    const DevArg& d = in[static_cast<size_t>(index_of(n.inputs, v))];
    types.push_back(d.type);
    ptrs.push_back(d.ptr);
  }
  std::optional<StencilLaunch> l = prepare_stencil_stitch(g, s, types, device);
  if (!l || l->output_types.size() != 1 || !(l->output_types[0] == out[0].type)) return false;
  launch_stencil_stitch(*l, ptrs, {out[0].ptr}, stream);
  return true;
}

}  // namespace tg::detail
