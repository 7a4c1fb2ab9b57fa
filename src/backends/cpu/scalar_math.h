#pragma once
// Scalar formulas in double shared by the reference kernels and the fused CPU loops (which
// must give the reference's numbers bit for bit where they compute in double).
#include <cmath>

namespace tg::detail {

/// 1 / (1 + e^-x), without overflow for large |x|.
inline double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

/// d/dx gelu_tanh(x), gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
inline double gelu_tanh_derivative(double x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const double t = std::tanh(k * (x + c * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
}

}  // namespace tg::detail
