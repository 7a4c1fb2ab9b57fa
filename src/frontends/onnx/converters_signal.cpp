// Converters of ONNX's signal ops: DFT, STFT, the Hann / Hamming / Blackman windows,
// MelWeightMatrix, TfIdfVectorizer.
#include <algorithm>
#include <cmath>
#include <map>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// ---- DFT / STFT: matmuls with constant cosine and sine matrices, in f64 ----

// x [..., n, 1|2] (real or complex last dim); transforms along `axis` to n_out bins.
Tensor dft_core(Ctx& c, Tensor x, int64_t axis, int64_t length, bool inverse, bool onesided) {
  Graph& g = c.g;
  int64_t r = x.rank();
  Shape s = x.shape();
  if (!s.is_static()) c.fail("DFT needs a static shape");
  if (r < 2) c.fail("DFT needs an input of rank 2 or more ([..., n, 1 or 2]), got " + s.str());
  int64_t comps = s[r - 1];
  if (comps != 1 && comps != 2) c.fail("the last dim must be 1 (real) or 2 (complex)");
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r - 1) c.fail("axis out of range");
  // An inverse one-sided transform (irfft) takes N / 2 + 1 bins to N real samples.
  const bool irfft = inverse && onesided;
  int64_t n_in = s[axis], N = length > 0 ? length : irfft ? 2 * (n_in - 1) : n_in;
  if (N <= 0)
    c.fail("the transform length " + std::to_string(N) + " must be positive (input " + s.str() + ")");
  int64_t n_out = irfft ? N : onesided ? N / 2 + 1 : N;
  require_size(c, static_cast<double>(n_in) * static_cast<double>(n_out), "the DFT matrix");
  TensorData cm = TensorData::zeros(Shape{n_in, n_out}, DType::f64), sm = cm.clone();
  for (int64_t t = 0; t < std::min(n_in, irfft ? N / 2 + 1 : N); ++t)
    for (int64_t k = 0; k < n_out; ++k) {
      double th = 2 * M_PI * static_cast<double>((k * t) % N) / static_cast<double>(N);
      // irfft: bin t stands for itself and its conjugate mirror N - t (bins 0 and N / 2 have none).
      double w = irfft && t != 0 && 2 * t != N ? 2.0 : 1.0;
      cm.set(t * n_out + k, w * std::cos(th) / (inverse ? static_cast<double>(N) : 1.0));
      sm.set(t * n_out + k, w * std::sin(th) / (inverse ? static_cast<double>(N) : 1.0));
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
  Tensor y = irfft ? g.expand_dims(g.transpose(re, inv), {r - 1})
                   : g.stack({g.transpose(re, inv), g.transpose(im, inv)}, r - 1);
  return g.cast(y, dt);
}

void dft(Ctx& c) {
  int64_t length = c.has_input(1) ? c.ints_in(1).at(0) : 0;
  // DFT-20 takes the axis as an input (default -2, the last signal dim).
  int64_t axis = c.opset >= 20 ? (c.has_input(2) ? c.ints_in(2).at(0) : -2) : c.attr_i("axis", 1);
  c.out(0, dft_core(c, c.in(0), axis, length, c.attr_i("inverse", 0) != 0, c.attr_i("onesided", 0) != 0));
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

// ---- TfIdfVectorizer (integer pools): every n-gram of the pool counted with static slices ----
// Per n-gram and skip: the n shifted slices of X compared with the gram's items at once and
// the matching windows summed, so the graph grows with n-grams x skips, not with X's length
// (one node per position made a 2 x 76 input with 33 skips take 14 s to import).

constexpr double kMaxTfIdfNodes = 200000;

void tfidf(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  require_rank(c, x, 1, 2, "X");
  if (!x.shape().is_static()) c.fail("needs a static input shape");
  bool one_row = x.rank() == 1;
  if (one_row) x = g.expand_dims(x, {0});
  x = g.cast(x, DType::i64);
  int64_t N = x.shape()[0], C = x.shape()[1];
  int64_t min_n = c.attr_i("min_gram_length", 1), max_n = c.attr_i("max_gram_length", 1);
  int64_t max_skip = c.attr_i("max_skip_count", 0);
  std::string mode = c.attr_s("mode", "TF");
  std::vector<int64_t> counts = c.attr_ints("ngram_counts"), indexes = c.attr_ints("ngram_indexes");
  std::vector<int64_t> pool = c.attr_ints("pool_int64s");
  std::vector<float> weights = c.attr_floats("weights");
  if (pool.empty()) c.fail("only integer pools (pool_int64s) are supported");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") c.fail("unknown mode '" + mode + "'");
  // The n-grams of the pool, in order: counts[i] starts the (i+1)-grams.
  std::vector<std::vector<int64_t>> grams;
  for (size_t i = 0; i < counts.size(); ++i) {
    size_t n = i + 1, begin = static_cast<size_t>(counts[i]);
    size_t end = i + 1 < counts.size() ? static_cast<size_t>(counts[i + 1]) : pool.size();
    if (begin > end || end > pool.size() || (end - begin) % n) c.fail("ngram_counts do not match pool_int64s");
    for (size_t p = begin; p < end; p += n) grams.emplace_back(pool.begin() + static_cast<long>(p), pool.begin() + static_cast<long>(p + n));
  }
  if (grams.size() != indexes.size()) c.fail("ngram_indexes must have one entry per n-gram");
  int64_t width = 0;
  for (int64_t i : indexes) {
    if (i < 0) c.fail("ngram_indexes must not be negative, got " + std::to_string(i));
    width = std::max(width, i + 1);
  }
  require_size(c, static_cast<double>(width) * static_cast<double>(N), "the output");
  // The graph below has about 3n + 3 nodes per n-gram and skip that fits the input: refused
  // beyond what a real vectorizer needs, before a hostile model makes millions of them.
  double planned = 0;
  for (const auto& gram : grams) {
    const int64_t n = static_cast<int64_t>(gram.size());
    if (n < min_n || n > max_n) continue;
    const int64_t fits = n == 1 ? 1 : std::min<int64_t>(max_skip + 1, std::max<int64_t>(0, (C - 1) / (n - 1)));
    planned += static_cast<double>(fits) * static_cast<double>(3 * n + 3);
  }
  if (planned > kMaxTfIdfNodes)
    c.fail("the n-gram search would take " + std::to_string(static_cast<int64_t>(planned)) + " graph nodes (" +
           std::to_string(grams.size()) + " n-grams, up to " + std::to_string(max_skip) + " skips over " +
           std::to_string(C) + " items); at most " + std::to_string(static_cast<int64_t>(kMaxTfIdfNodes)) + " are built");
  std::map<int64_t, Tensor> cols;  // output column -> its count (the rest are zeros)
  for (size_t k = 0; k < grams.size(); ++k) {
    int64_t n = static_cast<int64_t>(grams[k].size());
    if (n < min_n || n > max_n) continue;
    Tensor cnt;
    for (int64_t skip = 0; skip <= (n == 1 ? 0 : max_skip); ++skip) {
      const int64_t len = C - (n - 1) * (skip + 1);  // windows of this skip that fit
      if (len <= 0) break;
      Tensor hit;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t off = j * (skip + 1);
        Tensor e = g.equal(g.slice(x, {0, off}, {N, off + len}),
                           g.scalar(static_cast<double>(grams[k][static_cast<size_t>(j)]), DType::i64));
        hit = hit.valid() ? g.logical_and(hit, e) : e;
      }
      Tensor h = g.reduce_sum(g.cast(hit, DType::f32), {1});
      cnt = cnt.valid() ? g.add(cnt, h) : h;
    }
    if (!cnt.valid()) continue;
    double w = k < weights.size() ? weights[k] : 1.0;
    if (mode == "IDF") cnt = g.mul(g.cast(g.greater(cnt, g.scalar(0, DType::f32)), DType::f32), g.scalar(w, DType::f32));
    else if (mode == "TFIDF") cnt = g.mul(cnt, g.scalar(w, DType::f32));
    Tensor& col = cols[indexes[k]];
    col = col.valid() ? g.add(col, cnt) : cnt;
  }
  // Columns no n-gram maps to are zeros: one constant per run of them, so a wide output with
  // few counted columns stays a few nodes.
  std::vector<Tensor> parts;
  int64_t next = 0;  // the first column not yet in parts
  auto zeros_to = [&](int64_t end) {
    if (end > next) parts.push_back(g.constant(TensorData::zeros(Shape{N, end - next}, DType::f32)));
    next = std::max(next, end);
  };
  for (const auto& [o, col] : cols) {
    zeros_to(o);
    parts.push_back(g.expand_dims(col, {1}));
    next = o + 1;
  }
  zeros_to(width);
  if (parts.empty()) parts.push_back(g.constant(TensorData::zeros(Shape{N, 0}, DType::f32)));
  Tensor y = parts.size() == 1 ? parts[0] : g.concat(parts, 1);
  c.out(0, one_row ? g.squeeze(y, {0}) : y);
}

void window(Ctx& c, int kind) {  // 0 hann, 1 hamming, 2 blackman
  int64_t n = c.ints_in(0).at(0);
  require_size(c, static_cast<double>(n), "the window");
  bool periodic = c.attr_i("periodic", 1) != 0;
  DType dt = dtype_from_onnx(static_cast<int32_t>(c.attr_i("output_datatype", 1)));
  TensorData t(Shape{n}, dt);
  double den = periodic ? static_cast<double>(n) : static_cast<double>(n - 1);
  for (int64_t i = 0; i < n; ++i) {
    double a = 2 * M_PI * static_cast<double>(i) / den, v;
    if (kind == 0) v = 0.5 - 0.5 * std::cos(a);
    else if (kind == 1) v = 25.0 / 46.0 - (1 - 25.0 / 46.0) * std::cos(a);
    else v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
    t.set(i, v);
  }
  c.out_const(0, t);
}

// Triangular mel filters over the DFT bins, as ONNX's reference computes them.
void mel_weight_matrix(Ctx& c) {
  int64_t mels = c.ints_in(0).at(0), dft = c.ints_in(1).at(0), rate = c.ints_in(2).at(0);
  double lo = c.const_in(3).at(0), hi = c.const_in(4).at(0);
  if (mels < 1 || dft < 1 || rate < 1) c.fail("num_mel_bins, dft_length and sample_rate must be positive");
  int64_t bins = dft / 2 + 1;
  require_size(c, static_cast<double>(bins) * static_cast<double>(mels), "the matrix");
  double lo_mel = 2595 * std::log10(1 + lo / 700), hi_mel = 2595 * std::log10(1 + hi / 700);
  double step = (hi_mel - lo_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> f(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    double hz = 700 * (std::pow(10, (static_cast<double>(i) * step + lo_mel) / 2595) - 1);
    f[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(static_cast<double>(dft + 1) * hz / static_cast<double>(rate)));
  }
  TensorData t = TensorData::zeros(Shape{bins, mels}, DType::f64);
  auto set = [&](int64_t j, int64_t i, double v) {
    if (j >= 0 && j < bins) t.set(j * mels + i, v);
  };
  for (int64_t i = 0; i < mels; ++i) {
    int64_t l = f[static_cast<size_t>(i)], m = f[static_cast<size_t>(i + 1)], h = f[static_cast<size_t>(i + 2)];
    if (m == l) set(m, i, 1);
    else
      for (int64_t j = l; j <= m; ++j) set(j, i, static_cast<double>(j - l) / static_cast<double>(m - l));
    if (h > m)
      for (int64_t j = m; j < h; ++j) set(j, i, static_cast<double>(h - j) / static_cast<double>(h - m));
  }
  c.out_const(0, t.cast(dtype_from_onnx(static_cast<int32_t>(c.attr_i("output_datatype", 1)))));
}

}  // namespace

const std::vector<Converter>& signal_converters() {
  static const std::vector<Converter> t = {
      {"DFT", 17, kNewestOpset, dft},
      {"TfIdfVectorizer", 9, kNewestOpset, tfidf},
      {"STFT", 17, kNewestOpset, stft},
      {"MelWeightMatrix", 17, kNewestOpset, mel_weight_matrix},
      {"HannWindow", 17, kNewestOpset, +[](Ctx& c) { window(c, 0); }},
      {"HammingWindow", 17, kNewestOpset, +[](Ctx& c) { window(c, 1); }},
      {"BlackmanWindow", 17, kNewestOpset, +[](Ctx& c) { window(c, 2); }},
  };
  return t;
}

}  // namespace tg::onnx_import
