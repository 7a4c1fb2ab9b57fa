// The parts of the stencil kernels' source that both kernels share (stencil_codegen.h):
// literals, the boundary function tg_res, operand offsets, and the Writer's prelude (StencilArgs,
// tg_boff, tg_block, tg_src with the prologue applied, tg_weights), after which source() hands
// over to the tile kernel (stencil_tile_kernel.cpp) or the direct one (stencil_direct_kernel.cpp).
#include "backends/cuda/stencil_codegen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "backends/cuda/elementwise_codegen.h"

namespace tg::detail::stencil_codegen {

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

Writer::Writer(const Generated& gen)
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

std::string Writer::source() {
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

// tg_boff (broadcast operands), tg_block (block -> tile origin in output (q) and source (g)
// coordinates), tg_src (one source element, the prologue applied), tg_weights (registers).
void Writer::helpers() {
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

std::string Writer::weight(int64_t t) const {
  if (baked_) return lit(c_.weights[static_cast<size_t>(t)], C_);
  if (reg_weights_) return "w[" + std::to_string(t) + "]";
  return codegen_load(c_.dt, operand(c_.weights_operand), std::to_string(t));
}

// The epilogue at output offset `oo`, the stencil's value being `yv`: its other operands loaded,
// its members computed; each value's name (both kernels' stores read them).
std::unordered_map<int32_t, std::string> Writer::epilogue_values(const std::string& indent) {
  std::unordered_map<int32_t, std::string> names{{gen_.epi_in, "yv"}};
  for (const auto& [v, op] : gen_.epi_ops) {
    names[v] = "q" + std::to_string(op.index);
    os_ << indent << "const " << codegen_compute_type(g_.type(v).dtype) << " " << names[v] << " = "
        << codegen_load(g_.type(v).dtype, operand(op.index), operand_offset(op, 1, "oo")) << ";\n";
  }
  os_ << elementwise_members(g_, st_.epilogue, names, indent);
  return names;
}

}  // namespace tg::detail::stencil_codegen
