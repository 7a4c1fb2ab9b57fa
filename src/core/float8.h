#pragma once
// The OCP 8-bit floats on the host: E4M3FN (bias 7, no infinity, S.1111.111 is NaN, max 448)
// and E5M2 (bias 15, IEEE-like: infinities and NaNs, max 57344). Conversion to them rounds to
// nearest even and saturates to the largest finite value, infinities included (NaN stays NaN):
// what CUDA's __NV_SATFINITE conversions and ONNX's Cast with saturate=1 do, so the CPU and the
// GPU agree bit for bit.
#include <cmath>
#include <cstdint>

#include "tgraph/dtype.h"

namespace tg::detail {

struct Float8Format {
  int mant;        // mantissa bits
  int bias;        // exponent bias
  float max;       // largest finite value
  uint8_t nan;     // the NaN code (sign bit clear)
  bool has_inf;    // E5M2: exponent all ones, mantissa 0
};

inline constexpr Float8Format kE4M3{3, 7, 448.0f, 0x7f, false};
inline constexpr Float8Format kE5M2{2, 15, 57344.0f, 0x7f, true};

inline float float8_to_float(uint8_t b, const Float8Format& f) {
  const bool neg = b & 0x80;
  const int e = (b & 0x7f) >> f.mant, m = b & ((1 << f.mant) - 1);
  const int emax = (1 << (7 - f.mant)) - 1;
  float v;
  if (f.has_inf && e == emax) {
    v = m == 0 ? INFINITY : NAN;
  } else if (!f.has_inf && (b & 0x7f) == f.nan) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), 1 - f.bias - f.mant);
  } else {
    v = std::ldexp(static_cast<float>((1 << f.mant) | m), e - f.bias - f.mant);
  }
  return neg ? -v : v;
}

inline uint8_t float_to_float8(float x, const Float8Format& f) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | f.nan);
  float a = std::fabs(x);
  if (a >= f.max) a = f.max;  // saturate (infinity too)
  // Spacing of the format at a: 2^(exponent - mant), never below the subnormal spacing.
  int exp = 0;
  std::frexp(a, &exp);  // a = frac * 2^exp, frac in [0.5, 1)
  const int emin = 1 - f.bias;
  const int e = exp - 1 < emin ? emin : exp - 1;
  const float q = std::nearbyint(std::ldexp(a, f.mant - e));  // rounds half to even
  // q counts units of 2^(e - mant); q == 2^(mant+1) carried into the next binade.
  int eb = e + f.bias, m = static_cast<int>(q);
  if (m >= (2 << f.mant)) m >>= 1, ++eb;
  if (m < (1 << f.mant)) eb = 0;  // subnormal (or zero)
  const int code = (eb << f.mant) | (m & ((1 << f.mant) - 1));
  return static_cast<uint8_t>(sign | code);
}

inline const Float8Format& float8_format(DType t) { return t == DType::f8e5m2 ? kE5M2 : kE4M3; }

}  // namespace tg::detail
