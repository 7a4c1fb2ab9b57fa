#pragma once
// Typed attributes of ops. Each descriptor lists its fields with TG_FIELDS so the IR can
// compare, hash, print and serialize it without hand-written code per struct.
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "tgraph/dtype.h"

// Declares the reflected fields of a descriptor (in declaration order).
#define TG_FIELDS(...)                                               \
  auto fields() { return std::tie(__VA_ARGS__); }                    \
  auto fields() const { return std::tie(__VA_ARGS__); }              \
  static constexpr const char* field_names() { return #__VA_ARGS__; } \
  bool operator==(const auto& o) const { return fields() == o.fields(); }

namespace tg {

/// How a spatial window is padded.
enum class PaddingStyle : uint8_t { explicit_, valid, same, same_lower, explicit_offset };
/// Memory order of activations / weights.
enum class Layout : uint8_t { nhwc, nchw, hwio, oihw, ndhwc, ncdhw, dhwio, oidhw };
/// How a loss is reduced over the batch.
enum class LossReduction : uint8_t { none, sum, mean };
/// Padding modes of `pad`.
enum class PadMode : uint8_t { constant, reflect, symmetric, edge };
/// Interpolation of `resize`.
enum class ResizeMode : uint8_t { nearest, bilinear };
/// How `resize` maps output coordinates to input coordinates.
enum class CoordinateMode : uint8_t { half_pixel, align_corners, asymmetric, pytorch_half_pixel };
/// Rounding of the source coordinate in nearest-neighbour resize.
enum class NearestRounding : uint8_t { round_prefer_floor, round_prefer_ceil, floor, ceil };
/// Distribution drawn by random ops.
enum class Distribution : uint8_t { uniform, normal, truncated_normal };
/// How scatter combines an update with the existing value.
enum class ScatterMode : uint8_t { set, add, sub, mul, div, min, max };
/// Reduction applied over a stencil window.
enum class Reduction : uint8_t { sum, min, max, product, argmin, argmax };
/// How a collective combines the ranks' tensors (mean: the sum divided by the world size).
enum class CollectiveReduce : uint8_t { sum, mean, max, min };
/// Values read outside the source by a stencil.
enum class Boundary : uint8_t { zero, constant, clamp_to_edge, reflect, symmetric, periodic, anti_periodic };

/// Ops without attributes.
struct NoDesc {
  TG_FIELDS()
};
/// Reductions: axes (empty = all) and whether reduced dims stay as size 1.
struct ReduceDesc {
  std::vector<int64_t> axes;
  bool keep_dims = false;
  TG_FIELDS(axes, keep_dims)
};
/// One axis (softmax, concat, argmax...).
struct AxisDesc {
  int64_t axis = -1;
  TG_FIELDS(axis)
};
/// Cumulative sum/prod/min/max along an axis.
struct CumulativeDesc {
  int64_t axis = 0;
  bool exclusive = false;
  bool reverse = false;
  TG_FIELDS(axis, exclusive, reverse)
};
/// top_k: the k largest (or smallest) along an axis, values and i32 indices.
struct TopKDesc {
  int64_t k = 1;
  int64_t axis = -1;
  bool largest = true;
  TG_FIELDS(k, axis, largest)
};
/// sort / argsort along an axis (stable).
struct SortDesc {
  int64_t axis = -1;
  bool descending = false;
  TG_FIELDS(axis, descending)
};
/// Scalar parameters of parameterised elementwise ops (leaky_relu alpha, elu alpha, hard_sigmoid).
struct ScalarDesc {
  double alpha = 0.0;
  double beta = 0.0;
  TG_FIELDS(alpha, beta)
};
/// Target element type of cast / bitcast.
struct CastDesc {
  DType to = DType::f32;
  TG_FIELDS(to)
};
/// Batched matmul; transposes apply to the last two dims without a copy.
struct MatmulDesc {
  bool transpose_a = false;
  bool transpose_b = false;
  TG_FIELDS(transpose_a, transpose_b)
};
/// scaled_matmul: the result's dtype (f32, f16 or bf16) and the operands' transposes.
struct ScaledMatmulDesc {
  bool transpose_a = false;
  bool transpose_b = false;
  DType out = DType::f32;
  TG_FIELDS(transpose_a, transpose_b, out)
};
/// band_part: keep num_lower sub-diagonals and num_upper super-diagonals (-1 = all).
struct BandPartDesc {
  int64_t num_lower = -1;
  int64_t num_upper = -1;
  TG_FIELDS(num_lower, num_upper)
};
/// 2-D / 3-D convolution and its transposed form. Empty vectors mean 1s (stride, dilation)
/// or zeros (padding). explicit_padding is [before0, after0, before1, after1, ...].
struct ConvDesc {
  std::vector<int64_t> stride;
  std::vector<int64_t> dilation;
  PaddingStyle padding = PaddingStyle::explicit_;
  std::vector<int64_t> explicit_padding;
  Layout data_layout = Layout::nhwc;
  Layout weights_layout = Layout::hwio;
  int64_t groups = 1;
  std::vector<int64_t> output_padding;  // conv_transpose only
  TG_FIELDS(stride, dilation, padding, explicit_padding, data_layout, weights_layout, groups,
            output_padding)
};
using Conv2dDesc = ConvDesc;
using Conv3dDesc = ConvDesc;
/// Gradient ops of convolution also carry the shape of the tensor they produce.
struct ConvGradDesc {
  ConvDesc conv;
  std::vector<int64_t> result_shape;
  TG_FIELDS(conv, result_shape)
};
/// 2-D max / average pooling.
struct PoolDesc {
  std::vector<int64_t> kernel{2, 2};
  std::vector<int64_t> stride;
  std::vector<int64_t> dilation;
  PaddingStyle padding = PaddingStyle::explicit_;
  std::vector<int64_t> explicit_padding;
  Layout data_layout = Layout::nhwc;
  bool ceil_mode = false;
  bool count_include_pad = false;
  TG_FIELDS(kernel, stride, dilation, padding, explicit_padding, data_layout, ceil_mode,
            count_include_pad)
};
/// Normalisations: channel axis (batch/group norm) or first normalised axis (layer norm).
struct NormDesc {
  int64_t axis = -1;
  double epsilon = 1e-5;
  int64_t groups = 1;  // group_norm only
  TG_FIELDS(axis, epsilon, groups)
};
/// softmax_cross_entropy / mse.
struct LossDesc {
  int64_t axis = -1;
  LossReduction reduction = LossReduction::mean;
  TG_FIELDS(axis, reduction)
};
/// scaled_dot_product_attention; scale 0 means 1/sqrt(head_dim).
struct AttentionDesc {
  double scale = 0.0;
  bool causal = false;
  TG_FIELDS(scale, causal)
};
/// A target dim of reshape / broadcast_to that is dim j of the op's shape sources (their
/// shapes concatenated), known when they are: how a graph with dynamic dims says "batch x seq"
/// (a dim a PyTorch graph names as a symbol) without fixing it.
inline constexpr int64_t kDimFromSource = -2;
constexpr int64_t dim_from_source(int64_t j) { return kDimFromSource - j; }
/// reshape / broadcast_to target shape (reshape allows one -1; dim_from_source(j) codes take
/// dims of the shape sources).
struct ShapeDesc {
  std::vector<int64_t> shape;
  TG_FIELDS(shape)
};
/// transpose permutation; also expand_dims / squeeze / reverse axes.
struct AxesDesc {
  std::vector<int64_t> axes;
  TG_FIELDS(axes)
};
/// split into pieces of the given sizes along an axis.
struct SplitDesc {
  std::vector<int64_t> sizes;
  int64_t axis = 0;
  TG_FIELDS(sizes, axis)
};
/// Strided slice with TensorFlow's masks (bit i applies to dim i).
struct SliceDesc {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
  std::vector<int64_t> strides;
  int64_t begin_mask = 0;
  int64_t end_mask = 0;
  int64_t squeeze_mask = 0;
  TG_FIELDS(begin, end, strides, begin_mask, end_mask, squeeze_mask)
};
/// pad: amounts before/after each dim.
struct PadDesc {
  std::vector<int64_t> before;
  std::vector<int64_t> after;
  PadMode mode = PadMode::constant;
  double constant = 0.0;
  TG_FIELDS(before, after, mode, constant)
};
/// tile multiples per dim.
struct TileDesc {
  std::vector<int64_t> multiples;
  TG_FIELDS(multiples)
};
/// arange(start, limit, delta) of a dtype.
struct ArangeDesc {
  double start = 0.0;
  double limit = 0.0;
  double delta = 1.0;
  DType dtype = DType::f32;
  TG_FIELDS(start, limit, delta, dtype)
};
/// one_hot of integer indices.
struct OneHotDesc {
  int64_t depth = 0;
  int64_t axis = -1;
  double on_value = 1.0;
  double off_value = 0.0;
  DType dtype = DType::f32;
  TG_FIELDS(depth, axis, on_value, off_value, dtype)
};
/// space_to_depth / depth_to_space.
struct BlockDesc {
  int64_t block = 2;
  Layout data_layout = Layout::nhwc;
  TG_FIELDS(block, data_layout)
};
/// resize of the spatial dims to `size` ([h, w]).
struct ResizeDesc {
  std::vector<int64_t> size;
  ResizeMode mode = ResizeMode::nearest;
  CoordinateMode coordinates = CoordinateMode::half_pixel;
  NearestRounding rounding = NearestRounding::round_prefer_floor;
  Layout data_layout = Layout::nhwc;
  TG_FIELDS(size, mode, coordinates, rounding, data_layout)
};
/// What a sized_op becomes once its sizes are known.
enum class SizedKind : uint8_t { reshape, broadcast_to, pad, slice, tile, arange, resize };
/// sized_op: an op whose sizes are 1-D integer tensors computed in the graph from other
/// tensors' sizes (shape_of and integer arithmetic), as a model exported with dynamic axes
/// computes a padding up to a multiple of a window, a range over a feature map's height or an
/// upsampling to a skip connection's size. Its output dims are dynamic until the sizes are
/// known: in each size's copy of a dynamic executable they are, and the node becomes the op
/// itself (docs/decisions.md, "Sizes computed in the graph"). Operands after the data input:
/// reshape / broadcast_to (bidirectional, as numpy and ONNX Expand) the target shape; pad
/// [before..., after...] (mode and constant in `pad`); slice begin, end, strides over `axes`
/// (numpy's clamping; other axes whole); tile the multiples; arange start, limit, delta (no
/// data input; dtype in `arange`); resize the [h, w] size (the rest in `resize`).
/// `copy_zeros`: a reshape's 0 keeps the input's dim there (ONNX Reshape without allowzero).
/// `dims`: the output dims the builder could tell (-1 where not; empty: none), so what follows
/// knows a channel count computed beside dynamic dims.
struct SizedDesc {
  SizedKind op = SizedKind::reshape;
  std::vector<int64_t> axes;
  PadDesc pad;
  ArangeDesc arange;
  ResizeDesc resize;
  bool copy_zeros = false;
  std::vector<int64_t> dims;
  TG_FIELDS(op, axes, pad, arange, resize, copy_zeros, dims)
};
/// Random tensors from an explicit Philox state (i64[2]: seed, counter).
struct RandomDesc {
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  Distribution distribution = Distribution::uniform;
  double a = 0.0;  // uniform: min; normal: mean
  double b = 1.0;  // uniform: max; normal: stddev
  TG_FIELDS(shape, dtype, distribution, a, b)
};
/// random_state: the seed of a Philox stream.
struct SeedDesc {
  int64_t seed = 0;
  TG_FIELDS(seed)
};
/// Collectives across the ranks of a data-parallel job (tgraph/distributed.h): how they combine,
/// the root of a broadcast, and the world size and this process's rank when the op was built
/// (the output shapes of all_gather / reduce_scatter depend on the world size).
struct CollectiveDesc {
  CollectiveReduce reduce = CollectiveReduce::sum;
  int64_t root = 0;
  int64_t world = 1;
  int64_t rank = 0;
  TG_FIELDS(reduce, root, world, rank)
};
/// dropout with a drop probability.
struct DropoutDesc {
  double rate = 0.5;
  TG_FIELDS(rate)
};
/// gather (axis, batch_dims), gather_nd (batch_dims), *_along_axis (axis).
struct GatherDesc {
  int64_t axis = 0;
  int64_t batch_dims = 0;
  TG_FIELDS(axis, batch_dims)
};
/// scatter family.
struct ScatterDesc {
  int64_t axis = 0;
  int64_t batch_dims = 0;
  ScatterMode mode = ScatterMode::set;
  bool deterministic = false;
  TG_FIELDS(axis, batch_dims, mode, deterministic)
};
/// Stencil over the last 4 dims of the source (see docs/ops.md).
struct StencilDesc {
  Reduction reduction = Reduction::sum;
  std::vector<int64_t> offsets;           // 4 values, default 0
  std::vector<int64_t> strides;           // 4 values, default 1
  std::vector<int64_t> dilation_rates;    // 4 values, default 1
  std::vector<int64_t> explicit_padding;  // 8 values [before0, after0, ...]
  PaddingStyle padding_style = PaddingStyle::same;
  Boundary boundary = Boundary::zero;
  double padding_constant = 0.0;
  TG_FIELDS(reduction, offsets, strides, dilation_rates, explicit_padding, padding_style, boundary,
            padding_constant)
};
/// Names a variable, placeholder or read.
struct NameDesc {
  std::string name;
  TG_FIELDS(name)
};
/// Optimizer hyper-parameters (SGD and Adam share one struct).
struct OptimizerDesc {
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  bool decoupled_weight_decay = false;  // AdamW
  TG_FIELDS(momentum, nesterov, weight_decay, beta1, beta2, epsilon, decoupled_weight_decay)
};

}  // namespace tg
