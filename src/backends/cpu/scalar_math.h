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

/// gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), written x sigmoid(2u)
/// (the same function): 1 + tanh(u) cancels for negative x, sigmoid(2u) does not.
inline double gelu_tanh(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x * sigmoid(2.0 * u);
}

/// d/dx gelu_tanh(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u), written with s = sigmoid(2u)
/// and its mirror sigmoid(-2u) (0.5 (1 + t) = s, 1 - t^2 = 4 s sigmoid(-2u)): no cancellation.
inline double gelu_tanh_derivative(double x) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  const double u = k * (x + c * x * x * x);
  const double s = sigmoid(2.0 * u), sn = sigmoid(-2.0 * u);
  return s + 2.0 * x * s * sn * k * (1.0 + 3.0 * c * x * x);
}

}  // namespace tg::detail
