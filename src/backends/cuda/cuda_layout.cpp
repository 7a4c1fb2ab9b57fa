// Layout, data-movement and scan ops on the device. Each op is turned into kernel arguments
// the way the CPU reference (src/backends/cpu/ref_shape.cpp, ref_shape_more.cpp,
// ref_reduce.cpp, ref_linalg.cpp, ref_conv.cpp) maps output coordinates to input
// coordinates; most become one strided copy (kernels_copy.h): transpose, strided_slice,
// reverse, tile, space_to_depth / depth_to_space, each part of concat / split, and the
// scatter of slice_update. Constants the kernels write (pad's fill) are converted on the host
// with the CPU's own store rule, so every byte matches.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/ref_util.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/kernels_copy.h"
#include "backends/cuda/kernels_resize.h"
#include "backends/cuda/kernels_scan.h"
#include "core/element.h"
#include "ops/infer.h"

namespace tg::detail {
namespace {

using Dims = std::vector<long long>;

Dims dims_of(const Shape& s) { return Dims(s.dims().begin(), s.dims().end()); }

Dims row_strides(const Dims& d) {
  Dims s(d.size());
  long long p = 1;
  for (size_t i = d.size(); i-- > 0;) {
    s[i] = p;
    p *= d[i];
  }
  return s;
}

long long numel(const Dims& d) {
  long long n = 1;
  for (long long v : d) n *= v;
  return n;
}

// The dtype's bytes of v under the CPU's store rule (low bytes of the result).
unsigned long long bytes_of(double v, DType t) {
  unsigned long long b = 0;
  store_element(&b, t, 0, v);
  return b;
}

// out[out_offset + c . out_strides] = in[in_offset + c . in_strides] over dims.
struct Copy {
  Dims dims, in_strides, out_strides;
  long long in_offset = 0, out_offset = 0;
};

bool fits(const Copy& c) { return c.dims.size() <= static_cast<size_t>(kCopyMaxRank); }

bool run_copy(const void* in, void* out, const Copy& c, DType t, cudaStream_t stream) {
  if (!fits(c)) return false;
  StridedCopy s;
  s.rank = static_cast<int>(c.dims.size());
  for (int d = 0; d < s.rank; ++d) {
    s.dims[d] = c.dims[static_cast<size_t>(d)];
    s.in_strides[d] = c.in_strides[static_cast<size_t>(d)];
    s.out_strides[d] = c.out_strides[static_cast<size_t>(d)];
  }
  s.in_offset = c.in_offset;
  s.out_offset = c.out_offset;
  return launched(launch_strided_copy(in, out, s, static_cast<int>(dtype_size(t)), stream), "strided copy");
}

// A copy that gathers into a dense output of `dims`.
Copy gather(Dims dims) {
  Copy c;
  c.out_strides = row_strides(dims);
  c.dims = std::move(dims);
  return c;
}

// ---- strided_slice / slice_update: where each input dim is read (as ref slice_map) ----
struct SliceMap {
  Dims start, stride;
  std::vector<bool> squeezed;
};

bool slice_map(const SliceDesc& d, const Dims& x, SliceMap& m) {
  m = {Dims(x.size(), 0), Dims(x.size(), 1), std::vector<bool>(x.size(), false)};
  if (d.begin.size() > x.size()) return false;
  for (size_t i = 0; i < d.begin.size(); ++i) {
    long long n = x[i], s = d.strides.empty() ? 1 : d.strides[i], b = d.begin[i];
    if (s == 0) return false;
    if (b < 0) b += n;
    if ((d.squeeze_mask >> i) & 1) {
      if (b < 0 || b >= n) return false;  // the reference reports it
      m.start[i] = b;
      m.squeezed[i] = true;
      continue;
    }
    bool bmask = (d.begin_mask >> i) & 1;
    m.start[i] = s > 0 ? (bmask ? 0 : std::clamp<long long>(b, 0, n))
                       : (bmask ? n - 1 : std::clamp<long long>(b, -1, n - 1));
    m.stride[i] = s;
  }
  return true;
}

// The slice as a copy over the slice's dims `sd` (input side: x's strides).
bool slice_copy(const SliceDesc& d, const Dims& xd, const Dims& sd, Copy& c) {
  SliceMap m;
  if (!slice_map(d, xd, m)) return false;
  Dims rs = row_strides(xd);
  c.dims = sd;
  size_t k = 0;
  for (size_t i = 0; i < xd.size(); ++i) {
    c.in_offset += m.start[i] * rs[i];
    if (m.squeezed[i]) continue;
    if (k >= sd.size()) return false;
    c.in_strides.push_back(m.stride[i] * rs[i]);
    ++k;
  }
  return k == sd.size();
}

// ---- space_to_depth / depth_to_space (TensorFlow's DCR order, as ref space_depth) ----
bool space_depth(const Node& n, const Dims& xd, Copy& c) {
  const auto& d = std::get<BlockDesc>(n.attr);
  const long long b = d.block;
  const bool last = d.data_layout == Layout::nhwc;
  if ((!last && d.data_layout != Layout::nchw) || xd.size() != 4 || b < 1) return false;
  const bool to_depth = n.kind == OpKind::SpaceToDepth;
  // N, the deep side's spatial dims H, W and the shallow side's channels C.
  const long long N = xd[0];
  long long H, W, C;
  if (to_depth) {
    H = (last ? xd[1] : xd[2]) / b, W = (last ? xd[2] : xd[3]) / b, C = last ? xd[3] : xd[1];
  } else {
    H = last ? xd[1] : xd[2], W = last ? xd[2] : xd[3], C = (last ? xd[3] : xd[1]) / (b * b);
  }
  const long long bbC = b * b * C;
  if (to_depth && last) {  // y[N, H, W, (bh, bw, C)] <- x[N, H*b+bh, W*b+bw, C]
    c = gather({N, H, W, b, b, C});
    c.in_strides = {H * b * W * b * C, b * W * b * C, b * C, W * b * C, C, 1};
  } else if (to_depth) {  // y[N, (bh, bw, C), H, W] <- x[N, C, H*b+bh, W*b+bw]
    c = gather({N, b, b, C, H, W});
    c.in_strides = {C * H * b * W * b, W * b, 1, H * b * W * b, b * W * b, b};
  } else if (last) {  // y[N, H*b+bh, W*b+bw, C] <- x[N, H, W, (bh, bw, C)]
    c = gather({N, H, b, W, b, C});
    c.in_strides = {H * W * bbC, W * bbC, b * C, bbC, C, 1};
  } else {  // y[N, C, H*b+bh, W*b+bw] <- x[N, (bh, bw, C), H, W]
    c = gather({N, C, H, b, W, b});
    c.in_strides = {bbC * H * W, H * W, W, b * C * H * W, 1, C * H * W};
  }
  return true;
}

}  // namespace

bool cuda_layout(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                 const std::vector<DevOut>& out, cudaStream_t stream, int device) {
  if (out.empty()) return false;
  const DType t = out[0].type.dtype;
  const Dims yd = dims_of(out[0].type.shape);
  const Dims xd = in.empty() ? Dims{} : dims_of(in[0].type.shape);
  const long long rank = static_cast<long long>(xd.size());
  const void* x = in.empty() ? nullptr : in[0].ptr;
  void* y = out[0].ptr;
  switch (n.kind) {
    case OpKind::Transpose: {
      const auto& perm = std::get<AxesDesc>(n.attr).axes;
      if (static_cast<long long>(perm.size()) != rank) return false;
      Copy c = gather(yd);
      Dims rs = row_strides(xd);
      for (int64_t p : perm) {
        auto a = normalize_axis(p, rank);
        if (!a) return false;
        c.in_strides.push_back(rs[static_cast<size_t>(*a)]);
      }
      return run_copy(x, y, c, t, stream);
    }
    case OpKind::Concat: {
      auto a = normalize_axis(std::get<AxisDesc>(n.attr).axis, rank);
      if (!a) return false;
      const size_t ax = static_cast<size_t>(*a);
      Dims os = row_strides(yd);
      std::vector<Copy> parts;
      long long offset = 0;
      for (const DevArg& part : in) {
        Dims pd = dims_of(part.type.shape);
        if (pd.size() != yd.size() || part.type.dtype != t) return false;
        Copy c{pd, row_strides(pd), os, 0, offset * os[ax]};
        offset += pd[ax];
        if (!fits(c)) return false;
        parts.push_back(std::move(c));
      }
      for (size_t k = 0; k < in.size(); ++k)
        if (numel(parts[k].dims) > 0 && !run_copy(in[k].ptr, y, parts[k], t, stream)) return false;
      return true;
    }
    case OpKind::Split: {
      auto a = normalize_axis(std::get<SplitDesc>(n.attr).axis, rank);
      if (!a || rank > kCopyMaxRank) return false;
      const size_t ax = static_cast<size_t>(*a);
      Dims rs = row_strides(xd);
      long long offset = 0;
      for (const DevOut& part : out) {
        Copy c = gather(dims_of(part.type.shape));
        c.in_strides = rs;
        c.in_offset = offset * rs[ax];
        offset += c.dims[ax];
        if (numel(c.dims) > 0 && !run_copy(x, part.ptr, c, t, stream)) return false;
      }
      return true;
    }
    case OpKind::StridedSlice: {
      Copy c = gather(yd);
      c.in_strides.clear();
      if (!slice_copy(std::get<SliceDesc>(n.attr), xd, yd, c)) return false;
      if (numel(yd) == 0) return true;
      return run_copy(x, y, c, t, stream);
    }
    case OpKind::SliceUpdate: {
      // y = x, then the update is scattered into the slice (a strided slice never hits one
      // element twice).
      if (in.size() != 2 || in[1].type.dtype != t) return false;
      const Dims ud = dims_of(in[1].type.shape);
      Copy s;
      if (!slice_copy(std::get<SliceDesc>(n.attr), xd, ud, s) || !fits(s)) return false;
      Copy c{ud, row_strides(ud), s.in_strides, 0, s.in_offset};  // the slice's map, output side
      const size_t bytes = static_cast<size_t>(numel(xd)) * dtype_size(t);
      if (bytes) TG_CUDA(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, stream));
      if (numel(ud) == 0) return true;
      return run_copy(in[1].ptr, y, c, t, stream);
    }
    case OpKind::Pad: {
      const auto& d = std::get<PadDesc>(n.attr);
      if (d.before.size() != xd.size() || rank > kCopyMaxRank) return false;
      Dims before(d.before.begin(), d.before.end());
      PadKind mode;
      switch (d.mode) {
        case PadMode::constant: mode = PadKind::constant; break;
        case PadMode::reflect: mode = PadKind::reflect; break;
        case PadMode::symmetric: mode = PadKind::symmetric; break;
        case PadMode::edge: mode = PadKind::edge; break;
        default: return false;
      }
      return launched(launch_pad(x, y, static_cast<int>(rank), xd.data(), yd.data(), before.data(), mode,
                                 bytes_of(d.constant, t), static_cast<int>(dtype_size(t)), stream),
                      "pad");
    }
    case OpKind::Tile: {
      // Output dim d of size m * n is walked as (repeat, position): input strides (0, stride).
      const auto& m = std::get<TileDesc>(n.attr).multiples;
      if (m.size() != xd.size()) return false;
      Dims rs = row_strides(xd), dims, strides;
      for (size_t d = 0; d < xd.size(); ++d) {
        if (m[d] != 1) {
          dims.push_back(m[d]);
          strides.push_back(0);
        }
        dims.push_back(xd[d]);
        strides.push_back(rs[d]);
      }
      Copy c = gather(dims);
      c.in_strides = strides;
      return numel(yd) == 0 || run_copy(x, y, c, t, stream);
    }
    case OpKind::Reverse: {
      Copy c = gather(xd);
      c.in_strides = row_strides(xd);
      std::vector<bool> rev(xd.size(), false);
      for (int64_t a : std::get<AxesDesc>(n.attr).axes) {
        auto na = normalize_axis(a, rank);
        if (!na) return false;
        rev[static_cast<size_t>(*na)] = true;
      }
      for (size_t d = 0; d < xd.size(); ++d)
        if (rev[d] && xd[d] > 0) {
          c.in_offset += (xd[d] - 1) * c.in_strides[d];
          c.in_strides[d] = -c.in_strides[d];
        }
      return numel(xd) == 0 || run_copy(x, y, c, t, stream);
    }
    case OpKind::ShapeOf: {
      if (t != DType::i64 || static_cast<long long>(numel(yd)) != rank) return false;
      if (rank == 0) return true;
      return launched(launch_write_i64(y, xd.data(), static_cast<int>(rank), stream), "shape_of");
    }
    case OpKind::Arange: {
      const auto& d = std::get<ArangeDesc>(n.attr);
      return launched(launch_arange(y, numel(yd), d.start, d.delta, t, stream), "arange");
    }
    case OpKind::SpaceToDepth:
    case OpKind::DepthToSpace: {
      Copy c;
      if (!space_depth(n, xd, c) || numel(c.dims) != numel(yd)) return false;
      return numel(yd) == 0 || run_copy(x, y, c, t, stream);
    }
    case OpKind::Resize: {
      const auto& d = std::get<ResizeDesc>(n.attr);
      const bool last = d.data_layout == Layout::nhwc;
      if ((!last && d.data_layout != Layout::nchw) || rank != 4 || yd.size() != 4) return false;
      ResizeGeometry geo{xd[0],
                         last ? xd[3] : xd[1],
                         last ? xd[1] : xd[2],
                         last ? xd[2] : xd[3],
                         last ? yd[1] : yd[2],
                         last ? yd[2] : yd[3],
                         last};
      if (numel(yd) == 0) return true;
      const bool bilinear = d.mode == ResizeMode::bilinear;
      if (bilinear && !is_float(t)) return false;
      return launched(launch_resize(x, y, t, geo, bilinear, static_cast<int>(d.coordinates),
                                    static_cast<int>(d.rounding), stream),
                      "resize");
    }
    case OpKind::BandPart: {
      const auto& d = std::get<BandPartDesc>(n.attr);
      if (rank < 2) return false;
      if (numel(xd) == 0) return true;
      return launched(launch_band_part(x, y, numel(xd), xd[xd.size() - 2], xd.back(), d.num_lower,
                                       d.num_upper, static_cast<int>(dtype_size(t)), stream),
                      "band_part");
    }
    case OpKind::CumSum:
    case OpKind::CumProd:
    case OpKind::CumMax:
    case OpKind::CumMin: {
      const auto& d = std::get<CumulativeDesc>(n.attr);
      auto a = normalize_axis(d.axis, rank);
      if (!a || t == DType::boolean) return false;
      long long outer = 1, inner = 1, len = xd[static_cast<size_t>(*a)];
      for (long long i = 0; i < *a; ++i) outer *= xd[static_cast<size_t>(i)];
      for (long long i = *a + 1; i < rank; ++i) inner *= xd[static_cast<size_t>(i)];
      // The identity an exclusive scan starts from (ref identity_of).
      ScanOp op;
      double idf;
      long long idi;
      const double inf = std::numeric_limits<double>::infinity();
      switch (n.kind) {
        case OpKind::CumSum: op = ScanOp::sum, idf = 0, idi = 0; break;
        case OpKind::CumProd: op = ScanOp::prod, idf = 1, idi = 1; break;
        case OpKind::CumMax: op = ScanOp::max, idf = -inf, idi = ref::int_min(t); break;
        default: op = ScanOp::min, idf = inf, idi = ref::int_max(t); break;
      }
      return launched(launch_scan(x, y, t, op, outer, len, inner, d.exclusive, d.reverse, idf, idi, stream),
                      "scan");
    }
    default: return false;
  }
}

}  // namespace tg::detail
