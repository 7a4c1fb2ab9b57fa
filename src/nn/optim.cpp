// Optimizers built from ordinary ops and assign: the state lives in variables named after the
// variable it belongs to, so checkpoints carry it and several executables share it.
#include "tgraph/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tgraph/error.h"

namespace tg::optim {

namespace {

Tensor k(Graph& g, double v, DType t) { return g.scalar(v, t); }

Tensor as(Graph& g, Tensor x, DType t) { return x.dtype() == t ? x : g.cast(x, t); }

// The variable's own name (Tensor::name prints values as "%name").
std::string var_name(Tensor v) {
  std::string n = v.name();
  return !n.empty() && n[0] == '%' ? n.substr(1) : n;
}

void check_var(Tensor v, const char* who) {
  if (!v.valid()) throw Error(std::string("[") + who + "] empty variable handle");
  if (v.op().kind_name() != "variable")
    throw Error(std::string("[") + who + "] " + var_name(v) + " is not a variable");
  if (!is_float(v.dtype()))
    throw Error(std::string("[") + who + "] variable " + var_name(v) + " is " + v.type().str() +
                ", not floating point");
}

void check_lr(Tensor lr, const char* who) {
  if (!lr.valid() || lr.rank() != 0 || !is_float(lr.dtype()))
    throw Error(std::string("[") + who + "] lr must be a floating-point scalar tensor, got " +
                (lr.valid() ? lr.type().str() : std::string("an empty handle")));
}

// State variable of `v` with the given suffix, zero-initialised.
Tensor state(Graph& g, Tensor v, const std::string& suffix) {
  return g.variable(TensorData::zeros(v.shape(), v.dtype()), var_name(v) + "/" + suffix);
}

// assign(var, value), or assign(var, apply_if ? value : var) when a predicate is given.
Operation put(Graph& g, Tensor var, Tensor value, const std::optional<Tensor>& apply_if) {
  if (apply_if) value = g.select(*apply_if, value, var);
  return g.assign(var, value);
}

}  // namespace

Operation group(Graph& g, const std::vector<Operation>& ops) {
  return g.control_dependency(ops, [&] { return std::vector{g.scalar(0.0)}; })[0].op();
}

Operation sgd(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
              const SgdOptions& o) {
  check_lr(lr, "sgd");
  if (o.nesterov && o.momentum <= 0) throw Error("[sgd] nesterov needs a positive momentum");
  std::vector<Operation> ops;
  for (const Tensor& w : vars) {
    check_var(w, "sgd");
    auto it = grads.find(w);
    if (it == grads.end()) throw Error("[sgd] no gradient for variable " + var_name(w));
    DType t = w.dtype();
    Tensor d = as(g, it->second, t);
    if (o.weight_decay != 0) d = g.add(d, g.mul(w, k(g, o.weight_decay, t)));
    if (o.momentum != 0) {
      Tensor buf = state(g, w, "momentum");
      Tensor nb = g.add(g.mul(buf, k(g, o.momentum, t)), d);
      ops.push_back(put(g, buf, nb, o.apply_if));
      d = o.nesterov ? g.add(d, g.mul(nb, k(g, o.momentum, t))) : nb;
    }
    ops.push_back(put(g, w, g.sub(w, g.mul(d, as(g, lr, t))), o.apply_if));
  }
  return group(g, ops);
}

namespace {

Operation adam_impl(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
                    const AdamOptions& o, bool decoupled, const char* who) {
  check_lr(lr, who);
  if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1))
    throw Error(std::string("[") + who + "] betas must be in [0, 1)");
  std::vector<Operation> ops;
  Tensor step = g.variable(TensorData::scalar(0, DType::i64), o.name + "/step");
  Tensor t = g.add(step, g.scalar(1, DType::i64));
  ops.push_back(put(g, step, t, o.apply_if));
  // Bias corrections in f32: 1 - beta^t.
  Tensor tf = g.cast(t, DType::f32);
  Tensor bc1 = g.sub(k(g, 1, f32), g.pow(k(g, o.beta1, f32), tf));
  Tensor bc2 = g.sub(k(g, 1, f32), g.pow(k(g, o.beta2, f32), tf));
  Tensor lr32 = as(g, lr, f32);
  Tensor step_size32 = g.div(lr32, bc1);
  Tensor sqrt_bc2_32 = g.sqrt(bc2);
  for (const Tensor& w : vars) {
    check_var(w, who);
    auto it = grads.find(w);
    if (it == grads.end()) throw Error(std::string("[") + who + "] no gradient for variable " + var_name(w));
    DType dt = w.dtype();
    Tensor d = as(g, it->second, dt);
    if (!decoupled && o.weight_decay != 0) d = g.add(d, g.mul(w, k(g, o.weight_decay, dt)));
    Tensor m = state(g, w, "adam_m"), v = state(g, w, "adam_v");
    Tensor nm = g.add(g.mul(m, k(g, o.beta1, dt)), g.mul(d, k(g, 1 - o.beta1, dt)));
    Tensor nv = g.add(g.mul(v, k(g, o.beta2, dt)), g.mul(g.square(d), k(g, 1 - o.beta2, dt)));
    ops.push_back(put(g, m, nm, o.apply_if));
    ops.push_back(put(g, v, nv, o.apply_if));
    Tensor denom = g.add(g.div(g.sqrt(nv), as(g, sqrt_bc2_32, dt)), k(g, o.epsilon, dt));
    Tensor base = w;
    if (decoupled && o.weight_decay != 0)
      base = g.mul(w, g.sub(k(g, 1, dt), g.mul(as(g, lr32, dt), k(g, o.weight_decay, dt))));
    Tensor nw = g.sub(base, g.mul(as(g, step_size32, dt), g.div(nm, denom)));
    ops.push_back(put(g, w, nw, o.apply_if));
  }
  return group(g, ops);
}

}  // namespace

Operation adam(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
               const AdamOptions& o) {
  return adam_impl(g, vars, grads, lr, o, false, "adam");
}

Operation adamw(Graph& g, const std::vector<Tensor>& vars, const GradMap& grads, Tensor lr,
                AdamOptions o) {
  return adam_impl(g, vars, grads, lr, o, true, "adamw");
}

Tensor global_norm(Graph& g, const GradMap& grads) {
  if (grads.empty()) throw Error("[global_norm] no gradients");
  // Summed in a fixed order (by tensor id) so the result does not depend on hashing.
  std::vector<std::pair<int32_t, Tensor>> sorted;
  for (const auto& [v, d] : grads) sorted.emplace_back(v.id(), d);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Tensor total;
  for (const auto& [id, d] : sorted) {
    Tensor s = g.reduce_sum(g.square(as(g, d, f32)));
    total = total.valid() ? g.add(total, s) : s;
  }
  return g.sqrt(total);
}

GradMap clip_by_global_norm(Graph& g, const GradMap& grads, double max_norm, Tensor* norm_out) {
  if (!(max_norm > 0)) throw Error("[clip_by_global_norm] max_norm must be positive");
  Tensor norm = global_norm(g, grads);
  if (norm_out) *norm_out = norm;
  Tensor mx = k(g, max_norm, f32);
  Tensor factor = g.div(mx, g.maximum(norm, mx));
  GradMap out;
  for (const auto& [v, d] : grads) out[v] = g.mul(d, as(g, factor, d.dtype()));
  return out;
}

double cosine_lr(int64_t step, int64_t total, double base, int64_t warmup, double final_lr) {
  if (warmup > 0 && step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  int64_t span = std::max<int64_t>(1, total - warmup);
  double p = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(span));
  return final_lr + 0.5 * (base - final_lr) * (1 + std::cos(std::numbers::pi * p));
}

double step_lr(int64_t step, int64_t step_size, double base, double gamma) {
  return base * std::pow(gamma, static_cast<double>(step / std::max<int64_t>(1, step_size)));
}

ScaledGradients scaled_gradients(Graph& g, Tensor loss, const std::vector<Tensor>& vars,
                                 const LossScaleOptions& o) {
  if (!(o.initial_scale > 0 && o.growth_factor >= 1 && o.backoff_factor > 0 && o.backoff_factor < 1))
    throw Error("[scaled_gradients] needs initial_scale > 0, growth_factor >= 1, 0 < backoff_factor < 1");
  Tensor scale_var = g.variable(TensorData::scalar(o.initial_scale, f32), o.name + "/scale");
  Tensor good = g.variable(TensorData::scalar(0, DType::i64), o.name + "/good_steps");
  Tensor scaled = g.mul(loss, as(g, scale_var, loss.dtype()));
  GradMap raw = g.gradients(scaled, vars);
  ScaledGradients r;
  r.scale = scale_var;
  Tensor inv = g.reciprocal(scale_var);
  for (const Tensor& v : vars) {
    Tensor d = g.mul(as(g, raw.at(v), f32), inv);
    Tensor fin = g.reduce_all(g.is_finite(d));
    r.finite = r.finite.valid() ? g.logical_and(r.finite, fin) : fin;
    r.grads[v] = d;
  }
  if (!r.finite.valid()) r.finite = g.constant(TensorData::scalar(1, DType::boolean));
  Tensor next_good = g.add(good, g.scalar(1, DType::i64));
  Tensor grow = g.logical_and(r.finite, g.greater_equal(next_good, g.scalar(static_cast<double>(o.growth_interval), DType::i64)));
  Tensor new_scale = g.select(r.finite, g.select(grow, g.mul(scale_var, k(g, o.growth_factor, f32)), scale_var),
                              g.mul(scale_var, k(g, o.backoff_factor, f32)));
  Tensor zero = g.scalar(0, DType::i64);
  Tensor new_good = g.select(grow, zero, g.select(r.finite, next_good, zero));
  r.update = group(g, {g.assign(scale_var, new_scale), g.assign(good, new_good)});
  return r;
}

}  // namespace tg::optim
