#pragma once
// Device kernels the CUDA executor calls for single ops. Each takes device operands with
// their concrete types and a preallocated output, enqueues work on `stream`, and returns
// false (having done nothing) when it does not cover the op, dtype, layout or shape, so the
// executor can fall back.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/device_context.h"
#include "ir/graph_impl.h"

namespace tg::detail {

class GraphMemory;  // cuda_control_flow.h

struct DevArg {
  const void* ptr;
  TensorType type;
};
struct DevOut {
  void* ptr;
  TensorType type;
};

/// cuDNN convolution: conv2d / conv3d forward, conv2d_data_grad, conv2d_weight_grad,
/// conv_transpose2d (f32, f16, bf16; NHWC/NCHW data, HWIO/OIHW weights; groups, dilation).
bool cudnn_conv(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device);
/// One scaled_dot_product_attention call as cudnn_attention sees it: q, k, v (and the bias
/// when `masked`) of `dtype`, the scale resolved (never 0).
struct AttentionCall {
  DType dtype = DType::f32;
  Shape q, k, v, mask;
  bool masked = false;
  double scale = 1.0;
  bool causal = false;
};
/// The call of an attention op with these q, k, v shapes and dtype, its scale resolved (the
/// default 1 / sqrt(head dim) when the op's is 0); the caller adds the mask.
AttentionCall attention_call(const AttentionDesc& d, DType dtype, const Shape& q, const Shape& k, const Shape& v);
/// scaled_dot_product_attention as one cuDNN fused kernel (cudnn_attention.cpp): f16 / bf16,
/// rank 3 or 4, head dims multiples of 8 up to 256, an additive bias of q's dtype and rank 4
/// (dims 1 or full; keys full), causal or not. False when not covered (or no cuDNN frontend).
bool cudnn_attention(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                     cudaStream_t stream, int device);
/// True when cuDNN runs this call on `device` (its plan is built and kept); else `why` says why.
bool cudnn_attention_supported(int device, const AttentionCall& c, std::string* why = nullptr);
/// Whether the lowering keeps call c whole on `device`: as cudnn_attention_supported, except
/// that a shape whose plan no process on the machine built (cuDNN compiles a kernel for it) is
/// kept at once and its plan built on a thread of its own, tgraph's own attention kernel
/// running its calls meanwhile (kernels_attention.h; not under TGRAPH_NO_INTERIM_ATTENTION=1).
bool cudnn_attention_kept(int device, const AttentionCall& c, std::string* why = nullptr);
/// Returns once every attention plan being built on a thread of its own is built (benchmarks
/// before timing captured runs; tests).
void cudnn_attention_settle();
/// Calls tgraph's kernel ran while their cuDNN plan was being built, in this process (tests).
long long cudnn_attention_stand_ins();
/// Calls tgraph's attention kernel ran in this process, for any reason (tests).
long long cudnn_attention_own_calls();
/// Deferred attention plans the builder thread built (or saw refused), and those dropped
/// unbuilt by the queue's bound, in this process (tests).
long long cudnn_attention_builds_made();
long long cudnn_attention_builds_dropped();
/// While the token lives, attention plans deferred to their thread do not start building (30 s
/// at most; tests: a build that ends before the run reaches its call leaves nothing for tgraph's
/// kernel to stand in for).
std::shared_ptr<void> cudnn_attention_hold_builds();
/// True when tgraph was built with the cuDNN frontend.
bool cudnn_attention_available();
/// True when the call's shapes and dtype are of the kind cudnn_attention takes (no device asked).
bool attention_geometry_taken(const AttentionCall& c);

/// scaled_matmul on FP8 tensor cores (matmul_fp8.cpp): the node in the form
/// lower_cuda_scaled_matmul leaves (a [m, k], b [n, k] transposed), k and n multiples of 16.
bool cuda_scaled_matmul(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                        cudaStream_t stream, int device);
/// cuDNN pooling: avg_pool2d and its gradient where cuDNN gives the reference's result.
bool cudnn_pool(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                cudaStream_t stream, int device);
/// avg_pool2d / avg_pool2d_grad (cuda_avg_pool.cpp): cudnn_pool, or our kernels for what it
/// declines (ceil_mode, asymmetric padding, dilation); f32, f16, bf16, f64.
bool cuda_avg_pool(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream, int device);
/// max_pool2d, max_pool2d_with_indices, max_pool2d_grad (cuda_max_pool.cpp): our kernels, every
/// geometry, every dtype but bool (the gradient: float dtypes).
bool cuda_max_pool(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream, int device);
/// Generated reductions (reduce_sum/mean/max/min/prod/variance/logsumexp/all/any, argmax/min,
/// sum_to_like) and softmax / log_softmax. A reduce_variance given a second output of its type
/// also writes the mean of the same elements there (one read of x for both moments).
bool cuda_reduce(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                 cudaStream_t stream, int device);

/// Layout, data movement and scans (cuda_layout.cpp): transpose, concat, split, strided_slice,
/// slice_update, pad, tile, reverse, shape_of, arange, space_to_depth / depth_to_space, resize,
/// band_part, cumsum / cumprod / cummax / cummin, every dtype.
bool cuda_layout(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                 cudaStream_t stream, int device);

/// Gather / scatter families and one_hot (cuda_indexing.cpp): gather, gather_nd,
/// gather_along_axis, scatter, scatter_nd, scatter_along_axis (every mode; atomics, or sorted by
/// destination when deterministic), one_hot; every dtype, i32 / i64 indices. Out-of-range
/// indices are clamped and reported to the current IndexErrors scope.
bool cuda_indexing(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream, int device);
/// top_k, sort, argsort along any axis (cuda_sort.cpp): stable CUB radix sorts.
bool cuda_sort(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
               cudaStream_t stream, int device);
/// random_state, random, dropout (cuda_random.cpp): Philox4x32-10, the CPU reference's numbers.
bool cuda_random(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                 cudaStream_t stream, int device);
/// non_zero_indices, whose output shape depends on the data: selects on the device, copies the
/// count to the host (synchronising `stream`: a run containing it is never captured into a CUDA
/// graph), then calls `make_output` for the i64 [count, rank] result and fills it.
void cuda_non_zero_indices(const DevArg& x, const std::function<void*(const TensorType&)>& make_output,
                           cudaStream_t stream, int device);

/// Out-of-range indices that indexing kernels clamped on the device, for one executable. The
/// executor opens a Scope per run and calls take() when the run's work is done, before it
/// publishes variable writes: the CPU throws at the bad index, the device clamps, records the
/// first one, and the run fails there.
class IndexErrors {
 public:
  /// Makes `errors` the record that indexing kernels launched by this thread report to until
  /// the scope ends (the record is taken from `memory`, which captured graphs may read, and
  /// zeroed on `stream` on first use).
  class Scope {
   public:
    Scope(IndexErrors& errors, GraphMemory& memory, cudaStream_t stream);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    IndexErrors* saved_;
  };
  /// The error a kernel reported since the last call, naming the op ("[gather_nd] index 7 is
  /// out of range for dim 0 of size 5 (clamped on the device)"), or "" ; clears the record and
  /// synchronises `stream`. Free when no indexing kernel ever reported here.
  std::string take(const GraphImpl& g, cudaStream_t stream);
  /// Enqueues dst = src (bytes), skipped on the device when a kernel reported an index since
  /// the last take(): the captured graph's variable writes, so a replay that fails leaves the
  /// variables as they were. A plain copy when no indexing kernel reports here.
  void guarded_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  /// The device record of the current scope for a kernel about to launch, or nullptr.
  static void* current_record();

 private:
  DeviceBuffer record_;
  bool used_ = false;   // some kernel was given the record: take() must look
  bool clean_ = false;  // the record is known to be zero
};

/// Generated shared-memory-tiled stencil (every reduction and boundary mode; f32, f64, f16,
/// bf16); cuda_stencil.h.
bool cuda_stencil(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                  cudaStream_t stream, int device);

/// Temporary device memory for a device op (sort keys, CUB storage): from the allocator of the
/// run calling the op (the stream-ordered pool, or while the run is captured a buffer the
/// captured graph keeps, so no allocation node enters the graph), or from the pool when no run
/// is calling. Freed when the last owner lets go, in stream order.
DeviceBuffer op_workspace(size_t bytes, cudaStream_t stream, int device);
/// Routes this thread's op_workspace to `alloc` until the scope ends (the executor opens one
/// around each device op).
class OpWorkspaceScope {
 public:
  explicit OpWorkspaceScope(std::function<DeviceBuffer(size_t)> alloc);
  ~OpWorkspaceScope();
  OpWorkspaceScope(const OpWorkspaceScope&) = delete;
  OpWorkspaceScope& operator=(const OpWorkspaceScope&) = delete;

 private:
  std::function<DeviceBuffer(size_t)> alloc_;
  const std::function<DeviceBuffer(size_t)>* saved_;
};

/// A device kernel family: enqueues `n` on `stream` into preallocated outputs and returns true,
/// or returns false having done nothing (the executor then falls back to the CPU).
using DeviceOp = bool (*)(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                          const std::vector<DevOut>& out, cudaStream_t stream, int device);
/// The kernel family that covers op kind `k` on the device, or nullptr (device_ops.cpp: the
/// one table of which op runs where; add a line there when a family gains an op).
DeviceOp device_op_for(OpKind k);
/// Calls `op` for `n` on scratch operands and results of these types (their values do not
/// matter), allocated on `stream` and freed after: a library call made ahead of the run that
/// needs it, to load its kernels or ask its heuristics (library_warmup.h).
void call_on_scratch(DeviceOp op, const GraphImpl& g, const Node& n, const std::vector<TensorType>& in,
                     const std::vector<TensorType>& out, cudaStream_t stream, int device);
/// Whether a call of `n` with these operand and result types would now load a library's
/// kernels, ask its heuristics or build its plan (none of its kind has run in this process):
/// such calls a first run makes ahead, several at a time on scratch memory (library_warmup.h).
using WarmProbe = bool (*)(const GraphImpl& g, const Node& n, const std::vector<TensorType>& in,
                           const std::vector<TensorType>& out, int device);
/// The probe of the kinds whose calls can be cold (cuDNN's convolutions and attention), else null.
WarmProbe device_op_warm_probe(OpKind k);
bool cudnn_conv_cold(const GraphImpl& g, const Node& n, const std::vector<TensorType>& in,
                     const std::vector<TensorType>& out, int device);
bool cudnn_attention_cold(const GraphImpl& g, const Node& n, const std::vector<TensorType>& in,
                          const std::vector<TensorType>& out, int device);

/// Source of the generated reduction / softmax kernel (exposed so tests can compile it
/// without a device): `lanes` threads reduce one output (1: a thread per output, 32: a warp,
/// 256: a block).
std::string reduce_source(OpKind k, DType in, DType out, int lanes);
/// Source of the column-reduction kernels (tg_col_partial, tg_col_final): reductions whose kept
/// dims are the innermost ones (reduce_kernels.cpp).
std::string column_source(OpKind k, DType in, DType out);

}  // namespace tg::detail
