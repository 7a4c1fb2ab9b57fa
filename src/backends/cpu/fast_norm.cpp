// Fast f32 normalisations, softmax and softmax cross-entropy as OpenMP loops. Statistics and
// every per-element formula are computed in double with the reference's expressions
// (src/backends/cpu/ref_nn.cpp): population mean / variance, (x - mean) / sqrt(var + eps) *
// gamma + beta, max-shifted softmax; only the summation order differs. Training batch norm
// over the last axis takes its statistics in one pass of sums shifted by a sample of each
// channel (batch_norm_stats, shared with the fused CPU loops that apply them).
#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

#include "backends/cpu/fast_exp2.h"
#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/reference.h"

namespace tg::detail::fast {
namespace {

constexpr int64_t kParallelMin = 1 << 14;

// x viewed as [outer, len, inner] around axis ax.
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
};
bool lines_of(const std::vector<int64_t>& d, int64_t axis, Lines& l, int64_t& ax) {
  const int64_t r = static_cast<int64_t>(d.size());
  ax = axis < 0 ? axis + r : axis;
  if (ax < 0 || ax >= r) return false;
  for (int64_t i = 0; i < r; ++i) {
    if (i < ax) l.outer *= d[i];
    else if (i == ax) l.len = d[i];
    else l.inner *= d[i];
  }
  return true;
}

bool all_f32(const std::vector<TensorData>& in) {
  for (const TensorData& t : in)
    if (t.empty() || t.dtype() != DType::f32) return false;
  return true;
}

// Per-channel double sums over [outer, C, inner] of f(x, channel); parallel over rows when
// inner == 1 (channels last), else over channels.
template <class F>
void channel_sums(const float* x, const Lines& l, std::vector<double>& acc, F f) {
  const int64_t C = l.len;
  acc.assign(static_cast<size_t>(C), 0.0);
  const bool par = l.outer * l.len * l.inner >= kParallelMin;
  if (l.inner == 1) {
#pragma omp parallel if (par)
    {
      std::vector<double> part(static_cast<size_t>(C), 0.0);
#pragma omp for schedule(static) nowait
      for (int64_t o = 0; o < l.outer; ++o) {
        const float* row = x + o * C;
        for (int64_t c = 0; c < C; ++c) part[static_cast<size_t>(c)] += f(row[c], c);
      }
#pragma omp critical
      for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += part[static_cast<size_t>(c)];
    }
  } else {
#pragma omp parallel for schedule(static) if (par)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t o = 0; o < l.outer; ++o) {
        const float* p = x + (o * C + c) * l.inner;
        for (int64_t i = 0; i < l.inner; ++i) s += f(p[i], c);
      }
      acc[static_cast<size_t>(c)] = s;
    }
  }
}

// y = (x - mean[c]) * (gamma[c] / sd[c]) + beta[c] over [outer, C, inner], in double (within
// an ulp or two of the reference's (x - mean) / sd * gamma + beta before the f32 rounding).
void affine(const float* x, float* y, const Lines& l, const double* mean, const double* sd, const float* gamma,
            const float* beta) {
  const int64_t C = l.len, total = l.outer * l.len * l.inner;
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t oc = 0; oc < l.outer * C; ++oc) {
    const int64_t c = oc % C;
    const double m = mean[c], k = gamma[c] / sd[c], b = beta[c];
    const float* p = x + oc * l.inner;
    float* q = y + oc * l.inner;
#pragma omp simd
    for (int64_t i = 0; i < l.inner; ++i) q[i] = static_cast<float>((p[i] - m) * k + b);
  }
}

// The same for channels last (inner == 1): rows of C with per-channel factors.
void affine_last(const float* x, float* y, int64_t rows, int64_t C, const double* mean, const double* k,
                 const double* beta) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = x + r * C;
    float* q = y + r * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) q[c] = static_cast<float>((p[c] - mean[c]) * k[c] + beta[c]);
  }
}

// Sums of x - shift[c] and of their squares per channel over rows [r0, r1) of [rows, C]: one
// pass, shifted by a sample of each channel so that the variance loses no digits.
TG_CPU_CLONES
void shifted_moments(const float* __restrict x, int64_t r0, int64_t r1, int64_t C, const float* __restrict shift,
                     double* __restrict s, double* __restrict q) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = x + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(row[c]) - static_cast<double>(shift[c]);
      s[c] += d;
      q[c] += d * d;
    }
  }
}

// The training-mode output over channels last: parameters tiled to a chunk of whole rows.
void apply_last(const float* x, float* y, int64_t rows, const BatchNormStats& st) {
  const int64_t C = static_cast<int64_t>(st.mean.size());
  const int64_t per = std::max<int64_t>(1, 1024 / C), chunk = per * C, total = rows * C;
  std::vector<double> m(static_cast<size_t>(chunk)), k(static_cast<size_t>(chunk)), b(static_cast<size_t>(chunk));
  for (int64_t i = 0; i < chunk; ++i) {
    m[static_cast<size_t>(i)] = st.mean[static_cast<size_t>(i % C)];
    k[static_cast<size_t>(i)] = st.scale[static_cast<size_t>(i % C)];
    b[static_cast<size_t>(i)] = st.shift[static_cast<size_t>(i % C)];
  }
  const int64_t chunks = (total + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t i = 0; i < chunks; ++i)
    batch_norm_apply(x + i * chunk, y + i * chunk, std::min(chunk, total - i * chunk), m.data(), k.data(), b.data());
}

bool batch_norm(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  if (n.kind == OpKind::BatchNormTraining) {
    BatchNormStats st;
    if (batch_norm_stats(n, in, st)) {
      const int64_t C = static_cast<int64_t>(st.mean.size());
      TensorData y = cpu_output(0, in[0].shape(), DType::f32);
      apply_last(in[0].ptr<float>(), y.ptr<float>(), in[0].num_elements() / C, st);
      TensorData m = cpu_output(1, Shape({C}), DType::f32), v = cpu_output(2, Shape({C}), DType::f32);
      for (int64_t c = 0; c < C; ++c) {
        m.ptr<float>()[c] = static_cast<float>(st.mean[static_cast<size_t>(c)]);
        v.ptr<float>()[c] = static_cast<float>(st.var[static_cast<size_t>(c)]);
      }
      out.clear();
      out.push_back(std::move(y));
      out.push_back(std::move(m));
      out.push_back(std::move(v));
      return true;
    }
  }
  const auto* d = std::get_if<NormDesc>(&n.attr);
  const bool training = n.kind == OpKind::BatchNormTraining;
  if (!d || in.size() != (training ? 3u : 5u) || !all_f32(in)) return false;
  const auto& xd = in[0].shape().dims();
  Lines l;
  int64_t ax;
  if (!lines_of(xd, d->axis, l, ax)) return false;
  const int64_t C = l.len;
  for (size_t k = 1; k < in.size(); ++k)
    if (in[k].shape().dims() != std::vector<int64_t>{C}) return false;
  if (l.outer * l.inner == 0) return false;
  const float* x = in[0].ptr<float>();
  std::vector<double> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C)), sd(static_cast<size_t>(C));
  if (training) {
    const double cnt = static_cast<double>(l.outer * l.inner);
    channel_sums(x, l, mean, [](float v, int64_t) { return static_cast<double>(v); });
    for (double& m : mean) m /= cnt;
    const double* mp = mean.data();
    channel_sums(x, l, var, [mp](float v, int64_t c) {
      double t = v - mp[c];
      return t * t;
    });
    for (double& v : var) v /= cnt;
  } else {
    for (int64_t c = 0; c < C; ++c) {
      mean[static_cast<size_t>(c)] = in[1].ptr<float>()[c];
      var[static_cast<size_t>(c)] = in[2].ptr<float>()[c];
    }
  }
  for (int64_t c = 0; c < C; ++c) sd[static_cast<size_t>(c)] = std::sqrt(var[static_cast<size_t>(c)] + d->epsilon);
  const size_t gi = training ? 1 : 3;
  TensorData y = cpu_output(0, in[0].shape(), DType::f32);
  if (l.inner == 1) {
    std::vector<double> k(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      k[static_cast<size_t>(c)] = in[gi].ptr<float>()[c] / sd[static_cast<size_t>(c)];
      b[static_cast<size_t>(c)] = in[gi + 1].ptr<float>()[c];
    }
    affine_last(x, y.ptr<float>(), l.outer, C, mean.data(), k.data(), b.data());
  } else {
    affine(x, y.ptr<float>(), l, mean.data(), sd.data(), in[gi].ptr<float>(), in[gi + 1].ptr<float>());
  }
  out.clear();
  out.push_back(std::move(y));
  if (training) {
    TensorData m = cpu_output(1, Shape({C}), DType::f32), v = cpu_output(2, Shape({C}), DType::f32);
    for (int64_t c = 0; c < C; ++c) {
      m.ptr<float>()[c] = static_cast<float>(mean[static_cast<size_t>(c)]);
      v.ptr<float>()[c] = static_cast<float>(var[static_cast<size_t>(c)]);
    }
    out.push_back(std::move(m));
    out.push_back(std::move(v));
  }
  return true;
}

// One row: mean and variance in double over 16 lanes (a single running sum is bound by the add
// latency, 4 cycles an element), then (x - mean) / sd * gamma + beta per element, as the
// reference computes it.
TG_CPU_CLONES void layer_norm_row(const float* __restrict p, const float* __restrict g, const float* __restrict b,
                                  float* __restrict q, int64_t n, double eps) {
  constexpr int L = 16;
  double acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) acc[l] += p[i + l];
  double mean = 0;
  for (int l = 0; l < L; ++l) mean += acc[l];
  for (; i < n; ++i) mean += p[i];
  mean /= static_cast<double>(n);
  for (int l = 0; l < L; ++l) acc[l] = 0;
  for (i = 0; i + L <= n; i += L)
    for (int l = 0; l < L; ++l) {
      const double e = p[i + l] - mean;
      acc[l] += e * e;
    }
  double var = 0;
  for (int l = 0; l < L; ++l) var += acc[l];
  for (; i < n; ++i) var += (p[i] - mean) * (p[i] - mean);
  const double sd = std::sqrt(var / static_cast<double>(n) + eps);
  for (i = 0; i < n; ++i) q[i] = static_cast<float>((p[i] - mean) / sd * g[i] + b[i]);
}

bool layer_norm(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  const auto* d = std::get_if<NormDesc>(&n.attr);
  if (!d || in.size() != 3 || !all_f32(in)) return false;
  const auto& xd = in[0].shape().dims();
  const int64_t r = static_cast<int64_t>(xd.size());
  const int64_t ax = d->axis < 0 ? d->axis + r : d->axis;
  if (ax < 0 || ax >= r) return false;
  int64_t rows = 1, tail = 1;
  for (int64_t i = 0; i < r; ++i) (i < ax ? rows : tail) *= xd[static_cast<size_t>(i)];
  if (tail == 0 || in[1].num_elements() != tail || in[2].num_elements() != tail) return false;
  const float *x = in[0].ptr<float>(), *g = in[1].ptr<float>(), *b = in[2].ptr<float>();
  TensorData y = cpu_output(0, in[0].shape(), DType::f32);
  float* yp = y.ptr<float>();
#pragma omp parallel for schedule(static) if (rows * tail >= kParallelMin)
  for (int64_t row = 0; row < rows; ++row)
    layer_norm_row(x + row * tail, g, b, yp + row * tail, tail, d->epsilon);
  out.clear();
  out.push_back(std::move(y));
  return true;
}

// Softmax / log-softmax of one strided line in double, as the reference's softmax_line.
inline void softmax_line(const float* x, int64_t stride, int64_t len, bool log, double* tmp) {
  double m = -std::numeric_limits<double>::infinity(), s = 0;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, static_cast<double>(x[j * stride]));
  for (int64_t j = 0; j < len; ++j) {
    tmp[j] = std::exp(x[j * stride] - m);
    s += tmp[j];
  }
  const double ls = std::log(s);
  for (int64_t j = 0; j < len; ++j) tmp[j] = log ? (x[j * stride] - m) - ls : tmp[j] / s;
}

// e^(x - m) for x <= m, written so that the loops calling it vectorise: x - m = k ln2 + r with
// |r| <= ln2/2 reduced in double (x - m itself rounded to float would cost up to 2^-18 relative
// at |x - m| ~ 100), e^r by its Taylor series to r^7 in float (truncation below 6e-9
// relative), times 2^k in double (exponent bits) and rounded to float once, so results below
// the smallest normal float come out denormal rather than flushed. k and 2^k come from
// fast_exp2.h (no libm call or integer conversion: the loop vectorises; it took 3.4 ns an
// element before); x - m is clamped at -200, where e^x is 0 in float, so 2^k stays a normal
// double (the clamp is a select: this file is built without trapping math, src/CMakeLists.txt).
inline float exp_shifted(float x, float m) {
  const double d0 = static_cast<double>(x) - static_cast<double>(m);
  const double d = d0 > -200.0 ? d0 : -200.0;
  const double k = round_nearest(d * 1.4426950408889634);
  const float r = static_cast<float>(d - k * 0.6931471805599453);
  float p = 1.f / 5040;
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  return static_cast<float>(static_cast<double>(p) * pow2i(k));
}

// A contiguous line (the softmax axis innermost: attention scores, logits) in float: one
// vectorised exp per element and partial sums in 16 lanes, combined in double; within the f32
// tolerance of the double reference. Rows holding a NaN or +inf take the double line.
TG_CPU_CLONES void softmax_row(const float* x, float* y, int64_t len, bool log) {
  constexpr int L = 16;
  float mx[L], acc[L];
  for (int i = 0; i < L; ++i) mx[i] = -std::numeric_limits<float>::infinity();
  int nan = 0;
  int64_t j = 0;
  for (; j + L <= len; j += L)
    for (int i = 0; i < L; ++i) {
      const float v = x[j + i];
      nan |= v != v;
      mx[i] = v > mx[i] ? v : mx[i];
    }
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < L; ++i) m = std::max(m, mx[i]);
  for (; j < len; ++j) {
    nan |= x[j] != x[j];
    m = std::max(m, x[j]);
  }
  if (nan || m == std::numeric_limits<float>::infinity() || m == -std::numeric_limits<float>::infinity()) {
    std::vector<double> tmp(static_cast<size_t>(len));
    softmax_line(x, 1, len, log, tmp.data());
    for (int64_t t = 0; t < len; ++t) y[t] = static_cast<float>(tmp[static_cast<size_t>(t)]);
    return;
  }
  for (int64_t t = 0; t < len; ++t) y[t] = exp_shifted(x[t], m);
  for (int i = 0; i < L; ++i) acc[i] = 0.f;
  for (j = 0; j + L <= len; j += L)
    for (int i = 0; i < L; ++i) acc[i] += y[j + i];
  double s = 0;
  for (int i = 0; i < L; ++i) s += acc[i];
  for (; j < len; ++j) s += y[j];
  if (log) {
    const double ls = std::log(s) + m;
    for (int64_t t = 0; t < len; ++t) y[t] = static_cast<float>(static_cast<double>(x[t]) - ls);
  } else {
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t t = 0; t < len; ++t) y[t] *= inv;
  }
}

bool softmax(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  const auto* d = std::get_if<AxisDesc>(&n.attr);
  if (!d || in.size() != 1 || !all_f32(in)) return false;
  Lines l;
  int64_t ax;
  if (!lines_of(in[0].shape().dims(), d->axis, l, ax)) return false;
  const bool log = n.kind == OpKind::LogSoftmax;
  const float* x = in[0].ptr<float>();
  TensorData y = cpu_output(0, in[0].shape(), DType::f32);
  float* yp = y.ptr<float>();
  const int64_t lines = l.outer * l.inner;
  if (l.inner == 1) {
#pragma omp parallel for schedule(static) if (lines * l.len >= kParallelMin)
    for (int64_t li = 0; li < lines; ++li) softmax_row(x + li * l.len, yp + li * l.len, l.len, log);
  } else {
#pragma omp parallel if (lines * l.len >= kParallelMin)
    {
      std::vector<double> tmp(static_cast<size_t>(l.len));
#pragma omp for schedule(static)
      for (int64_t li = 0; li < lines; ++li) {
        const int64_t base = (li / l.inner) * l.len * l.inner + li % l.inner;
        softmax_line(x + base, l.inner, l.len, log, tmp.data());
        for (int64_t j = 0; j < l.len; ++j) yp[base + j * l.inner] = static_cast<float>(tmp[static_cast<size_t>(j)]);
      }
    }
  }
  out.clear();
  out.push_back(std::move(y));
  return true;
}

bool softmax_xent(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in,
                  std::vector<TensorData>& out) {
  const auto* d = std::get_if<LossDesc>(&n.attr);
  if (!d || in.size() != 2 || !all_f32(in)) return false;
  if (in[0].shape().dims() != in[1].shape().dims()) return false;  // broadcast labels: reference
  Lines l;
  int64_t ax;
  if (!lines_of(in[0].shape().dims(), d->axis, l, ax)) return false;
  const float *a = in[0].ptr<float>(), *b = in[1].ptr<float>();
  const int64_t lines = l.outer * l.inner;
  std::vector<double> per(static_cast<size_t>(lines));
#pragma omp parallel if (lines * l.len >= kParallelMin)
  {
    std::vector<double> tmp(static_cast<size_t>(l.len));
#pragma omp for schedule(static)
    for (int64_t li = 0; li < lines; ++li) {
      const int64_t base = (li / l.inner) * l.len * l.inner + li % l.inner;
      softmax_line(a + base, l.inner, l.len, true, tmp.data());
      double s = 0;
      for (int64_t j = 0; j < l.len; ++j) {
        double lab = b[base + j * l.inner];
        if (lab != 0) s -= lab * tmp[static_cast<size_t>(j)];
      }
      per[static_cast<size_t>(li)] = s;
    }
  }
  std::vector<TensorType> types = concrete_output_types(g, n, in);
  if (types.size() != 1 || types[0].dtype != DType::f32) return false;
  TensorData y = cpu_output(0, types[0].shape, DType::f32);
  if (d->reduction == LossReduction::none) {
    if (y.num_elements() != lines) return false;
    for (int64_t i = 0; i < lines; ++i) y.ptr<float>()[i] = static_cast<float>(per[static_cast<size_t>(i)]);
  } else {
    if (y.num_elements() != 1) return false;
    double s = 0;
    for (double v : per) s += v;
    y.ptr<float>()[0] = static_cast<float>(d->reduction == LossReduction::sum ? s : s / static_cast<double>(lines));
  }
  out.clear();
  out.push_back(std::move(y));
  return true;
}

}  // namespace

TG_CPU_CLONES
void batch_norm_apply(const float* __restrict x, float* __restrict y, int64_t count, const double* __restrict mean,
                      const double* __restrict scale, const double* __restrict shift) {
  for (int64_t i = 0; i < count; ++i) y[i] = static_cast<float>((x[i] - mean[i]) * scale[i] + shift[i]);
}

bool batch_norm_stats(const Node& n, const std::vector<TensorData>& in, BatchNormStats& st) {
  const auto* d = std::get_if<NormDesc>(&n.attr);
  if (!d || n.kind != OpKind::BatchNormTraining || in.size() != 3 || !all_f32(in)) return false;
  Lines l;
  int64_t ax;
  if (!lines_of(in[0].shape().dims(), d->axis, l, ax) || l.inner != 1) return false;
  const int64_t C = l.len, rows = l.outer;
  if (rows == 0 || C == 0 || in[1].shape().dims() != std::vector<int64_t>{C} ||
      in[2].shape().dims() != std::vector<int64_t>{C})
    return false;
  const float* x = in[0].ptr<float>();
  const int nt = rows * C >= kParallelMin ? omp_get_max_threads() : 1;
  std::vector<double> part(static_cast<size_t>(2 * C * nt), 0.0);
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    double* s = part.data() + 2 * C * t;
    shifted_moments(x, rows * t / T, rows * (t + 1) / T, C, x, s, s + C);
  }
  // Threads' partial sums are added in thread order, so the result does not vary by run.
  const double cnt = static_cast<double>(rows);
  st.mean.assign(static_cast<size_t>(C), 0.0);
  st.var.assign(static_cast<size_t>(C), 0.0);
  st.scale.resize(static_cast<size_t>(C));
  st.shift.resize(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int t = 0; t < nt; ++t) {
      s += part[static_cast<size_t>(2 * C * t + c)];
      q += part[static_cast<size_t>(2 * C * t + C + c)];
    }
    const double ms = s / cnt;
    const size_t k = static_cast<size_t>(c);
    st.mean[k] = x[c] + ms;
    st.var[k] = std::max(0.0, q / cnt - ms * ms);
    st.scale[k] = in[1].ptr<float>()[c] / std::sqrt(st.var[k] + d->epsilon);
    st.shift[k] = in[2].ptr<float>()[c];
  }
  return true;
}

bool norm(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  switch (n.kind) {
    case OpKind::BatchNorm: case OpKind::BatchNormTraining: return batch_norm(n, in, out);
    case OpKind::LayerNorm: return layer_norm(n, in, out);
    case OpKind::Softmax: case OpKind::LogSoftmax: return softmax(n, in, out);
    case OpKind::SoftmaxCrossEntropy: return softmax_xent(g, n, in, out);
    default: return false;
  }
}

}  // namespace tg::detail::fast
