// Layers of the model library: parameters are made (seeded) at construction, forward() builds
// the ops. Training-mode switches are either fixed at build time or a run-time bool scalar.
#include <algorithm>
#include <cmath>

#include "tgraph/error.h"
#include "tgraph/nn.h"

namespace tg::nn {

// ---- initialisers ----------------------------------------------------------------------------

uint64_t seed_for(uint64_t base, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ (base * 0x9e3779b97f4a7c15ull);
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

TensorData init_value(Shape shape, Init init, int64_t fan_in, int64_t fan_out, uint64_t seed, double scale,
                      DType dtype) {
  auto scaled = [&](TensorData t, double s) {
    TensorData out(t.shape(), dtype);
    for (int64_t i = 0; i < t.num_elements(); ++i) out.set(i, t.at(i) * s);
    return out;
  };
  double fi = static_cast<double>(std::max<int64_t>(1, fan_in));
  double fo = static_cast<double>(std::max<int64_t>(1, fan_out));
  switch (init) {
    case Init::zeros: return TensorData::zeros(shape, dtype);
    case Init::ones: return TensorData::full(shape, 1.0, dtype);
    case Init::normal: return scaled(TensorData::randn(shape, DType::f64, seed), scale);
    case Init::uniform: return TensorData::uniform(shape, -scale, scale, dtype, seed);
    case Init::he_normal: return scaled(TensorData::randn(shape, DType::f64, seed), std::sqrt(2.0 / fi));
    case Init::he_uniform: {
      double a = std::sqrt(6.0 / fi);
      return TensorData::uniform(shape, -a, a, dtype, seed);
    }
    case Init::glorot_normal:
      return scaled(TensorData::randn(shape, DType::f64, seed), std::sqrt(2.0 / (fi + fo)));
    case Init::glorot_uniform: {
      double a = std::sqrt(6.0 / (fi + fo));
      return TensorData::uniform(shape, -a, a, dtype, seed);
    }
  }
  throw Error("[nn] unknown initialiser");
}

// ---- Module ----------------------------------------------------------------------------------

std::string Module::child_name(const std::string& local) const {
  return name_.empty() ? local : name_ + "." + local;
}

Tensor Module::add_parameter(Graph& g, const std::string& local, const TensorData& init) {
  params_.push_back(g.variable(init, child_name(local)));
  return params_.back();
}

Tensor Module::add_buffer(Graph& g, const std::string& local, const TensorData& init) {
  buffers_.push_back(g.variable(init, child_name(local)));
  return buffers_.back();
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out = params_;
  for (const auto& c : children_) {
    auto p = c->parameters();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out = buffers_;
  for (const auto& c : children_) {
    auto p = c->buffers();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

std::vector<Operation> Module::updates() const {
  std::vector<Operation> out = updates_;
  for (const auto& c : children_) {
    auto p = c->updates();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

void Module::set_mode(const Mode& m) {
  if (m.flag.valid() && (m.flag.dtype() != DType::boolean || m.flag.rank() != 0))
    throw Error("[nn] the training flag must be a bool scalar, got " + m.flag.type().str());
  mode_ = m;
  for (const auto& c : children_) c->set_mode(m);
}

namespace {

// mode ? a : b, folded at build time when the mode is fixed.
Tensor by_mode(Graph& g, const Mode& m, const std::function<Tensor()>& train, const std::function<Tensor()>& infer) {
  if (!m.flag.valid()) return m.training ? train() : infer();
  return g.select(m.flag, train(), infer());
}

}  // namespace

// ---- Linear ----------------------------------------------------------------------------------

Linear::Linear(Graph& g, const std::string& name, int64_t in, int64_t out, const Options& o) : Module(name) {
  if (in <= 0 || out <= 0) throw Error("[Linear] " + name + ": sizes must be positive");
  weight = add_parameter(g, "weight", init_value({in, out}, o.init, in, out, seed_for(o.seed, child_name("weight")),
                                                 0.02, o.dtype));
  if (o.bias) bias = add_parameter(g, "bias", TensorData::zeros({out}, o.dtype));
}

Tensor Linear::forward(Graph& g, Tensor x) {
  const Shape& s = x.shape();
  int64_t in = weight.shape()[0], out = weight.shape()[1];
  Tensor y;
  int dyn = 0;
  for (int64_t d : s.dims()) dyn += d < 0;
  if (s.ranked() && s.rank() > 2 && dyn <= 1 && s.dim(-1) == in) {
    // One 2-D GEMM instead of a batched one: [.., in] -> [N, in] x [in, out] -> [.., out].
    std::vector<int64_t> back = s.dims();
    back.back() = out;
    y = g.reshape(g.matmul(g.reshape(x, {-1, in}), weight), back);
  } else {
    y = g.matmul(x, weight);
  }
  return bias.valid() ? g.add(y, bias) : y;
}

// ---- Conv2d ----------------------------------------------------------------------------------

Conv2d::Conv2d(Graph& g, const std::string& name, int64_t cin, int64_t cout, int64_t kernel, const Options& o)
    : Module(name) {
  if (cin <= 0 || cout <= 0 || kernel <= 0 || o.groups <= 0 || cin % o.groups || cout % o.groups)
    throw Error("[Conv2d] " + name + ": bad sizes (in " + std::to_string(cin) + ", out " + std::to_string(cout) +
                ", kernel " + std::to_string(kernel) + ", groups " + std::to_string(o.groups) + ")");
  int64_t cig = cin / o.groups;
  int64_t fan_in = kernel * kernel * cig, fan_out = kernel * kernel * cout / o.groups;
  uint64_t seed = seed_for(o.seed, child_name("weight"));
  Layout wl = o.data_layout == Layout::nhwc ? Layout::hwio : Layout::oihw;
  Shape ws = wl == Layout::hwio ? Shape{kernel, kernel, cig, cout} : Shape{cout, cig, kernel, kernel};
  weight = add_parameter(g, "weight", init_value(ws, o.init, fan_in, fan_out, seed, 0.02, o.dtype));
  if (o.bias) bias = add_parameter(g, "bias", TensorData::zeros({cout}, o.dtype));
  int64_t pad = o.padding >= 0 ? o.padding : o.dilation * (kernel - 1) / 2;
  desc.stride = {o.stride, o.stride};
  desc.dilation = {o.dilation, o.dilation};
  desc.padding = PaddingStyle::explicit_;
  desc.explicit_padding = {pad, pad, pad, pad};
  desc.data_layout = o.data_layout;
  desc.weights_layout = wl;
  desc.groups = o.groups;
}

Tensor Conv2d::forward(Graph& g, Tensor x) {
  Tensor y = g.conv2d(x, weight, desc);
  if (!bias.valid()) return y;
  if (desc.data_layout == Layout::nhwc) return g.add(y, bias);
  return g.add(y, g.reshape(bias, {bias.shape()[0], 1, 1}));
}

// ---- BatchNorm2d -----------------------------------------------------------------------------

BatchNorm2d::BatchNorm2d(Graph& g, const std::string& name, int64_t channels, const Options& o)
    : Module(name), options(o) {
  if (channels <= 0) throw Error("[BatchNorm2d] " + name + ": channels must be positive");
  gamma = add_parameter(g, "gamma", TensorData::full({channels}, 1.0, o.dtype));
  beta = add_parameter(g, "beta", TensorData::zeros({channels}, o.dtype));
  running_mean = add_buffer(g, "running_mean", TensorData::zeros({channels}, o.dtype));
  running_var = add_buffer(g, "running_var", TensorData::full({channels}, 1.0, o.dtype));
}

Tensor BatchNorm2d::forward(Graph& g, Tensor x) {
  const Options& o = options;
  if (!mode_.flag.valid() && !mode_.training)
    return g.batch_norm(x, running_mean, running_var, gamma, beta, o.axis, o.epsilon);
  // Batch statistics (biased variance normalises; the running variance is unbiased).
  std::vector<Tensor> t = g.batch_norm_training(x, gamma, beta, o.axis, o.epsilon);
  Tensor y = t[0], bm = t[1], bv = t[2];
  if (mode_.flag.valid()) {
    // Run-time switch: normalise with the statistics the flag picks (select is differentiable;
    // gradients do not flow through if_else regions).
    Tensor mean = g.select(mode_.flag, bm, running_mean), var = g.select(mode_.flag, bv, running_var);
    y = g.batch_norm(x, mean, var, gamma, beta, o.axis, o.epsilon);
  }
  const Shape& s = x.shape();
  int64_t ax = o.axis < 0 ? o.axis + s.rank() : o.axis;
  int64_t n = 1;
  for (int64_t i = 0; i < s.rank(); ++i)
    if (i != ax) n = s[i] < 0 || n < 0 ? -1 : n * s[i];
  Tensor unbiased;
  if (n > 1) {
    unbiased = g.mul(bv, g.scalar(static_cast<double>(n) / static_cast<double>(n - 1), bv.dtype()));
  } else {
    // Dynamic batch: n / (n - 1) from the run-time element count.
    Tensor cnt = g.div(g.cast(g.reduce_prod(g.shape_of(x)), bv.dtype()),
                       g.cast(g.slice(g.shape_of(x), {ax}, {ax + 1}), bv.dtype()));
    cnt = g.reshape(cnt, {});
    unbiased = g.mul(bv, g.div(cnt, g.maximum(g.sub(cnt, g.scalar(1, bv.dtype())), g.scalar(1, bv.dtype()))));
  }
  Tensor m = g.scalar(o.momentum, bm.dtype()), keep = g.scalar(1 - o.momentum, bm.dtype());
  Tensor new_mean = g.add(g.mul(running_mean, keep), g.mul(g.stop_gradient(bm), m));
  Tensor new_var = g.add(g.mul(running_var, keep), g.mul(g.stop_gradient(unbiased), m));
  if (mode_.flag.valid()) {
    new_mean = g.select(mode_.flag, new_mean, running_mean);
    new_var = g.select(mode_.flag, new_var, running_var);
  }
  add_update(g.assign(running_mean, new_mean));
  add_update(g.assign(running_var, new_var));
  return y;
}

// ---- LayerNorm -------------------------------------------------------------------------------

LayerNorm::LayerNorm(Graph& g, const std::string& name, int64_t dim, double eps, DType dtype)
    : Module(name), epsilon(eps) {
  gamma = add_parameter(g, "gamma", TensorData::full({dim}, 1.0, dtype));
  beta = add_parameter(g, "beta", TensorData::zeros({dim}, dtype));
}

Tensor LayerNorm::forward(Graph& g, Tensor x) { return g.layer_norm(x, gamma, beta, -1, epsilon); }

// ---- Embedding -------------------------------------------------------------------------------

Embedding::Embedding(Graph& g, const std::string& name, int64_t num, int64_t dim, double stddev, uint64_t seed,
                     DType dtype)
    : Module(name) {
  table = add_parameter(g, "weight", init_value({num, dim}, Init::normal, num, dim,
                                                seed_for(seed, child_name("weight")), stddev, dtype));
}

Tensor Embedding::forward(Graph& g, Tensor ids) {
  if (!is_integer(ids.dtype())) throw Error("[Embedding] " + name() + ": ids must be integers, got " + ids.type().str());
  return g.gather(table, ids, 0);
}

// ---- Dropout ---------------------------------------------------------------------------------

Dropout::Dropout(Graph& g, const std::string& name, double r, uint64_t seed) : Module(name), rate(r) {
  if (!(r >= 0 && r < 1)) throw Error("[Dropout] " + name + ": rate must be in [0, 1), got " + std::to_string(r));
  TensorData s({2}, DType::i64);
  s.set(0, static_cast<double>(seed_for(seed, child_name("state")) & 0x7fffffffffffull));
  s.set(1, 0);
  state = add_buffer(g, "state", s);
}

Tensor Dropout::forward(Graph& g, Tensor x) {
  if (rate == 0 || (!mode_.flag.valid() && !mode_.training)) return x;
  auto drawn = g.dropout(x, state, rate);  // not a structured binding: lambdas capture y below
  Tensor y = drawn.first, next = drawn.second;
  Tensor nstate = mode_.flag.valid() ? g.select(mode_.flag, next, state) : next;
  add_update(g.assign(state, nstate));
  return by_mode(g, mode_, [&] { return y; }, [&] { return x; });
}

// ---- Sequential ------------------------------------------------------------------------------

Tensor Sequential::forward(Graph& g, Tensor x) {
  for (const auto& c : children()) x = c->forward(g, x);
  return x;
}

}  // namespace tg::nn
