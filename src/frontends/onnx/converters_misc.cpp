// Converters of ONNX's Einsum, Det and random ops.
#include <algorithm>

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

}  // namespace

const std::vector<Converter>& misc_converters() {
  static const std::vector<Converter> t = {
      {"Einsum", 12, kNewestOpset, einsum},
      {"Det", 11, kNewestOpset, det},
      {"RandomNormal", 1, kNewestOpset, random_op<true, false>},
      {"RandomUniform", 1, kNewestOpset, random_op<false, false>},
      {"RandomNormalLike", 1, kNewestOpset, random_op<true, true>},
      {"RandomUniformLike", 1, kNewestOpset, random_op<false, true>},
      {"Bernoulli", 15, kNewestOpset, bernoulli},
  };
  return t;
}

}  // namespace tg::onnx_import
