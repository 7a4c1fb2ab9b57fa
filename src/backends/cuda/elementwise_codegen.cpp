#include "backends/cuda/elementwise_codegen.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <sstream>
#include <unordered_map>

#include "core/env.h"
#include "core/float8.h"
#include "ops/elementwise_formulas.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

// The type values of a dtype are computed in inside the kernel.
const char* compute_type(DType t) {
  switch (t) {
    case DType::f16: case DType::bf16: case DType::f32: case DType::f8e4m3: case DType::f8e5m2: return "float";
    case DType::f64: return "double";
    case DType::boolean: return "bool";
    default: return "long long";
  }
}

const char* storage_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::f16: return "__half";
    case DType::bf16: return "__nv_bfloat16";
    case DType::i8: return "signed char";
    case DType::i16: return "short";
    case DType::i32: return "int";
    case DType::i64: return "long long";
    case DType::u8: case DType::boolean: case DType::f8e4m3: case DType::f8e5m2: return "unsigned char";
  }
  return "?";
}

// The format arguments of the prelude's 8-bit float conversions, from core/float8.h's formats.
std::string float8_args(DType t, bool to) {
  const Float8Format& f = float8_format(t);
  return ", " + std::to_string(f.mant) + ", " + std::to_string(f.bias) + ", " +
         (to ? std::to_string(f.max) + "f)" : std::string(f.has_inf ? "true)" : "false)"));
}

// Expression converting stored value p of dtype t to its compute type.
std::string from_storage(DType t, const std::string& p) {
  switch (t) {
    case DType::f16: return "__half2float(" + p + ")";
    case DType::bf16: return "__bfloat162float(" + p + ")";
    case DType::f8e4m3: case DType::f8e5m2: return "tg_f8_to_f(" + p + float8_args(t, false);
    case DType::boolean: return "(" + p + " != 0)";
    case DType::f32: case DType::f64: return p;
    default: return "(long long)" + p;
  }
}

std::string load(DType t, const std::string& ptr, const std::string& off) {
  return from_storage(t, "((const " + std::string(storage_type(t)) + "*)" + ptr + ")[" + off + "]");
}

std::string store(DType t, const std::string& v) {
  switch (t) {
    case DType::f16: return "__float2half_rn(" + v + ")";
    case DType::bf16: return "__float2bfloat16_rn(" + v + ")";
    case DType::f8e4m3: case DType::f8e5m2: return "tg_f_to_f8(" + v + float8_args(t, true);
    case DType::boolean: return "(unsigned char)(" + v + " ? 1 : 0)";
    default: return "(" + std::string(storage_type(t)) + ")(" + v + ")";
  }
}

// A value computed in a wider type, rounded (or wrapped) to its dtype, so an intermediate
// inside a fused kernel holds exactly what the unfused op would have stored.
std::string round_to(DType t, const std::string& e) {
  switch (t) {
    case DType::f16: return "__half2float(__float2half_rn(" + e + "))";
    case DType::bf16: return "__bfloat162float(__float2bfloat16_rn(" + e + "))";
    case DType::f8e4m3: case DType::f8e5m2: return from_storage(t, store(t, e));
    case DType::i8: case DType::i16: case DType::i32: case DType::u8:
      return "(long long)(" + std::string(storage_type(t)) + ")(" + e + ")";
    default: return e;
  }
}

// Bounds for float -> integer casts (truncate and saturate; NaN -> 0).
std::string int_bounds(DType t) {
  switch (t) {
    case DType::i8: return "-128.0, 127.0";
    case DType::i16: return "-32768.0, 32767.0";
    case DType::i32: return "-2147483648.0, 2147483647.0";
    case DType::u8: return "0.0, 255.0";
    default: return "-9223372036854775808.0, 9223372036854775807.0";
  }
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// The float formulas' text (ops/elementwise_formulas.h), as the compiler spelled it.
struct FormulaText {
  OpKind kind;
  const char* text;
};
#define TG_TEXT(kind, expr) FormulaText{OpKind::kind, #expr},
constexpr FormulaText kUnaryText[] = {TG_UNARY_FLOAT_FORMULAS(TG_TEXT)};
constexpr FormulaText kBinaryText[] = {TG_BINARY_FLOAT_FORMULAS(TG_TEXT)};
#undef TG_TEXT

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// `text` with each whole identifier found in `with` replaced (numbers, 1e-5 included, kept).
std::string substitute(const char* text, const std::unordered_map<std::string, std::string>& with) {
  std::string out;
  for (const char* p = text; *p;) {
    if (!ident_char(*p)) {
      out += *p++;
      continue;
    }
    const char* q = p;
    const bool number = std::isdigit(static_cast<unsigned char>(*p));
    while (*q && (ident_char(*q) || (number && (*q == '.' || ((*q == '-' || *q == '+') && (q[-1] == 'e' || q[-1] == 'E'))))))
      ++q;
    const std::string tok(p, q);
    const auto it = number ? with.end() : with.find(tok);
    out += it == with.end() ? tok : it->second;
    p = q;
  }
  return out;
}

// Float op n written from its formula in compute type T with operands x; "" when not a
// formula op.
std::string formula_expression(const Node& n, const std::vector<std::string>& x, const std::string& T) {
  const ScalarDesc* d = std::get_if<ScalarDesc>(&n.attr);
  std::unordered_map<std::string, std::string> with{{"T", T}};
  if (d) {
    with["a"] = num(d->alpha);
    with["b"] = num(d->beta);
  }
  for (const FormulaText& f : kUnaryText)
    if (f.kind == n.kind && x.size() == 1) {
      with["x"] = "(" + x[0] + ")";
      return "(" + T + ")(" + substitute(f.text, with) + ")";
    }
  for (const FormulaText& f : kBinaryText)
    if (f.kind == n.kind && x.size() == 2) {
      with["x"] = "(" + x[0] + ")";
      with["y"] = "(" + x[1] + ")";
      return "(" + T + ")(" + substitute(f.text, with) + ")";
    }
  return "";
}

// The expression computing node n from its operand names a, b, c; "" when unsupported.
std::string expression(const GraphImpl& g, const Node& n, const std::vector<std::string>& x) {
  const DType in = g.type(n.inputs[0]).dtype;
  const DType out = g.type(n.outputs[0]).dtype;
  const std::string T = compute_type(out);
  const bool fl = is_float(in) || is_float8(in);  // 8-bit floats compute as float
  auto a = x.size() > 0 ? x[0] : "", b = x.size() > 1 ? x[1] : "", c = x.size() > 2 ? x[2] : "";
  auto f = [&](const char* fn) { return std::string(fn) + "(" + a + ")"; };
  if (fl && n.kind != OpKind::Cast) {
    if (std::string e = formula_expression(n, x, T); !e.empty()) return e;
  }
  // Integer and boolean operands, and the ops that are not formulas.
  switch (n.kind) {
    case OpKind::Identity: case OpKind::StopGradient: case OpKind::BroadcastTo: case OpKind::BroadcastLike:
      return a;
    case OpKind::Neg: return "(" + T + ")(-" + a + ")";
    case OpKind::Abs: return "(" + a + " < 0 ? -" + a + " : " + a + ")";
    case OpKind::Sign: return "tg_sign(" + a + ")";
    case OpKind::Square: return "(" + a + " * " + a + ")";
    case OpKind::Relu: return "(" + a + " < (" + T + ")0 ? (" + T + ")0 : " + a + ")";
    case OpKind::LogicalNot: return "(!" + a + ")";
    case OpKind::BitwiseNot: return in == DType::boolean ? "(!" + a + ")" : "(~" + a + ")";
    case OpKind::IsNan: return f("isnan");
    case OpKind::IsInf: return f("isinf");
    case OpKind::IsFinite: return f("isfinite");
    case OpKind::Cast:
      if (out == DType::boolean) return "(" + a + " != 0)";
      if (fl && !is_float(out) && !is_float8(out)) return "tg_f2i((double)" + a + ", " + int_bounds(out) + ")";
      return "(" + T + ")(" + a + ")";
    case OpKind::Add: return "(" + T + ")(" + a + " + " + b + ")";
    case OpKind::Sub: return "(" + T + ")(" + a + " - " + b + ")";
    case OpKind::Mul: return "(" + T + ")(" + a + " * " + b + ")";
    case OpKind::Div: return "tg_idiv(" + a + ", " + b + ")";
    case OpKind::DivNoNan: return "(" + b + " == 0 ? (" + T + ")0 : (" + T + ")tg_idiv(" + a + ", " + b + "))";
    case OpKind::Mod: return "tg_imod(" + a + ", " + b + ")";
    case OpKind::FloorMod: return "tg_ifloormod(" + a + ", " + b + ")";
    case OpKind::Pow: return "(" + T + ")tg_ipow((long long)" + a + ", (long long)" + b + ")";
    case OpKind::Minimum: return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
    case OpKind::Maximum: return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
    case OpKind::MinimumNan: return "(" + a + " < " + b + " ? " + a + " : " + b + ")";
    case OpKind::MaximumNan: return "(" + a + " > " + b + " ? " + a + " : " + b + ")";
    case OpKind::Equal: return "(" + a + " == " + b + ")";
    case OpKind::NotEqual: return "(" + a + " != " + b + ")";
    case OpKind::Less: return "(" + a + " < " + b + ")";
    case OpKind::LessEqual: return "(" + a + " <= " + b + ")";
    case OpKind::Greater: return "(" + a + " > " + b + ")";
    case OpKind::GreaterEqual: return "(" + a + " >= " + b + ")";
    case OpKind::LogicalAnd: return "(" + a + " && " + b + ")";
    case OpKind::LogicalOr: return "(" + a + " || " + b + ")";
    case OpKind::LogicalXor: return "(" + a + " != " + b + ")";
    case OpKind::BitwiseAnd: return in == DType::boolean ? "(" + a + " && " + b + ")" : "(" + a + " & " + b + ")";
    case OpKind::BitwiseOr: return in == DType::boolean ? "(" + a + " || " + b + ")" : "(" + a + " | " + b + ")";
    case OpKind::BitwiseXor: return in == DType::boolean ? "(" + a + " != " + b + ")" : "(" + a + " ^ " + b + ")";
    case OpKind::ShiftLeft: case OpKind::ShiftRight: {
      // Shifts by a negative amount or the dtype's width or more give 0 (right: the sign).
      const int width = in == DType::boolean ? 1 : static_cast<int>(dtype_size(in)) * 8;
      return std::string(n.kind == OpKind::ShiftLeft ? "tg_shl(" : "tg_shr(") + "(long long)" + a + ", (long long)" +
             b + ", " + std::to_string(width) + ")";
    }
    case OpKind::Select: return "(" + a + " ? " + b + " : " + c + ")";
    case OpKind::Clamp:
      return fl ? "(isnan(" + a + ") ? " + a + " : fmin(fmax(" + a + ", " + b + "), " + c + "))"
                : "tg_iclamp(" + a + ", " + b + ", " + c + ")";
    default: return "";
  }
}

const char* kPrelude = R"(
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __forceinline__ long long tg_f2i(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return (long long)lo;
  if (v >= hi) return hi >= 9.2e18 ? 9223372036854775807LL : (long long)hi;
  return (long long)v;
}
// The OCP 8-bit floats, as core/float8.h converts them on the host (the same steps, so the CPU
// and the GPU agree bit for bit): E4M3FN (mant 3, bias 7, S.1111.111 NaN) and E5M2 (mant 2,
// bias 15, IEEE-like); to them: nearest even, saturated to the largest finite, NaN 0x7f.
__device__ __forceinline__ float tg_f8_to_f(unsigned char b, int mant, int bias, bool has_inf) {
  const int mag = b & 0x7f, e = mag >> mant, m = mag & ((1 << mant) - 1);
  float v;
  if (has_inf ? e == (1 << (7 - mant)) - 1 : mag == 0x7f) v = (has_inf && m == 0) ? __int_as_float(0x7f800000) : __int_as_float(0x7fc00000);
  else if (e == 0) v = ldexpf((float)m, 1 - bias - mant);
  else v = ldexpf((float)((1 << mant) | m), e - bias - mant);
  return (b & 0x80) ? -v : v;
}
__device__ __forceinline__ unsigned char tg_f_to_f8(float x, int mant, int bias, float maxv) {
  const int sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return (unsigned char)(sign | 0x7f);
  const float a = fminf(fabsf(x), maxv);
  int exp = 0;
  frexpf(a, &exp);
  const int e = exp - 1 < 1 - bias ? 1 - bias : exp - 1;
  int m = (int)rintf(ldexpf(a, mant - e)), eb = e + bias;
  if (m >= (2 << mant)) m >>= 1, ++eb;
  if (m < (1 << mant)) eb = 0;
  return (unsigned char)(sign | (eb << mant) | (m & ((1 << mant) - 1)));
}
__device__ __forceinline__ long long tg_idiv(long long a, long long b) {
  if (b == 0) return 0;
  if (b == -1) return (long long)(0ULL - (unsigned long long)a);
  return a / b;
}
__device__ __forceinline__ long long tg_imod(long long a, long long b) { return (b == 0 || b == -1) ? 0 : a % b; }
__device__ __forceinline__ long long tg_ifloormod(long long a, long long b) {
  if (b == 0 || b == -1) return 0;
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ long long tg_shl(long long a, long long b, int w) {
  return (b < 0 || b >= w) ? 0 : (long long)((unsigned long long)a << b);
}
__device__ __forceinline__ long long tg_shr(long long a, long long b, int w) {
  return (b < 0 || b >= w) ? (a < 0 ? -1 : 0) : (a >> b);
}
// Integer a**b as the reference: by squaring with wrap-around; a negative exponent truncates
// 1/a**|b| toward zero.
__device__ __forceinline__ long long tg_ipow(long long a, long long b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  unsigned long long r = 1, x = (unsigned long long)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (long long)r;
}
__device__ __forceinline__ long long tg_iclamp(long long x, long long lo, long long hi) {
  long long m = x > lo ? x : lo;
  return m < hi ? m : hi;
}
)";

}  // namespace

// The formulas' helpers (ops/elementwise_formulas.h) compiled for the device.
#define TG_FN __device__ __forceinline__
#define TG_STRING(...) #__VA_ARGS__
#define TG_EXPANDED_STRING(...) TG_STRING(__VA_ARGS__)
static const char* const kFormulaHelpers = TG_EXPANDED_STRING(TG_FORMULA_HELPERS);
#undef TG_EXPANDED_STRING
#undef TG_STRING
#undef TG_FN

std::string elementwise_prelude() { return std::string(kPrelude) + kFormulaHelpers + "\n"; }
const char* codegen_compute_type(DType t) { return compute_type(t); }
const char* codegen_storage_type(DType t) { return storage_type(t); }
std::string codegen_load(DType t, const std::string& ptr, const std::string& off) {
  return load(t, ptr, off);
}
std::string codegen_store(DType t, const std::string& v) { return store(t, v); }
std::string codegen_from_storage(DType t, const std::string& p) { return from_storage(t, p); }
std::string codegen_round_to(DType t, const std::string& e) { return round_to(t, e); }

bool round_half_ops() { return env_flag("TGRAPH_ROUND_HALF_OPS"); }

std::string elementwise_members(const GraphImpl& g, const FusionGroup& group,
                                std::unordered_map<int32_t, std::string>& names, const std::string& indent) {
  std::ostringstream os;
  for (int32_t id : group.nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    std::vector<std::string> xs;
    for (int32_t v : n.inputs) xs.push_back(names.at(v));
    std::string e = expression(g, n, xs);
    if (e.empty()) throw Error(std::string("[cuda] no generated kernel for op ") + op_name(n.kind));
    int32_t v = n.outputs[0];
    // Named by position, not by graph value id: structurally equal kernels (every bottleneck
    // block's batch norm) then have equal sources, which compile once (the cache's key is the
    // source). Ids in the names made ResNet-50's step compile 321 sources for 38 distinct
    // kernels. A group emitted again into the same map keeps its names (another scope).
    auto known = names.find(v);
    std::string nm = known != names.end() && known->second[0] == 'w'
                         ? known->second
                         : "w" + std::to_string(std::count_if(names.begin(), names.end(),
                                                              [](const auto& e) { return e.second[0] == 'w'; }));
    // f16 / bf16 intermediates stay in float between the ops of a kernel (excess precision,
    // as XLA and inductor compute fused half-precision chains): each is rounded where it is
    // stored, and at an explicit cast. Rounding after every op made a batch norm + ReLU
    // kernel of an autocast graph bound by conversions, at half the bandwidth of the same
    // kernel on f32 operands (docs/decisions.md). TGRAPH_ROUND_HALF_OPS=1 rounds every op.
    const DType t = g.type(v).dtype;
    const bool excess = (t == DType::f16 || t == DType::bf16) && n.kind != OpKind::Cast && !round_half_ops();
    os << indent << "const " << compute_type(t) << " " << nm << " = " << (excess ? e : round_to(t, e)) << ";\n";
    names[v] = nm;
  }
  return os.str();
}

bool elementwise_supported(const GraphImpl& g, const FusionGroup& group) {
  for (int32_t id : group.nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    std::vector<std::string> names(n.inputs.size(), "a");
    if (expression(g, n, names).empty()) return false;
  }
  return group.inputs.size() <= static_cast<size_t>(kMaxOperands) &&
         group.outputs.size() <= static_cast<size_t>(kMaxOperands);
}

void coalesce_dims(ElementwiseArgs& a, int inputs) {
  int r = 0;
  for (int d = 0; d < a.rank; ++d) {
    if (a.dims[d] == 1) continue;
    bool merge = r > 0;
    for (int k = 0; k < inputs && merge; ++k) merge = a.strides[k][r - 1] == a.strides[k][d] * a.dims[d];
    if (merge) {
      a.dims[r - 1] *= a.dims[d];
      for (int k = 0; k < inputs; ++k) a.strides[k][r - 1] = a.strides[k][d];
      continue;
    }
    a.dims[r] = a.dims[d];
    for (int k = 0; k < inputs; ++k) a.strides[k][r] = a.strides[k][d];
    ++r;
  }
  if (r == 0) {
    a.dims[0] = 1;
    for (int k = 0; k < inputs; ++k) a.strides[k][0] = 0;
    r = 1;
  }
  a.rank = r;
}

StridePattern StridePattern::of(const ElementwiseArgs& a, int inputs) {
  StridePattern p;
  p.rank = a.rank;
  for (int k = 0; k < inputs; ++k) {
    bool flat = true;
    uint32_t moves = 0;
    long long contiguous = 1;
    for (int d = a.rank - 1; d >= 0; --d) {
      if (a.strides[k][d] != 0) moves |= 1u << d;
      flat &= a.dims[d] == 1 || a.strides[k][d] == contiguous;
      contiguous *= a.dims[d];
    }
    p.flat.push_back(flat);
    p.moves_along.push_back(moves);
  }
  return p;
}

StridePattern StridePattern::general(int rank, int inputs) {
  StridePattern p;
  p.rank = rank;
  p.flat.assign(static_cast<size_t>(inputs), false);
  p.moves_along.assign(static_cast<size_t>(inputs), (1u << rank) - 1);
  return p;
}

std::string StridePattern::key() const {
  std::string k = std::to_string(rank);
  for (size_t i = 0; i < flat.size(); ++i) k += flat[i] ? ",f" : "," + std::to_string(moves_along[i]);
  if (hoist_inner) k += ",h";
  return k;
}

namespace {

// Statements computing o<k>, input k's element offset for output index i (a strided kernel;
// a flat one reads every input at i): the coordinates of i once (innermost first, straight-line,
// unused ones fall away), each input's offset from the coordinates of the dims it moves along.
void offset_code(std::ostringstream& os, Indexing ix, const StridePattern& pattern, size_t ins, const char* indent) {
  const bool i32 = ix == Indexing::strided32;
  const char* t = i32 ? "unsigned" : "long long";
  os << indent << t << " o0 = 0";
  for (size_t k = 1; k < ins; ++k) os << ", o" << k << " = 0";
  os << ";\n" << indent << "{ " << t << " r = (" << t << ")i;\n";
  for (int d = pattern.rank - 1; d > 0; --d) {
    const std::string D = std::to_string(d);
    if (i32)
      os << indent << "  const unsigned q" << D << " = (__umulhi(r, a.div_mul[" << D << "]) + r) >> a.div_shift[" << D
         << "], c" << D << " = r - q" << D << " * (unsigned)a.dims[" << D << "]; r = q" << D << ";\n";
    else
      os << indent << "  const long long q" << D << " = r / a.dims[" << D << "], c" << D << " = r - q" << D
         << " * a.dims[" << D << "]; r = q" << D << ";\n";
  }
  os << indent << "  const " << t << " c0 = r; (void)c0;\n";
  for (size_t k = 0; k < ins; ++k) {
    if (pattern.flat[k]) {
      os << indent << "  o" << k << " = (" << t << ")i;\n";
      continue;
    }
    for (int d = 0; d < pattern.rank; ++d)
      if (pattern.moves_along[k] >> d & 1u)
        os << indent << "  o" << k << " += c" << d << " * (" << t << ")a.strides[" << k << "][" << d << "];\n";
  }
  os << indent << "}\n";
}

void check_pattern(Indexing ix, const StridePattern* pattern, size_t ins) {
  if (ix != Indexing::flat && ins > 0 &&
      (!pattern || pattern->rank < 1 || pattern->flat.size() != ins || pattern->moves_along.size() != ins))
    throw Error("[cuda] a strided elementwise kernel needs the stride pattern of its " + std::to_string(ins) +
                " inputs");
}

// The kernel that computes `vec` neighbouring outputs per thread (elementwise_vector_width):
// one offset computation and one vector load per input for all of them, vector stores. An input
// that does not move along the innermost dim is read once, as a scalar.
std::string vector_source(const GraphImpl& g, const FusionGroup& group, Indexing ix, const StridePattern* pattern,
                          int vec) {
  const size_t ins = group.inputs.size();
  check_pattern(ix, pattern, ins);
  std::ostringstream os;
  os << "template <class T, int V> struct alignas(sizeof(T) * V) tg_pack { T v[V]; };\n";
  const int inner = pattern ? pattern->rank - 1 : 0;
  // Inputs at the same offset in every step of a thread (StridePattern::hoist_inner), loaded
  // once before the loop: batch norm's four per-channel f32 operands were 128 bytes of cached
  // loads a thread for every 16 bytes of the activation it read (3.0 TB/s against 4.1 for the
  // kernels without them).
  std::vector<bool> hoisted(ins, false);
  if (ix != Indexing::flat && pattern->hoist_inner && pattern->rank >= 2)
    for (size_t k = 0; k < ins; ++k) hoisted[k] = !pattern->flat[k] && pattern->moves_along[k] == 1u << inner;
  const bool any_hoisted = std::find(hoisted.begin(), hoisted.end(), true) != hoisted.end();
  os << "extern \"C\" __global__ void __launch_bounds__(256) " << elementwise_kernel_name(g, group) << "(const Args a) {\n"
     << "  const long long nv = a.n / " << vec << ", step = (long long)gridDim.x * blockDim.x;\n"
     << "  const long long t0 = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n";
  if (any_hoisted) {
    os << "  if (t0 >= nv) return;\n";
    for (size_t k = 0; k < ins; ++k)
      if (hoisted[k])
        os << "  tg_pack<" << storage_type(g.type(group.inputs[k]).dtype) << ", " << vec << "> h" << k << ";\n";
    os << "  {\n    const long long i = t0 * " << vec << ";\n";
    offset_code(os, ix, *pattern, ins, "    ");
    for (size_t k = 0; k < ins; ++k) {
      if (!hoisted[k]) continue;
      const char* S = storage_type(g.type(group.inputs[k]).dtype);
      os << "    h" << k << " = *(const tg_pack<" << S << ", " << vec << ">*)((const " << S << "*)a.in[" << k << "] + o"
         << k << ");\n";
    }
    os << "  }\n";
  }
  os << "  for (long long t = t0; t < nv; t += step) {\n"
     << "    const long long i = t * " << vec << ";\n";
  if (ix != Indexing::flat && ins > 0) offset_code(os, ix, *pattern, ins, "    ");
  std::vector<bool> lanes(ins, true);  // read as a vector (else one scalar for every lane)
  for (size_t k = 0; k < ins; ++k) {
    const DType t = g.type(group.inputs[k]).dtype;
    const std::string off = ix == Indexing::flat ? "i" : "o" + std::to_string(k);
    const std::string K = std::to_string(k);
    lanes[k] = ix == Indexing::flat || pattern->flat[k] || (pattern->moves_along[k] >> inner & 1u);
    if (hoisted[k])
      os << "    const tg_pack<" << storage_type(t) << ", " << vec << ">& x" << K << " = h" << K << ";\n";
    else if (lanes[k])
      os << "    const tg_pack<" << storage_type(t) << ", " << vec << "> x" << K << " = *(const tg_pack<"
         << storage_type(t) << ", " << vec << ">*)((const " << storage_type(t) << "*)a.in[" << K << "] + " << off
         << ");\n";
    else
      os << "    const " << compute_type(t) << " s" << K << " = " << load(t, "a.in[" + K + "]", off) << ";\n";
  }
  for (size_t m = 0; m < group.outputs.size(); ++m)
    os << "    tg_pack<" << storage_type(g.type(group.outputs[m]).dtype) << ", " << vec << "> y" << m << ";\n";
  os << "#pragma unroll\n    for (int j = 0; j < " << vec << "; ++j) {\n";
  std::unordered_map<int32_t, std::string> name;
  for (size_t k = 0; k < ins; ++k) {
    const int32_t v = group.inputs[k];
    const DType t = g.type(v).dtype;
    const std::string nm = "u" + std::to_string(k);
    os << "      const " << compute_type(t) << " " << nm << " = "
       << (lanes[k] ? from_storage(t, "x" + std::to_string(k) + ".v[j]") : "s" + std::to_string(k)) << ";\n";
    name[v] = nm;
  }
  os << elementwise_members(g, group, name, "      ");
  for (size_t m = 0; m < group.outputs.size(); ++m) {
    const int32_t v = group.outputs[m];
    os << "      y" << m << ".v[j] = " << store(g.type(v).dtype, name.at(v)) << ";\n";
  }
  os << "    }\n";
  for (size_t m = 0; m < group.outputs.size(); ++m) {
    const char* S = storage_type(g.type(group.outputs[m]).dtype);
    os << "    *(tg_pack<" << S << ", " << vec << ">*)((" << S << "*)a.out[" << m << "] + i) = y" << m << ";\n";
  }
  os << "  }\n}\n";
  return os.str();
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

bool hoistable_inner(const ElementwiseArgs& a, int vec) {
  // Every step of the grid-stride loop advances a thread by gridDim.x * 256 * vec outputs: a
  // multiple of the innermost dim, whatever the grid, when that dim divides 256 * vec (ResNet's
  // 64 to 2048 channels with 8 bf16 lanes).
  const long long inner = a.dims[a.rank - 1];
  return vec > 1 && a.rank >= 2 && inner > 0 && (256LL * vec) % inner == 0;
}

int elementwise_vector_width(const ElementwiseArgs& a, bool flat, const std::vector<DType>& in_types,
                             const std::vector<DType>& out_types) {
  const long long inner = flat ? a.n : a.dims[a.rank - 1];
  for (int v : {8, 4, 2}) {
    if (inner % v != 0) continue;
    bool ok = true;
    for (size_t k = 0; k < in_types.size() && ok; ++k) {
      const size_t bytes = dtype_size(in_types[k]) * static_cast<size_t>(v);
      if (flat) {
        ok = aligned(a.in[k], bytes);
        continue;
      }
      const long long s = a.strides[k][a.rank - 1];
      if (s == 0) continue;  // one scalar for the vector's lanes
      ok = s == 1 && aligned(a.in[k], bytes);
      for (int d = 0; d + 1 < a.rank && ok; ++d) ok = a.strides[k][d] % v == 0;
    }
    for (size_t m = 0; m < out_types.size() && ok; ++m) ok = aligned(a.out[m], dtype_size(out_types[m]) * static_cast<size_t>(v));
    if (ok) return v;
  }
  return 1;
}

std::string elementwise_kernel_name(const GraphImpl& g, const FusionGroup& group) {
  std::string name = "tg_ew";
  int shown = 0;
  std::string last;
  for (int32_t id : group.nodes) {
    const std::string op = op_name(g.nodes[static_cast<size_t>(id)].kind);
    if (op == last || op == "broadcast_to" || op == "reshape" || op == "cast") continue;  // the telling ones
    if (shown++ == 4) break;
    name += "_" + op;
    last = op;
  }
  return name + "_n" + std::to_string(group.nodes.size());
}

std::string elementwise_source(const GraphImpl& g, const FusionGroup& group, Indexing ix, int32_t condition,
                               const StridePattern* pattern, int vec) {
  std::ostringstream os;
  os << elementwise_prelude();
  os << "struct Args { const void* in[" << kMaxOperands << "]; void* out[" << kMaxOperands
     << "]; long long n; int rank; long long dims[" << kMaxRank << "]; long long strides[" << kMaxOperands << "]["
     << kMaxRank << "]; unsigned long long handle; unsigned div_mul[" << kMaxRank << "], div_shift[" << kMaxRank
     << "]; };\n";
  if (vec > 1) {
    if (condition >= 0) throw Error("[cuda] a kernel that sets a loop's condition computes one element per thread");
    os << vector_source(g, group, ix, pattern, vec);
    return os.str();
  }
  // A device-runtime builtin that NVRTC does not declare (ptxas resolves it, as for nvcc).
  if (condition >= 0) os << "extern \"C\" __device__ void cudaGraphSetConditional(unsigned long long, unsigned int);\n";
  const size_t ins = group.inputs.size();
  check_pattern(ix, pattern, ins);
  std::unordered_map<int32_t, std::string> name;
  // One element in two halves: load_at reads the inputs (In), finish_at computes and stores.
  // (`unused_` keeps In a valid struct for a group without inputs.)
  os << "struct In { int unused_";
  for (size_t k = 0; k < ins; ++k) os << "; " << compute_type(g.type(group.inputs[k]).dtype) << " x" << k;
  os << "; };\n";
  os << "__device__ __forceinline__ In load_at(const Args& a, long long i) {\n  In l;\n";
  if (ix != Indexing::flat && ins > 0) offset_code(os, ix, *pattern, ins, "  ");
  for (size_t k = 0; k < ins; ++k) {
    const std::string off = ix == Indexing::flat ? "i" : "o" + std::to_string(k);
    os << "  l.x" << k << " = " << load(g.type(group.inputs[k]).dtype, "a.in[" + std::to_string(k) + "]", off) << ";\n";
  }
  os << "  return l;\n}\n";
  os << "__device__ __forceinline__ void finish_at(const Args& a, long long i, const In& l) {\n";
  for (size_t k = 0; k < ins; ++k) {
    const int32_t v = group.inputs[k];
    const std::string nm = "u" + std::to_string(k);
    os << "  const " << compute_type(g.type(v).dtype) << " " << nm << " = l.x" << k << ";\n";
    name[v] = nm;
  }
  os << elementwise_members(g, group, name, "  ");
  for (size_t k = 0; k < group.outputs.size(); ++k) {
    int32_t v = group.outputs[k];
    os << "  ((" << storage_type(g.type(v).dtype) << "*)a.out[" << k << "])[i] = " << store(g.type(v).dtype, name.at(v))
       << ";\n";
  }
  // One element, so one thread: concurrent cudaGraphSetConditional calls are undefined. A
  // float is true when non-zero (-0.0 false, NaN true), as on the host.
  if (condition >= 0) os << "  cudaGraphSetConditional(a.handle, " << name.at(condition) << " != 0 ? 1u : 0u);\n";
  os << "}\n";
  // Four elements a step, all loads issued before any store: four reads in flight per thread
  // (one alone leaves a broadcasting kernel far from the copy bandwidth). A store never
  // precedes a load of the same thread's elements, so outputs written over inputs (a loop's
  // state) stay exact.
  os << "extern \"C\" __global__ void __launch_bounds__(256) " << elementwise_kernel_name(g, group) << "(const Args a) {\n"
     << "  const long long step = (long long)gridDim.x * blockDim.x;\n"
     << "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
     << "  for (; i + 3 * step < a.n; i += 4 * step) {\n"
     << "    const In l0 = load_at(a, i), l1 = load_at(a, i + step), l2 = load_at(a, i + 2 * step), l3 = load_at(a, i + 3 * step);\n"
     << "    finish_at(a, i, l0); finish_at(a, i + step, l1); finish_at(a, i + 2 * step, l2); finish_at(a, i + 3 * step, l3);\n"
     << "  }\n"
     << "  for (; i < a.n; i += step) finish_at(a, i, load_at(a, i));\n";
  os << "}\n";
  return os.str();
}

}  // namespace tg::detail
