#pragma once
// Shapes with dynamic dimensions, and tensor types.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tgraph/dtype.h"

namespace tg {

/// A dimension whose size is known only at run time.
inline constexpr int64_t kDynamic = -1;

/// Dimensions of a tensor; a dim of -1 is dynamic; an unranked shape has no known rank.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  /// A shape whose rank is unknown.
  static Shape unranked();

  bool ranked() const { return ranked_; }
  int64_t rank() const { return ranked_ ? static_cast<int64_t>(dims_.size()) : -1; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t operator[](int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t dim(int64_t i) const;  // negative i counts from the end
  /// True when ranked and no dimension is dynamic.
  bool is_static() const;
  /// Product of the dims; -1 when not static; tg::Error when it overflows int64.
  int64_t num_elements() const;
  /// "[2,-1,3]" or "[*]".
  std::string str() const;
  bool operator==(const Shape& o) const = default;

 private:
  std::vector<int64_t> dims_;
  bool ranked_ = true;
};

/// Shape and element type of a tensor.
struct TensorType {
  Shape shape;
  DType dtype = DType::f32;
  TensorType() = default;
  TensorType(Shape s, DType t) : shape(std::move(s)), dtype(t) {}
  /// "[2,3] f32".
  std::string str() const;
  bool operator==(const TensorType& o) const = default;
};

/// The product of `dims` (each >= 0), or a tg::Error naming `what` and the dims when it does
/// not fit in int64 -- checked arithmetic, since kernels, allocators and loaders index with
/// these counts (a wrapped count reads out of bounds or returns garbage).
int64_t checked_num_elements(const std::vector<int64_t>& dims, const std::string& what);
/// `elements` x the size of `t` in bytes, or a tg::Error naming `what` when it overflows int64.
int64_t checked_nbytes(int64_t elements, DType t, const std::string& what);
/// "" when every dim of `s` is a size (>= 0) or -1 (dynamic) and a static `s` of dtype `t` has a
/// byte size that fits in int64; else what is wrong, for an error message.
std::string shape_problem(const Shape& s, DType t);

/// True when a value of type `actual` may be used where `expected` is declared (-1 matches any).
bool shape_compatible(const Shape& expected, const Shape& actual);

}  // namespace tg
