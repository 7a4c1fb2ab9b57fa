// Converters of ONNX's Einsum and recurrent layers (RNN, GRU, LSTM, unrolled over the static
// sequence length).
#include <algorithm>
#include <cmath>
#include <functional>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// ---- Einsum: operands are aligned to one letter order, multiplied (broadcast) and summed ----

void einsum(Ctx& c) {
  Graph& g = c.g;
  std::string eq;
  for (char ch : c.attr_s("equation", ""))
    if (ch != ' ') eq += ch;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t s = 0;
  while (true) {
    size_t comma = lhs.find(',', s);
    terms.push_back(lhs.substr(s, comma - s));
    if (comma == std::string::npos) break;
    s = comma + 1;
  }
  if (static_cast<int>(terms.size()) != c.num_inputs()) c.fail("the equation names " + std::to_string(terms.size()) + " operands");
  // An ellipsis becomes letters '0'..'9' (the broadcast dims).
  int64_t ell = 0;
  std::vector<std::string> ops;
  std::map<char, int64_t> size;
  std::vector<Tensor> xs;
  for (size_t i = 0; i < terms.size(); ++i) {
    Tensor x = c.in(static_cast<int>(i));
    std::string t = terms[i];
    size_t e = t.find("...");
    int64_t named = static_cast<int64_t>(t.size()) - (e == std::string::npos ? 0 : 3);
    if (e != std::string::npos) {
      int64_t k = x.rank() - named;
      ell = std::max(ell, k);
      std::string fill;
      for (int64_t j = 0; j < k; ++j) fill += static_cast<char>('0' + (10 - k + j));
      t = t.substr(0, e) + fill + t.substr(e + 3);
    }
    if (static_cast<int64_t>(t.size()) != x.rank()) c.fail("operand " + std::to_string(i) + " has rank " + std::to_string(x.rank()));
    // Repeated letters take the diagonal.
    for (size_t p = 0; p < t.size(); ++p)
      for (size_t q = p + 1; q < t.size(); ++q)
        if (t[p] == t[q]) {
          int64_t n = x.shape()[static_cast<int64_t>(p)];
          if (n < 0) c.fail("a repeated index needs a static dim");
          std::vector<int64_t> ms(t.size(), 1);
          ms[p] = ms[q] = n;
          TensorData eye = TensorData::zeros(Shape{n, n}, x.dtype());
          for (int64_t k = 0; k < n; ++k) eye.set(k * n + k, 1);
          x = g.reduce_sum(g.mul(x, g.reshape(g.constant(eye), ms)), {static_cast<int64_t>(q)});
          t.erase(q, 1);
          --q;
        }
    for (size_t p = 0; p < t.size(); ++p) size[t[p]] = std::max(size[t[p]], x.shape()[static_cast<int64_t>(p)]);
    ops.push_back(t);
    xs.push_back(x);
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    size_t e = out.find("...");
    if (e != std::string::npos) {
      std::string fill;
      for (int64_t j = 0; j < ell; ++j) fill += static_cast<char>('0' + (10 - ell + j));
      out = out.substr(0, e) + fill + out.substr(e + 3);
    }
  } else {
    for (int64_t j = 0; j < ell; ++j) out += static_cast<char>('0' + (10 - ell + j));
    std::map<char, int> count;
    for (const auto& t : ops)
      for (char ch : t) ++count[ch];
    for (auto& [ch, n] : count)
      if (n == 1 && !(ch >= '0' && ch <= '9')) out += ch;
  }
  std::string order = out;
  for (auto& [ch, n] : size)
    if (order.find(ch) == std::string::npos) order += ch;
  Tensor prod;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string& t = ops[i];
    std::vector<int64_t> perm;
    std::string sorted;
    for (char ch : order)
      if (t.find(ch) != std::string::npos) {
        perm.push_back(static_cast<int64_t>(t.find(ch)));
        sorted += ch;
      }
    Tensor x = xs[i];
    bool ident = true;
    for (size_t k = 0; k < perm.size(); ++k) ident = ident && perm[k] == static_cast<int64_t>(k);
    if (!ident) x = g.transpose(x, perm);
    std::vector<int64_t> missing;
    for (size_t k = 0; k < order.size(); ++k)
      if (sorted.find(order[k]) == std::string::npos) missing.push_back(static_cast<int64_t>(k));
    if (!missing.empty()) x = g.expand_dims(x, missing);
    prod = prod.valid() ? g.mul(prod, x) : x;
  }
  std::vector<int64_t> sum_axes;
  for (size_t k = out.size(); k < order.size(); ++k) sum_axes.push_back(static_cast<int64_t>(k));
  if (!sum_axes.empty()) prod = g.reduce_sum(prod, sum_axes);
  // Output dims of size 1 that the operands broadcast stay as the product's.
  c.out(0, prod);
}

// ---- Det: the Leibniz sum over permutations (exact for the small matrices it accepts) ----

void det(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  require_rank(c, x, 2, 64, "the input");
  int64_t r = x.rank(), n = x.shape().dim(-1);
  if (n != x.shape().dim(-2) || n < 1) c.fail("needs square matrices of static size");
  if (n > 4) c.fail("matrices larger than 4x4 are not supported");
  auto elem = [&](int64_t i, int64_t j) {
    std::vector<int64_t> b(static_cast<size_t>(r), 0), e(static_cast<size_t>(r), -1);
    b[static_cast<size_t>(r - 2)] = i;
    e[static_cast<size_t>(r - 2)] = i + 1;
    b[static_cast<size_t>(r - 1)] = j;
    e[static_cast<size_t>(r - 1)] = j + 1;
    return g.squeeze(g.slice(x, b, e), {r - 2, r - 1});
  };
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  Tensor sum;
  do {
    int inversions = 0;
    for (size_t a = 0; a < perm.size(); ++a)
      for (size_t b = a + 1; b < perm.size(); ++b) inversions += perm[a] > perm[b];
    Tensor term = elem(0, perm[0]);
    for (int64_t i = 1; i < n; ++i) term = g.mul(term, elem(i, perm[static_cast<size_t>(i)]));
    if (!sum.valid()) sum = inversions % 2 ? g.neg(term) : term;
    else sum = inversions % 2 ? g.sub(sum, term) : g.add(sum, term);
  } while (std::next_permutation(perm.begin(), perm.end()));
  c.out(0, sum);
}

// ---- DFT / STFT: matmuls with constant cosine and sine matrices, in f64 ----

// x [..., n, 1|2] (real or complex last dim); transforms along `axis` to n_out bins.
Tensor dft_core(Ctx& c, Tensor x, int64_t axis, int64_t length, bool inverse, bool onesided) {
  Graph& g = c.g;
  int64_t r = x.rank();
  Shape s = x.shape();
  if (!s.is_static()) c.fail("DFT needs a static shape");
  int64_t comps = s[r - 1];
  if (comps != 1 && comps != 2) c.fail("the last dim must be 1 (real) or 2 (complex)");
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1) c.fail("axis out of range");
  int64_t n_in = s[axis], N = length > 0 ? length : n_in;
  int64_t n_out = onesided ? N / 2 + 1 : N;
  require_size(c, static_cast<double>(n_in) * static_cast<double>(n_out), "the DFT matrix");
  TensorData cm = TensorData::zeros(Shape{n_in, n_out}, DType::f64), sm = cm.clone();
  for (int64_t t = 0; t < std::min(n_in, N); ++t)
    for (int64_t k = 0; k < n_out; ++k) {
      double th = 2 * M_PI * static_cast<double>((k * t) % N) / static_cast<double>(N);
      cm.set(t * n_out + k, std::cos(th) / (inverse ? static_cast<double>(N) : 1.0));
      sm.set(t * n_out + k, std::sin(th) / (inverse ? static_cast<double>(N) : 1.0));
    }
  Tensor C = g.constant(cm), S = g.constant(sm);
  DType dt = x.dtype();
  Tensor xf = g.cast(x, DType::f64);
  auto part = [&](int64_t i) {  // component i with the signal axis last
    std::vector<int64_t> b(static_cast<size_t>(r), 0), e(static_cast<size_t>(r), -1);
    b.back() = i;
    e.back() = i + 1;
    Tensor p = g.squeeze(g.slice(xf, b, e), {r - 1});
    std::vector<int64_t> perm;
    for (int64_t k = 0; k < r - 1; ++k)
      if (k != axis) perm.push_back(k);
    perm.push_back(axis);
    return g.transpose(p, perm);
  };
  Tensor a = part(0);
  Tensor re = g.matmul(a, C), im = g.neg(g.matmul(a, S));
  if (inverse) im = g.neg(im);
  if (comps == 2) {
    Tensor b = part(1);
    Tensor bs = g.matmul(b, S), bc = g.matmul(b, C);
    re = inverse ? g.sub(re, bs) : g.add(re, bs);
    im = g.add(im, bc);
  }
  std::vector<int64_t> inv(static_cast<size_t>(r - 1));
  {
    std::vector<int64_t> perm;
    for (int64_t k = 0; k < r - 1; ++k)
      if (k != axis) perm.push_back(k);
    perm.push_back(axis);
    for (int64_t k = 0; k < r - 1; ++k) inv[static_cast<size_t>(perm[static_cast<size_t>(k)])] = k;
  }
  Tensor y = g.stack({g.transpose(re, inv), g.transpose(im, inv)}, r - 1);
  return g.cast(y, dt);
}

void dft(Ctx& c) {
  int64_t length = c.has_input(1) ? c.ints_in(1).at(0) : 0;
  c.out(0, dft_core(c, c.in(0), c.attr_i("axis", 1), length, c.attr_i("inverse", 0) != 0, c.attr_i("onesided", 0) != 0));
}

void stft(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  require_rank(c, x, 3, 3, "the signal");
  Shape s = x.shape();
  if (!s.is_static()) c.fail("STFT needs a static shape");
  int64_t step = c.ints_in(1).at(0);
  std::optional<Tensor> window;
  int64_t len = 0;
  if (c.has_input(2)) {
    window = c.in(2);
    len = window->shape().dim(0);
  }
  if (c.has_input(3)) len = c.ints_in(3).at(0);
  if (len <= 0 || step <= 0 || len > s[1]) c.fail("bad frame_length or frame_step");
  int64_t frames = (s[1] - len) / step + 1;
  require_size(c, static_cast<double>(frames) * static_cast<double>(len), "the frames");
  std::vector<Tensor> fs;
  for (int64_t f = 0; f < frames; ++f) fs.push_back(g.slice(x, {0, f * step, 0}, {-1, f * step + len, -1}));
  Tensor fr = g.stack(fs, 1);  // [B, frames, len, c]
  if (window) fr = g.mul(fr, g.reshape(g.cast(*window, x.dtype()), {1, 1, len, 1}));
  c.out(0, dft_core(c, fr, 2, len, false, c.attr_i("onesided", 1) != 0));
}

// ---- GridSample (PyTorch's grid_sample): taps gathered from [N, C, H*W] with run-time indices ----

void grid_sample(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), grid = c.in(1);
  require_rank(c, x, 4, 4, "X");
  require_rank(c, grid, 4, 4, "grid");
  Shape xs = x.shape(), gs = grid.shape();
  if (!xs.is_static() || !gs.is_static()) c.fail("GridSample needs static shapes");
  int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = gs[1], Wo = gs[2];
  std::string mode = c.attr_s("mode", "bilinear"), pad = c.attr_s("padding_mode", "zeros");
  bool align = c.attr_i("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") c.fail("unknown mode '" + mode + "'");
  if (pad != "zeros" && pad != "border" && pad != "reflection") c.fail("unknown padding_mode '" + pad + "'");
  const DType f = DType::f64;
  auto k = [&](double v) { return g.scalar(v, f); };
  Tensor gf = g.cast(grid, f);
  auto coord = [&](int64_t i, int64_t size) {  // unnormalised source coordinate [N, Ho, Wo]
    Tensor v = g.squeeze(g.slice(gf, {0, 0, 0, i}, {-1, -1, -1, i + 1}), {3});
    double n = static_cast<double>(size);
    return align ? g.mul(g.add(v, k(1)), k((n - 1) / 2)) : g.div(g.sub(g.mul(g.add(v, k(1)), k(n)), k(1)), k(2));
  };
  auto reflect = [&](Tensor v, double lo2, double hi2) {
    if (lo2 == hi2) return g.mul(v, k(0));
    double mn = lo2 / 2, span = (hi2 - lo2) / 2;
    Tensor a = g.abs(g.sub(v, k(mn)));
    Tensor extra = g.mod(a, k(span));
    Tensor flips = g.floor(g.div(a, k(span)));
    Tensor even = g.equal(g.floor_mod(flips, k(2)), k(0));
    return g.select(even, g.add(extra, k(mn)), g.add(g.sub(k(span), extra), k(mn)));
  };
  auto bound = [&](Tensor v, int64_t size) {  // border / reflection applied to a coordinate
    double n = static_cast<double>(size);
    if (pad == "border") return g.minimum(g.maximum(v, k(0)), k(n - 1));
    if (pad == "reflection") {
      v = align ? reflect(v, 0, 2 * (n - 1)) : reflect(v, -1, 2 * n - 1);
      return g.minimum(g.maximum(v, k(0)), k(n - 1));
    }
    return v;
  };
  Tensor ix = coord(0, W), iy = coord(1, H);
  if (mode != "bicubic") {
    ix = bound(ix, W);
    iy = bound(iy, H);
  }
  Tensor flat = g.reshape(g.cast(x, f), {N, C, H * W});
  // The value at integer coordinates (xi, yi) [N, Ho, Wo], 0 outside (after per-tap bounding).
  auto tap = [&](Tensor xi, Tensor yi) {
    if (mode == "bicubic" && pad != "zeros") {
      xi = bound(xi, W);
      yi = bound(yi, H);
    }
    Tensor inside = g.logical_and(g.logical_and(g.greater_equal(xi, k(0)), g.less(xi, k(static_cast<double>(W)))),
                                  g.logical_and(g.greater_equal(yi, k(0)), g.less(yi, k(static_cast<double>(H)))));
    Tensor cx = g.minimum(g.maximum(xi, k(0)), k(static_cast<double>(W - 1)));
    Tensor cy = g.minimum(g.maximum(yi, k(0)), k(static_cast<double>(H - 1)));
    Tensor idx = g.cast(g.add(g.mul(cy, k(static_cast<double>(W))), cx), DType::i64);
    idx = g.broadcast_to(g.reshape(idx, {N, 1, Ho * Wo}), {N, C, Ho * Wo});
    Tensor v = g.reshape(g.gather_along_axis(flat, idx, 2), {N, C, Ho, Wo});
    return g.mul(v, g.reshape(g.cast(inside, f), {N, 1, Ho, Wo}));
  };
  auto w4 = [&](Tensor t) { return g.reshape(t, {N, 1, Ho, Wo}); };
  Tensor y;
  if (mode == "nearest") {
    y = tap(g.rint(ix), g.rint(iy));
  } else if (mode == "bilinear") {
    Tensor x0 = g.floor(ix), y0 = g.floor(iy);
    Tensor fx = g.sub(ix, x0), fy = g.sub(iy, y0);
    Tensor x1 = g.add(x0, k(1)), y1 = g.add(y0, k(1));
    Tensor gx = g.sub(k(1), fx), gy = g.sub(k(1), fy);
    y = g.add(g.add(g.mul(tap(x0, y0), w4(g.mul(gx, gy))), g.mul(tap(x1, y0), w4(g.mul(fx, gy)))),
              g.add(g.mul(tap(x0, y1), w4(g.mul(gx, fy))), g.mul(tap(x1, y1), w4(g.mul(fx, fy)))));
  } else {
    const double A = -0.75;
    auto coeffs = [&](Tensor t) {  // the 4 cubic weights for fraction t
      auto near = [&](Tensor d) {  // ((A + 2) d - (A + 3)) d d + 1
        return g.add(g.mul(g.mul(g.sub(g.mul(k(A + 2), d), k(A + 3)), d), d), k(1));
      };
      auto far = [&](Tensor d) {  // ((A d - 5A) d + 8A) d - 4A
        return g.sub(g.mul(g.add(g.mul(g.sub(g.mul(k(A), d), k(5 * A)), d), k(8 * A)), d), k(4 * A));
      };
      return std::vector<Tensor>{far(g.add(t, k(1))), near(t), near(g.sub(k(1), t)), far(g.sub(k(2), t))};
    };
    Tensor x0 = g.floor(ix), y0 = g.floor(iy);
    auto cx = coeffs(g.sub(ix, x0)), cy = coeffs(g.sub(iy, y0));
    for (int j = 0; j < 4; ++j) {
      Tensor row;
      for (int i = 0; i < 4; ++i) {
        Tensor v = g.mul(tap(g.add(x0, k(i - 1)), g.add(y0, k(j - 1))), w4(cx[static_cast<size_t>(i)]));
        row = row.valid() ? g.add(row, v) : v;
      }
      row = g.mul(row, w4(cy[static_cast<size_t>(j)]));
      y = y.valid() ? g.add(y, row) : row;
    }
  }
  c.out(0, g.cast(y, x.dtype()));
}

// ---- random ops: tgraph's Philox stream seeded by the `seed` attribute (0 when absent); the
// values differ from other runtimes' generators ----

Tensor draw(Ctx& c, const std::vector<int64_t>& shape, DType dt, Distribution dist, double a, double b) {
  double total = 1;
  for (int64_t v : shape) total *= static_cast<double>(v);
  require_size(c, total, "the random tensor");
  RandomDesc d;
  d.shape = shape;
  d.dtype = dt;
  d.distribution = dist;
  d.a = a;
  d.b = b;
  return c.g.random(c.g.random_state(static_cast<int64_t>(c.attr_f("seed", 0.f))), d).first;
}

template <bool normal, bool like>
void random_op(Ctx& c) {
  std::vector<int64_t> shape;
  DType dt;
  if (like) {
    Shape s = c.in(0).shape();
    if (!s.is_static()) c.fail("needs a static input shape");
    shape = s.dims();
    dt = c.has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(c.attr_i("dtype", 1))) : c.in(0).dtype();
  } else {
    shape = c.attr_ints("shape");
    dt = dtype_from_onnx(static_cast<int32_t>(c.attr_i("dtype", 1)));
  }
  if (!is_float(dt)) c.fail("the output must be a float type");
  if (normal) c.out(0, draw(c, shape, dt, Distribution::normal, c.attr_f("mean", 0.f), c.attr_f("scale", 1.f)));
  else c.out(0, draw(c, shape, dt, Distribution::uniform, c.attr_f("low", 0.f), c.attr_f("high", 1.f)));
}

void bernoulli(Ctx& c) {
  Graph& g = c.g;
  Tensor p = c.in(0);
  Shape s = p.shape();
  if (!s.is_static()) c.fail("needs a static input shape");
  DType dt = c.has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(c.attr_i("dtype", 1))) : p.dtype();
  Tensor u = draw(c, s.dims(), DType::f64, Distribution::uniform, 0, 1);
  c.out(0, g.cast(g.less(u, g.cast(p, DType::f64)), dt));
}

// ---- recurrent layers ----------------------------------------------------------------------

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

const std::vector<Converter>& misc_converters() {
  static const std::vector<Converter> t = {
      {"Einsum", 12, 18, einsum},
      {"Det", 11, 18, det},
      {"DFT", 17, 18, dft},
      {"RandomNormal", 1, 18, random_op<true, false>},
      {"RandomUniform", 1, 18, random_op<false, false>},
      {"RandomNormalLike", 1, 18, random_op<true, true>},
      {"RandomUniformLike", 1, 18, random_op<false, true>},
      {"Bernoulli", 15, 18, bernoulli},
      {"GridSample", 16, 18, grid_sample},
      {"STFT", 17, 18, stft},
      {"RNN", 7, 18, recurrent<Cell::rnn>},
      {"GRU", 7, 18, recurrent<Cell::gru>},
      {"LSTM", 7, 18, recurrent<Cell::lstm>},
  };
  return t;
}

}  // namespace tg::onnx_import
