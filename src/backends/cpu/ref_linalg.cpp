// Reference matmul (transposes, broadcast batch dims), scaled_matmul and band_part.
#include "backends/cpu/ref_util.h"

namespace tg::detail::ref {
namespace {

// Element (r, k) of the logical (possibly transposed) matrix of x at batch coordinates `bidx`.
struct MatView {
  const TensorData& x;
  bool transposed;
  Dims batch;           // x's batch dims
  int64_t rows, cols;   // stored (untransposed) matrix dims
  explicit MatView(const TensorData& t, bool tr) : x(t), transposed(tr) {
    const Dims& d = dims(t);
    batch.assign(d.begin(), d.end() - 2);
    rows = d[d.size() - 2];
    cols = d[d.size() - 1];
  }
  int64_t index(const Dims& bidx, int64_t r, int64_t k) const {
    int64_t m = batch.empty() ? 0 : broadcast_index(bidx, batch);
    return m * rows * cols + (transposed ? k * cols + r : r * cols + k);
  }
};

template <class T>
void matmul(const Ctx& c, TensorData& y) {
  const auto& d = c.attr<MatmulDesc>();
  MatView a(c.in[0], d.transpose_a), b(c.in[1], d.transpose_b);
  const Dims& od = dims(y);
  const int64_t m = od[od.size() - 2], n = od[od.size() - 1];
  const int64_t kdim = d.transpose_a ? a.rows : a.cols;
  const Dims obatch(od.begin(), od.end() - 2);
  for (int64_t bi = 0; bi < numel(obatch); ++bi) {
    Dims bidx = unravel(bi, obatch);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T acc = 0;
        for (int64_t k = 0; k < kdim; ++k)
          acc = wadd(acc, wmul(load<T>(a.x, a.index(bidx, i, k)), load<T>(b.x, b.index(bidx, k, j))));
        store(y, (bi * m + i) * n + j, acc);
      }
  }
}

// (scale_a * scale_b) * (a @ b): the 8-bit operands read exactly, summed in double, the
// result rounded once to its dtype.
void scaled_matmul(const Ctx& c, TensorData& y) {
  const auto& d = c.attr<ScaledMatmulDesc>();
  MatView a(c.in[0], d.transpose_a), b(c.in[1], d.transpose_b);
  const double scale = c.in[2].at(0) * c.in[3].at(0);
  const int64_t m = dims(y)[0], n = dims(y)[1], kdim = d.transpose_a ? a.rows : a.cols;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < kdim; ++k) acc += a.x.at(a.index({}, i, k)) * b.x.at(b.index({}, k, j));
      y.set(i * n + j, scale * acc);
    }
}

void band_part(const Ctx& c, TensorData& y) {
  const auto& d = c.attr<BandPartDesc>();
  const TensorData& x = c.in[0];
  const Dims& xd = dims(x);
  const int64_t rows = xd[xd.size() - 2], cols = xd[xd.size() - 1];
  for (int64_t f = 0; f < x.num_elements(); ++f) {
    int64_t i = (f / cols) % rows, j = f % cols;
    bool keep = (d.num_lower < 0 || i - j <= d.num_lower) && (d.num_upper < 0 || j - i <= d.num_upper);
    if (keep) copy_elem(y, f, x, f);
    else store_int(y, f, 0);
  }
}

}  // namespace

std::vector<TensorData> eval_linalg(const Ctx& c) {
  TensorData y = c.output(0);
  if (c.kind() == OpKind::BandPart) band_part(c, y);
  else if (c.kind() == OpKind::ScaledMatMul) scaled_matmul(c, y);
  else if (int_like(c.in[0].dtype())) matmul<int64_t>(c, y);
  else matmul<double>(c, y);
  return {y};
}

}  // namespace tg::detail::ref
