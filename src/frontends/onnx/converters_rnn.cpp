// Converters of ONNX's recurrent layers (RNN, GRU, LSTM), unrolled over the static sequence
// length.
#include <functional>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

using Act = std::function<Tensor(Tensor)>;

Act activation(Ctx& c, const std::string& name, float alpha, float beta) {
  Graph& g = c.g;
  if (name == "Tanh") return [&g](Tensor x) { return g.tanh(x); };
  if (name == "Sigmoid") return [&g](Tensor x) { return g.sigmoid(x); };
  if (name == "Relu") return [&g](Tensor x) { return g.relu(x); };
  if (name == "LeakyRelu") return [&g, alpha](Tensor x) { return g.leaky_relu(x, alpha); };
  if (name == "HardSigmoid") return [&g, alpha, beta](Tensor x) { return g.hard_sigmoid(x, alpha, beta); };
  if (name == "Elu") return [&g, alpha](Tensor x) { return g.elu(x, alpha); };
  if (name == "Softplus") return [&g](Tensor x) { return g.softplus(x); };
  if (name == "Softsign")
    return [&g](Tensor x) { return g.div(x, g.add(scalar_like(g, 1, x), g.abs(x))); };
  if (name == "Affine")
    return [&g, alpha, beta](Tensor x) { return g.add(g.mul(x, scalar_like(g, alpha, x)), scalar_like(g, beta, x)); };
  if (name == "ScaledTanh")
    return [&g, alpha, beta](Tensor x) { return g.mul(g.tanh(g.mul(x, scalar_like(g, beta, x))), scalar_like(g, alpha, x)); };
  c.fail("activation '" + name + "' is not supported");
}

enum class Cell { rnn, gru, lstm };

template <Cell kind>
void recurrent(Ctx& c) {
  Graph& g = c.g;
  const int gates = kind == Cell::rnn ? 1 : kind == Cell::gru ? 3 : 4;
  Tensor x = c.in(0), W = c.in(1), R = c.in(2);
  require_rank(c, x, 3, 3, "X");
  require_rank(c, W, 3, 3, "W");
  require_rank(c, R, 3, 3, "R");
  int64_t layout = c.attr_i("layout", 0);
  if (layout) x = g.transpose(x, {1, 0, 2});
  Shape xs = x.shape();
  int64_t S = xs[0], B = xs[1];
  if (S < 0) c.fail("the sequence length must be static");
  int64_t H = c.attr_i("hidden_size", R.shape()[2]);
  std::string dir = c.attr_s("direction", "forward");
  int64_t ndir = dir == "bidirectional" ? 2 : 1;
  // W is [num_directions, gates * H, input_size] and R [num_directions, gates * H, H]: checked
  // before anything of hidden_size's size is built.
  const Shape ws = W.shape(), rs = R.shape();
  auto off = [](int64_t dim, int64_t want) { return dim >= 0 && dim != want; };
  if (H <= 0 || off(ws[0], ndir) || off(ws[1], gates * H) || off(rs[0], ndir) || off(rs[1], gates * H) ||
      off(rs[2], H) || off(ws[2], x.shape()[2]))
    c.fail("hidden_size " + std::to_string(H) + ", direction " + dir + " and X " + x.shape().str() + " need W [" +
           std::to_string(ndir) + ", " + std::to_string(gates * H) + ", input_size] and R [" + std::to_string(ndir) +
           ", " + std::to_string(gates * H) + ", " + std::to_string(H) + "], got W " + ws.str() + " and R " + rs.str());
  std::vector<std::string> names;
  const auto* acts = &names;
  for (const auto& a : c.node.attribute())
    if (a.name() == "activations")
      for (const auto& s : a.strings()) names.push_back(s);
  std::vector<float> alphas = c.attr_floats("activation_alpha"), betas = c.attr_floats("activation_beta");
  int per_dir = kind == Cell::rnn ? 1 : kind == Cell::gru ? 2 : 3;
  if (names.empty())
    for (int64_t d = 0; d < ndir; ++d) {
      if (kind == Cell::rnn) names.push_back("Tanh");
      else if (kind == Cell::gru) names.insert(names.end(), {"Sigmoid", "Tanh"});
      else names.insert(names.end(), {"Sigmoid", "Tanh", "Tanh"});
    }
  if (static_cast<int64_t>(acts->size()) != per_dir * ndir) c.fail("wrong number of activations");
  float clip = c.attr_f("clip", 0.f);
  bool lbr = c.attr_i("linear_before_reset", 0) != 0;
  if (kind == Cell::lstm && c.attr_i("input_forget", 0)) c.fail("input_forget is not supported");
  std::optional<TensorData> lens;  // known sequence lengths
  Tensor lens_t;                   // lengths known only at run time: masks are computed then
  if (c.has_input(4)) {
    if (c.is_const(4)) lens = c.const_in(4);
    else lens_t = g.reshape(c.in(4), {-1, 1});
  }

  auto pick = [&](Tensor t, int64_t d) {  // [ndir, ...] -> [...]
    return g.squeeze(g.slice(t, {d}, {d + 1}), {0});
  };
  auto cols = [&](Tensor t, int64_t k) {  // gate k of the last dim (H each)
    std::vector<int64_t> b(static_cast<size_t>(t.rank()), 0), e(static_cast<size_t>(t.rank()), -1);
    b.back() = k * H;
    e.back() = (k + 1) * H;
    return g.slice(t, b, e);
  };
  auto clipped = [&](Tensor t) {
    return clip > 0 ? g.minimum(g.maximum(t, scalar_like(g, -clip, t)), scalar_like(g, clip, t)) : t;
  };

  std::vector<Tensor> ys_dirs, hs, cs;
  for (int64_t d = 0; d < ndir; ++d) {
    bool reverse = dir == "reverse" || d == 1;
    if (reverse && lens_t.valid()) c.fail("run-time sequence_lens with a reverse direction is not supported");
    if (reverse && lens) {
      bool all_full = true;
      for (int64_t b = 0; b < lens->num_elements(); ++b) all_full = all_full && lens->at(b) == S;
      if (!all_full) c.fail("sequence_lens with a reverse direction is not supported");
    }
    int a0 = static_cast<int>(d) * per_dir;
    auto act = [&](int k) {
      size_t i = static_cast<size_t>(a0 + k);
      return activation(c, names[i], i < alphas.size() ? alphas[i] : (names[i] == "LeakyRelu" ? 0.01f : names[i] == "HardSigmoid" ? 0.2f : 1.f),
                        i < betas.size() ? betas[i] : (names[i] == "HardSigmoid" ? 0.5f : 0.f));
    };
    Act f = act(0), gg = per_dir > 1 ? act(1) : f, hh = per_dir > 2 ? act(2) : f;
    Tensor Wd = pick(W, d), Rd = pick(R, d);
    Tensor xw = g.matmul(x, Wd, false, true);  // [S, B, gates*H]
    Tensor wb, rb;
    if (c.has_input(3)) {
      Tensor Bd = pick(c.in(3), d);
      wb = g.slice(Bd, {0}, {gates * H});
      rb = g.slice(Bd, {gates * H}, {2 * gates * H});
      xw = g.add(xw, wb);
    }
    Tensor h = c.has_input(5) ? pick(c.in(5), d) : g.constant(TensorData::zeros(Shape{B, H}, x.dtype()));
    Tensor cell;
    if (kind == Cell::lstm) cell = c.has_input(6) ? pick(c.in(6), d) : g.constant(TensorData::zeros(Shape{B, H}, x.dtype()));
    Tensor P;
    if (kind == Cell::lstm && c.has_input(7)) P = pick(c.in(7), d);
    std::vector<Tensor> ys(static_cast<size_t>(S));
    for (int64_t step = 0; step < S; ++step) {
      int64_t t = reverse ? S - 1 - step : step;
      Tensor xt = g.squeeze(g.slice(xw, {t, 0, 0}, {t + 1, -1, -1}), {0});  // [B, gates*H]
      Tensor hr = g.matmul(h, Rd, false, true);
      if (rb.valid() && !(kind == Cell::gru)) hr = g.add(hr, rb);
      Tensor hn, cn;
      if (kind == Cell::rnn) {
        hn = f(clipped(g.add(xt, hr)));
      } else if (kind == Cell::gru) {
        Tensor rbz, rbr, rbh;
        if (rb.valid()) {
          rbz = cols(rb, 0), rbr = cols(rb, 1), rbh = cols(rb, 2);
        }
        auto plus = [&](Tensor a, Tensor b) { return b.valid() ? g.add(a, b) : a; };
        Tensor z = f(clipped(plus(g.add(cols(xt, 0), cols(hr, 0)), rbz)));
        Tensor r = f(clipped(plus(g.add(cols(xt, 1), cols(hr, 1)), rbr)));
        Tensor Rh = g.slice(Rd, {2 * H, 0}, {3 * H, -1});
        Tensor cand;
        if (lbr) cand = g.add(cols(xt, 2), g.mul(r, plus(cols(hr, 2), rbh)));
        else cand = plus(g.add(cols(xt, 2), g.matmul(g.mul(r, h), Rh, false, true)), rbh);
        Tensor ht = gg(clipped(cand));
        hn = g.add(g.mul(g.sub(scalar_like(g, 1, z), z), ht), g.mul(z, h));
      } else {
        Tensor pre = g.add(xt, hr);
        Tensor pi = cols(pre, 0), po = cols(pre, 1), pf = cols(pre, 2), pc = cols(pre, 3);
        if (P.valid()) {
          pi = g.add(pi, g.mul(g.slice(P, {0}, {H}), cell));
          pf = g.add(pf, g.mul(g.slice(P, {2 * H}, {3 * H}), cell));
        }
        Tensor i = f(clipped(pi)), fg = f(clipped(pf)), ct = gg(clipped(pc));
        cn = g.add(g.mul(fg, cell), g.mul(i, ct));
        if (P.valid()) po = g.add(po, g.mul(g.slice(P, {H}, {2 * H}), cn));
        Tensor o = f(clipped(po));
        hn = g.mul(o, hh(cn));
      }
      Tensor y = hn;
      if (lens || lens_t.valid()) {
        Tensor mask;
        if (lens) {
          TensorData m(Shape{B, 1}, DType::boolean);
          for (int64_t b = 0; b < B; ++b) m.set(b, t < static_cast<int64_t>(lens->at(b)));
          mask = g.constant(m);
        } else {
          mask = g.less(g.scalar(static_cast<double>(t), lens_t.dtype()), lens_t);
        }
        y = g.select(mask, hn, scalar_like(g, 0, hn));
        hn = g.select(mask, hn, h);
        if (cn.valid()) cn = g.select(mask, cn, cell);
      }
      h = hn;
      if (cn.valid()) cell = cn;
      ys[static_cast<size_t>(t)] = y;
    }
    ys_dirs.push_back(g.stack(ys, 0));  // [S, B, H]
    hs.push_back(h);
    if (cell.valid()) cs.push_back(cell);
  }
  Tensor Y = g.stack(ys_dirs, 1);  // [S, ndir, B, H]
  Tensor Yh = g.stack(hs, 0);      // [ndir, B, H]
  if (layout) {
    Y = g.transpose(Y, {2, 0, 1, 3});
    Yh = g.transpose(Yh, {1, 0, 2});
  }
  c.out(0, Y);
  c.out(1, Yh);
  if (kind == Cell::lstm) {
    Tensor Yc = g.stack(cs, 0);
    c.out(2, layout ? g.transpose(Yc, {1, 0, 2}) : Yc);
  }
}

}  // namespace

const std::vector<Converter>& rnn_converters() {
  static const std::vector<Converter> t = {
      {"RNN", 7, kNewestOpset, recurrent<Cell::rnn>},
      {"GRU", 7, kNewestOpset, recurrent<Cell::gru>},
      {"LSTM", 7, kNewestOpset, recurrent<Cell::lstm>},
  };
  return t;
}

}  // namespace tg::onnx_import
