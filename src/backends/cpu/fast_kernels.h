#pragma once
// The fast CPU path: oneDNN matmul and convolution, OpenMP-parallel elementwise loops. Each
// kernel covers a subset of its op (f32, plain shapes) and says no otherwise, so the caller
// falls back to the reference interpreter, which is the definition of every op's semantics.
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ir/graph_impl.h"
#include "tgraph/tensor_data.h"

// Hot loops are built for AVX-512, AVX2 and the baseline ISA and picked when the library loads
// (the library itself is compiled for the baseline). FMA contraction is off (GCC) so a result
// does not depend on which loop of a clone an element fell in.
// Sanitizer and fuzzing builds (clang, ASan) compile one baseline loop: there the clones'
// resolver ran before the CPU model was known and chose the AVX-512 loop on a CPU without it
// (SIGILL in fused::exec, found by fuzz_onnx_import on the 2-core build machine).
#if defined(TGRAPH_NO_CPU_CLONES)
#define TG_CPU_CLONES
#elif defined(__clang__)
#define TG_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TG_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off")))
#endif

namespace tg::detail {

/// Evaluates node n on host inputs with a fast kernel and sets `out` (one tensor per output);
/// returns false, leaving `out` untouched, when no fast kernel covers this op, dtype or shape.
/// Thread-safe: one executable may run from several threads at once.
bool cpu_fast_eval(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in,
                   std::vector<TensorData>& out);

namespace fast {
/// One elementwise op applied to a convolution's result inside the primitive (a oneDNN
/// post-op), so the result is written once instead of being read back by a separate loop.
struct PostOp {
  OpKind kind = OpKind::Relu;           // post_op_supported(kind)
  double alpha = 0.0;                   // leaky_relu's slope, elu's alpha
  const TensorData* operand = nullptr;  // binary ops: the other operand (f32, rank <= 4), each
                                        // dim 1 (broadcast) or the result's, in its layout
};
/// The ops a convolution can apply as post-ops: relu, leaky_relu, elu, sigmoid, tanh, gelu,
/// silu (unary), add and mul (either operand), sub and div (the convolution's result first).
/// A binary op's operand is a scalar or per channel, except for one add of a tensor of the
/// result's shape (a residual): oneDNN's sum post-op, which accumulates into the output, so
/// the operand is copied there first unless it already lies there (oneDNN's jit convolutions
/// take no other full-size operand; with one they fell back to a GEMM one 10x slower).
bool post_op_supported(OpKind k);
/// Whether post-op kind k takes no operand (an activation). (post_ops.cpp, as the three below)
bool post_is_unary(OpKind k);
/// Appends what tells post-op p apart in a primitive cache key (its operand's dims aside).
void post_key(std::vector<int64_t>& key, const PostOp& p);
/// Appends p to `po`: oneDNN's eltwise op, or its binary op on an operand described by `operand`.
void append_post_op(dnnl::post_ops& po, const PostOp& p, const dnnl::memory::desc& operand);
/// Adds the execution arguments of the binary post-ops: post[i]'s operand where descs[i] is not
/// empty, post[i] being the primitive's post-op i - first (post-ops before `first` are folded
/// into the primitive otherwise: a convolution's bias).
void add_post_operands(std::unordered_map<int, dnnl::memory>& args, const std::vector<PostOp>& post,
                       const std::vector<dnnl::memory::desc>& descs, size_t first);
/// oneDNN convolution for f32 conv2d (nhwc/nchw data, hwio/oihw weights), with `post` ops
/// applied to its result in order (the output is then the last op's result).
/// With the graph `g`, weights that are its constants are reordered into the primitive's layout
/// once and kept across calls.
bool conv2d(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out,
            const GraphImpl* g = nullptr, const std::vector<PostOp>* post = nullptr);
/// oneDNN matmul (batched, transposes, batch broadcast) for f32, with `post` ops applied to
/// its result (activations; binary ops with a scalar or one value per column only).
bool matmul(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out,
            const GraphImpl* g = nullptr, const std::vector<PostOp>* post = nullptr);
/// bf16 / f16 matmul, conv2d and its gradients through the f32 kernels (operands widened,
/// f32 accumulation, result rounded once), and f32 <-> bf16 / f16 casts (fast_half.cpp).
bool half_op(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// gather / scatter (mode set) along one axis, no batch dims, any dtype: row copies; a scatter
/// into a sole-owned input writes in place (fast_indexing.cpp).
bool indexing(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// Elementwise unary / binary f32 ops on operands of equal shapes.
bool elementwise(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// oneDNN backward convolution for f32 conv2d_data_grad / conv2d_weight_grad (fast_conv_grad.cpp).
bool conv2d_grad(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// max / avg pool2d and their gradients, f32 nhwc / nchw (fast_pool.cpp).
bool pool(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// batch_norm, batch_norm_training (3 outputs), layer_norm, softmax, log_softmax and
/// softmax_cross_entropy, f32 (fast_norm.cpp).
bool norm(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);

/// Per-channel statistics of batch_norm_training over channels-last x and the affine map they
/// give: y = (x - mean) * scale + shift, computed in double per element.
struct BatchNormStats {
  std::vector<double> mean, var, scale, shift;
};
/// The statistics of a batch_norm_training node on f32 inputs {x, gamma, beta} whose channel
/// axis is the last; false for other layouts and types (fast_norm.cpp).
bool batch_norm_stats(const Node& n, const std::vector<TensorData>& in, BatchNormStats& s);
/// y[i] = f32((x[i] - mean[i]) * scale[i] + shift[i]) for i < count, the parameters given per
/// element: the one formula of the batch_norm_training output, fused or not (fast_norm.cpp).
void batch_norm_apply(const float* x, float* y, int64_t count, const double* mean, const double* scale,
                      const double* shift);
/// reduce_sum / mean / max / min and sum_to_like, f32 (fast_reduce.cpp).
bool reduce(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// reduce_any / reduce_all of bool tensors (fast_reduce.cpp).
bool reduce_bool(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);
/// reshape, broadcast_to / _like, tile, transpose, concat (any dtype); select, cast f32 <-> i32 / bool,
/// f32 comparisons and rsqrt (fast_shape.cpp).
bool shape_op(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out);

// ---- shared by the oneDNN kernels: engine, per-thread stream, primitive cache ----
inline dnnl::engine& dnnl_cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

inline dnnl::stream& dnnl_thread_stream() {
  thread_local dnnl::stream s(dnnl_cpu_engine());
  return s;
}

/// Memory for a oneDNN primitive's scratchpad or a reordered operand, owned by the calling
/// thread and kept for its next call: allocating it per call costs page faults each time.
/// `slot` separates the buffers one call needs at once (0 scratchpad, 1-3 operands).
inline dnnl::memory dnnl_thread_memory(const dnnl::memory::desc& d, int slot) {
  struct Buf {
    std::unique_ptr<std::byte[]> p;
    size_t size = 0;
  };
  thread_local Buf bufs[4];
  Buf& b = bufs[slot];
  const size_t need = d.get_size() + 64;
  if (b.size < need) {
    b.p.reset(new std::byte[need]);
    b.size = need;
  }
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(b.p.get()) + 63) & ~uintptr_t(63));
  return dnnl::memory(d, dnnl_cpu_engine(), aligned);
}

/// Entries are built once per key (a null entry records a problem oneDNN cannot do) and then
/// shared read-only; oneDNN primitives may be executed from several threads at once.
template <class Entry>
class PrimitiveCache {
 public:
  // The engine is made first so that it outlives the cached primitives at exit.
  PrimitiveCache() { (void)dnnl_cpu_engine(); }
  template <class Make>
  std::shared_ptr<const Entry> get(const std::vector<int64_t>& key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second;
    }
    std::shared_ptr<const Entry> e;
    try {
      e = make();
    } catch (const dnnl::error&) {
      e = nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.size() > 4096) map_.clear();  // bound memory for endlessly varying shapes
    return map_.emplace(key, e).first->second;
  }

 private:
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::shared_ptr<const Entry>> map_;
};
}  // namespace fast

}  // namespace tg::detail
