#include "tgraph/shape.h"

#include "tgraph/error.h"

namespace tg {

Shape Shape::unranked() {
  Shape s;
  s.ranked_ = false;
  return s;
}

int64_t Shape::dim(int64_t i) const {
  int64_t r = rank();
  if (i < 0) i += r;
  if (i < 0 || i >= r) throw Error("[shape] dim " + std::to_string(i) + " out of range for " + str());
  return dims_[static_cast<size_t>(i)];
}

bool Shape::is_static() const {
  if (!ranked_) return false;
  for (int64_t d : dims_)
    if (d < 0) return false;
  return true;
}

int64_t Shape::num_elements() const {
  if (!is_static()) return -1;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::str() const {
  if (!ranked_) return "[*]";
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

std::string TensorType::str() const { return shape.str() + " " + dtype_name(dtype); }

bool shape_compatible(const Shape& expected, const Shape& actual) {
  if (!expected.ranked() || !actual.ranked()) return true;
  if (expected.rank() != actual.rank()) return false;
  for (int64_t i = 0; i < expected.rank(); ++i)
    if (expected[i] >= 0 && actual[i] >= 0 && expected[i] != actual[i]) return false;
  return true;
}

}  // namespace tg
