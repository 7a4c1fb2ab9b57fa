// Converters of ONNX's quantization ops: integer maths in f64, round half to even, saturation.
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

void dequantize(Ctx& c) {
  Graph& g = c.g;
  if (c.attr_i("block_size", 0)) c.fail("blocked quantization (block_size) is not supported");
  Tensor x = c.in(0), s = c.in(1);
  // output_dtype (opset 23): the output's type, which is also the multiplication's; x_scale's
  // type when absent.
  const int64_t od = c.attr_i("output_dtype", 0);
  const DType t = od ? dtype_from_onnx(static_cast<int32_t>(od)) : s.dtype();
  if (!is_float(t)) c.fail(std::string("output_dtype ") + dtype_name(t) + " is not a float type");
  s = g.cast(s, t);
  Tensor xf = g.cast(x, t);
  auto per_axis = [&](Tensor t) {
    if (t.rank() != 1 || x.rank() <= 1) return t;
    std::vector<int64_t> shp(static_cast<size_t>(x.rank()), 1);
    shp[static_cast<size_t>(norm_axis(c, c.attr_i("axis", 1), x.rank()))] = -1;
    return g.reshape(t, shp);
  };
  if (c.has_input(2)) xf = g.sub(xf, per_axis(g.cast(c.in(2), s.dtype())));
  c.out(0, g.mul(xf, per_axis(s)));
}

void quantize(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), s = c.in(1);
  if (c.attr_i("block_size", 0)) c.fail("blocked quantization (block_size) is not supported");
  DType out = c.has_input(2) ? c.in(2).dtype()
              : c.has_attr("output_dtype") ? dtype_from_onnx(static_cast<int32_t>(c.attr_i("output_dtype", 2)))
                                           : DType::u8;
  if (out != DType::u8 && out != DType::i8) c.fail(std::string("quantizing to ") + dtype_name(out) + " is not supported");
  auto per_axis = [&](Tensor t) {
    if (t.rank() != 1 || x.rank() <= 1) return t;
    std::vector<int64_t> shp(static_cast<size_t>(x.rank()), 1);
    shp[static_cast<size_t>(norm_axis(c, c.attr_i("axis", 1), x.rank()))] = -1;
    return g.reshape(t, shp);
  };
  // precision (opset 23): the type the division runs in; y_scale's when absent.
  const int64_t pr = c.attr_i("precision", 0);
  const DType t = pr ? dtype_from_onnx(static_cast<int32_t>(pr)) : s.dtype();
  if (!is_float(t)) c.fail(std::string("precision ") + dtype_name(t) + " is not a float type");
  Tensor y = g.rint(g.div(g.cast(x, t), per_axis(g.cast(s, t))));
  if (c.has_input(2)) y = g.add(y, per_axis(g.cast(c.in(2), t)));
  double lo = out == DType::u8 ? 0 : -128, hi = out == DType::u8 ? 255 : 127;
  y = g.minimum(g.maximum(y, scalar_like(g, lo, y)), scalar_like(g, hi, y));
  c.out(0, g.cast(y, out));
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
