// Shape operands that depend on dynamic input dims, followed symbolically (issue 22). A model
// exported with dynamic axes computes its Reshape / Expand / ConstantOfShape / Range / Slice
// operands from Shape(x) through Gather, Unsqueeze, Concat, Cast and a little arithmetic; none
// of it is known at import time, but each element is a number or one input dim. follow_sym
// tracks that per element (SymDim) beside the tensors the converters build anyway, and the
// shape-taking converters read it through sym_target: a dim becomes a reshape / broadcast_to
// shape source (docs/decisions.md, "Dynamic sizes"), so the graph is imported once for all sizes.
#include <algorithm>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

bool SymDim::same(const SymDim& o) const {
  if (kind != o.kind || kind == Kind::unknown) return false;
  return kind == Kind::known ? value == o.value : dim == o.dim && source == o.source;
}

std::optional<std::vector<SymDim>> Ctx::sym_in(int i) const {
  if (!has_input(i)) return std::nullopt;
  Value v = value_in(i);
  if (v.kind != Value::Kind::tensor) return std::nullopt;
  if (v.sym) return v.sym;
  const DType t = v.t.dtype();
  const bool integer = t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8 ||
                       t == DType::boolean;
  if (!integer || !is_const(i) || v.t.rank() > 1 || !v.t.shape().is_static() || v.t.shape().num_elements() > 64)
    return std::nullopt;
  std::vector<SymDim> r;
  for (int64_t x : ints_in(i)) r.push_back(SymDim::number(x));
  return r;
}

void Ctx::set_sym(int i, std::vector<SymDim> s) {
  if (!wants_output(i)) return;
  auto it = values_.find(node.output(i));
  if (it != values_.end() && !it->second.constant && !it->second.const_derived) it->second.sym = std::move(s);
}

namespace {

using Kind = SymDim::Kind;
using Syms = std::vector<SymDim>;

SymDim unknown() { return {}; }

bool any_dim(const Syms& s) {
  return std::any_of(s.begin(), s.end(), [](const SymDim& d) { return d.kind != Kind::known; });
}

// Elementwise over two vectors broadcast as ONNX does for 0-D / 1-D operands.
template <class F>
std::optional<Syms> elementwise(const Syms& a, const Syms& b, F f) {
  if (a.size() != b.size() && a.size() != 1 && b.size() != 1) return std::nullopt;
  Syms r;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) r.push_back(f(a[a.size() == 1 ? 0 : i], b[b.size() == 1 ? 0 : i]));
  return r;
}

SymDim arith(const std::string& op, const SymDim& a, const SymDim& b) {
  if (a.kind == Kind::known && b.kind == Kind::known) {
    const int64_t x = a.value, y = b.value;
    if (op == "Add") return SymDim::number(x + y);
    if (op == "Sub") return SymDim::number(x - y);
    if (op == "Mul") return SymDim::number(x * y);
    if (op == "Div" && y != 0) return SymDim::number(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));  // floor
    return unknown();
  }
  auto is = [](const SymDim& d, int64_t v) { return d.kind == Kind::known && d.value == v; };
  if ((op == "Add" || op == "Sub") && is(b, 0)) return a;
  if (op == "Add" && is(a, 0)) return b;
  if ((op == "Mul" || op == "Div") && is(b, 1)) return a;
  if (op == "Mul" && is(a, 1)) return b;
  return unknown();
}

// Equal: numbers compare; a dim is a size, never negative; the same dim equals itself.
std::optional<SymDim> equal(const SymDim& a, const SymDim& b) {
  if (a.same(b)) return SymDim::number(1);
  if (a.kind == Kind::known && b.kind == Kind::known) return SymDim::number(a.value == b.value);
  const SymDim& k = a.kind == Kind::known ? a : b;
  if (k.kind == Kind::known && k.value < 0) return SymDim::number(0);
  return std::nullopt;
}

std::optional<Syms> follow(Ctx& c) {
  const std::string& op = c.node.op_type();
  if (op == "Shape") {
    Tensor x = c.in(0);
    const int64_t r = x.rank();
    int64_t start = c.attr_i("start", 0), end = c.attr_i("end", r);
    start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    Syms s;
    for (int64_t d = start; d < end; ++d)
      s.push_back(x.shape()[d] >= 0 ? SymDim::number(x.shape()[d]) : SymDim{Kind::dim, 0, x, d});
    return s;
  }
  if (op == "Size") return std::nullopt;
  bool some = false;
  for (int i = 0; i < c.num_inputs() && !some; ++i) some = c.has_input(i) && c.value_in(i).sym.has_value();
  if (!some) return std::nullopt;  // nothing symbolic came in: the constant machinery has it
  // (checked first: reading the other inputs' numbers may fold them, which only this needs)
  std::vector<std::optional<Syms>> in;
  for (int i = 0; i < c.num_inputs(); ++i) in.push_back(c.sym_in(i));
  auto all = [&](std::initializer_list<int> idx) {
    for (int i : idx)
      if (i >= static_cast<int>(in.size()) || !in[static_cast<size_t>(i)]) return false;
    return true;
  };
  if (op == "Identity" || op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Flatten") {
    if (!all({0})) return std::nullopt;
    return in[0];
  }
  if (op == "Cast") {  // to an integer type (ONNX's int8..int64, uint8..uint64)
    const int64_t to = c.attr_i("to", 0);
    if (!all({0}) || !(to == 2 || to == 3 || to == 4 || to == 5 || to == 6 || to == 7 || to == 12 || to == 13))
      return std::nullopt;
    return in[0];
  }
  if (op == "Gather") {
    if (!all({0, 1}) || c.in(0).rank() != 1) return std::nullopt;
    Syms r;
    const int64_t n = static_cast<int64_t>(in[0]->size());
    for (const SymDim& i : *in[1]) {
      if (i.kind != Kind::known) return std::nullopt;
      const int64_t k = i.value < 0 ? i.value + n : i.value;
      if (k < 0 || k >= n) return std::nullopt;
      r.push_back((*in[0])[static_cast<size_t>(k)]);
    }
    return r;
  }
  if (op == "Concat") {
    Syms r;
    for (auto& s : in) {
      if (!s) return std::nullopt;
      r.insert(r.end(), s->begin(), s->end());
    }
    return r;
  }
  if (op == "Slice") {
    if (c.opset < 10 || !all({0, 1, 2}) || c.in(0).rank() != 1) return std::nullopt;
    for (int i = 1; i < c.num_inputs(); ++i)
      if (c.has_input(i) && (!in[static_cast<size_t>(i)] || any_dim(*in[static_cast<size_t>(i)]))) return std::nullopt;
    const int64_t n = static_cast<int64_t>(in[0]->size());
    int64_t b = (*in[1])[0].value, e = (*in[2])[0].value, st = c.has_input(4) ? (*in[4])[0].value : 1;
    if (st <= 0) return std::nullopt;
    b = std::clamp<int64_t>(b < 0 ? b + n : b, 0, n);
    e = std::clamp<int64_t>(e < 0 ? e + n : e, 0, n);
    Syms r;
    for (int64_t k = b; k < e; k += st) r.push_back((*in[0])[static_cast<size_t>(k)]);
    return r;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    if (!all({0, 1})) return std::nullopt;
    return elementwise(*in[0], *in[1], [&](const SymDim& a, const SymDim& b) { return arith(op, a, b); });
  }
  if (op == "Max" || op == "Min") {  // numbers only, and max(dim, 1) / max(dim, 0) = dim
    if (in.size() != 2 || !all({0, 1})) return std::nullopt;
    bool ok = true;
    auto r = elementwise(*in[0], *in[1], [&](const SymDim& a, const SymDim& b) {
      if (a.kind == Kind::known && b.kind == Kind::known)
        return SymDim::number(op == "Max" ? std::max(a.value, b.value) : std::min(a.value, b.value));
      const SymDim& k = a.kind == Kind::known ? a : b;
      const SymDim& d = a.kind == Kind::known ? b : a;
      if (op == "Max" && k.kind == Kind::known && k.value <= 0) return d;
      ok = false;
      return unknown();
    });
    return ok ? r : std::nullopt;
  }
  if (op == "Equal") {
    if (!all({0, 1})) return std::nullopt;
    bool ok = true;
    auto r = elementwise(*in[0], *in[1], [&](const SymDim& a, const SymDim& b) {
      auto e = equal(a, b);
      ok = ok && e.has_value();
      return e.value_or(unknown());
    });
    return ok ? r : std::nullopt;
  }
  if (op == "Where") {
    if (!all({0, 1, 2}) || any_dim(*in[0])) return std::nullopt;
    const Syms &cond = *in[0], &a = *in[1], &b = *in[2];
    const size_t n = std::max({cond.size(), a.size(), b.size()});
    Syms r;
    for (size_t i = 0; i < n; ++i) {
      auto at = [&](const Syms& s) -> std::optional<SymDim> {
        if (s.size() == 1) return s[0];
        if (i < s.size()) return s[i];
        return std::nullopt;
      };
      auto k = at(cond), x = at(a), y = at(b);
      if (!k || !x || !y) return std::nullopt;
      r.push_back(k->value ? *x : *y);
    }
    return r;
  }
  return std::nullopt;
}

}  // namespace

void follow_sym(Ctx& c) {
  if (c.num_outputs() < 1 || !c.wants_output(0)) return;
  auto s = follow(c);
  if (!s) return;
  if (any_dim(*s)) return c.set_sym(0, std::move(*s));
  // Every element proved a number (a dim compared with -1, say): the output is a constant.
  const Value out = c.value_out(0);
  const Shape shape = out.t.shape();
  if (out.constant || out.const_derived || !shape.is_static() || shape.num_elements() != static_cast<int64_t>(s->size()))
    return;
  std::vector<double> v;
  for (const SymDim& d : *s) v.push_back(static_cast<double>(d.value));
  TensorData t = TensorData::from_vector(shape, out.t.dtype(), v);
  if (out.t.dtype() == DType::i64)  // exactly, not through double
    for (size_t k = 0; k < s->size(); ++k) t.ptr<int64_t>()[k] = (*s)[k].value;
  c.out_const(0, t);
}

std::optional<SymTarget> sym_target(const Ctx& c, int i) {
  auto s = c.sym_in(i);
  if (!s) return std::nullopt;
  SymTarget t;
  for (const SymDim& d : *s) {
    if (d.kind == Kind::known) {
      t.codes.push_back(d.value);
    } else if (d.kind == Kind::unknown) {
      t.codes.push_back(-1);
      ++t.unknown;
    } else {
      int64_t offset = 0;
      size_t k = 0;
      for (; k < t.sources.size() && !(t.sources[k] == d.source); ++k) offset += t.sources[k].rank();
      if (k == t.sources.size()) t.sources.push_back(d.source);
      t.codes.push_back(dim_from_source(offset + d.dim));
    }
  }
  return t;
}

}  // namespace tg::onnx_import
