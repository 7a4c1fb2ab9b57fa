#pragma once
// Internals of the reference interpreter: row-major index arithmetic, exact element access
// and the per-family evaluators that reference.cpp dispatches to.
#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <string>
#include <variant>
#include <vector>

#include "backends/cpu/reference.h"

namespace tg::detail::ref {

using Dims = std::vector<int64_t>;

/// What one family's evaluator sees: the node, its host inputs and its concrete output types.
struct Ctx {
  const GraphImpl& g;
  const Node& n;
  const std::vector<TensorData>& in;
  std::vector<TensorType> out_types;

  OpKind kind() const { return n.kind; }
  template <class D>
  const D& attr() const { return std::get<D>(n.attr); }
  /// Throws tg::Error("[op] msg").
  [[noreturn]] void fail(const std::string& msg) const;
  /// A new tensor of output i's concrete type.
  TensorData output(size_t i) const;
};

/// Product of dims (1 for a scalar).
int64_t numel(const Dims& d);
/// Row-major strides of dims.
Dims row_strides(const Dims& d);
/// Coordinates of flat index i in dims.
Dims unravel(int64_t i, const Dims& d);
/// Flat index of coordinates idx in dims (no bounds checks).
int64_t ravel(const Dims& idx, const Dims& d);
/// Flat index into a tensor of dims `in` numpy-broadcast (right-aligned) to coordinates `idx`.
int64_t broadcast_index(const Dims& idx, const Dims& in);
/// Axis normalised against rank (negative counts from the end); throws via c on error.
int64_t norm_axis(const Ctx& c, int64_t axis, int64_t rank);
inline const Dims& dims(const TensorData& t) { return t.shape().dims(); }

/// Calls f(base, stride, len) for every 1-D line of dims along axis.
template <class F>
void for_each_line(const Dims& d, int64_t axis, F&& f) {
  int64_t outer = 1, inner = 1, len = d[static_cast<size_t>(axis)];
  for (int64_t i = 0; i < axis; ++i) outer *= d[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < d.size(); ++i) inner *= d[i];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(o * len * inner + i, inner, len);
}

/// True for integer and bool dtypes: arithmetic on them is done exactly in int64.
bool int_like(DType t);
/// Bit width of an integer dtype (1 for bool).
int bit_width(DType t);
/// Element i as an exact int64 (integer dtypes; floats are truncated).
int64_t load_int(const TensorData& t, int64_t i);
/// Stores v wrapped to the dtype's width (two's complement), like a C++20 integer conversion.
void store_int(TensorData& t, int64_t i, int64_t v);
/// Copies one element's bytes (exact for every dtype).
void copy_elem(TensorData& dst, int64_t di, const TensorData& src, int64_t si);
/// The smallest / largest value of an integer or bool dtype.
int64_t int_min(DType t);
int64_t int_max(DType t);
/// The lowest / highest value of dtype t as T (-inf / +inf for floats).
template <class T>
T lowest_of(DType t) {
  if constexpr (std::is_same_v<T, double>)
    if (is_float(t)) return -std::numeric_limits<double>::infinity();
  return static_cast<T>(int_min(t));
}
template <class T>
T highest_of(DType t) {
  if constexpr (std::is_same_v<T, double>)
    if (is_float(t)) return std::numeric_limits<double>::infinity();
  return static_cast<T>(int_max(t));
}
/// Loads element i as T (double, or exact int64).
template <class T>
T load(const TensorData& t, int64_t i) {
  if constexpr (std::is_same_v<T, int64_t>) return load_int(t, i);
  else return t.at(i);
}
/// Stores v (double: converted by store_element; int64: wrapped).
inline void store(TensorData& t, int64_t i, double v) { t.set(i, v); }
inline void store(TensorData& t, int64_t i, int64_t v) { store_int(t, i, v); }
/// Two's complement arithmetic on int64 without undefined behaviour.
inline int64_t wadd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
inline int64_t wsub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
inline int64_t wmul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
inline double wadd(double a, double b) { return a + b; }
inline double wsub(double a, double b) { return a - b; }
inline double wmul(double a, double b) { return a * b; }

/// Philox4x32-10 (Salmon et al., Random123): one 128-bit counter block under a 64-bit key.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key);

// Family evaluators (one file each).
std::vector<TensorData> eval_elementwise(const Ctx& c);
std::vector<TensorData> eval_reduce(const Ctx& c);
std::vector<TensorData> eval_linalg(const Ctx& c);
std::vector<TensorData> eval_shape(const Ctx& c);
std::vector<TensorData> eval_shape_more(const Ctx& c);
std::vector<TensorData> eval_conv(const Ctx& c);
std::vector<TensorData> eval_pool(const Ctx& c);
std::vector<TensorData> eval_nn(const Ctx& c);
std::vector<TensorData> eval_random(const Ctx& c);
std::vector<TensorData> eval_indexing(const Ctx& c);
std::vector<TensorData> eval_stencil(const Ctx& c);
std::vector<TensorData> eval_collective(const Ctx& c);

}  // namespace tg::detail::ref
