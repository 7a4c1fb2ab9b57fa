#include "backends/cpu/fused_elementwise.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <type_traits>
#include <mutex>
#include <numeric>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/fused_ops.h"
#include "core/half.h"
#include "ops/elementwise_formulas.h"

namespace tg::detail {

using fused::Code;
using fused::Instr;
using fused::Round;

namespace {

constexpr int64_t kTile = 1024;            // elements per tile: its registers stay in L1 / L2
constexpr int64_t kMaxPeriod = 4096;       // largest tile (lcm of the periods it must hold)
constexpr int64_t kParallelMin = 1 << 15;  // elements below which one thread runs the loop

bool is_float16(DType t) { return t == DType::f16 || t == DType::bf16; }
bool is_float_reg(DType t) { return t == DType::f32 || is_float16(t); }
bool is_reg(DType t) { return is_float_reg(t) || t == DType::boolean; }

Round round_of(DType t) {
  return t == DType::f16 ? Round::f16 : t == DType::bf16 ? Round::bf16 : Round::none;
}

// The f32 code of an op computed exactly in f32, or unary_double / binary_double.
bool code_of(OpKind k, Code& c) {
  switch (k) {
    case OpKind::Neg: c = Code::neg; return true;
    case OpKind::Abs: c = Code::abs; return true;
    case OpKind::Sign: c = Code::sign; return true;
    case OpKind::Square: c = Code::square; return true;
    case OpKind::Relu: c = Code::relu; return true;
    case OpKind::Sqrt: c = Code::sqrt; return true;
    case OpKind::Add: c = Code::add; return true;
    case OpKind::Sub: c = Code::sub; return true;
    case OpKind::Mul: c = Code::mul; return true;
    case OpKind::Div: c = Code::div; return true;
    case OpKind::DivNoNan: c = Code::div_no_nan; return true;
    case OpKind::Minimum: c = Code::minimum; return true;
    case OpKind::Maximum: c = Code::maximum; return true;
    case OpKind::MinimumNan: c = Code::minimum_nan; return true;
    case OpKind::MaximumNan: c = Code::maximum_nan; return true;
    case OpKind::Equal: c = Code::eq; return true;
    case OpKind::NotEqual: c = Code::ne; return true;
    case OpKind::Less: c = Code::lt; return true;
    case OpKind::LessEqual: c = Code::le; return true;
    case OpKind::Greater: c = Code::gt; return true;
    case OpKind::GreaterEqual: c = Code::ge; return true;
    case OpKind::LogicalNot: c = Code::logical_not; return true;
    case OpKind::LogicalAnd: c = Code::logical_and; return true;
    case OpKind::LogicalOr: c = Code::logical_or; return true;
    case OpKind::LogicalXor: c = Code::logical_xor; return true;
    case OpKind::IsNan: c = Code::is_nan; return true;
    case OpKind::IsInf: c = Code::is_inf; return true;
    case OpKind::IsFinite: c = Code::is_finite; return true;
    case OpKind::Select: c = Code::select; return true;
    case OpKind::ReluGrad: c = Code::relu_grad; return true;
    case OpKind::Clamp: c = Code::clamp; return true;
    case OpKind::Identity:
    case OpKind::StopGradient: return false;  // no code: a loop passes the operand through (below)
    default:
      // Every other float op with a formula (ops/elementwise_formulas.h) computes it in double.
      if (has_unary_formula(k)) c = Code::unary_double;
      else if (has_binary_formula(k)) c = Code::binary_double;
      else return false;
      return true;
  }
}

// How a leaf is read per tile.
enum class Access : uint8_t {
  direct,    // contiguous f32: used in place
  convert,   // contiguous f16 / bf16 / bool: widened per tile
  constant,  // the same for every tile (a scalar, or a period that divides the tile): once per run
  gather,    // any other broadcast: by strides per tile
};

struct Leaf {
  Shape shape;
  DType dtype = DType::f32;
  Access access = Access::direct;
  std::vector<int64_t> dims, strides;  // the kernel's dims merged where this leaf allows
};

struct Output {
  int reg = 0;
  DType dtype = DType::f32;
};

struct Reduction {
  int reg = 0;
  int64_t period = 1;
  bool mean = false;
};

// Element type loads / stores.
inline float load_one(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const uint8_t*>(p)[i] ? 1.0f : 0.0f;
  }
}

void load_run(const void* p, DType t, int64_t off, int64_t stride, int64_t len, float* out) {
  if (stride == 0) {
    std::fill(out, out + len, load_one(p, t, off));
  } else if (t == DType::f32 && stride == 1) {
    std::memcpy(out, static_cast<const float*>(p) + off, static_cast<size_t>(len) * sizeof(float));
  } else {
    for (int64_t j = 0; j < len; ++j) out[j] = load_one(p, t, off + j * stride);
  }
}

// Elements [start, start + len) of the kernel's index space, read from a broadcast leaf.
void gather(const Leaf& l, const void* p, int64_t start, int64_t len, float* out) {
  if (len <= 0) return;  // an empty tensor (a zero dim): nothing to read, and no dim to divide by
  const int r = static_cast<int>(l.dims.size());
  if (r == 0) {
    std::fill(out, out + len, load_one(p, l.dtype, 0));
    return;
  }
  int64_t idx[16], off = 0, rem = start;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % l.dims[static_cast<size_t>(d)];
    rem /= l.dims[static_cast<size_t>(d)];
    off += idx[d] * l.strides[static_cast<size_t>(d)];
  }
  const int64_t inner = l.dims.back(), step = l.strides.back();
  int64_t done = 0;
  while (done < len) {
    const int64_t run = std::min(inner - idx[r - 1], len - done);
    load_run(p, l.dtype, off, step, run, out + done);
    done += run;
    idx[r - 1] += run;
    off += run * step;
    for (int d = r - 1; d > 0 && idx[d] == l.dims[static_cast<size_t>(d)]; --d) {
      idx[d] = 0;
      off -= l.dims[static_cast<size_t>(d)] * l.strides[static_cast<size_t>(d)];
      ++idx[d - 1];
      off += l.strides[static_cast<size_t>(d - 1)];
    }
  }
}

void store(const float* src, void* dst, DType t, int64_t start, int64_t len) {
  switch (t) {
    case DType::f32:
      std::memcpy(static_cast<float*>(dst) + start, src, static_cast<size_t>(len) * sizeof(float));
      break;
    case DType::f16:
      for (int64_t j = 0; j < len; ++j) static_cast<uint16_t*>(dst)[start + j] = float_to_half(src[j]);
      break;
    case DType::bf16:
      for (int64_t j = 0; j < len; ++j) static_cast<uint16_t*>(dst)[start + j] = float_to_bf16(src[j]);
      break;
    default:
      for (int64_t j = 0; j < len; ++j) static_cast<uint8_t*>(dst)[start + j] = src[j] != 0.0f ? 1 : 0;
      break;
  }
}

// 64-byte aligned scratch owned by the calling thread, grown on demand.
// (Freed with the matching aligned delete: a plain delete[] of aligned new[] is undefined.)
template <class T>
struct AlignedArrayDelete {
  void operator()(T* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
template <class T>
T* thread_scratch(size_t count) {
  static_assert(std::is_trivially_destructible_v<T>, "raw aligned storage");
  thread_local std::unique_ptr<T, AlignedArrayDelete<T>> buf;
  thread_local size_t cap = 0;
  if (count > cap) {
    cap = std::max(count, cap * 2);
    buf.reset(static_cast<T*>(::operator new[](cap * sizeof(T), std::align_val_t(64))));
  }
  return buf.get();
}

}  // namespace

struct FusedProgram {
  std::vector<int64_t> dims;  // the kernel's shape
  int64_t n = 0;
  int64_t tile = kTile;
  std::vector<Leaf> leaves;  // leaf i is register i
  std::vector<Instr> code;
  int nregs = 0;
  std::vector<Output> outputs;
  std::vector<Reduction> reductions;
  std::vector<int64_t> bn_channels;  // per batch_norm_training member
};

bool fused_supports(const GraphImpl& g, const Node& n) {
  if (n.outputs.size() != 1 || n.inputs.empty()) return false;
  const DType out = g.type(n.outputs[0]).dtype;
  auto in = [&](size_t i) { return g.type(n.inputs[i]).dtype; };
  const Family f = op_def(n.kind).family;
  switch (n.kind) {
    case OpKind::BroadcastTo:
    case OpKind::BroadcastLike:
    case OpKind::Identity:
    case OpKind::StopGradient: return is_reg(out) && in(0) == out;
    case OpKind::Cast: return is_reg(in(0)) && is_reg(out);
    case OpKind::LogicalNot: return in(0) == DType::boolean && out == DType::boolean;
    case OpKind::IsNan:
    case OpKind::IsInf:
    case OpKind::IsFinite: return is_float_reg(in(0)) && out == DType::boolean;
    case OpKind::Select:
      return n.inputs.size() == 3 && in(0) == DType::boolean && is_reg(in(1)) && in(1) == out && in(2) == out;
    default: break;
  }
  Code c;
  if (!code_of(n.kind, c)) return false;
  switch (f) {
    case Family::unary:
    case Family::unary_float: return n.inputs.size() == 1 && is_float_reg(in(0)) && out == in(0);
    case Family::binary:
    case Family::binary_float:
      return n.inputs.size() == 2 && is_float_reg(in(0)) && is_float_reg(in(1)) && is_float_reg(out);
    case Family::clamp:
      return n.inputs.size() == 3 && is_float_reg(in(0)) && is_float_reg(in(1)) && is_float_reg(in(2)) &&
             is_float_reg(out);
    case Family::compare:
      return n.inputs.size() == 2 && out == DType::boolean &&
             ((is_float_reg(in(0)) && is_float_reg(in(1))) ||
              (in(0) == DType::boolean && in(1) == DType::boolean));
    case Family::binary_logical:
      return n.inputs.size() == 2 && in(0) == DType::boolean && in(1) == DType::boolean &&
             out == DType::boolean;
    default: return false;
  }
}

int64_t fused_reduction_period(const GraphImpl& g, const Node& n) {
  if (n.kind != OpKind::ReduceSum && n.kind != OpKind::ReduceMean && n.kind != OpKind::SumToLike) return 0;
  if (n.outputs.size() != 1 || n.inputs.empty() || !n.control_deps.empty()) return 0;
  const TensorType &x = g.type(n.inputs[0]), &y = g.type(n.outputs[0]);
  if (x.dtype != DType::f32 || y.dtype != DType::f32 || !x.shape.is_static() || !y.shape.is_static())
    return 0;
  const std::vector<int64_t>& d = x.shape.dims();
  const int64_t r = static_cast<int64_t>(d.size());
  std::vector<bool> red(d.size(), false);
  if (n.kind == OpKind::SumToLike) {
    if (n.inputs.size() != 2 || !g.type(n.inputs[1]).shape.is_static()) return 0;
    const std::vector<int64_t>& ld = g.type(n.inputs[1]).shape.dims();
    const int64_t lr = static_cast<int64_t>(ld.size());
    if (lr > r) return 0;
    for (int64_t i = 0; i < r; ++i) {
      const int64_t j = i - (r - lr);
      if (j < 0)
        red[static_cast<size_t>(i)] = true;
      else if (ld[static_cast<size_t>(j)] != d[static_cast<size_t>(i)]) {
        if (ld[static_cast<size_t>(j)] != 1) return 0;
        red[static_cast<size_t>(i)] = true;
      }
    }
  } else {
    const auto* rd = std::get_if<ReduceDesc>(&n.attr);
    if (!rd) return 0;
    if (rd->axes.empty()) std::fill(red.begin(), red.end(), true);
    for (int64_t a : rd->axes) {
      const int64_t k = a < 0 ? a + r : a;
      if (k < 0 || k >= r) return 0;
      red[static_cast<size_t>(k)] = true;
    }
  }
  // Output i mod P: every reduced axis (of size > 1) comes before every kept one.
  int64_t period = 1;
  bool kept_seen = false;
  for (int64_t i = 0; i < r; ++i) {
    if (d[static_cast<size_t>(i)] == 1) continue;
    if (red[static_cast<size_t>(i)]) {
      if (kept_seen) return 0;
    } else {
      kept_seen = true;
      period *= d[static_cast<size_t>(i)];
    }
  }
  if (period > kMaxPeriod || y.shape.num_elements() != period || x.shape.num_elements() == 0) return 0;
  return period;
}

std::shared_ptr<const FusedProgram> compile_fused(const GraphImpl& g, const CpuKernel& k) {
  if (!k.shape.is_static() || k.shape.rank() > 16) return nullptr;
  auto p = std::make_shared<FusedProgram>();
  p->dims = k.shape.dims();
  p->n = k.shape.num_elements();
  const int nleaves = static_cast<int>(k.leaves.size());
  std::map<int32_t, int> reg;  // value -> virtual register
  for (int i = 0; i < nleaves; ++i) reg[k.leaves[static_cast<size_t>(i)]] = i;
  int next = nleaves;
  auto operand = [&](int32_t v, int& r) {
    auto it = reg.find(v);
    if (it == reg.end()) return false;
    r = it->second;
    return true;
  };
  int64_t period = 1;
  for (int32_t id : k.nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::BatchNormTraining) {
      // Its normalised output, from x and the statistics its own step computed.
      const TensorType& x = g.type(n.inputs[0]);
      Instr in;
      int a;
      if (x.dtype != DType::f32 || !(x.shape == k.shape) || x.shape.num_elements() == 0 || !operand(n.inputs[0], a))
        return nullptr;
      in.code = Code::batch_norm;
      in.a = in.b = in.c = static_cast<int16_t>(a);
      in.aux = static_cast<int16_t>(p->bn_channels.size());
      p->bn_channels.push_back(x.shape.dims().back());
      period = std::lcm(period, x.shape.dims().back());
      in.d = static_cast<int16_t>(next);
      reg[n.outputs[0]] = next++;
      p->code.push_back(in);
      continue;
    }
    if (!fused_supports(g, n)) return nullptr;
    const int32_t v = n.outputs[0];
    const DType out = g.type(v).dtype;
    Instr in;
    int ops[3] = {0, 0, 0};
    const size_t nin = n.kind == OpKind::BroadcastLike || n.kind == OpKind::BroadcastTo ? 1 : n.inputs.size();
    for (size_t i = 0; i < nin; ++i)
      if (!operand(n.inputs[i], ops[i])) return nullptr;
    in.a = static_cast<int16_t>(ops[0]);
    in.b = static_cast<int16_t>(nin > 1 ? ops[1] : ops[0]);
    in.c = static_cast<int16_t>(nin > 2 ? ops[2] : ops[0]);
    switch (n.kind) {
      case OpKind::BroadcastTo:
      case OpKind::BroadcastLike:
      case OpKind::Identity:
      case OpKind::StopGradient: reg[v] = ops[0]; continue;
      case OpKind::Cast: {
        const DType from = g.type(n.inputs[0]).dtype;
        if (out == DType::f32 || out == from || from == DType::boolean) {
          reg[v] = ops[0];  // exact: the register already holds the value
          continue;
        }
        in.code = out == DType::boolean ? Code::to_bool : Code::copy;
        break;
      }
      default:
        code_of(n.kind, in.code);
        in.kind = n.kind;
        if (const auto* s = std::get_if<ScalarDesc>(&n.attr)) {
          in.alpha = s->alpha;
          in.beta = s->beta;
        }
    }
    in.round = round_of(out);
    in.d = static_cast<int16_t>(next);
    reg[v] = next++;
    p->code.push_back(in);
  }
  for (int32_t v : k.outputs) {
    int r;
    if (!operand(v, r)) return nullptr;
    p->outputs.push_back(Output{r, g.type(v).dtype});
  }
  for (int32_t id : k.reductions) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    int64_t per = fused_reduction_period(g, n);
    int r;
    if (per <= 0 || !(g.type(n.inputs[0]).shape == k.shape) || !operand(n.inputs[0], r)) return nullptr;
    p->reductions.push_back(Reduction{r, per, n.kind == OpKind::ReduceMean});
    period = std::lcm(period, per);
  }
  if (period > kMaxPeriod) return nullptr;

  // Leaves: strides against the kernel's shape (numpy broadcasting), adjacent dims merged.
  const int rank = static_cast<int>(p->dims.size());
  std::vector<int64_t> const_periods;
  for (int i = 0; i < nleaves; ++i) {
    Leaf l;
    const TensorType& t = g.type(k.leaves[static_cast<size_t>(i)]);
    if (!t.shape.is_static() || !is_reg(t.dtype) || t.shape.rank() > rank) return nullptr;
    l.shape = t.shape;
    l.dtype = t.dtype;
    const std::vector<int64_t>& ld = t.shape.dims();
    const int lr = static_cast<int>(ld.size());
    std::vector<int64_t> st(static_cast<size_t>(rank), 0);
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int j = d - (rank - lr);
      if (j < 0) continue;
      const int64_t dim = ld[static_cast<size_t>(j)];
      if (dim != p->dims[static_cast<size_t>(d)] && dim != 1) return nullptr;
      st[static_cast<size_t>(d)] = dim == 1 ? 0 : s;
      s *= dim;
    }
    for (int d = 0; d < rank; ++d) {
      const int64_t dim = p->dims[static_cast<size_t>(d)];
      if (dim == 1) continue;
      if (!l.dims.empty() && l.strides.back() == st[static_cast<size_t>(d)] * dim) {
        l.dims.back() *= dim;
        l.strides.back() = st[static_cast<size_t>(d)];
      } else {
        l.dims.push_back(dim);
        l.strides.push_back(st[static_cast<size_t>(d)]);
      }
    }
    if (l.dims.size() == 1 && l.strides[0] == 1) {
      l.access = l.dtype == DType::f32 ? Access::direct : Access::convert;
    } else if (l.dims.empty() || l.strides[0] == 0) {
      int64_t q = 1;
      for (size_t d = 1; d < l.dims.size(); ++d) q *= l.dims[d];
      l.access = Access::constant;
      const_periods.push_back(q);
    } else {
      l.access = Access::gather;
    }
    p->leaves.push_back(std::move(l));
  }
  // The tile: about kTile elements, a multiple of every reduction's period and of as many
  // broadcast leaves' periods as fit, so those leaves read the same values in every tile.
  for (int64_t q : const_periods)  // (an empty tensor's leaf has period 0: it takes no part)
    if (q > 0 && std::lcm(period, q) <= kMaxPeriod) period = std::lcm(period, q);
  p->tile = period * std::max<int64_t>(1, kTile / period);
  for (Leaf& l : p->leaves) {
    if (l.access != Access::constant) continue;
    int64_t q = 1;
    for (size_t d = 1; d < l.dims.size(); ++d) q *= l.dims[d];
    if (q <= 0 || p->tile % q != 0) l.access = Access::gather;
  }

  // Registers: leaves first, then temporaries reused once their last reader has run.
  const int nv = next;
  const int end = static_cast<int>(p->code.size());
  std::vector<int> last(static_cast<size_t>(nv), -1);
  for (int i = 0; i < end; ++i)
    for (int r : {p->code[static_cast<size_t>(i)].a, p->code[static_cast<size_t>(i)].b,
                  p->code[static_cast<size_t>(i)].c})
      last[static_cast<size_t>(r)] = i;
  for (const Output& o : p->outputs) last[static_cast<size_t>(o.reg)] = end;
  for (const Reduction& r : p->reductions) last[static_cast<size_t>(r.reg)] = end;
  std::vector<int> phys(static_cast<size_t>(nv), -1), free_regs;
  for (int i = 0; i < nleaves; ++i) phys[static_cast<size_t>(i)] = i;
  int nphys = nleaves;
  for (int i = 0; i < end; ++i) {
    Instr& in = p->code[static_cast<size_t>(i)];
    int d;
    if (free_regs.empty()) {
      d = nphys++;
    } else {
      d = free_regs.back();
      free_regs.pop_back();
    }
    const int vd = in.d;
    phys[static_cast<size_t>(vd)] = d;
    int srcs[3] = {in.a, in.b, in.c};
    for (int j = 0; j < 3; ++j) {
      const int s = srcs[j];
      if (s >= nleaves && last[static_cast<size_t>(s)] == i && std::find(srcs, srcs + j, s) == srcs + j)
        free_regs.push_back(phys[static_cast<size_t>(s)]);
    }
    in.d = static_cast<int16_t>(d);
    in.a = static_cast<int16_t>(phys[static_cast<size_t>(in.a)]);
    in.b = static_cast<int16_t>(phys[static_cast<size_t>(in.b)]);
    in.c = static_cast<int16_t>(phys[static_cast<size_t>(in.c)]);
    if (last[static_cast<size_t>(vd)] < i) free_regs.push_back(d);  // a result nobody reads
  }
  for (Output& o : p->outputs) o.reg = phys[static_cast<size_t>(o.reg)];
  for (Reduction& r : p->reductions) r.reg = phys[static_cast<size_t>(r.reg)];
  if (nphys > 32000) return nullptr;
  p->nregs = nphys;
  return p;
}

bool run_fused(const FusedProgram& p, const std::vector<const TensorData*>& leaves,
               const std::vector<const fast::BatchNormStats*>& bns, std::vector<TensorData>& outs) {
  const size_t nl = p.leaves.size();
  if (leaves.size() != nl || outs.size() != p.outputs.size() + p.reductions.size() ||
      bns.size() != p.bn_channels.size())
    return false;
  for (size_t i = 0; i < bns.size(); ++i)
    if (!bns[i] || static_cast<int64_t>(bns[i]->mean.size()) != p.bn_channels[i]) return false;
  for (size_t i = 0; i < nl; ++i) {
    const TensorData& t = *leaves[i];
    if (t.empty() || t.dtype() != p.leaves[i].dtype || !(t.shape() == p.leaves[i].shape)) return false;
  }
  const int64_t n = p.n, T = p.tile;
  const int nregs = p.nregs;
  const size_t nred = p.reductions.size();
  // Leaves that read the same values in every tile, widened once for all threads.
  std::vector<std::vector<float>> constant(nl);
  for (size_t i = 0; i < nl; ++i)
    if (p.leaves[i].access == Access::constant) {
      constant[i].resize(static_cast<size_t>(std::min(T, n)));
      gather(p.leaves[i], leaves[i]->data(), 0, static_cast<int64_t>(constant[i].size()), constant[i].data());
    }
  // Batch-norm parameters tiled to the tile (a multiple of the channel count).
  const int64_t tlen = std::min(T, n);
  std::vector<std::vector<double>> bn_tiles(3 * bns.size(), std::vector<double>(static_cast<size_t>(tlen)));
  std::vector<const double*> aux(3 * bns.size());
  for (size_t i = 0; i < bns.size(); ++i) {
    const std::vector<double>* src[3] = {&bns[i]->mean, &bns[i]->scale, &bns[i]->shift};
    const int64_t C = p.bn_channels[i];
    for (int w = 0; w < 3; ++w) {
      std::vector<double>& t = bn_tiles[3 * i + static_cast<size_t>(w)];
      for (int64_t j = 0; j < tlen; ++j) t[static_cast<size_t>(j)] = (*src[w])[static_cast<size_t>(j % C)];
      aux[3 * i + static_cast<size_t>(w)] = t.data();
    }
  }
  std::vector<double> totals;
  for (const Reduction& r : p.reductions) totals.resize(totals.size() + static_cast<size_t>(r.period), 0.0);
  std::mutex mu;
  const int64_t ntiles = (n + T - 1) / T;

  auto work = [&](int64_t t0, int64_t t1) {
    float* scratch = thread_scratch<float>(static_cast<size_t>(nregs * T));
    double* acc = thread_scratch<double>(std::max<size_t>(1, nred * static_cast<size_t>(T)));
    std::fill(acc, acc + nred * static_cast<size_t>(T), 0.0);
    std::vector<float*> regs(static_cast<size_t>(nregs));
    for (int r = 0; r < nregs; ++r)
      regs[static_cast<size_t>(r)] = scratch + static_cast<size_t>(r) * static_cast<size_t>(T);
    for (size_t i = 0; i < nl; ++i)
      if (p.leaves[i].access == Access::constant) regs[i] = constant[i].data();
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * T, len = std::min(T, n - start);
      for (size_t i = 0; i < nl; ++i) {
        const Leaf& l = p.leaves[i];
        switch (l.access) {
          case Access::direct: regs[i] = const_cast<float*>(leaves[i]->ptr<float>()) + start; break;
          case Access::convert:
            regs[i] = scratch + i * static_cast<size_t>(T);
            load_run(leaves[i]->data(), l.dtype, start, 1, len, regs[i]);
            break;
          case Access::gather:
            regs[i] = scratch + i * static_cast<size_t>(T);
            gather(l, leaves[i]->data(), start, len, regs[i]);
            break;
          case Access::constant: break;
        }
      }
      fused::exec(p.code.data(), p.code.size(), regs.data(), aux.data(), static_cast<int>(len));
      // Reductions first: a reduction of a leaf read in place (Access::direct) reads the leaf's
      // memory, which an output may share (the arena gives an output the bytes of a leaf of its
      // shape that dies at this kernel), so it must be read before the outputs are stored.
      for (size_t r = 0; r < nred; ++r)
        fused::accumulate(acc + r * static_cast<size_t>(T), regs[static_cast<size_t>(p.reductions[r].reg)],
                          static_cast<int>(len));
      for (size_t o = 0; o < p.outputs.size(); ++o)
        store(regs[static_cast<size_t>(p.outputs[o].reg)], outs[o].data(), p.outputs[o].dtype, start, len);
    }
    if (nred == 0) return;
    std::lock_guard<std::mutex> lock(mu);
    size_t base = 0;
    for (size_t r = 0; r < nred; ++r) {
      const int64_t per = p.reductions[r].period;
      const double* a = acc + r * static_cast<size_t>(T);
      for (int64_t j = 0; j < T; ++j) totals[base + static_cast<size_t>(j % per)] += a[j];
      base += static_cast<size_t>(per);
    }
  };

  const int threads =
      n >= kParallelMin ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), ntiles)) : 1;
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
      work(ntiles * id / nt, ntiles * (id + 1) / nt);
    }
  } else {
    work(0, ntiles);
  }

  size_t base = 0;
  for (size_t r = 0; r < nred; ++r) {
    const Reduction& red = p.reductions[r];
    float* y = outs[p.outputs.size() + r].ptr<float>();
    const double count = static_cast<double>(n / red.period);
    for (int64_t j = 0; j < red.period; ++j) {
      const double s = totals[base + static_cast<size_t>(j)];
      y[j] = static_cast<float>(red.mean ? s / count : s);
    }
    base += static_cast<size_t>(red.period);
  }
  return true;
}

}  // namespace tg::detail
