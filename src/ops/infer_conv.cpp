// Inference for convolution (forward, transposed, gradients) and 2-D pooling.
//
// Layouts: activations are channels-last (nhwc / ndhwc) or channels-first (nchw / ncdhw);
// weights are spatial-first (hwio / dhwio: [k..., I, O]) or O-first (oihw / oidhw: [O, I, k...]).
// conv3d also accepts the 2-D names (nhwc means ndhwc) so a default ConvDesc works for it.
// conv_transpose2d takes the weights of the convolution it transposes, as PyTorch, ONNX and
// TensorFlow do: oihw is [C_in, C_out/groups, kh, kw], hwio is [kh, kw, C_out/groups, C_in].
#include "ops/infer.h"

namespace tg::detail {
namespace {

std::string num(int64_t v) { return std::to_string(v); }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::optional<bool> channels_last(Layout l, int64_t spatial) {
  if (l == Layout::nhwc || (spatial == 3 && l == Layout::ndhwc)) return true;
  if (l == Layout::nchw || (spatial == 3 && l == Layout::ncdhw)) return false;
  return std::nullopt;
}

std::optional<bool> weights_spatial_first(Layout l, int64_t spatial) {
  if (l == Layout::hwio || (spatial == 3 && l == Layout::dhwio)) return true;
  if (l == Layout::oihw || (spatial == 3 && l == Layout::oidhw)) return false;
  return std::nullopt;
}

// Batch, channels and spatial extents of an activation shape.
struct Act {
  int64_t n, c;
  std::vector<int64_t> sp;
};
Act split_act(const Shape& s, bool last) {
  const auto& d = s.dims();
  if (last) return {d.front(), d.back(), {d.begin() + 1, d.end() - 1}};
  return {d[0], d[1], {d.begin() + 2, d.end()}};
}
Shape join_act(int64_t n, int64_t c, const std::vector<int64_t>& sp, bool last) {
  std::vector<int64_t> d{n};
  if (!last) d.push_back(c);
  d.insert(d.end(), sp.begin(), sp.end());
  if (last) d.push_back(c);
  return Shape(d);
}

// Output channels, input channels (per group) and kernel extents of a weights shape.
struct Filter {
  int64_t o, i;
  std::vector<int64_t> k;
};
Filter split_filter(const Shape& s, bool spatial_first) {
  const auto& d = s.dims();
  if (spatial_first) return {d.back(), d[d.size() - 2], {d.begin(), d.end() - 2}};
  return {d[0], d[1], {d.begin() + 2, d.end()}};
}

// Stride, dilation and padding of a window with defaults filled in; `error` set when invalid.
struct Window {
  std::vector<int64_t> stride, dilation, pad;  // pad is [before0, after0, before1, ...]
  PaddingStyle style;
  std::string error;
};
Window make_window(std::vector<int64_t> stride, std::vector<int64_t> dilation, PaddingStyle style,
                   std::vector<int64_t> pad, size_t n) {
  Window w{std::move(stride), std::move(dilation), std::move(pad), style, {}};
  auto fill = [&](std::vector<int64_t>& v, const char* name, size_t count, int64_t dflt, int64_t min) {
    if (v.empty()) v.assign(count, dflt);
    if (v.size() != count && w.error.empty())
      w.error = std::string(name) + " " + Shape(v).str() + " needs " + num(int64_t(count)) + " values";
    for (int64_t x : v)
      if (x < min && w.error.empty())
        w.error = std::string(name) + " " + Shape(v).str() + " has a value below " + num(min);
  };
  fill(w.stride, "stride", n, 1, 1);
  fill(w.dilation, "dilation", n, 1, 1);
  fill(w.pad, "explicit_padding", 2 * n, 0, 0);
  if (style == PaddingStyle::explicit_offset && w.error.empty())
    w.error = "padding style explicit_offset applies only to stencil";
  if (style != PaddingStyle::explicit_) w.pad.assign(2 * n, 0);
  return w;
}

constexpr int64_t kNoFit = -2;

// Extent of a sliding window's output along one dim: -1 when unknown, kNoFit when the window
// is larger than the padded input. same: ceil(in / stride), whatever the kernel.
int64_t window_out(int64_t in, int64_t k, const Window& w, size_t i, bool ceil_mode) {
  if (w.style == PaddingStyle::same || w.style == PaddingStyle::same_lower)
    return in < 0 ? -1 : ceil_div(in, w.stride[i]);
  if (in < 0 || k < 0) return -1;
  int64_t ke = (k - 1) * w.dilation[i] + 1, pb = w.pad[2 * i], s = w.stride[i];
  int64_t span = in + pb + w.pad[2 * i + 1] - ke;
  if (span < 0) return kNoFit;
  int64_t out = (ceil_mode ? ceil_div(span, s) : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pb) --out;  // a last window starting in the padding
  return out;
}

// Transposed: the input extent of the forward conv. same: in * stride.
int64_t transposed_out(int64_t in, int64_t k, const Window& w, size_t i, int64_t out_pad) {
  if (w.style == PaddingStyle::same || w.style == PaddingStyle::same_lower)
    return in < 0 ? -1 : in * w.stride[i];
  if (in < 0 || k < 0) return -1;
  int64_t ke = (k - 1) * w.dilation[i] + 1;
  int64_t out = (in - 1) * w.stride[i] + ke - w.pad[2 * i] - w.pad[2 * i + 1] + out_pad;
  return out < 1 ? kNoFit : out;
}

// output_padding with its default (zeros) filled into `out`; an error text when invalid. It
// picks among the input sizes a strided conv maps to one size, so only conv_transpose has it.
std::string output_padding(const std::vector<int64_t>& given, const Window& win, bool transposed,
                           std::vector<int64_t>& out) {
  size_t n = win.stride.size();
  out = given.empty() ? std::vector<int64_t>(n, 0) : given;
  std::string str = Shape(out).str();
  if (out.size() != n) return "output_padding " + str + " needs " + num(int64_t(n)) + " values";
  bool same = win.style == PaddingStyle::same || win.style == PaddingStyle::same_lower;
  for (size_t i = 0; i < n; ++i) {
    if (out[i] == 0) continue;
    if (!transposed) return "output_padding applies only to conv_transpose, got " + str;
    if (same) return "output_padding " + str + " cannot be used with same padding";
    if (out[i] < 0 || (out[i] >= win.stride[i] && out[i] >= win.dilation[i]))
      return "output_padding " + str + " must be >= 0 and smaller than the stride or the dilation";
  }
  return {};
}

// Output shape of a (transposed) convolution of x by w; xn / wn name them in messages.
InferResult conv_shape(const InferContext& c, int64_t spatial, bool transposed, const Shape& x,
                       const Shape& w, const ConvDesc& d, DType dt, const char* xn, const char* wn) {
  auto operands = [&] { return std::string(xn) + " is " + x.str() + ", " + wn + " is " + w.str(); };
  auto last = channels_last(d.data_layout, spatial);
  if (!last)
    return op_error(c, "data_layout " + enum_name(d.data_layout) +
                           " is not an activation layout (nhwc or nchw" +
                           (spatial == 3 ? ", ndhwc, ncdhw)" : ")"));
  auto sfirst = weights_spatial_first(d.weights_layout, spatial);
  if (!sfirst)
    return op_error(c, "weights_layout " + enum_name(d.weights_layout) +
                           " is not a weights layout (hwio or oihw" +
                           (spatial == 3 ? ", dhwio, oidhw)" : ")"));
  if (x.rank() != spatial + 2 || w.rank() != spatial + 2)
    return op_error(c, "needs rank-" + num(spatial + 2) + " operands: " + operands());
  if (d.groups < 1) return op_error(c, "groups must be >= 1, got " + num(d.groups));
  size_t n = static_cast<size_t>(spatial);
  Window win = make_window(d.stride, d.dilation, d.padding, d.explicit_padding, n);
  if (!win.error.empty()) return op_error(c, win.error);
  std::vector<int64_t> out_pad;
  if (std::string e = output_padding(d.output_padding, win, transposed, out_pad); !e.empty())
    return op_error(c, e);
  Act a = split_act(x, *last);
  Filter f = split_filter(w, *sfirst);
  int64_t g = d.groups, cout;
  std::string gs = g == 1 ? "" : " x " + num(g) + " groups";
  if (!transposed) {
    if (a.c >= 0 && f.i >= 0 && a.c != f.i * g)
      return op_error(
          c, "input channels " + num(a.c) + " do not match weights' " + num(f.i) + gs + ": " + operands());
    if (f.o >= 0 && f.o % g != 0)
      return op_error(
          c, "output channels " + num(f.o) + " are not divisible by groups " + num(g) + ": " + operands());
    cout = f.o;
  } else {
    if (a.c >= 0 && f.o >= 0 && a.c != f.o)
      return op_error(
          c, "input channels " + num(a.c) + " do not match weights' " + num(f.o) + ": " + operands());
    cout = f.i < 0 ? -1 : f.i * g;
  }
  if (a.c >= 0 && a.c % g != 0)
    return op_error(
        c, "input channels " + num(a.c) + " are not divisible by groups " + num(g) + ": " + operands());
  std::vector<int64_t> sp(n);
  for (size_t i = 0; i < n; ++i) {
    sp[i] = transposed ? transposed_out(a.sp[i], f.k[i], win, i, out_pad[i])
                       : window_out(a.sp[i], f.k[i], win, i, false);
    if (sp[i] == kNoFit && transposed)
      return op_error(c, "padding " + Shape(win.pad).str() + " leaves no output along spatial dim " +
                             num(int64_t(i)) + ": " + operands());
    if (sp[i] == kNoFit)
      return op_error(c, "window of kernel " + num(f.k[i]) + " (dilation " + num(win.dilation[i]) +
                             ") does not fit spatial dim " + num(int64_t(i)) + " of extent " + num(a.sp[i]) +
                             " with padding " + Shape(win.pad).str() + ": " + operands());
  }
  return {{TensorType(join_act(a.n, cout, sp, *last), dt)}, {}};
}

int64_t spatial_dims(OpKind k) {
  return (k == OpKind::Conv3d || k == OpKind::Conv3dDataGrad || k == OpKind::Conv3dWeightGrad) ? 3 : 2;
}

InferResult float_pair(const InferContext& c, const char* a, const char* b) {
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return op_error(c, "operand dtypes differ: " + describe_inputs(c, {a, b}));
  if (!is_float(c.inputs[0].dtype))
    return op_error(c, "needs floating-point operands: " + describe_inputs(c, {a, b}));
  return {};
}

// Output shape of 2-D pooling of x.
InferResult pool_shape(const InferContext& c, const Shape& x, const PoolDesc& d) {
  auto last = channels_last(d.data_layout, 2);
  if (!last) return op_error(c, "data_layout " + enum_name(d.data_layout) + " is not nhwc or nchw");
  if (x.rank() != 4) return op_error(c, "needs a rank-4 input, x is " + x.str());
  if (d.kernel.size() != 2 || d.kernel[0] < 1 || d.kernel[1] < 1)
    return op_error(c, "kernel " + Shape(d.kernel).str() + " needs 2 values >= 1");
  // As in PyTorch, an empty stride means the kernel size (non-overlapping windows).
  Window win =
      make_window(d.stride.empty() ? d.kernel : d.stride, d.dilation, d.padding, d.explicit_padding, 2);
  if (!win.error.empty()) return op_error(c, win.error);
  Act a = split_act(x, *last);
  for (size_t i = 0; i < 2; ++i) {
    int64_t ke = (d.kernel[i] - 1) * win.dilation[i] + 1;
    if (win.pad[2 * i] >= ke || win.pad[2 * i + 1] >= ke)
      return op_error(c, "padding " + Shape(win.pad).str() + " must be smaller than the window " + num(ke) +
                             " (a window would see only padding)");
    a.sp[i] = window_out(a.sp[i], d.kernel[i], win, i, d.ceil_mode);
    if (a.sp[i] == kNoFit)
      return op_error(c, "window " + Shape(d.kernel).str() + " does not fit x " + x.str() + " with padding " +
                             Shape(win.pad).str());
  }
  return {{TensorType(join_act(a.n, a.c, a.sp, *last), DType::f32)}, {}};
}

InferResult check_pool_dtype(const InferContext& c, DType t) {
  bool avg = c.kind == OpKind::AvgPool2d || c.kind == OpKind::AvgPool2dGrad;
  if (avg && !is_float(t)) return op_error(c, "needs a floating-point input, x is " + c.inputs.back().str());
  if (t == DType::boolean) return op_error(c, "does not take bool input");
  return {};
}

}  // namespace

InferResult infer_conv(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  if (r = float_pair(c, "x", "w"); !r.ok()) return r;
  return conv_shape(c, spatial_dims(c.kind), c.kind == OpKind::ConvTranspose2d, c.inputs[0].shape,
                    c.inputs[1].shape, std::get<ConvDesc>(c.attr), c.inputs[0].dtype, "x", "w");
}

// Data grad (dy, w) -> input_shape; weight grad (dy, x) -> weights_shape. The forward conv
// that the result shape implies must produce dy's shape.
InferResult infer_conv_grad(const InferContext& c) {
  InferResult r;
  bool data = c.kind == OpKind::Conv2dDataGrad || c.kind == OpKind::Conv3dDataGrad;
  if (!arity_ok(c, 2, r)) return r;
  if (r = float_pair(c, "dy", data ? "w" : "x"); !r.ok()) return r;
  const auto& d = std::get<ConvGradDesc>(c.attr);
  Shape res(d.result_shape);
  for (int64_t v : d.result_shape)
    if (v < -1) return op_error(c, "result_shape " + res.str() + " has a negative dimension");
  const Shape& other = c.inputs[1].shape;
  InferResult fwd = data ? conv_shape(c, spatial_dims(c.kind), false, res, other, d.conv, c.inputs[0].dtype,
                                      "input_shape", "w")
                         : conv_shape(c, spatial_dims(c.kind), false, other, res, d.conv, c.inputs[0].dtype,
                                      "x", "weights_shape");
  if (!fwd.ok()) return fwd;
  const Shape& dy = c.inputs[0].shape;
  if (!shape_compatible(fwd.types[0].shape, dy))
    return op_error(c, "dy is " + dy.str() + " but the forward convolution gives " +
                           fwd.types[0].shape.str() + " (" + (data ? "input_shape " : "x ") +
                           (data ? res : other).str() + ", " + (data ? "w " : "weights_shape ") +
                           (data ? other : res).str() + ")");
  return {{TensorType(res, c.inputs[0].dtype)}, {}};
}

InferResult infer_pool(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 1, r)) return r;
  if (r = check_pool_dtype(c, c.inputs[0].dtype); !r.ok()) return r;
  r = pool_shape(c, c.inputs[0].shape, std::get<PoolDesc>(c.attr));
  if (!r.ok()) return r;
  Shape out = r.types[0].shape;
  if (c.kind == OpKind::MaxPool2dWithIndices)
    return {{TensorType(out, c.inputs[0].dtype), TensorType(out, DType::i32)}, {}};
  return {{TensorType(out, c.inputs[0].dtype)}, {}};
}

// (dy, x) -> x's type; dy must have the pooled shape of x.
InferResult infer_pool_grad(const InferContext& c) {
  InferResult r;
  if (!arity_ok(c, 2, r)) return r;
  if (c.inputs[0].dtype != c.inputs[1].dtype)
    return op_error(c, "operand dtypes differ: " + describe_inputs(c, {"dy", "x"}));
  if (r = check_pool_dtype(c, c.inputs[1].dtype); !r.ok()) return r;
  r = pool_shape(c, c.inputs[1].shape, std::get<PoolDesc>(c.attr));
  if (!r.ok()) return r;
  if (!shape_compatible(r.types[0].shape, c.inputs[0].shape))
    return op_error(c, "dy is " + c.inputs[0].shape.str() + " but pooling x " + c.inputs[1].shape.str() +
                           " gives " + r.types[0].shape.str());
  return {{c.inputs[1]}, {}};
}

}  // namespace tg::detail
