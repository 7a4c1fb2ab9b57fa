// Host side of the gather / scatter / one_hot / non_zero kernels (kernels_indexing.cu): turns
// the op's shapes into an IndexMap (rows of x picked by indices), picks the scatter strategy,
// and holds the record of out-of-range indices clamped on the device.
//
// Scatter strategies: modes whose atomic combination is exact or whose order only moves
// float rounding (kernels_indexing.h: scatter_atomic_supported) use atomics unless
// ScatterDesc::deterministic; everything else (set: last update wins; deterministic
// requests; integer div; f16 / bf16 mul, div, min, max; 8 / 16-bit integers) sorts the update
// rows by destination (stable radix sort) and combines each destination's updates in their
// original order: bitwise the reference, run after run.
#include <algorithm>
#include <cstring>
#include <variant>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_control_flow.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/device_context.h"
#include "backends/cuda/kernels_indexing.h"
#include "backends/cuda/kernels_sort.h"
#include "ops/infer.h"

namespace tg::detail {
namespace {

thread_local IndexErrors* current_errors = nullptr;

int sm_count(int device) {
  static int counts[64] = {};
  if (device < 0 || device >= 64) return 132;
  if (counts[device] == 0) TG_CUDA(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device));
  return counts[device];
}

long long prod(const Shape& s, int64_t from, int64_t to) {
  long long p = 1;
  for (int64_t i = from; i < to; ++i) p *= s[i];
  return p;
}

int bit_width(unsigned long long v) {
  int b = 0;
  while (v >> b) ++b;
  return b;
}

// The index map of a gather-family or scatter-family node and the number of rows of x (the
// scatter's destinations); false when the shapes are beyond the kernels (rank > 8).
bool index_map(const Node& n, const TensorType& x, const TensorType& ind, IndexMap& m, long long& x_rows) {
  const Shape &xs = x.shape, &is = ind.shape;
  const int64_t xr = xs.rank(), ir = is.rank();
  int64_t axis, bd;
  if (const auto* s = std::get_if<ScatterDesc>(&n.attr)) axis = s->axis, bd = s->batch_dims;
  else if (const auto* gd = std::get_if<GatherDesc>(&n.attr)) axis = gd->axis, bd = gd->batch_dims;
  else return false;
  m.indices64 = ind.dtype == DType::i64;
  switch (n.kind) {
    case OpKind::Gather: case OpKind::Scatter: {
      const int64_t ax = axis < 0 ? axis + xr : axis;
      if (bd < 0) bd += ir;
      if (ax < 0 || ax >= xr || bd < 0 || bd > ax || bd > ir) return false;
      m.kind = IndexKind::axis;
      m.n_per = prod(is, bd, ir);
      m.p_per = prod(xs, bd, ax);
      m.a = xs[ax];
      m.rows = prod(xs, 0, ax) * m.n_per;
      m.row_len = prod(xs, ax + 1, xr);
      m.dim = static_cast<int>(ax);
      x_rows = prod(xs, 0, ax + 1);
      return true;
    }
    case OpKind::GatherNd: case OpKind::ScatterNd: {
      if (ir < 1) return false;
      const int64_t k = is[ir - 1];
      if (k < 0 || k > kIndexMaxRank || bd < 0 || bd + k > xr || bd >= ir) return false;
      m.kind = IndexKind::nd;
      m.k = static_cast<int>(k);
      m.n_per = prod(is, bd, ir - 1);
      m.rows = prod(xs, 0, bd) * m.n_per;
      m.row_len = prod(xs, bd + k, xr);
      long long stride = 1;
      for (int64_t i = k - 1; i >= 0; --i) {
        m.nd_dims[i] = xs[bd + i];
        m.nd_strides[i] = stride;
        stride *= xs[bd + i];
      }
      m.nd_rows = stride;
      m.dim = static_cast<int>(bd);
      x_rows = prod(xs, 0, bd) * stride;
      return true;
    }
    default: {  // along axis
      const int64_t ax = axis < 0 ? axis + xr : axis;
      if (xr != ir || xr > kIndexMaxRank || ax < 0 || ax >= xr) return false;
      m.kind = IndexKind::along;
      m.rank = static_cast<int>(xr);
      long long stride = 1;
      for (int64_t d = xr - 1; d >= 0; --d) {
        m.idims[d] = is[d];
        m.xdims[d] = xs[d];
        m.xstrides[d] = stride;
        stride *= xs[d];
      }
      m.rows = is.num_elements();
      m.row_len = 1;
      m.dim = static_cast<int>(ax);
      x_rows = xs.num_elements();
      return true;
    }
  }
}

ScatterOp scatter_op(ScatterMode m) { return static_cast<ScatterOp>(static_cast<int>(m)); }
static_assert(static_cast<int>(ScatterMode::max) == static_cast<int>(ScatterOp::max));

bool scatter(const Node& n, const std::vector<DevArg>& in, const DevOut& y, const IndexMap& m, long long x_rows,
             cudaStream_t stream, int device) {
  const auto& d = std::get<ScatterDesc>(n.attr);
  const DType t = in[0].type.dtype;
  const ScatterOp op = scatter_op(d.mode);
  const bool atomic = !d.deterministic && scatter_atomic_supported(t, op);
  if (!atomic && m.rows >= (1LL << 31)) return false;  // beyond the u32 positions of the sort
  const size_t bytes = static_cast<size_t>(in[0].type.shape.num_elements()) * dtype_size(t);
  if (bytes) TG_CUDA(cudaMemcpyAsync(y.ptr, in[0].ptr, bytes, cudaMemcpyDeviceToDevice, stream));
  if (m.rows == 0 || m.row_len == 0) return true;
  const int sms = sm_count(device);
  if (atomic) {
    TG_CUDA(launch_scatter_atomic(y.ptr, in[2].ptr, m, t, op, sms, stream));
    return true;
  }
  // Ordered: destination keys, a stable radix sort, then each destination's updates in order.
  const int key64 = static_cast<unsigned long long>(x_rows) >= 0xffffffffull;
  const size_t kb = key64 ? 8 : 4, nrows = static_cast<size_t>(m.rows);
  const size_t key_bytes = (nrows * kb + 255) / 256 * 256, val_bytes = (nrows * 4 + 255) / 256 * 256;
  void* none[2] = {nullptr, nullptr};
  uint32_t* vnone[2] = {nullptr, nullptr};
  const int end_bit = std::max(1, bit_width(static_cast<unsigned long long>(x_rows)));
  size_t cub_bytes = 0;
  TG_CUDA(launch_radix_sort_pairs(none, key64, vnone, m.rows, end_bit, nullptr, nullptr, cub_bytes, stream));
  DeviceBuffer ws = op_workspace(2 * key_bytes + 2 * val_bytes + cub_bytes, stream, device);
  auto* base = reinterpret_cast<char*>(ws.get());
  void* keys[2] = {base, base + key_bytes};
  uint32_t* vals[2] = {reinterpret_cast<uint32_t*>(base + 2 * key_bytes),
                       reinterpret_cast<uint32_t*>(base + 2 * key_bytes + val_bytes)};
  TG_CUDA(launch_scatter_keys(m, x_rows, keys[0], key64, vals[0], sms, stream));
  int which = 0;
  TG_CUDA(launch_radix_sort_pairs(keys, key64, vals, m.rows, end_bit, &which, base + 2 * key_bytes + 2 * val_bytes,
                                  cub_bytes, stream));
  TG_CUDA(launch_scatter_ordered(y.ptr, in[2].ptr, keys[which], key64, vals[which], m.rows, m.row_len, x_rows, t, op,
                                 sms, stream));
  return true;
}

// The bytes of `v` stored as dtype t (the host's conversion: rounding, saturation).
uint64_t bits_of(double v, DType t) {
  TensorData s = TensorData::scalar(v, t);
  uint64_t b = 0;
  std::memcpy(&b, s.data(), dtype_size(t));
  return b;
}

bool one_hot(const Node& n, const DevArg& ind, const DevOut& y, cudaStream_t stream, int device) {
  const auto& d = std::get<OneHotDesc>(n.attr);
  const Shape& s = ind.type.shape;
  const int64_t r = s.rank(), ax = d.axis < 0 ? d.axis + r + 1 : d.axis;
  if (ax < 0 || ax > r) return false;
  if (ind.type.dtype != DType::i32 && ind.type.dtype != DType::i64) return false;
  TG_CUDA(launch_one_hot(ind.ptr, ind.type.dtype == DType::i64, y.ptr, prod(s, 0, ax), d.depth, prod(s, ax, r),
                         static_cast<int>(dtype_size(y.type.dtype)), bits_of(d.on_value, y.type.dtype),
                         bits_of(d.off_value, y.type.dtype), sm_count(device), stream));
  return true;
}

}  // namespace

bool cuda_indexing(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream, int device) {
  if (out.size() != 1) return false;
  if (n.kind == OpKind::OneHot) return in.size() == 1 && one_hot(n, in[0], out[0], stream, device);
  const bool is_scatter = n.kind == OpKind::Scatter || n.kind == OpKind::ScatterNd || n.kind == OpKind::ScatterAlongAxis;
  if (in.size() != (is_scatter ? 3u : 2u)) return false;
  if (in[1].type.dtype != DType::i32 && in[1].type.dtype != DType::i64) return false;
  IndexMap m;
  long long x_rows = 0;
  if (!index_map(n, in[0].type, in[1].type, m, x_rows)) return false;
  m.indices = in[1].ptr;
  m.node = static_cast<int>(&n - g.nodes.data());
  m.error = static_cast<IndexError*>(IndexErrors::current_record());
  if (is_scatter) return scatter(n, in, out[0], m, x_rows, stream, device);
  TG_CUDA(launch_gather(in[0].ptr, out[0].ptr, m, static_cast<int>(dtype_size(in[0].type.dtype)), sm_count(device),
                        stream));
  return true;
}

void cuda_non_zero_indices(const DevArg& x, const std::function<void*(const TensorType&)>& make_output,
                           cudaStream_t stream, int device) {
  const Shape& s = x.type.shape;
  const int64_t rank = s.rank(), n = s.num_elements();
  if (rank > kIndexMaxRank)
    throw Error("[non_zero_indices] the CUDA kernel takes rank <= 8, x is " + x.type.str());
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  TG_CUDA(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone)
    throw Error("[non_zero_indices] cannot be captured into a CUDA graph: its output size depends on the data");
  size_t ws_bytes = 0;
  TG_CUDA(launch_non_zero_select(nullptr, x.type.dtype, n, nullptr, nullptr, nullptr, ws_bytes, stream));
  const size_t flat_bytes = (static_cast<size_t>(n) * 8 + 255) / 256 * 256;
  DeviceBuffer ws = op_workspace(flat_bytes + 256 + ws_bytes, stream, device);
  auto* flat = reinterpret_cast<long long*>(ws.get());
  auto* count = reinterpret_cast<long long*>(reinterpret_cast<char*>(ws.get()) + flat_bytes);
  TG_CUDA(cudaMemsetAsync(count, 0, sizeof(long long), stream));
  TG_CUDA(launch_non_zero_select(x.ptr, x.type.dtype, n, flat, count, reinterpret_cast<char*>(ws.get()) + flat_bytes + 256,
                                 ws_bytes, stream));
  int64_t found = 0;
  TG_CUDA(cudaMemcpyAsync(&found, count, sizeof found, cudaMemcpyDeviceToHost, stream));
  TG_CUDA(cudaStreamSynchronize(stream));
  void* y = make_output(TensorType(Shape{found, rank}, DType::i64));
  std::vector<long long> dims(s.dims().begin(), s.dims().end());
  TG_CUDA(launch_non_zero_coords(flat, found, dims.data(), static_cast<int>(rank), static_cast<long long*>(y), stream));
}

// ---- IndexErrors ----

IndexErrors::Scope::Scope(IndexErrors& errors, GraphMemory& memory, cudaStream_t stream) : saved_(current_errors) {
  if (!errors.record_) errors.record_ = memory.take(sizeof(IndexError));
  if (!errors.clean_) {  // new, or a run that failed before take(): start from a clean record
    TG_CUDA(cudaMemsetAsync(errors.record_.get(), 0, sizeof(IndexError), stream));
    errors.clean_ = true;
  }
  if (errors.used_) errors.clean_ = false;  // this run may report (a replay launches no launcher)
  current_errors = &errors;
}

IndexErrors::Scope::~Scope() { current_errors = saved_; }

void* IndexErrors::current_record() {
  if (!current_errors) return nullptr;
  current_errors->used_ = true;
  current_errors->clean_ = false;  // until take() has looked
  return current_errors->record_.get();
}

void IndexErrors::guarded_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  if (!used_ || !record_) {
    TG_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  TG_CUDA(launch_copy_unless_error(dst, src, bytes, reinterpret_cast<const IndexError*>(record_.get()), stream));
}

std::string IndexErrors::take(const GraphImpl& g, cudaStream_t stream) {
  if (!used_ || !record_) return {};
  IndexError e{};
  TG_CUDA(cudaMemcpyAsync(&e, record_.get(), sizeof e, cudaMemcpyDeviceToHost, stream));
  TG_CUDA(cudaStreamSynchronize(stream));
  if (e.node != 0) TG_CUDA(cudaMemsetAsync(record_.get(), 0, sizeof e, stream));
  clean_ = true;
  if (e.node == 0) return {};
  const size_t id = static_cast<size_t>(e.node - 1);
  const OpKind k = id < g.nodes.size() ? g.nodes[id].kind : OpKind::Gather;
  return op_tag(k) + "index " + std::to_string(e.index) + " is out of range for dim " + std::to_string(e.dim) +
         " of size " + std::to_string(e.size) + " (clamped on the device)";
}

}  // namespace tg::detail
