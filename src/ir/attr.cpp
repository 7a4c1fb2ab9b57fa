#include "ir/attr.h"

namespace tg::detail {

namespace {
template <size_t N>
std::string pick(const char* const (&names)[N], int v) {
  return v >= 0 && static_cast<size_t>(v) < N ? names[v] : "?";
}
}  // namespace

std::string enum_name(PaddingStyle v) {
  static const char* const n[] = {"explicit", "valid", "same", "same_lower", "explicit_offset"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(Layout v) {
  static const char* const n[] = {"nhwc", "nchw", "hwio", "oihw", "ndhwc", "ncdhw", "dhwio", "oidhw"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(LossReduction v) {
  static const char* const n[] = {"none", "sum", "mean"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(PadMode v) {
  static const char* const n[] = {"constant", "reflect", "symmetric", "edge"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(ResizeMode v) {
  static const char* const n[] = {"nearest", "bilinear"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(CoordinateMode v) {
  static const char* const n[] = {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(NearestRounding v) {
  static const char* const n[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(Distribution v) {
  static const char* const n[] = {"uniform", "normal", "truncated_normal"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(ScatterMode v) {
  static const char* const n[] = {"set", "add", "sub", "mul", "div", "min", "max"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(Reduction v) {
  static const char* const n[] = {"sum", "min", "max", "product", "argmin", "argmax"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(Boundary v) {
  static const char* const n[] = {"zero", "constant", "clamp_to_edge", "reflect", "symmetric", "periodic", "anti_periodic"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(CollectiveReduce v) {
  static const char* const n[] = {"sum", "mean", "max", "min"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(SizedKind v) {
  static const char* const n[] = {"reshape", "broadcast_to", "pad", "slice", "tile", "arange", "resize"};
  return pick(n, static_cast<int>(v));
}
std::string enum_name(DType v) { return dtype_name(v); }

}  // namespace tg::detail
