// Converters of ONNX's control flow (If, Loop, Scan) and of the training-preview optimizers
// (Adagrad, Momentum, Adam). Bodies are converted inline: If computes both branches and
// selects (both must give the same types); Loop and Scan are unrolled, which needs a trip
// count and condition known at import time and a static scan length.
#include <cmath>
#include <functional>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

constexpr int64_t kMaxUnroll = 4096;

Value known(Graph& g, const TensorData& v) { return Value{g.constant(v), v, true}; }

TensorData i64_scalar(int64_t v) {
  TensorData t(Shape{}, DType::i64);
  t.ptr<int64_t>()[0] = v;
  return t;
}

// The value of v now, or nullopt when it depends on the graph's inputs.
std::optional<TensorData> fold(Ctx& c, const Value& v, const std::vector<std::pair<Tensor, TensorData>>& feeds) {
  if (v.kind != Value::Kind::tensor)
    c.fail(std::string("a ") + kind_name(v.kind) + " where a tensor was expected");
  if (v.constant) return v.constant;
  if (!v.const_derived) return std::nullopt;
  return c.g.run(feeds, {v.t})[0];
}

void if_(Ctx& c) {
  Graph& g = c.g;
  if (c.is_const(0)) {  // a condition computed from constants is folded: only the taken branch
    auto outs = c.inline_subgraph(c.attr_g(c.const_in(0).at(0) != 0 ? "then_branch" : "else_branch"), {});
    for (size_t i = 0; i < outs.size(); ++i) c.out_value(static_cast<int>(i), outs[i]);
    return;
  }
  // Both branches are computed and selected: they must convert and agree in type, else the
  // condition must be known at import time (shape-dependent branches of function bodies).
  const std::string known = "the condition (input 0) must be known at import time when ";
  std::vector<Value> a, b;
  try {
    a = c.inline_subgraph(c.attr_g("then_branch"), {});
    b = c.inline_subgraph(c.attr_g("else_branch"), {});
  } catch (const Error& e) {
    c.fail(known + "a branch converts only for it: " + e.what());
  }
  if (a.size() != b.size()) c.fail("the branches give different numbers of outputs");
  Tensor p = g.reshape(c.in(0), {});
  // Tensors are selected; sequences and optionals of the same make-up element by element.
  std::function<Value(const Value&, const Value&, size_t)> pick = [&](const Value& x, const Value& y,
                                                                      size_t i) {
    const std::string differ = known + "the branches give different types for output " + std::to_string(i);
    if (x.kind != y.kind || x.elems.size() != y.elems.size())
      c.fail(differ + " (a " + kind_name(x.kind) + " of " + std::to_string(x.elems.size()) + " vs a " +
             kind_name(y.kind) + " of " + std::to_string(y.elems.size()) + ")");
    Value r;
    r.kind = x.kind;
    if (x.kind == Value::Kind::tensor) {
      if (!(x.t.type() == y.t.type()))
        c.fail(differ + " (" + x.t.type().str() + " vs " + y.t.type().str() + ")");
      r.t = g.select(p, x.t, y.t);
    }
    for (size_t k = 0; k < x.elems.size(); ++k) r.elems.push_back(pick(x.elems[k], y.elems[k], i));
    return r;
  };
  for (size_t i = 0; i < a.size(); ++i) c.out_value(static_cast<int>(i), pick(a[i], b[i], i));
}

void loop(Ctx& c) {
  Graph& g = c.g;
  const onnx::GraphProto& body = c.attr_g("body");
  std::optional<int64_t> trip;
  if (c.has_input(0)) trip = static_cast<int64_t>(c.const_in(0).at(0));
  bool cond = c.has_input(1) ? c.const_in(1).at(0) != 0 : true;
  if (!trip && !c.has_input(1)) c.fail("a loop without a trip count and a condition never ends");
  std::vector<Value> carried;
  for (int i = 2; i < c.num_inputs(); ++i) carried.push_back(c.value_in(i));
  size_t n_carried = carried.size();
  std::vector<std::vector<Tensor>> scans;
  for (int64_t it = 0; cond && (!trip || it < *trip); ++it) {
    if (it >= kMaxUnroll) c.fail("more than " + std::to_string(kMaxUnroll) + " iterations cannot be unrolled");
    std::vector<Value> ins = {known(g, i64_scalar(it)), known(g, TensorData::scalar(1, DType::boolean))};
    ins.insert(ins.end(), carried.begin(), carried.end());
    auto outs = c.inline_subgraph(body, ins);
    if (outs.size() < 1 + n_carried) c.fail("the body gives too few outputs");
    if (c.has_input(1) || !trip) {
      auto v = fold(c, outs[0], {});
      if (!v) c.fail("the loop condition depends on the graph's inputs (data-dependent loops are not supported)");
      cond = v->at(0) != 0;
    }
    for (size_t k = 0; k < n_carried; ++k) carried[k] = outs[1 + k];
    scans.resize(outs.size() - 1 - n_carried);
    for (size_t k = 0; k < scans.size(); ++k) {
      const Value& s = outs[1 + n_carried + k];
      if (s.kind != Value::Kind::tensor)
        c.fail("scan outputs must be tensors, got a " + std::string(kind_name(s.kind)));
      scans[k].push_back(s.t);
    }
  }
  for (size_t k = 0; k < n_carried; ++k) {  // a sequence keeps its elements' records
    if (carried[k].kind == Value::Kind::tensor)
      c.out(static_cast<int>(k), carried[k].t);
    else
      c.out_value(static_cast<int>(k), carried[k]);
  }
  int n_scan = c.num_outputs() - static_cast<int>(n_carried);
  for (int k = 0; k < n_scan; ++k) {
    if (static_cast<size_t>(k) >= scans.size() || scans[static_cast<size_t>(k)].empty())
      c.fail("a loop with no iterations has empty scan outputs of unknown shape");
    c.out(static_cast<int>(n_carried) + k, g.stack(scans[static_cast<size_t>(k)], 0));
  }
}

// One Scan (opset 9 semantics) over states and scan inputs; returns states then scan outputs.
std::vector<Tensor> scan_core(Ctx& c, std::vector<Value> states, const std::vector<Tensor>& xs) {
  Graph& g = c.g;
  const onnx::GraphProto& body = c.attr_g("body");
  std::vector<int64_t> in_axes = c.attr_ints("scan_input_axes"), in_dirs = c.attr_ints("scan_input_directions");
  if (c.opset < 9) in_dirs = c.attr_ints("directions");
  std::vector<int64_t> out_axes = c.attr_ints("scan_output_axes"), out_dirs = c.attr_ints("scan_output_directions");
  int64_t len = -1;
  std::vector<int64_t> axes;
  for (size_t i = 0; i < xs.size(); ++i) {
    int64_t a = i < in_axes.size() ? norm_axis(c, in_axes[i], xs[i].rank()) : 0;
    axes.push_back(a);
    int64_t n = xs[i].shape()[a];
    if (n < 0) c.fail("the scan length must be static");
    if (len >= 0 && n != len) c.fail("scan inputs have different lengths");
    len = n;
  }
  if (len < 0) c.fail("Scan needs at least one scan input");
  if (len > kMaxUnroll) c.fail("more than " + std::to_string(kMaxUnroll) + " iterations cannot be unrolled");
  std::vector<std::vector<Tensor>> outs_seq;
  for (int64_t t = 0; t < len; ++t) {
    std::vector<Value> ins = states;
    for (size_t i = 0; i < xs.size(); ++i) {
      bool rev = i < in_dirs.size() && in_dirs[i] != 0;
      int64_t k = rev ? len - 1 - t : t;
      std::vector<int64_t> b(static_cast<size_t>(xs[i].rank()), 0), e(static_cast<size_t>(xs[i].rank()), -1);
      b[static_cast<size_t>(axes[i])] = k;
      e[static_cast<size_t>(axes[i])] = k + 1;
      ins.push_back(Value{g.squeeze(g.slice(xs[i], b, e), {axes[i]}), std::nullopt, false});
    }
    auto outs = c.inline_subgraph(body, ins);
    if (outs.size() < states.size()) c.fail("the body gives too few outputs");
    for (const auto& o : outs)
      if (o.kind != Value::Kind::tensor) c.fail("Scan's states and outputs must be tensors");
    for (size_t k = 0; k < states.size(); ++k) states[k] = outs[k];
    outs_seq.resize(outs.size() - states.size());
    for (size_t k = 0; k < outs_seq.size(); ++k) outs_seq[k].push_back(outs[states.size() + k].t);
  }
  std::vector<Tensor> r;
  for (auto& s : states) r.push_back(s.t);
  for (size_t k = 0; k < outs_seq.size(); ++k) {
    auto seq = outs_seq[k];
    if (k < out_dirs.size() && out_dirs[k] != 0) std::reverse(seq.begin(), seq.end());
    int64_t a = k < out_axes.size() ? out_axes[k] : 0;
    if (a < 0) a += seq[0].rank() + 1;
    r.push_back(g.stack(seq, a));
  }
  return r;
}

void scan(Ctx& c) {
  Graph& g = c.g;
  int64_t m = c.attr_i("num_scan_inputs", 0);
  int first = c.opset < 9 ? 1 : 0;  // Scan-8 starts with sequence_lens
  if (c.opset < 9 && c.has_input(0)) c.fail("sequence_lens is not supported");
  int n = c.num_inputs() - first;
  int n_states = n - static_cast<int>(m);
  if (n_states < 0) c.fail("has " + std::to_string(n) + " inputs but " + std::to_string(m) + " scan inputs");
  std::vector<Value> states;
  std::vector<Tensor> xs;
  for (int i = 0; i < n_states; ++i) {
    c.in(first + i);  // a tensor
    states.push_back(c.value_in(first + i));
  }
  for (int i = n_states; i < n; ++i) xs.push_back(c.in(first + i));
  if (c.opset >= 9) {
    auto r = scan_core(c, states, xs);
    for (size_t i = 0; i < r.size(); ++i) c.out(static_cast<int>(i), r[i]);
    return;
  }
  // Scan-8: dim 0 is a batch; scan along dim 1 of each batch entry.
  if (xs.empty()) c.fail("needs at least one scan input");
  for (auto& s : states)
    if (s.t.rank() < 1) c.fail("state " + s.t.shape().str() + " has no batch dim");
  for (auto& x : xs)
    if (x.rank() < 2) c.fail("scan input " + x.shape().str() + " needs a batch and a sequence dim");
  int64_t batch = xs[0].shape()[0];
  if (batch < 0) c.fail("the batch must be static");
  std::vector<std::vector<Tensor>> per;
  for (int64_t b = 0; b < batch; ++b) {
    auto take = [&](Tensor t) {
      std::vector<int64_t> lo(static_cast<size_t>(t.rank()), 0), hi(static_cast<size_t>(t.rank()), -1);
      lo[0] = b;
      hi[0] = b + 1;
      return g.squeeze(g.slice(t, lo, hi), {0});
    };
    std::vector<Value> sb;
    for (auto& s : states) sb.push_back(Value{take(s.t), std::nullopt, false});
    std::vector<Tensor> xb;
    for (auto& x : xs) xb.push_back(take(x));
    auto r = scan_core(c, sb, xb);
    per.resize(r.size());
    for (size_t i = 0; i < r.size(); ++i) per[i].push_back(r[i]);
  }
  for (size_t i = 0; i < per.size(); ++i) c.out(static_cast<int>(i), g.stack(per[i], 0));
}

// ---- ai.onnx.preview.training optimizers: inputs R, T, then n groups of tensors ----

void adagrad(Ctx& c) {
  Graph& g = c.g;
  int n = (c.num_inputs() - 2) / 3;
  double decay = c.attr_f("decay_factor", 0.f), eps = c.attr_f("epsilon", 0.f), l2 = c.attr_f("norm_coefficient", 0.f);
  for (int i = 0; i < n; ++i) {
    Tensor x = c.in(2 + i), gr = c.in(2 + n + i), h = c.in(2 + 2 * n + i);
    Tensor t = g.cast(c.in(1), x.dtype()), r = g.cast(c.in(0), x.dtype());
    Tensor rate = g.div(r, g.add(scalar_like(g, 1, x), g.mul(t, scalar_like(g, decay, x))));
    Tensor greg = g.add(g.mul(scalar_like(g, l2, x), x), gr);
    Tensor hn = g.add(h, g.mul(greg, greg));
    Tensor ad = g.add(g.sqrt(hn), scalar_like(g, eps, x));
    c.out(i, g.sub(x, g.div(g.mul(rate, greg), ad)));
    c.out(n + i, hn);
  }
}

void momentum(Ctx& c) {
  Graph& g = c.g;
  int n = (c.num_inputs() - 2) / 3;
  double alpha = c.attr_f("alpha", 0.f), beta = c.attr_f("beta", 0.f), l2 = c.attr_f("norm_coefficient", 0.f);
  bool nesterov = c.attr_s("mode", "standard") == "nesterov";
  for (int i = 0; i < n; ++i) {
    Tensor x = c.in(2 + i), gr = c.in(2 + n + i), v = c.in(2 + 2 * n + i);
    Tensor r = g.cast(c.in(0), x.dtype());
    Tensor tpos = g.greater(c.in(1), g.scalar(0, c.in(1).dtype()));
    Tensor b = g.select(tpos, scalar_like(g, beta, x), scalar_like(g, 1, x));
    Tensor greg = g.add(g.mul(scalar_like(g, l2, x), x), gr);
    Tensor vn = g.add(g.mul(scalar_like(g, alpha, x), v), g.mul(b, greg));
    Tensor step = nesterov ? g.add(greg, g.mul(scalar_like(g, alpha, x), vn)) : vn;
    c.out(i, g.sub(x, g.mul(r, step)));
    c.out(n + i, vn);
  }
}

void adam(Ctx& c) {
  Graph& g = c.g;
  int n = (c.num_inputs() - 2) / 4;
  double alpha = c.attr_f("alpha", 0.9f), beta = c.attr_f("beta", 0.999f), eps = c.attr_f("epsilon", 1e-2f);  // ONNX's default
  double l2 = c.attr_f("norm_coefficient", 0.f), l2post = c.attr_f("norm_coefficient_post", 0.f);
  for (int i = 0; i < n; ++i) {
    Tensor x = c.in(2 + i), gr = c.in(2 + n + i), v = c.in(2 + 2 * n + i), h = c.in(2 + 3 * n + i);
    Tensor r = g.cast(c.in(0), x.dtype()), t = g.cast(c.in(1), x.dtype());
    Tensor greg = g.add(g.mul(scalar_like(g, l2, x), x), gr);
    Tensor vn = g.add(g.mul(scalar_like(g, alpha, x), v), g.mul(scalar_like(g, 1 - alpha, x), greg));
    Tensor hn = g.add(g.mul(scalar_like(g, beta, x), h), g.mul(scalar_like(g, 1 - beta, x), g.mul(greg, greg)));
    Tensor hs = g.add(g.sqrt(hn), scalar_like(g, eps, x));
    Tensor one = scalar_like(g, 1, x);
    Tensor adj = g.div(g.mul(r, g.sqrt(g.sub(one, g.pow(scalar_like(g, beta, x), t)))),
                       g.sub(one, g.pow(scalar_like(g, alpha, x), t)));
    Tensor radj = g.select(g.greater(t, scalar_like(g, 0, x)), adj, r);
    Tensor xn = g.sub(x, g.div(g.mul(radj, vn), hs));
    c.out(i, g.mul(scalar_like(g, 1 - l2post, x), xn));
    c.out(n + i, vn);
    c.out(2 * n + i, hn);
  }
}

}  // namespace

const std::vector<Converter>& control_converters() {
  static const std::vector<Converter> t = {
      {"If", 1, kNewestOpset, if_},
      {"Loop", 1, kNewestOpset, loop},
      {"Scan", 8, kNewestOpset, scan},
      {"Adagrad", 1, 1, adagrad},
      {"Momentum", 1, 1, momentum},
      {"Adam", 1, 1, adam},
  };
  return t;
}

}  // namespace tg::onnx_import
