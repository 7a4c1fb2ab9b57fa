// Fast f32 reductions (reduce_sum / mean / max / min over any axes) and sum_to_like as OpenMP
// loops. Sums accumulate in double (the reference sums in double too, so results agree to
// f32 rounding); max / min propagate NaN as the reference does. After dropping unit dims and
// merging neighbours, the layouts [K, R] (reduce the inner run) and [K1, R, K2] (reduce a
// middle or outer run) have their own loops; any other runs one odometer per output element.
#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/reference.h"

namespace tg::detail::fast {
namespace {

constexpr int64_t kParallelMin = 1 << 14;
enum class Red { sum, max, min };

inline double fold(Red r, double acc, double v) {
  switch (r) {
    case Red::sum: return acc + v;
    case Red::max: return (acc != acc || v != v) ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, v);
    default: return (acc != acc || v != v) ? std::numeric_limits<double>::quiet_NaN() : std::min(acc, v);
  }
}
inline double init(Red r) {
  return r == Red::sum ? 0.0 : r == Red::max ? -std::numeric_limits<double>::infinity()
                                             : std::numeric_limits<double>::infinity();
}

// Any other pattern of merged runs (e.g. [R, K, R]): each output element walks its reduced
// runs with an odometer, the innermost reduced run as a strided line.
bool reduce_general(const float* x, const std::vector<std::pair<int64_t, bool>>& m, Red r, bool mean, float* y,
                    int64_t total) {
  const size_t n = m.size();
  std::vector<int64_t> stride(n, 1);
  for (size_t k = n; k-- > 1;) stride[k - 1] = stride[k] * m[k].first;
  std::vector<int64_t> kdim, kst, rdim, rst;
  int64_t outs = 1, cnt = 1;
  for (size_t k = 0; k < n; ++k) {
    if (m[k].second) rdim.push_back(m[k].first), rst.push_back(stride[k]), cnt *= m[k].first;
    else kdim.push_back(m[k].first), kst.push_back(stride[k]), outs *= m[k].first;
  }
  if (rdim.empty()) return false;
  const int64_t len = rdim.back(), ls = rst.back(), lines = cnt / len;
  const double div = static_cast<double>(cnt);
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t o = 0; o < outs; ++o) {
    int64_t base = 0, rem = o;
    for (size_t k = kdim.size(); k-- > 0;) base += (rem % kdim[k]) * kst[k], rem /= kdim[k];
    double acc = init(r);
    for (int64_t li = 0; li < lines; ++li) {
      int64_t off = base, lr = li;
      for (size_t k = rdim.size() - 1; k-- > 0;) off += (lr % rdim[k]) * rst[k], lr /= rdim[k];
      const float* p = x + off;
      for (int64_t j = 0; j < len; ++j) acc = fold(r, acc, p[j * ls]);
    }
    y[o] = static_cast<float>(mean ? acc / div : acc);
  }
  return true;
}

// Reduces x (dims d) over the flagged dims into y (the kept dims, row-major); mean divides the
// sum by the count.
bool reduce_core(const float* x, const std::vector<int64_t>& d, const std::vector<bool>& red, Red r, bool mean,
                 float* y) {
  std::vector<std::pair<int64_t, bool>> m;  // merged (size, reduced) runs
  int64_t total = 1, count = 1;
  for (size_t i = 0; i < d.size(); ++i) {
    total *= d[i];
    if (red[i]) count *= d[i];
    if (d[i] == 1) continue;
    if (!m.empty() && m.back().second == red[i]) m.back().first *= d[i];
    else m.push_back({d[i], red[i]});
  }
  int64_t K1 = 1, R = 1, K2 = 1;
  if (m.empty()) {
  } else if (m.size() == 1) {
    (m[0].second ? R : K1) = m[0].first;
  } else if (m.size() == 2) {
    if (m[0].second) R = m[0].first, K2 = m[1].first;
    else K1 = m[0].first, R = m[1].first;
  } else if (m.size() == 3 && !m[0].second) {
    K1 = m[0].first, R = m[1].first, K2 = m[2].first;
  } else {
    return reduce_general(x, m, r, mean, y, total);
  }
  if (total == 0) {
    for (int64_t i = 0; i < K1 * K2; ++i)
      y[i] = static_cast<float>(mean ? std::numeric_limits<double>::quiet_NaN() : init(r));
    return true;
  }
  (void)count;
  const double div = static_cast<double>(R);
  auto finish = [&](double v) { return static_cast<float>(mean ? v / div : v); };
  const bool par = total >= kParallelMin;
  const int threads = par ? omp_get_max_threads() : 1;
  if (K2 == 1) {  // [K1, R]: contiguous runs
    if (K1 >= threads) {
#pragma omp parallel for schedule(static) if (par)
      for (int64_t k = 0; k < K1; ++k) {
        const float* p = x + k * R;
        double acc = init(r);
        for (int64_t i = 0; i < R; ++i) acc = fold(r, acc, p[i]);
        y[k] = finish(acc);
      }
    } else {
      for (int64_t k = 0; k < K1; ++k) {
        const float* p = x + k * R;
        double acc = init(r);
#pragma omp parallel if (par)
        {
          double part = init(r);
#pragma omp for schedule(static) nowait
          for (int64_t i = 0; i < R; ++i) part = fold(r, part, p[i]);
#pragma omp critical
          acc = fold(r, acc, part);
        }
        y[k] = finish(acc);
      }
    }
    return true;
  }
  // [K1, R, K2]: accumulate rows of K2.
  if (K1 >= threads) {
#pragma omp parallel if (par)
    {
      std::vector<double> acc(static_cast<size_t>(K2));
#pragma omp for schedule(static)
      for (int64_t k = 0; k < K1; ++k) {
        std::fill(acc.begin(), acc.end(), init(r));
        for (int64_t i = 0; i < R; ++i) {
          const float* p = x + (k * R + i) * K2;
          for (int64_t j = 0; j < K2; ++j) acc[static_cast<size_t>(j)] = fold(r, acc[static_cast<size_t>(j)], p[j]);
        }
        for (int64_t j = 0; j < K2; ++j) y[k * K2 + j] = finish(acc[static_cast<size_t>(j)]);
      }
    }
  } else {
    for (int64_t k = 0; k < K1; ++k) {
      std::vector<double> acc(static_cast<size_t>(K2), init(r));
#pragma omp parallel if (par)
      {
        std::vector<double> part(static_cast<size_t>(K2), init(r));
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < R; ++i) {
          const float* p = x + (k * R + i) * K2;
          for (int64_t j = 0; j < K2; ++j) part[static_cast<size_t>(j)] = fold(r, part[static_cast<size_t>(j)], p[j]);
        }
#pragma omp critical
        for (int64_t j = 0; j < K2; ++j) acc[static_cast<size_t>(j)] = fold(r, acc[static_cast<size_t>(j)], part[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < K2; ++j) y[k * K2 + j] = finish(acc[static_cast<size_t>(j)]);
    }
  }
  return true;
}

}  // namespace

bool reduce_bool(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  // reduce_any / reduce_all of bool tensors (attention-mask checks): each output element walks
  // its reduced elements with an odometer and stops at the first that decides it.
  const bool any = n.kind == OpKind::ReduceAny;
  const auto* d = std::get_if<ReduceDesc>(&n.attr);
  if (!d || (!any && n.kind != OpKind::ReduceAll) || in.size() != 1 || in[0].empty() ||
      in[0].dtype() != DType::boolean)
    return false;
  const auto& xd = in[0].shape().dims();
  const int64_t rank = static_cast<int64_t>(xd.size());
  std::vector<bool> red(xd.size(), d->axes.empty());
  for (int64_t a : d->axes) {
    const int64_t k = a < 0 ? a + rank : a;
    if (k < 0 || k >= rank) return false;
    red[static_cast<size_t>(k)] = true;
  }
  std::vector<TensorType> types = concrete_output_types(g, n, in);
  if (types.size() != 1 || types[0].dtype != DType::boolean) return false;
  std::vector<int64_t> stride(xd.size(), 1), kdim, kst, rdim, rst;
  for (int64_t k = rank - 1; k-- > 0;) stride[static_cast<size_t>(k)] = stride[static_cast<size_t>(k) + 1] * xd[static_cast<size_t>(k) + 1];
  int64_t outs = 1, cnt = 1;
  for (size_t k = 0; k < xd.size(); ++k) {
    if (red[k]) rdim.push_back(xd[k]), rst.push_back(stride[k]), cnt *= xd[k];
    else kdim.push_back(xd[k]), kst.push_back(stride[k]), outs *= xd[k];
  }
  TensorData y = cpu_output(0, types[0].shape, DType::boolean);
  const auto* x = static_cast<const uint8_t*>(in[0].data());
  auto* yp = static_cast<uint8_t*>(y.data());
#pragma omp parallel for schedule(static) if (outs * cnt >= kParallelMin)
  for (int64_t o = 0; o < outs; ++o) {
    int64_t base = 0, rem = o;
    for (size_t k = kdim.size(); k-- > 0;) base += (rem % kdim[k]) * kst[k], rem /= kdim[k];
    bool acc = !any;
    for (int64_t i = 0; i < cnt; ++i) {
      int64_t off = base, ri = i;
      for (size_t k = rdim.size(); k-- > 0;) off += (ri % rdim[k]) * rst[k], ri /= rdim[k];
      if ((x[off] != 0) == any) {
        acc = any;
        break;
      }
    }
    yp[o] = acc ? 1 : 0;
  }
  out.clear();
  out.push_back(std::move(y));
  return true;
}

bool reduce(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  if (in.size() != (n.kind == OpKind::SumToLike ? 2u : 1u) || in[0].empty() || in[0].dtype() != DType::f32)
    return false;
  const auto& xd = in[0].shape().dims();
  const int64_t rank = static_cast<int64_t>(xd.size());
  std::vector<bool> red(xd.size(), false);
  Red r = Red::sum;
  bool mean = false;
  if (n.kind == OpKind::SumToLike) {
    if (in[1].empty()) return false;
    const auto& ld = in[1].shape().dims();
    const int64_t lr = static_cast<int64_t>(ld.size());
    if (lr > rank) return false;
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t j = i - (rank - lr);
      if (j < 0) red[static_cast<size_t>(i)] = true;
      else if (ld[static_cast<size_t>(j)] != xd[static_cast<size_t>(i)]) {
        if (ld[static_cast<size_t>(j)] != 1) return false;
        red[static_cast<size_t>(i)] = true;
      }
    }
  } else {
    const auto* d = std::get_if<ReduceDesc>(&n.attr);
    if (!d) return false;
    switch (n.kind) {
      case OpKind::ReduceSum: break;
      case OpKind::ReduceMean: mean = true; break;
      case OpKind::ReduceMax: r = Red::max; break;
      case OpKind::ReduceMin: r = Red::min; break;
      default: return false;
    }
    if (d->axes.empty()) std::fill(red.begin(), red.end(), true);
    for (int64_t a : d->axes) {
      const int64_t k = a < 0 ? a + rank : a;
      if (k < 0 || k >= rank) return false;
      red[static_cast<size_t>(k)] = true;
    }
  }
  std::vector<TensorType> types = concrete_output_types(g, n, in);
  if (types.size() != 1 || types[0].dtype != DType::f32) return false;
  TensorData y = cpu_output(0, types[0].shape, DType::f32);
  int64_t kept = 1;
  for (size_t i = 0; i < xd.size(); ++i)
    if (!red[i]) kept *= xd[i];
  if (y.num_elements() != kept) return false;
  if (!reduce_core(in[0].ptr<float>(), xd, red, r, mean, y.ptr<float>())) return false;
  out.clear();
  out.push_back(std::move(y));
  return true;
}

}  // namespace tg::detail::fast
