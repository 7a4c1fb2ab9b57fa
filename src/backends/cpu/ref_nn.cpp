// Reference normalisations, softmax, losses and scaled dot-product attention, in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Population mean and variance (÷N) of x over the given flat indices.
std::pair<double, double> moments(const TensorData& x, const std::vector<int64_t>& m) {
  double mean = 0, var = 0;
  for (int64_t i : m) mean += x.at(i);
  mean /= static_cast<double>(m.size());
  for (int64_t i : m) var += (x.at(i) - mean) * (x.at(i) - mean);
  return {mean, var / static_cast<double>(m.size())};
}

// Flat indices of x grouped by key(coordinates) into `count` groups.
template <class Key>
std::vector<std::vector<int64_t>> group(const TensorData& x, int64_t count, Key&& key) {
  std::vector<std::vector<int64_t>> g(static_cast<size_t>(count));
  for (int64_t i = 0; i < x.num_elements(); ++i) g[static_cast<size_t>(key(unravel(i, dims(x))))].push_back(i);
  return g;
}

std::vector<TensorData> norm(const Ctx& c) {
  const auto& d = c.attr<NormDesc>();
  const TensorData& x = c.in[0];
  const Dims& xd = dims(x);
  const size_t ax = static_cast<size_t>(norm_axis(c, d.axis, x.shape().rank()));
  std::vector<TensorData> out;
  for (size_t k = 0; k < c.out_types.size(); ++k) out.push_back(c.output(k));
  auto affine = [&](int64_t i, double mean, double var, int64_t p, size_t gi, size_t bi) {
    out[0].set(i, (x.at(i) - mean) / std::sqrt(var + d.epsilon) * c.in[gi].at(p) + c.in[bi].at(p));
  };
  switch (c.kind()) {
    case OpKind::BatchNorm:  // inputs x, mean, var, gamma, beta
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        int64_t ch = unravel(i, xd)[ax];
        affine(i, c.in[1].at(ch), c.in[2].at(ch), ch, 3, 4);
      }
      break;
    case OpKind::BatchNormTraining: {  // statistics per channel over every other dim
      auto g = group(x, xd[ax], [&](const Dims& o) { return o[ax]; });
      for (size_t ch = 0; ch < g.size(); ++ch) {
        auto [mean, var] = moments(x, g[ch]);
        for (int64_t i : g[ch]) affine(i, mean, var, static_cast<int64_t>(ch), 1, 2);
        out[1].set(static_cast<int64_t>(ch), mean);
        out[2].set(static_cast<int64_t>(ch), var);
      }
      break;
    }
    case OpKind::LayerNorm: {  // statistics over dims [axis, rank); gamma/beta shaped like them
      int64_t tail = numel(Dims(xd.begin() + static_cast<long>(ax), xd.end()));
      auto g = group(x, numel(xd) / std::max<int64_t>(tail, 1), [&](const Dims& o) {
        return ravel(Dims(o.begin(), o.begin() + static_cast<long>(ax)), Dims(xd.begin(), xd.begin() + static_cast<long>(ax)));
      });
      for (auto& m : g) {
        auto [mean, var] = moments(x, m);
        for (int64_t i : m) affine(i, mean, var, i % tail, 1, 2);
      }
      break;
    }
    default: {  // group_norm: per image (dim 0) and group of consecutive channels
      const int64_t G = d.groups, cpg = xd[ax] / G;
      auto g = group(x, xd[0] * G, [&](const Dims& o) { return o[0] * G + o[ax] / cpg; });
      for (auto& m : g) {
        auto [mean, var] = moments(x, m);
        for (int64_t i : m) affine(i, mean, var, unravel(i, xd)[ax], 1, 2);
      }
    }
  }
  return out;
}

// Softmax / log-softmax of one line, shifted by its maximum. A line of only -inf gives NaN.
void softmax_line(const TensorData& x, TensorData& y, int64_t base, int64_t stride, int64_t len, bool log) {
  double m = -kInf, s = 0;
  for (int64_t j = 0; j < len; ++j) m = std::max(m, x.at(base + j * stride));
  for (int64_t j = 0; j < len; ++j) s += std::exp(x.at(base + j * stride) - m);
  for (int64_t j = 0; j < len; ++j) {
    double v = x.at(base + j * stride) - m;
    y.set(base + j * stride, log ? v - std::log(s) : std::exp(v) / s);
  }
}

TensorData loss(const Ctx& c) {
  const auto& d = c.attr<LossDesc>();
  const TensorData &a = c.in[0], &b = c.in[1];
  std::vector<double> per;  // the unreduced loss, row-major
  if (c.kind() == OpKind::Mse) {
    for (int64_t i = 0; i < a.num_elements(); ++i) per.push_back((a.at(i) - b.at(i)) * (a.at(i) - b.at(i)));
  } else {
    int64_t ax = norm_axis(c, d.axis, a.shape().rank());
    TensorData ls(a.shape(), DType::f64);
    for_each_line(dims(a), ax, [&](int64_t base, int64_t stride, int64_t len) {
      softmax_line(a, ls, base, stride, len, true);
      double s = 0;
      for (int64_t j = 0; j < len; ++j) {
        double l = b.at(base + j * stride);
        if (l != 0) s -= l * ls.at(base + j * stride);  // a zero label contributes 0, even at -inf
      }
      per.push_back(s);
    });
  }
  TensorData y = c.output(0);
  if (d.reduction == LossReduction::none) {
    for (size_t i = 0; i < per.size(); ++i) y.set(static_cast<int64_t>(i), per[i]);
    return y;
  }
  double s = 0;
  for (double v : per) s += v;
  y.set(0, d.reduction == LossReduction::sum ? s : s / static_cast<double>(per.size()));
  return y;
}

// softmax(q k^T * scale + mask) v per batch; batch dims and the mask broadcast (numpy rules).
TensorData attention(const Ctx& c) {
  const auto& d = c.attr<AttentionDesc>();
  const TensorData &q = c.in[0], &k = c.in[1], &v = c.in[2];
  const TensorData* mask = c.in.size() > 3 ? &c.in[3] : nullptr;
  TensorData y = c.output(0);
  const Dims& yd = dims(y);
  const Dims batch(yd.begin(), yd.end() - 2);
  const int64_t Lq = yd[yd.size() - 2], Dv = yd.back(), Lk = dims(k)[dims(k).size() - 2];
  const int64_t D = dims(q).back();
  const double scale = d.scale != 0 ? d.scale : 1.0 / std::sqrt(static_cast<double>(D));
  auto bidx = [](const TensorData& t, const Dims& b) {
    Dims tb(dims(t).begin(), dims(t).end() - 2);
    return tb.empty() ? 0 : broadcast_index(b, tb);
  };
  for (int64_t bi = 0; bi < numel(batch); ++bi) {
    Dims b = unravel(bi, batch);
    const int64_t qb = bidx(q, b) * Lq * D, kb = bidx(k, b) * Lk * D, vb = bidx(v, b) * Lk * Dv;
    for (int64_t i = 0; i < Lq; ++i) {
      std::vector<double> s(static_cast<size_t>(Lk));
      double m = -kInf;
      for (int64_t j = 0; j < Lk; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < D; ++e) dot += q.at(qb + i * D + e) * k.at(kb + j * D + e);
        double sj = dot * scale;
        if (d.causal && j > i) sj = -kInf;  // top-left aligned: query i sees keys 0..i
        if (mask) {
          Dims sc = b;
          sc.insert(sc.end(), {i, j});
          double mv = mask->at(broadcast_index(sc, dims(*mask)));
          if (mask->dtype() == DType::boolean) sj = mv != 0 ? sj : -kInf;  // true = attend
          else sj += mv;
        }
        s[static_cast<size_t>(j)] = sj;
        m = std::isnan(sj) || std::isnan(m) ? std::nan("") : std::max(m, sj);
      }
      double z = 0;
      for (double& sj : s) z += (sj = m == -kInf ? 0.0 : std::exp(sj - m));  // a fully masked row gives 0
      for (int64_t e = 0; e < Dv; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < Lk; ++j)
          if (s[static_cast<size_t>(j)] != 0) acc += s[static_cast<size_t>(j)] / z * v.at(vb + j * Dv + e);
        y.set((bi * Lq + i) * Dv + e, acc);
      }
    }
  }
  return y;
}

}  // namespace

std::vector<TensorData> eval_nn(const Ctx& c) {
  switch (op_def(c.kind()).family) {
    case Family::norm: return norm(c);
    case Family::softmax: {
      TensorData y = c.output(0);
      int64_t ax = norm_axis(c, c.attr<AxisDesc>().axis, c.in[0].shape().rank());
      for_each_line(dims(c.in[0]), ax, [&](int64_t b, int64_t s, int64_t n) {
        softmax_line(c.in[0], y, b, s, n, c.kind() == OpKind::LogSoftmax);
      });
      return {y};
    }
    case Family::loss: return {loss(c)};
    default: return {attention(c)};
  }
}

}  // namespace tg::detail::ref
