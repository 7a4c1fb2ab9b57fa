#pragma once
// The graph builder: every op of tgraph is a method here. Builders check and infer types at
// the call, so a mistake is reported at the line that made it.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tgraph/descriptors.h"
#include "tgraph/device.h"
#include "tgraph/shape.h"
#include "tgraph/tensor.h"
#include "tgraph/tensor_data.h"

namespace tg {
namespace detail {
struct GraphAccess;
}

class Executable;

/// Arithmetic precision of matmul and convolution.
enum class Precision : uint8_t { f32, tf32, bf16, f16 };

/// Options of Graph::compile.
struct CompileOptions {
  Device device = Device::best();
  /// Dimensions fed as -1 stay dynamic and are resolved at run time (no recompiling).
  bool disable_type_inference = false;
  Precision precision = Precision::f32;
  /// Runs the optimisation passes (off: verify and plan only).
  bool optimize = true;
  /// Rank-4 outputs may come back in the layout the compiled program keeps them in (channels-
  /// last where convolutions made it so), which saves a transpose per output: the output is
  /// then that layout's tensor, and Executable::output_permutations() says how to view it as
  /// the value asked for (a frontend hands it on as a strided view: PyTorch's channels_last).
  bool free_output_layouts = false;
  /// Debugging switches for this executable only, by their environment names
  /// ({{"TGRAPH_NO_FUSION", "1"}}; docs/switches.md lists which): its compile and its runs see
  /// these values before the environment's. An unknown name is an error.
  std::map<std::string, std::string> switches;
};

class Graph;
/// Body of a region: receives the graph to build into.
using RegionFn = std::function<std::vector<Tensor>(Graph&)>;

/// A graph of tensor operations. Copies share the same graph.
class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&);
  Graph& operator=(const Graph&);

  // ---- sources and state -----------------------------------------------------------------
  /// An input fed at run time; -1 dims are dynamic.
  Tensor placeholder(Shape shape, DType dtype, const std::string& name = "");
  /// A constant baked into the graph.
  Tensor constant(const TensorData& value, const std::string& name = "");
  /// A scalar constant.
  Tensor scalar(double value, DType dtype = DType::f32);
  /// A persistent variable with an initial value; using the tensor reads its value at the
  /// start of the run (see docs/ops.md for ordering with assign).
  Tensor variable(const TensorData& initial, const std::string& name);
  /// An explicit read of a variable, ordered by control dependencies (sees earlier assigns).
  Tensor read_variable(Tensor variable);
  /// Writes value into variable when the returned operation runs.
  Operation assign(Tensor variable, Tensor value);
  /// Runs fn; every op made inside it runs after `ops`. Returns fn's tensors.
  std::vector<Tensor> control_dependency(const std::vector<Operation>& ops,
                                         const std::function<std::vector<Tensor>()>& fn);
  /// Stops gradients: identity forward, zero gradient.
  Tensor stop_gradient(Tensor x);

  // ---- elementwise unary -------------------------------------------------------------------
  Tensor identity(Tensor x);
  Tensor neg(Tensor x);
  Tensor abs(Tensor x);
  Tensor sign(Tensor x);
  Tensor exp(Tensor x);
  Tensor exp2(Tensor x);
  Tensor log(Tensor x);
  Tensor log2(Tensor x);
  Tensor log1p(Tensor x);
  Tensor expm1(Tensor x);
  Tensor sqrt(Tensor x);
  Tensor rsqrt(Tensor x);
  Tensor reciprocal(Tensor x);
  Tensor square(Tensor x);
  Tensor sin(Tensor x);
  Tensor cos(Tensor x);
  Tensor tan(Tensor x);
  Tensor sinh(Tensor x);
  Tensor cosh(Tensor x);
  Tensor tanh(Tensor x);
  Tensor asin(Tensor x);
  Tensor acos(Tensor x);
  Tensor atan(Tensor x);
  Tensor asinh(Tensor x);
  Tensor acosh(Tensor x);
  Tensor atanh(Tensor x);
  Tensor erf(Tensor x);
  Tensor floor(Tensor x);
  Tensor ceil(Tensor x);
  /// Rounds half away from zero.
  Tensor round(Tensor x);
  /// Rounds half to even.
  Tensor rint(Tensor x);
  Tensor trunc(Tensor x);
  Tensor logical_not(Tensor x);
  Tensor bitwise_not(Tensor x);
  Tensor is_nan(Tensor x);
  Tensor is_inf(Tensor x);
  Tensor is_finite(Tensor x);
  Tensor sigmoid(Tensor x);
  Tensor relu(Tensor x);
  Tensor leaky_relu(Tensor x, double alpha = 0.01);
  Tensor elu(Tensor x, double alpha = 1.0);
  /// GELU, exact (erf) form.
  Tensor gelu(Tensor x);
  /// GELU, tanh approximation.
  Tensor gelu_tanh(Tensor x);
  Tensor silu(Tensor x);
  Tensor softplus(Tensor x);
  /// max(0, min(1, alpha*x + beta)).
  Tensor hard_sigmoid(Tensor x, double alpha = 1.0 / 6.0, double beta = 0.5);
  Tensor cast(Tensor x, DType to);
  /// Reinterprets the bytes; the element size must match.
  Tensor bitcast(Tensor x, DType to);

  // ---- elementwise binary (numpy broadcasting, explicit promotion) ----------------------------
  Tensor add(Tensor a, Tensor b);
  Tensor sub(Tensor a, Tensor b);
  Tensor mul(Tensor a, Tensor b);
  Tensor div(Tensor a, Tensor b);
  /// a / b, and 0 where b == 0.
  Tensor div_no_nan(Tensor a, Tensor b);
  /// Remainder with the sign of a (C fmod).
  Tensor mod(Tensor a, Tensor b);
  /// Remainder with the sign of b (Python %).
  Tensor floor_mod(Tensor a, Tensor b);
  Tensor pow(Tensor a, Tensor b);
  /// Minimum, ignoring a NaN operand (IEEE minNum).
  Tensor minimum(Tensor a, Tensor b);
  Tensor maximum(Tensor a, Tensor b);
  /// Minimum, NaN if either operand is NaN.
  Tensor minimum_nan(Tensor a, Tensor b);
  Tensor maximum_nan(Tensor a, Tensor b);
  Tensor atan2(Tensor y, Tensor x);
  /// dy * d/dx gelu_tanh(x): the gradient of gelu_tanh (what its autodiff rule emits).
  Tensor gelu_tanh_grad(Tensor dy, Tensor x);
  /// dy where y > 0, else 0, y = relu(x): the gradient of relu (what its autodiff rule emits).
  Tensor relu_grad(Tensor dy, Tensor y);
  Tensor equal(Tensor a, Tensor b);
  Tensor not_equal(Tensor a, Tensor b);
  Tensor less(Tensor a, Tensor b);
  Tensor less_equal(Tensor a, Tensor b);
  Tensor greater(Tensor a, Tensor b);
  Tensor greater_equal(Tensor a, Tensor b);
  Tensor logical_and(Tensor a, Tensor b);
  Tensor logical_or(Tensor a, Tensor b);
  Tensor logical_xor(Tensor a, Tensor b);
  Tensor bitwise_and(Tensor a, Tensor b);
  Tensor bitwise_or(Tensor a, Tensor b);
  Tensor bitwise_xor(Tensor a, Tensor b);
  Tensor shift_left(Tensor a, Tensor b);
  Tensor shift_right(Tensor a, Tensor b);
  /// cond ? a : b (broadcast).
  Tensor select(Tensor cond, Tensor a, Tensor b);
  /// min(max(x, lo), hi).
  Tensor clamp(Tensor x, Tensor lo, Tensor hi);

  // ---- reductions and scans ------------------------------------------------------------------
  Tensor reduce_sum(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_prod(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_max(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_min(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_mean(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  /// Population variance (divides by N).
  Tensor reduce_variance(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_all(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_any(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  Tensor reduce_logsumexp(Tensor x, std::vector<int64_t> axes = {}, bool keep_dims = false);
  /// Index (i32) of the first maximum along axis.
  Tensor argmax(Tensor x, int64_t axis, bool keep_dims = false);
  Tensor argmin(Tensor x, int64_t axis, bool keep_dims = false);
  Tensor cumsum(Tensor x, int64_t axis, bool exclusive = false, bool reverse = false);
  Tensor cumprod(Tensor x, int64_t axis, bool exclusive = false, bool reverse = false);
  Tensor cummax(Tensor x, int64_t axis, bool exclusive = false, bool reverse = false);
  Tensor cummin(Tensor x, int64_t axis, bool exclusive = false, bool reverse = false);
  /// Values and i32 indices of the k largest (or smallest) along axis.
  std::pair<Tensor, Tensor> top_k(Tensor x, int64_t k, int64_t axis = -1, bool largest = true);
  Tensor sort(Tensor x, int64_t axis = -1, bool descending = false);
  Tensor argsort(Tensor x, int64_t axis = -1, bool descending = false);

  // ---- linear algebra ------------------------------------------------------------------------
  /// Batched matmul over the last two dims, batch dims broadcast.
  Tensor matmul(Tensor a, Tensor b, bool transpose_a = false, bool transpose_b = false);
  /// FP8 matmul: (scale_a * scale_b) * (a @ b) as `out` (f32, f16 or bf16), a and b 2-D
  /// f8e4m3 / f8e5m2 (not both e5m2), the scales f32 with one element (per-tensor). On CUDA
  /// (compute capability 8.9+) cuBLASLt's FP8 kernels when k and n are multiples of 16; else, and
  /// on the CPU, the operands widened to f32. Fastest with b transposed ([n, k], as torch._scaled_mm).
  Tensor scaled_matmul(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, DType out = DType::f32,
                       bool transpose_a = false, bool transpose_b = false);
  Tensor band_part(Tensor x, int64_t num_lower, int64_t num_upper);

  // ---- convolution and pooling ---------------------------------------------------------------
  Tensor conv2d(Tensor x, Tensor w, const ConvDesc& d = {});
  Tensor conv3d(Tensor x, Tensor w, const ConvDesc& d = {});
  Tensor conv_transpose2d(Tensor x, Tensor w, const ConvDesc& d = {});
  /// Gradient of conv2d with respect to its input, given dy and the input's shape.
  Tensor conv2d_data_grad(Tensor dy, Tensor w, Shape input_shape, const ConvDesc& d = {});
  /// Gradient of conv2d with respect to its weights, given dy, x and the weights' shape.
  Tensor conv2d_weight_grad(Tensor dy, Tensor x, Shape weights_shape, const ConvDesc& d = {});
  Tensor conv3d_data_grad(Tensor dy, Tensor w, Shape input_shape, const ConvDesc& d = {});
  Tensor conv3d_weight_grad(Tensor dy, Tensor x, Shape weights_shape, const ConvDesc& d = {});
  Tensor max_pool2d(Tensor x, const PoolDesc& d = {});
  /// Max pooling that also returns the flat (per image and channel) i32 index of each max.
  std::pair<Tensor, Tensor> max_pool2d_with_indices(Tensor x, const PoolDesc& d = {});
  Tensor avg_pool2d(Tensor x, const PoolDesc& d = {});
  Tensor max_pool2d_grad(Tensor dy, Tensor x, const PoolDesc& d = {});
  Tensor avg_pool2d_grad(Tensor dy, Tensor x, const PoolDesc& d = {});
  Tensor global_avg_pool2d(Tensor x, Layout layout = Layout::nhwc);
  Tensor global_max_pool2d(Tensor x, Layout layout = Layout::nhwc);

  // ---- normalisation, losses, attention -------------------------------------------------------
  /// (x - mean) / sqrt(var + eps) * gamma + beta with given statistics; channel `axis`.
  Tensor batch_norm(Tensor x, Tensor mean, Tensor var, Tensor gamma, Tensor beta,
                    int64_t axis = -1, double epsilon = 1e-5);
  /// Training form: normalises with the batch statistics; returns {y, batch_mean, batch_var}.
  std::vector<Tensor> batch_norm_training(Tensor x, Tensor gamma, Tensor beta, int64_t axis = -1,
                                          double epsilon = 1e-5);
  /// Normalises over dims [axis, rank).
  Tensor layer_norm(Tensor x, Tensor gamma, Tensor beta, int64_t axis = -1, double epsilon = 1e-5);
  Tensor group_norm(Tensor x, Tensor gamma, Tensor beta, int64_t groups, int64_t axis = -1,
                    double epsilon = 1e-5);
  Tensor softmax(Tensor x, int64_t axis = -1);
  Tensor log_softmax(Tensor x, int64_t axis = -1);
  /// Cross entropy of logits against probability labels (same shape).
  Tensor softmax_cross_entropy(Tensor logits, Tensor labels, int64_t axis = -1,
                               LossReduction reduction = LossReduction::mean);
  Tensor mse(Tensor a, Tensor b, LossReduction reduction = LossReduction::mean);
  /// softmax(q k^T * scale + mask) v over [..., L, D]; mask is additive (float) or boolean.
  Tensor scaled_dot_product_attention(Tensor q, Tensor k, Tensor v,
                                      std::optional<Tensor> mask = std::nullopt,
                                      const AttentionDesc& d = {});

  // ---- shape ops -----------------------------------------------------------------------------
  Tensor reshape(Tensor x, std::vector<int64_t> shape);
  /// reshape whose target may take dims of `sources` (dim_from_source(j): dim j of their shapes
  /// concatenated), resolved at run time where those are dynamic: x of [B*S, 768] back to
  /// [B, S, 768] given a tensor of [B, S]. The sources are read for their shapes only.
  Tensor reshape(Tensor x, std::vector<int64_t> shape, const std::vector<Tensor>& sources);
  Tensor transpose(Tensor x, std::vector<int64_t> perm);
  Tensor broadcast_to(Tensor x, std::vector<int64_t> shape);
  /// broadcast_to whose target may take dims of `sources`, as reshape's.
  Tensor broadcast_to(Tensor x, std::vector<int64_t> shape, const std::vector<Tensor>& sources);
  /// x broadcast to the shape of `like` (resolved at run time for dynamic dims).
  Tensor broadcast_like(Tensor x, Tensor like);
  /// Sums x down to the shape of `like` (the inverse of broadcasting; for gradients).
  Tensor sum_to_like(Tensor x, Tensor like);
  Tensor expand_dims(Tensor x, std::vector<int64_t> axes);
  Tensor squeeze(Tensor x, std::vector<int64_t> axes = {});
  /// Collapses dims [axis, rank) into one.
  Tensor flatten(Tensor x, int64_t axis = 1);
  Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
  Tensor stack(const std::vector<Tensor>& xs, int64_t axis);
  std::vector<Tensor> split(Tensor x, std::vector<int64_t> sizes, int64_t axis);
  Tensor strided_slice(Tensor x, const SliceDesc& d);
  /// Simple slice: begin/end per dim (end -1 = to the end), unit strides.
  Tensor slice(Tensor x, std::vector<int64_t> begin, std::vector<int64_t> end);
  /// x with the strided slice replaced by update.
  Tensor slice_update(Tensor x, Tensor update, const SliceDesc& d);
  Tensor pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after,
             PadMode mode = PadMode::constant, double constant = 0.0);
  Tensor tile(Tensor x, std::vector<int64_t> multiples);
  Tensor reverse(Tensor x, std::vector<int64_t> axes);
  /// The shape as a 1-D i64 tensor (resolved at run time for dynamic dims).
  Tensor shape_of(Tensor x);
  Tensor arange(double start, double limit, double delta = 1.0, DType dtype = DType::f32);
  Tensor one_hot(Tensor indices, int64_t depth, int64_t axis = -1, DType dtype = DType::f32,
                 double on_value = 1.0, double off_value = 0.0);
  Tensor space_to_depth(Tensor x, int64_t block, Layout layout = Layout::nhwc);
  Tensor depth_to_space(Tensor x, int64_t block, Layout layout = Layout::nhwc);
  Tensor resize(Tensor x, const ResizeDesc& d);

  // ---- shape ops whose sizes are tensors computed in the graph --------------------------------
  // As MPSGraph's reshape(withShapeTensor:) and ONNX's Reshape / Pad / Slice / Range: the sizes
  // are 1-D integer tensors computed from other tensors' sizes (shape_of and integer arithmetic:
  // a padding up to a multiple of a window, a range over a feature map's height, an upsampling
  // to a skip connection's size). Sizes known when built give the plain op; otherwise a
  // sized_op whose output dims are dynamic until they are known, as they are in each size's copy
  // of a dynamic executable. Sizes that depend on tensor values, not only on sizes, are refused.
  // (Named *_sized: `reshape(x, {})` must stay the reshape to a scalar.)
  /// `copy_zeros`: a 0 in `shape` keeps x's dim there (ONNX Reshape without allowzero).
  Tensor reshape_sized(Tensor x, Tensor shape, bool copy_zeros = false);
  /// numpy's bidirectional broadcast of x and `shape` (ONNX Expand).
  Tensor broadcast_to_sized(Tensor x, Tensor shape);
  /// pads: [before..., after...], one of each per dim of x.
  Tensor pad_sized(Tensor x, Tensor pads, PadMode mode = PadMode::constant, double constant = 0.0);
  /// numpy slicing of `axes` (begin / end / strides one per axis; negatives count from the
  /// end; clamped to the dim); other axes whole.
  Tensor slice_sized(Tensor x, Tensor begin, Tensor end, Tensor strides, std::vector<int64_t> axes);
  Tensor tile_sized(Tensor x, Tensor multiples);
  /// start, limit, delta: single numbers.
  Tensor arange_sized(Tensor start, Tensor limit, Tensor delta, DType dtype);
  /// `size`: [h, w]; d.size is ignored.
  Tensor resize_sized(Tensor x, Tensor size, const ResizeDesc& d);

  // ---- random --------------------------------------------------------------------------------
  /// A Philox state (i64[2]: seed, counter) to thread through random ops.
  Tensor random_state(int64_t seed);
  /// Draws a tensor; returns {values, next_state}.
  std::pair<Tensor, Tensor> random(Tensor state, const RandomDesc& d);
  /// Zeroes elements with probability rate and scales the rest by 1/(1-rate); {y, next_state}.
  std::pair<Tensor, Tensor> dropout(Tensor x, Tensor state, double rate);

  // ---- gather / scatter / stencil --------------------------------------------------------------
  Tensor gather(Tensor x, Tensor indices, int64_t axis = 0, int64_t batch_dims = 0);
  Tensor gather_nd(Tensor x, Tensor indices, int64_t batch_dims = 0);
  Tensor gather_along_axis(Tensor x, Tensor indices, int64_t axis);
  /// Scatters combine duplicate indices in index order on the CPU. On the GPU the arithmetic
  /// modes use atomics (fast, order unspecified) unless `deterministic` asks for the CPU's order
  /// (bitwise reproducible; sorts the updates by destination first).
  Tensor scatter(Tensor x, Tensor indices, Tensor updates, int64_t axis = 0,
                 ScatterMode mode = ScatterMode::set, int64_t batch_dims = 0, bool deterministic = false);
  Tensor scatter_nd(Tensor x, Tensor indices, Tensor updates, ScatterMode mode = ScatterMode::set,
                    int64_t batch_dims = 0, bool deterministic = false);
  Tensor scatter_along_axis(Tensor x, Tensor indices, Tensor updates, int64_t axis,
                            ScatterMode mode = ScatterMode::set, bool deterministic = false);
  /// Coordinates (i64 [n, rank]) of the non-zero elements; n is known only at run time.
  Tensor non_zero_indices(Tensor x);
  /// Sliding-window weighted reduction over the last 4 dims (see docs/ops.md).
  Tensor stencil(Tensor source, Tensor weights, const StencilDesc& d = {});
  /// The 2-D form: the window slides over the last 2 dims of `source` (rank >= 2) with 2-D
  /// `weights` [kh, kw]; the StencilDesc vectors hold 2 values (explicit_padding 4) or are
  /// empty for the defaults. It is the 4-D op with unit leading window dims.
  Tensor stencil_2d(Tensor source, Tensor weights, const StencilDesc& d = {});
  /// The 3-D form: the last 3 dims, weights [kd, kh, kw], 3 values per vector (padding 6).
  Tensor stencil_3d(Tensor source, Tensor weights, const StencilDesc& d = {});

  // ---- collectives across ranks (tgraph/distributed.h; every rank runs the same ones, in order) ----
  /// Every rank's x combined element by element (sum, mean, max, min); the same on every rank.
  Tensor all_reduce(Tensor x, CollectiveReduce reduce = CollectiveReduce::sum);
  /// The ranks' x concatenated along axis 0 in rank order (axis 0 becomes world_size times longer).
  Tensor all_gather(Tensor x);
  /// The ranks' x combined, then axis 0 split into one part per rank: this rank's part.
  Tensor reduce_scatter(Tensor x, CollectiveReduce reduce = CollectiveReduce::sum);
  /// Rank root's x on every rank.
  Tensor broadcast(Tensor x, int64_t root = 0);

  // ---- control flow ----------------------------------------------------------------------------
  /// Runs then_fn or else_fn on a scalar bool predicate; both return the same types.
  std::vector<Tensor> if_else(Tensor pred, const RegionFn& then_fn, const RegionFn& else_fn = {});
  using ForBody = std::function<std::vector<Tensor>(Graph&, Tensor index, std::vector<Tensor> args)>;
  /// for (i = lower; i < upper; i += step) args = body(i, args); i32 scalars.
  std::vector<Tensor> for_loop(Tensor lower, Tensor upper, Tensor step, std::vector<Tensor> init,
                               const ForBody& body);
  std::vector<Tensor> for_loop(Tensor n, std::vector<Tensor> init, const ForBody& body);
  using WhileBefore = std::function<std::pair<Tensor, std::vector<Tensor>>(Graph&, std::vector<Tensor>)>;
  using WhileAfter = std::function<std::vector<Tensor>(Graph&, std::vector<Tensor>)>;
  /// MPSGraph's while: before(args) -> (pred, results); while pred: args = after(results);
  /// returns the results of the last `before`.
  std::vector<Tensor> while_loop(std::vector<Tensor> init, const WhileBefore& before,
                                 const WhileAfter& after);

  // ---- differentiation -----------------------------------------------------------------------
  /// d(sum of y)/dx for each x, built as ops of this graph (reverse mode). Gradients of values
  /// used several times are summed; broadcasting is undone; stop_gradient blocks. Throws
  /// naming the op when one on the path has no gradient rule.
  std::unordered_map<Tensor, Tensor> gradients(Tensor y, const std::vector<Tensor>& xs);

  // ---- compiling and running -------------------------------------------------------------------
  /// Compiles the part of the graph that computes targets and runs target_ops.
  Executable compile(const std::vector<std::pair<Tensor, TensorType>>& feeds,
                     const std::vector<Tensor>& targets,
                     const std::vector<Operation>& target_ops = {},
                     const CompileOptions& options = {});
  /// Compiles (cached by signature) and runs once.
  std::vector<TensorData> run(const std::vector<std::pair<Tensor, TensorData>>& feeds,
                              const std::vector<Tensor>& targets,
                              const std::vector<Operation>& target_ops = {});

  // ---- inspection --------------------------------------------------------------------------
  /// Text form, one op per line in SSA style.
  std::string str() const;
  /// Graphviz dot form.
  std::string dot() const;
  int64_t num_nodes() const;
  /// The implementation (for tgraph's own passes and tools).
  detail::GraphImpl& impl() const { return *impl_; }
  /// The block new ops go into (0 at top level; a region while building a body).
  int32_t current_block() const { return block_; }

 private:
  friend struct detail::GraphAccess;
  std::shared_ptr<detail::GraphImpl> impl_;
  int32_t block_ = 0;  // where new nodes go: the top block or a region being built
  std::shared_ptr<void> run_cache_;
};

}  // namespace tg
