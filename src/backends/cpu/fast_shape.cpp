// Fast data-movement ops as OpenMP loops: reshape, broadcast_to / broadcast_like, transpose,
// strided_slice and concat (byte copies, any dtype), plus the small elementwise ops a training step needs beside
// fast_elementwise.cpp's: select, cast between f32 / i32 / bool, f32 comparisons and rsqrt
// (double, rounded once, as the reference). Output shapes come from the op's inference rule.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <omp.h>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/reference.h"
#include "core/element.h"
#include "ops/elementwise_formulas.h"

namespace tg::detail::fast {
namespace {

constexpr int64_t kParallelMin = 1 << 15;

bool out_type(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, TensorType& t) {
  for (const TensorData& x : in)
    if (x.empty()) return false;
  std::vector<TensorType> types = concrete_output_types(g, n, in);
  if (types.size() != 1) return false;
  t = types[0];
  return true;
}

// Copies rows of `inner` elements (w bytes each) of an output of dims od from a source with
// per-dim element strides st (0 where broadcast), walking every output dim but the last
// `inner` run.
void strided_copy(const std::byte* src, std::byte* dst, const std::vector<int64_t>& od0, const std::vector<int64_t>& st0,
                  size_t w) {
  // Merge neighbouring dims that step through the source as one (both broadcast, or contiguous).
  std::vector<int64_t> od, st;
  int64_t total = 1;
  for (size_t k = 0; k < od0.size(); ++k) {
    total *= od0[k];
    if (od0[k] == 1) continue;
    if (!od.empty() && st.back() == st0[k] * od0[k]) {
      od.back() *= od0[k];
      st.back() = st0[k];
    } else {
      od.push_back(od0[k]);
      st.push_back(st0[k]);
    }
  }
  if (total == 0) return;
  const size_t r = od.size();
  if (r == 0) {
    std::memcpy(dst, src, w);
    return;
  }
  if (r == 1 && st[0] == 0 && w == 4) {  // a fill
    uint32_t v;
    std::memcpy(&v, src, 4);
    auto* q4 = reinterpret_cast<uint32_t*>(dst);
#pragma omp parallel for simd schedule(static) if (total >= kParallelMin)
    for (int64_t i = 0; i < total; ++i) q4[i] = v;
    return;
  }
  const int64_t len = od[r - 1], ls = st[r - 1], rows = total / len;
#pragma omp parallel for schedule(static) if (total >= kParallelMin)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t rem = row, off = 0;
    for (size_t k = r - 1; k-- > 0;) {
      off += (rem % od[k]) * st[k];
      rem /= od[k];
    }
    // Signed offsets: a strided slice's negative strides step backwards from its first element.
    const auto sw = static_cast<std::ptrdiff_t>(w);
    std::byte* q = dst + static_cast<std::ptrdiff_t>(row * len) * sw;
    const std::byte* p = src + static_cast<std::ptrdiff_t>(off) * sw;
    if (ls == 1) {
      std::memcpy(q, p, static_cast<size_t>(len) * w);
    } else if (w == 4) {
      const auto* p4 = reinterpret_cast<const uint32_t*>(p);
      auto* q4 = reinterpret_cast<uint32_t*>(q);
      for (int64_t j = 0; j < len; ++j) q4[j] = p4[j * ls];
    } else {
      for (int64_t j = 0; j < len; ++j)
        std::memcpy(q + static_cast<std::ptrdiff_t>(j) * sw, p + static_cast<std::ptrdiff_t>(j * ls) * sw, w);
    }
  }
}

// Element strides of a tensor of dims `in` numpy-broadcast (right-aligned) to dims od.
bool broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& od, std::vector<int64_t>& st) {
  if (in.size() > od.size()) return false;
  st.assign(od.size(), 0);
  const size_t off = od.size() - in.size();
  int64_t s = 1;
  for (size_t k = in.size(); k-- > 0;) {
    if (in[k] == od[off + k]) st[off + k] = in[k] == 1 ? 0 : s;
    else if (in[k] != 1) return false;
    s *= in[k];
  }
  return true;
}

TensorData copy_broadcast(const TensorData& x, const TensorType& t, bool& ok) {
  std::vector<int64_t> st;
  ok = t.dtype == x.dtype() && broadcast_strides(x.shape().dims(), t.shape.dims(), st);
  if (!ok) return {};
  TensorData y = cpu_output(0, t.shape, t.dtype);
  strided_copy(static_cast<const std::byte*>(x.data()), static_cast<std::byte*>(y.data()), t.shape.dims(), st,
               dtype_size(t.dtype));
  return y;
}

template <class F>
void par_for(int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace

bool shape_op(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  if (in.empty()) return false;
  TensorType t;
  TensorData y;
  switch (n.kind) {
    case OpKind::Reshape: {
      if (!out_type(g, n, in, t) || t.dtype != in[0].dtype()) return false;  // inputs 1..: shape sources
      if (t.shape.num_elements() != in[0].num_elements()) return false;
      y = cpu_output(0, t.shape, t.dtype);
      if (y.data() == in[0].data()) break;  // planned as the input's own bytes: nothing to copy
      const size_t bytes = in[0].nbytes();
      const auto* p = static_cast<const std::byte*>(in[0].data());
      auto* q = static_cast<std::byte*>(y.data());
      const int64_t chunks = static_cast<int64_t>((bytes + 65535) / 65536);
#pragma omp parallel for schedule(static) if (bytes >= (1u << 20))
      for (int64_t c = 0; c < chunks; ++c) {
        size_t a = static_cast<size_t>(c) * 65536, b = std::min(bytes, a + 65536);
        std::memcpy(q + a, p + a, b - a);
      }
      break;
    }
    case OpKind::BroadcastTo: case OpKind::BroadcastLike: {
      if ((n.kind == OpKind::BroadcastLike && in.size() != 2u) || !out_type(g, n, in, t)) return false;
      bool ok;
      y = copy_broadcast(in[0], t, ok);
      if (!ok) return false;
      break;
    }
    case OpKind::Tile: {  // out [r0*d0, r1*d1, ...] is [r0, d0, r1, d1, ...]: x read with stride 0 over each r
      const auto* d = std::get_if<TileDesc>(&n.attr);
      if (!d || in.size() != 1 || !out_type(g, n, in, t) || t.dtype != in[0].dtype()) return false;
      const auto& xd = in[0].shape().dims();
      if (d->multiples.size() != xd.size()) return false;
      std::vector<int64_t> xs(xd.size(), 1), dims, st;
      for (size_t k = xd.size(); k-- > 1;) xs[k - 1] = xs[k] * xd[k];
      for (size_t k = 0; k < xd.size(); ++k) {
        if (d->multiples[k] < 0 || t.shape.dims()[k] != xd[k] * d->multiples[k]) return false;
        dims.insert(dims.end(), {d->multiples[k], xd[k]});
        st.insert(st.end(), {0, xs[k]});
      }
      y = cpu_output(0, t.shape, t.dtype);
      if (t.shape.num_elements() > 0)
        strided_copy(static_cast<const std::byte*>(in[0].data()), static_cast<std::byte*>(y.data()), dims, st,
                     dtype_size(t.dtype));
      break;
    }
    case OpKind::Transpose: {
      const auto* d = std::get_if<AxesDesc>(&n.attr);
      if (!d || in.size() != 1 || !out_type(g, n, in, t) || t.dtype != in[0].dtype()) return false;
      const auto& xd = in[0].shape().dims();
      const size_t r = xd.size();
      std::vector<int64_t> perm = d->axes;
      if (perm.empty())
        for (size_t k = r; k-- > 0;) perm.push_back(static_cast<int64_t>(k));
      if (perm.size() != r) return false;
      std::vector<int64_t> xs(r, 1), st(r);
      for (size_t k = r; k-- > 1;) xs[k - 1] = xs[k] * xd[k];
      for (size_t k = 0; k < r; ++k) {
        int64_t p = perm[k] < 0 ? perm[k] + static_cast<int64_t>(r) : perm[k];
        if (p < 0 || p >= static_cast<int64_t>(r) || t.shape.dims()[k] != xd[static_cast<size_t>(p)]) return false;
        st[k] = xs[static_cast<size_t>(p)];
      }
      y = cpu_output(0, t.shape, t.dtype);
      strided_copy(static_cast<const std::byte*>(in[0].data()), static_cast<std::byte*>(y.data()), t.shape.dims(), st,
                   dtype_size(t.dtype));
      break;
    }
    case OpKind::StridedSlice: {  // any dtype: a strided view of x copied, runs by memcpy
      const auto* d = std::get_if<SliceDesc>(&n.attr);
      if (!d || in.size() != 1 || !out_type(g, n, in, t) || t.dtype != in[0].dtype()) return false;
      const auto& xd = in[0].shape().dims();
      const size_t r = xd.size(), ns = d->begin.size();
      if (ns > r || d->end.size() != ns || (!d->strides.empty() && d->strides.size() != ns) || ns >= 63) return false;
      std::vector<int64_t> xs(r, 1), dims, st;
      for (size_t k = r; k-- > 1;) xs[k - 1] = xs[k] * xd[k];
      int64_t offset = 0;  // elements of x before the slice's first
      for (size_t k = 0; k < r; ++k) {
        const int64_t dim = xd[k];
        if (k >= ns) {  // kept whole
          dims.push_back(dim);
          st.push_back(xs[k]);
          continue;
        }
        const int64_t s = d->strides.empty() ? 1 : d->strides[k], b = d->begin[k];
        if (s == 0) return false;
        if ((d->squeeze_mask >> k) & 1) {  // one index, no output dim (inference checked the range)
          offset += (b < 0 ? b + dim : b) * xs[k];
          continue;
        }
        // The first index, by slice_extent's rules (infer_shape_more.cpp); the extent is the output's.
        const int64_t bi = b < 0 ? b + dim : b;
        const int64_t start = s > 0 ? (((d->begin_mask >> k) & 1) ? 0 : std::clamp<int64_t>(bi, 0, dim))
                                    : (((d->begin_mask >> k) & 1) ? dim - 1 : std::clamp<int64_t>(bi, -1, dim - 1));
        if (dims.size() >= t.shape.dims().size()) return false;
        dims.push_back(t.shape.dims()[dims.size()]);
        if (dims.back() > 0 && (start < 0 || start >= dim)) return false;
        offset += dims.back() > 0 ? start * xs[k] : 0;
        st.push_back(s * xs[k]);
      }
      if (dims != t.shape.dims()) return false;
      y = cpu_output(0, t.shape, t.dtype);
      const size_t w = dtype_size(t.dtype);
      if (t.shape.num_elements() > 0)
        strided_copy(static_cast<const std::byte*>(in[0].data()) + static_cast<std::ptrdiff_t>(offset * static_cast<int64_t>(w)),
                     static_cast<std::byte*>(y.data()), dims, st, w);
      break;
    }
    case OpKind::Concat: {
      const auto* d = std::get_if<AxisDesc>(&n.attr);
      if (!d || !out_type(g, n, in, t)) return false;
      const auto& od = t.shape.dims();
      const int64_t r = static_cast<int64_t>(od.size());
      const int64_t ax = d->axis < 0 ? d->axis + r : d->axis;
      if (ax < 0 || ax >= r) return false;
      int64_t outer = 1, inner = 1;
      for (int64_t k = 0; k < r; ++k) {
        if (k < ax) outer *= od[static_cast<size_t>(k)];
        if (k > ax) inner *= od[static_cast<size_t>(k)];
      }
      int64_t sum = 0;
      for (const TensorData& x : in) {
        if (x.dtype() != t.dtype || x.shape().rank() != r) return false;
        sum += x.shape().dims()[static_cast<size_t>(ax)];
      }
      if (sum != od[static_cast<size_t>(ax)]) return false;
      y = cpu_output(0, t.shape, t.dtype);
      const size_t w = dtype_size(t.dtype);
      auto* q = static_cast<std::byte*>(y.data());
      int64_t at = 0;
      for (const TensorData& x : in) {
        const int64_t len = x.shape().dims()[static_cast<size_t>(ax)] * inner;
        const auto* p = static_cast<const std::byte*>(x.data());
        const int64_t row = od[static_cast<size_t>(ax)] * inner;
        par_for(len > 0 ? outer : 0, [&](int64_t o) {
          std::memcpy(q + static_cast<size_t>(o * row + at) * w, p + static_cast<size_t>(o * len) * w,
                      static_cast<size_t>(len) * w);
        });
        at += len;
      }
      break;
    }
    case OpKind::Select: {
      if (in.size() != 3 || !out_type(g, n, in, t)) return false;
      const int64_t cnt = t.shape.num_elements();
      if (in[0].dtype() != DType::boolean || t.dtype != DType::f32 || in[1].dtype() != DType::f32 ||
          in[2].dtype() != DType::f32)
        return false;
      bool ok0, ok1, ok2;
      // Operands of the output's shape are used in place; others are broadcast first.
      auto full = [&](const TensorData& x, DType dt, bool& ok) {
        if (x.shape().dims() == t.shape.dims()) {
          ok = true;
          return x;
        }
        return copy_broadcast(x, TensorType(t.shape, dt), ok);
      };
      TensorData c = full(in[0], DType::boolean, ok0), a = full(in[1], DType::f32, ok1), b = full(in[2], DType::f32, ok2);
      if (!ok0 || !ok1 || !ok2) return false;
      y = cpu_output(0, t.shape, DType::f32);
      const uint8_t* cp = c.ptr<uint8_t>();
      const float *ap = a.ptr<float>(), *bp = b.ptr<float>();
      float* yp = y.ptr<float>();
      par_for(cnt, [&](int64_t i) { yp[i] = cp[i] ? ap[i] : bp[i]; });
      break;
    }
    case OpKind::Cast: {
      if (in.size() != 1 || !out_type(g, n, in, t)) return false;
      const DType from = in[0].dtype(), to = t.dtype;
      const int64_t cnt = in[0].num_elements();
      y = cpu_output(0, t.shape, to);
      if (from == DType::f32 && to == DType::i32) {
        const float* p = in[0].ptr<float>();
        int32_t* q = y.ptr<int32_t>();
        par_for(cnt, [&](int64_t i) { q[i] = saturate<int32_t>(p[i]); });
      } else if (from == DType::f32 && to == DType::boolean) {
        const float* p = in[0].ptr<float>();
        uint8_t* q = y.ptr<uint8_t>();
        par_for(cnt, [&](int64_t i) { q[i] = p[i] != 0.0f ? 1 : 0; });
      } else if (from == DType::i32 && to == DType::f32) {
        const int32_t* p = in[0].ptr<int32_t>();
        float* q = y.ptr<float>();
        par_for(cnt, [&](int64_t i) { q[i] = static_cast<float>(p[i]); });
      } else if (from == DType::boolean && to == DType::f32) {
        const uint8_t* p = in[0].ptr<uint8_t>();
        float* q = y.ptr<float>();
        par_for(cnt, [&](int64_t i) { q[i] = p[i] ? 1.0f : 0.0f; });
      } else if (from == to) {
        std::memcpy(y.data(), in[0].data(), in[0].nbytes());
      } else {
        return false;
      }
      break;
    }
    case OpKind::Greater: case OpKind::GreaterEqual: case OpKind::Less: case OpKind::LessEqual:
    case OpKind::Equal: case OpKind::NotEqual: {
      if (in.size() != 2 || in[0].dtype() != DType::f32 || in[1].dtype() != DType::f32 ||
          in[0].shape().dims() != in[1].shape().dims())
        return false;
      y = cpu_output(0, in[0].shape(), DType::boolean);
      const float *a = in[0].ptr<float>(), *b = in[1].ptr<float>();
      uint8_t* q = y.ptr<uint8_t>();
      const int64_t cnt = in[0].num_elements();
      switch (n.kind) {
        case OpKind::Greater: par_for(cnt, [&](int64_t i) { q[i] = a[i] > b[i]; }); break;
        case OpKind::GreaterEqual: par_for(cnt, [&](int64_t i) { q[i] = a[i] >= b[i]; }); break;
        case OpKind::Less: par_for(cnt, [&](int64_t i) { q[i] = a[i] < b[i]; }); break;
        case OpKind::LessEqual: par_for(cnt, [&](int64_t i) { q[i] = a[i] <= b[i]; }); break;
        case OpKind::Equal: par_for(cnt, [&](int64_t i) { q[i] = a[i] == b[i]; }); break;
        default: par_for(cnt, [&](int64_t i) { q[i] = a[i] != b[i]; }); break;
      }
      break;
    }
    case OpKind::Rsqrt: {
      if (in.size() != 1 || in[0].dtype() != DType::f32) return false;
      y = cpu_output(0, in[0].shape(), DType::f32);
      const float* p = in[0].ptr<float>();
      float* q = y.ptr<float>();
      // in double, rounded once: the reference's result (ops/elementwise_formulas.h)
      par_for(in[0].num_elements(), [&](int64_t i) { q[i] = static_cast<float>(unary_formula<OpKind::Rsqrt>(p[i], 0, 0)); });
      break;
    }
    default:
      return false;
  }
  out.clear();
  out.push_back(std::move(y));
  return true;
}

}  // namespace tg::detail::fast
