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
  return checked_num_elements(dims_, "[shape]");
}

namespace {
std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}
}  // namespace

int64_t checked_num_elements(const std::vector<int64_t>& dims, const std::string& what) {
  // The product of the non-zero dims must fit too: an empty [0, 2^62, 4] still has strides
  // (2^64 for its first dim) that kernels compute before they find nothing to do.
  int64_t n = 1;
  bool empty = false;
  for (int64_t d : dims) {
    if (d < 0) throw Error(what + " shape " + dims_str(dims) + " has a negative dim");
    empty |= d == 0;
    if (__builtin_mul_overflow(n, d == 0 ? 1 : d, &n))
      throw Error(what + " shape " + dims_str(dims) + " has more elements than fit in 64 bits");
  }
  return empty ? 0 : n;
}

int64_t checked_nbytes(int64_t elements, DType t, const std::string& what) {
  int64_t bytes = 0;
  if (elements < 0 || __builtin_mul_overflow(elements, static_cast<int64_t>(dtype_size(t)), &bytes))
    throw Error(what + " " + std::to_string(elements) + " elements of " + dtype_name(t) +
                " are more bytes than fit in 64 bits");
  return bytes;
}

std::string shape_problem(const Shape& s, DType t) {
  if (!s.ranked()) return "";
  for (int64_t d : s.dims())
    if (d < -1) return "dim " + std::to_string(d) + " of " + s.str() + " is neither a size (>= 0) nor -1 (dynamic)";
  if (!s.is_static()) return "";
  try {
    std::vector<int64_t> nonzero;  // an empty tensor's strides must fit in bytes too
    for (int64_t d : s.dims()) nonzero.push_back(d == 0 ? 1 : d);
    checked_nbytes(checked_num_elements(nonzero, ""), t, "");
  } catch (const Error&) {
    return s.str() + " " + dtype_name(t) + " has more elements or bytes than fit in 64 bits";
  }
  return "";
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
