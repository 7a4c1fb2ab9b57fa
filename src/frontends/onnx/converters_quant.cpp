// Converters of ONNX's quantization ops: integer maths in f64, round half to even, saturation.
#include <cmath>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// Integer operand minus its zero point, as f64 (exact for 8-bit data).
Tensor centered(Ctx& c, int x, int zp) {
  Graph& g = c.g;
  Tensor v = g.cast(c.in(x), DType::f64);
  if (c.has_input(zp)) {
    Tensor z = g.cast(c.in(zp), DType::f64);
    if (z.rank() == 1 && v.rank() > 2 && z.shape()[0] != 1) {  // per output channel of conv weights
      std::vector<int64_t> s(static_cast<size_t>(v.rank()), 1);
      s[0] = -1;
      z = g.reshape(z, s);
    }
    v = g.sub(v, z);
  }
  return v;
}

// Quantizes real values: saturate(rint(v / scale) + zero_point) in zero_point's dtype (u8 default).
Tensor requantize(Ctx& c, Tensor v, int scale, int zp) {
  Graph& g = c.g;
  Tensor y = g.rint(g.div(v, g.cast(c.in(scale), DType::f64)));
  DType out = c.has_input(zp) ? c.in(zp).dtype() : DType::u8;
  if (c.has_input(zp)) y = g.add(y, g.cast(c.in(zp), DType::f64));
  double lo = out == DType::u8 ? 0 : -128, hi = out == DType::u8 ? 255 : 127;
  return g.cast(g.minimum(g.maximum(y, g.scalar(lo, DType::f64)), g.scalar(hi, DType::f64)), out);
}

Tensor per_channel(Graph& g, Tensor s, int64_t rank) {
  if (s.rank() != 1 || rank <= 2) return s;
  std::vector<int64_t> shp(static_cast<size_t>(rank), 1);
  shp[1] = -1;
  return g.reshape(s, shp);
}

void conv_integer(Ctx& c) {
  Tensor y = conv_core(c, centered(c, 0, 2), centered(c, 1, 3));
  c.out(0, c.g.cast(y, DType::i32));
}

void qlinear_conv(Ctx& c) {
  Graph& g = c.g;
  Tensor y = conv_core(c, centered(c, 0, 2), centered(c, 3, 5));
  if (c.has_input(8)) y = bias_nchw(g, y, g.cast(c.in(8), DType::f64));
  Tensor s = g.mul(g.cast(c.in(1), DType::f64), per_channel(g, g.cast(c.in(4), DType::f64), y.rank()));
  c.out(0, requantize(c, g.mul(y, s), 6, 7));
}

void qlinear_matmul(Ctx& c) {
  Graph& g = c.g;
  Tensor y = g.matmul(centered(c, 0, 2), centered(c, 3, 5));
  Tensor s = g.mul(g.cast(c.in(1), DType::f64), g.cast(c.in(4), DType::f64));
  c.out(0, requantize(c, g.mul(y, s), 6, 7));
}

// Computed in f32 like ONNX's reference, so ties round the same way.
void dynamic_quantize(Ctx& c) {
  Graph& g = c.g;
  Tensor x = g.cast(c.in(0), DType::f32);
  Tensor zero = g.scalar(0, DType::f32);
  Tensor lo = g.minimum(g.reduce_min(x), zero), hi = g.maximum(g.reduce_max(x), zero);
  Tensor scale = g.div(g.sub(hi, lo), g.scalar(255, DType::f32));
  auto sat = [&](Tensor v) { return g.minimum(g.maximum(v, zero), g.scalar(255, DType::f32)); };
  Tensor zp = sat(g.rint(g.sub(zero, g.div(lo, scale))));
  Tensor y = sat(g.add(g.rint(g.div(x, scale)), zp));
  c.out(0, g.cast(y, DType::u8));
  c.out(1, scale);
  c.out(2, g.cast(zp, DType::u8));
}

void matmul_integer(Ctx& c) {
  Graph& g = c.g;
  Tensor a = g.cast(c.in(0), DType::i32), b = g.cast(c.in(1), DType::i32);
  if (c.has_input(2)) a = g.sub(a, g.cast(c.in(2), DType::i32));
  if (c.has_input(3)) b = g.sub(b, g.cast(c.in(3), DType::i32));
  c.out(0, g.matmul(a, b));
}

// A scale or zero point t laid against x: a scalar as is, per axis (rank 1) along `axis`, or
// in blocks (block_size > 0, t of x's rank) each element repeated block_size times along
// `axis` and cut to x's extent.
Tensor against_x(Ctx& c, Tensor t, Tensor x) {
  Graph& g = c.g;
  const int64_t block = c.attr_i("block_size", 0);
  if (block < 0) c.fail("block_size must not be negative");
  if (x.rank() <= 1 && block == 0) return t;
  const int64_t axis = norm_axis(c, c.attr_i("axis", 1), x.rank());
  if (block == 0) {
    if (t.rank() != 1) return t;
    std::vector<int64_t> shp(static_cast<size_t>(x.rank()), 1);
    shp[static_cast<size_t>(axis)] = -1;
    return g.reshape(t, shp);
  }
  const std::vector<int64_t> xd = static_dims(c, x, "x"), td = static_dims(c, t, "the scale");
  const size_t a = static_cast<size_t>(axis);
  if (td.size() != xd.size() || td[a] * block < xd[a] || (td[a] - 1) * block >= xd[a])
    c.fail("a blocked scale " + t.shape().str() + " does not cover x " + x.shape().str() + " in blocks of " +
           std::to_string(block));
  std::vector<int64_t> wide = td;
  wide.insert(wide.begin() + static_cast<int64_t>(a) + 1, block);
  std::vector<int64_t> merged = td;
  merged[a] *= block;
  Tensor r = g.reshape(g.broadcast_to(g.expand_dims(t, {axis + 1}), wide), merged);
  if (merged[a] == xd[a]) return r;
  std::vector<int64_t> begin(xd.size(), 0);
  return g.slice(r, begin, xd);
}

void dequantize(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), s = c.in(1);
  // output_dtype (opset 23): the output's type, which is also the multiplication's; x_scale's
  // type when absent.
  const int64_t od = c.attr_i("output_dtype", 0);
  const DType t = od ? dtype_from_onnx(static_cast<int32_t>(od)) : s.dtype();
  if (!is_float(t)) c.fail(std::string("output_dtype ") + dtype_name(t) + " is not a float type");
  s = g.cast(s, t);
  Tensor xf = g.cast(x, t);
  auto per_axis = [&](Tensor t) { return against_x(c, t, x); };
  if (c.has_input(2)) xf = g.sub(xf, per_axis(g.cast(c.in(2), s.dtype())));
  c.out(0, g.mul(xf, per_axis(s)));
  // OCP FP8 by one scale, no zero point (or a zero one): remembered for MatMul.
  const int32_t n = c.onnx_type_in(0);
  const bool zero_free =
      !c.has_input(2) || (c.is_const(2) && c.const_in(2).num_elements() == 1 && c.const_in(2).at(0) == 0);
  if ((n == kFloat8E4M3FN || n == kFloat8E5M2) && zero_free && c.in(1).shape().ranked() &&
      c.in(1).shape().num_elements() == 1)
    c.set_fp8_dequantized(0, {x, n == kFloat8E4M3FN ? DType::f8e4m3 : DType::f8e5m2,
                              g.reshape(g.cast(c.in(1), DType::f32), std::vector<int64_t>{})});
}

void quantize(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), s = c.in(1);
  // The output's type: the zero point's (a narrow format it holds widened, kInt4...), else
  // output_dtype, else uint8.
  const int32_t narrow = c.has_input(2) ? c.onnx_type_in(2)
                         : c.has_attr("output_dtype") ? narrow_type(static_cast<int32_t>(c.attr_i("output_dtype", 2)))
                                                      : 0;
  DType out = c.has_input(2) ? c.in(2).dtype()
              : c.has_attr("output_dtype") ? dtype_from_onnx(static_cast<int32_t>(c.attr_i("output_dtype", 2)))
                                           : DType::u8;
  auto per_axis = [&](Tensor t) { return against_x(c, t, x); };
  // precision (opset 23): the type the division runs in; y_scale's when absent.
  const int64_t pr = c.attr_i("precision", 0);
  const DType t = pr ? dtype_from_onnx(static_cast<int32_t>(pr)) : s.dtype();
  if (!is_float(t)) c.fail(std::string("precision ") + dtype_name(t) + " is not a float type");
  const bool narrow_float = narrow == kFloat8E4M3FN || narrow == kFloat8E4M3FNUZ || narrow == kFloat8E5M2 ||
                            narrow == kFloat8E5M2FNUZ || narrow == kFloat4E2M1;
  // i32 holds uint16 (int32 is no quantized type)
  if (!narrow_float && out != DType::u8 && out != DType::i8 && out != DType::i16 && out != DType::i32)
    c.fail(std::string("quantizing to ") + dtype_name(out) + " is not supported");
  Tensor y = g.div(g.cast(x, t), per_axis(g.cast(s, t)));
  if (narrow_float) {  // the 8- and 4-bit floats: x / scale + zero_point, rounded to the format
    if (c.has_input(2)) y = g.add(y, per_axis(g.cast(c.in(2), t)));
    c.out(0, round_to_float_format(c, y, narrow, c.attr_i("saturate", 1) != 0));
    return c.set_onnx_type(0, narrow);
  }
  y = g.rint(y);
  if (c.has_input(2)) y = g.add(y, per_axis(g.cast(c.in(2), t)));
  const bool is_signed = out == DType::i8 || out == DType::i16;
  const double bits = narrow == kInt4 || narrow == kUint4 ? 4
                      : narrow == kInt2 || narrow == kUint2 ? 2
                      : out == DType::i16 || out == DType::i32 ? 16 : 8;
  const double lo = is_signed ? -std::exp2(bits - 1) : 0, hi = is_signed ? std::exp2(bits - 1) - 1 : std::exp2(bits) - 1;
  y = g.minimum(g.maximum(y, scalar_like(g, lo, y)), scalar_like(g, hi, y));
  c.out(0, g.cast(y, out));
  c.set_onnx_type(0, narrow);
}

}  // namespace

const std::vector<Converter>& quant_converters() {
  static const std::vector<Converter> t = {
      {"MatMulInteger", 10, kNewestOpset, matmul_integer},
      {"DequantizeLinear", 10, kNewestOpset, dequantize},
      {"QuantizeLinear", 10, kNewestOpset, quantize},
      {"ConvInteger", 10, kNewestOpset, conv_integer},
      {"QLinearConv", 10, kNewestOpset, qlinear_conv},
      {"QLinearMatMul", 10, kNewestOpset, qlinear_matmul},
      {"DynamicQuantizeLinear", 11, kNewestOpset, dynamic_quantize},
  };
  return t;
}

}  // namespace tg::onnx_import
