// The shared-memory tile kernel of the stencil (cuda_stencil.h; the direct kernel's fallback):
// the choice of its output tile and its source, of four parts:
//   tg_block    which tile (and which index of the flattened leading dims) a block computes
//               (written with the shared helpers, stencil_codegen.cpp);
//   tg_load     the tile plus halo into shared memory, one row (innermost dim) per warp at a
//               time, the boundary mode resolved per row and per element, the prologue applied
//               to every real source element (padding values are the stencil's, unchanged);
//   tg_compute  every output of the tile from shared memory, the taps unrolled with constant
//               offsets, the epilogue applied before the store;
//   tg_stencil  the kernel calling them (a block-wide barrier between load and compute).
// Zero taps of a sum are skipped while the tile holds only finite values (0 * inf = NaN exact).
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/stencil_codegen.h"

namespace tg::detail::stencil_codegen {
namespace {

constexpr int64_t kSharedBytes = 48 * 1024;  // static shared memory of one block

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

}  // namespace

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

// tg_load: rows of the tile (every dim but the innermost) go to warps, elements of a row to
// lanes; `ru` rows are loaded before any is stored, so several loads are in flight per thread.
// Rows resolve their outer coordinates once; a row inside the source along the innermost dim
// (the block's common case) loads without per-element boundary work.
void Writer::load() {
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

// The taps, unrolled with constant offsets into the tile from x (zero weights left out when
// `skip`). min / max / argmin / argmax keep the first extreme, a NaN winning.
std::string Writer::taps(bool skip) const {
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
void Writer::reduction() {
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
void Writer::compute() {
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
  const std::unordered_map<int32_t, std::string> names = epilogue_values("        ");
  for (size_t j = 0; j < st_.outputs.size(); ++j) {
    const int32_t v = st_.outputs[j];
    const DType t = v == gen_.epi_in ? yt : g_.type(v).dtype;
    os_ << "        ((" << codegen_storage_type(t) << "*)a.out[" << j
        << "])[oo] = " << codegen_store(t, names.at(v)) << ";\n";
  }
  os_ << "    }\n  }\n}\n";
}

void Writer::kernel() {
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

}  // namespace tg::detail::stencil_codegen
