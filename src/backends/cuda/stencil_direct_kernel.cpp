// The register-blocked direct kernel of the stencil (Config::direct; cuda_stencil.h describes
// it): the choice of its shape (the measured defaults or TGRAPH_STENCIL_CONFIG) and its source:
// tg_src4 (16-byte vector loads, the prologue applied), tg_direct (each thread walks the rows of
// its input footprint once, accumulators in registers, on a path without boundary logic when the
// footprint lies inside the source), the stores (the epilogue applied, vector stores where
// aligned) and the kernel tg_stencil.
#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/stencil_codegen.h"
#include "core/env.h"

namespace tg::detail::stencil_codegen {

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
  if (const char* e = env_value("TGRAPH_STENCIL_CONFIG")) {
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

// One reduction step of accumulator acc (and best) over tap t reading x, in tap order.
std::string Writer::step(const std::string& acc, const std::string& best, const std::string& x,
                         int64_t t) const {
  const char* better = (c_.red == Reduction::max || c_.red == Reduction::argmax) ? ">" : "<";
  const double w = baked_ ? c_.weights[static_cast<size_t>(t)] : 2.0;
  const std::string v = w == 1 ? x : w == -1 ? "-" + x : x + " * " + weight(t);
  if (c_.red == Reduction::sum) return acc + (w == -1 ? " -= " + x : " += " + v) + ";";
  if (c_.red == Reduction::product) return acc + " *= " + v + ";";
  if (t == 0) return acc + " = " + v + ";" + (arg_ ? " " + best + " = 0;" : "");
  return "{ const TG_C v = " + v + "; if (" + acc + " == " + acc + " && (v != v || v " + better + " " + acc +
         ")) { " + acc + " = v;" + (arg_ ? " " + best + " = " + std::to_string(t) + ";" : "") + " } }";
}

std::string Writer::name2(char c, int64_t r, int64_t v) {
  std::string s(1, c);
  s += std::to_string(r);
  s += '_';
  s += std::to_string(v);
  return s;
}

std::string Writer::acc(int64_t r, int64_t v) const { return name2('a', r, v); }

std::string Writer::best(int64_t r, int64_t v) const { return name2('b', r, v); }

void Writer::init_accs(bool declare) {
  const char* init = c_.red == Reduction::product ? "(TG_C)1" : "(TG_C)0";
  for (int64_t r = 0; r < c_.R; ++r)
    for (int64_t v = 0; v < c_.V; ++v) {
      os_ << "  " << (declare ? "TG_C " : "") << acc(r, v) << " = " << init << ";";
      if (arg_) os_ << " " << (declare ? "int " : "") << best(r, v) << " = 0;";
      os_ << "\n";
    }
}

// tg_src4: four consecutive source elements from 16-byte vector loads, the prologue applied.
void Writer::src4() {
  os_ << "__device__ __forceinline__ void tg_src4(const StencilArgs& a, long long i, TG_C* x) {\n";
  if (st_.prologue.nodes.empty()) {
    os_ << "  const float4 s = *(const float4*)((const float*)" << operand(gen_.source_operand)
        << " + i);\n  x[0] = s.x; x[1] = s.y; x[2] = s.z; x[3] = s.w;\n}\n";
    return;
  }
  for (const auto& [v, op] : gen_.pro_ops) {
    const std::string n = "p" + std::to_string(op.index);
    if (op.access == Access::flat)
      os_ << "  const float4 " << n << " = *(const float4*)((const float*)" << operand(op.index)
          << " + i);\n";
    else
      os_ << "  const " << codegen_compute_type(g_.type(v).dtype) << " " << n << " = "
          << codegen_load(g_.type(v).dtype, operand(op.index), "0") << ";\n";
  }
  const char* lane[] = {".x", ".y", ".z", ".w"};
  for (int j = 0; j < 4; ++j) {
    std::unordered_map<int32_t, std::string> names;
    for (const auto& [v, op] : gen_.pro_ops)
      (names[v] = "p") += std::to_string(op.index) + (op.access == Access::flat ? lane[j] : "");
    os_ << "  {\n"
        << elementwise_members(g_, st_.prologue, names, "    ") << "    x[" << j
        << "] = " << names.at(gen_.pro_out) << ";\n  }\n";
  }
  os_ << "}\n";
}

// Every footprint row (f0, f1, f2) of the thread in order, loaded into xs (element e of the
// row at xs[lo + e]) and reduced into the outputs whose windows cross it. Walking rows in
// order visits each output's taps in the reference's order. `fast`: the footprint is inside
// the source (no boundary logic); `skip`: zero taps of a sum left out, every value read summed
// into zs so that a non-finite one is noticed.
void Writer::direct_body(bool fast, bool skip) {
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
          for (int64_t t3 = 0; t3 < c_.k[3]; ++t3)
            used[static_cast<size_t>(v * c_.s[3] + t3 * c_.d[3])] = true;
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
              for (int64_t e = std::max<int64_t>(0, 4 * ch - c_.lo); e < std::min(F3, 4 * ch + 4 - c_.lo);
                   ++e)
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
          os_ << "    const long long row = sb + c0 * a.sstride[1] + c1 * a.sstride[2] + c2 * "
                 "a.sstride[3];\n";
          if (padded_) os_ << "    const bool out = c0 < 0 || c1 < 0 || c2 < 0;\n";
          for (int64_t e = 0; e < F3; ++e) {
            if (!used[static_cast<size_t>(e)]) continue;
            os_ << "    { bool fl = flip; const long long c3 = tg_res(g3 + " << e << ", a.n[3], fl); ";
            if (padded_)
              os_ << "xs[" << c_.lo + e << "] = out || c3 < 0 ? " << pad_ << " : tg_src(a, row + c3); }\n";
            else
              os_ << "const TG_C x = tg_src(a, row + c3); xs[" << c_.lo + e
                  << "] = " << (anti ? "fl ? -x : x" : "x") << "; }\n";
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
                  << step(acc(r, v), best(r, v),
                          "xs[" + std::to_string(c_.lo + v * c_.s[3] + t3 * c_.d[3]) + "]", tb + t3)
                  << "\n";
          }
        os_ << "  }\n";
      }
}

// The outputs of the thread: rounded as the unfused stencil stores them, the epilogue
// applied, stored (four at a time where aligned and whole).
void Writer::direct_store() {
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
        << "    const long long orow = ob + (" << P(0) << ") * a.ostride[1] + (" << P(1)
        << ") * a.ostride[2] + (" << P(2) << ") * a.ostride[3] + p3;\n";
    if (c_.vout)
      for (size_t j = 0; j < st_.outputs.size(); ++j) os_ << "    float st" << j << "[" << V << "];\n";
    for (int64_t v = 0; v < V; ++v) {
      os_ << "    if (p3 + " << v << " < a.o[3]) {\n      const long long oo = orow + " << v
          << ";\n      (void)oo;\n"
          << "      const " << codegen_compute_type(yt)
          << " yv = " << (arg_ ? "(long long)" + best(r, v) : codegen_round_to(c_.dt, acc(r, v))) << ";\n";
      const std::unordered_map<int32_t, std::string> names = epilogue_values("      ");
      for (size_t j = 0; j < st_.outputs.size(); ++j) {
        const int32_t val = st_.outputs[j];
        const DType t = val == gen_.epi_in ? yt : g_.type(val).dtype;
        if (c_.vout)
          os_ << "      st" << j << "[" << v << "] = " << names.at(val) << ";\n";
        else
          os_ << "      ((" << codegen_storage_type(t) << "*)a.out[" << j
              << "])[oo] = " << codegen_store(t, names.at(val)) << ";\n";
      }
      os_ << "    }\n";
    }
    if (c_.vout) {
      os_ << "    if (a.vec_out && p3 + " << V << " <= a.o[3]) {\n";
      for (size_t j = 0; j < st_.outputs.size(); ++j)
        for (int64_t ch = 0; ch < V / 4; ++ch)
          os_ << "      *(float4*)((float*)a.out[" << j << "] + orow + " << 4 * ch << ") = make_float4(st"
              << j << "[" << 4 * ch << "], st" << j << "[" << 4 * ch + 1 << "], st" << j << "[" << 4 * ch + 2
              << "], st" << j << "[" << 4 * ch + 3 << "]);\n";
      os_ << "    } else {\n";
      for (int64_t v = 0; v < V; ++v)
        for (size_t j = 0; j < st_.outputs.size(); ++j)
          os_ << "      if (p3 + " << v << " < a.o[3]) ((float*)a.out[" << j << "])[orow + " << v << "] = st"
              << j << "[" << v << "];\n";
      os_ << "    }\n";
    }
    os_ << "  }\n";
  }
}

void Writer::direct() {
  const int64_t TY = kThreads / c_.TX;
  if (c_.vin) src4();
  os_ << "#define TG_DIRECT 1\n"
      << "__device__ __forceinline__ void tg_direct(const StencilArgs& a, const TG_C* w, long long blk, int "
         "tid) "
         "{\n"
      << "  unsigned r = (unsigned)blk;\n  long long q[4];\n";
  for (int i = 3; i >= 0; --i)
    os_ << "  { const unsigned n = (unsigned)a.nt[" << i << "]; q[" << i << "] = (long long)(r % n) * "
        << c_.T[i] << "LL; r /= n; }\n";
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
  for (int i = 0; i < 4; ++i)
    os_ << " && g" << i << " >= 0 && g" << i << " + " << c_.F[i] << " <= a.n[" << i << "]";
  os_ << ";\n";
  init_accs(true);
  os_ << "  if (inner) {\n"
      << (skip_zeros_ ? "  TG_C zs = (TG_C)0;\n" : "")
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
      << (c_.min_blocks ? ", " + std::to_string(c_.min_blocks) : "")
      << ") tg_stencil(const StencilArgs a) {\n"
      << (reg_weights_ ? "  TG_C w[" + std::to_string(K_) + "];\n  tg_weights(a, w);\n"
                       : "  const TG_C* w = nullptr;\n")
      << "  tg_direct(a, w, (long long)blockIdx.x, (int)threadIdx.x);\n}\n";
}

}  // namespace tg::detail::stencil_codegen
