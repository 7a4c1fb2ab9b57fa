#include "tgraph/tensor_data.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/element.h"
#include "tgraph/error.h"

namespace tg {

TensorData::TensorData(Shape shape, DType dtype) : shape_(std::move(shape)), dtype_(dtype) {
  if (!shape_.is_static())
    throw Error("[tensor_data] shape " + shape_.str() + " is not static");
  size_t n = std::max<size_t>(
      1, static_cast<size_t>(checked_nbytes(shape_.num_elements(), dtype, "[tensor_data] " + shape_.str())));
  buf_ = std::shared_ptr<std::byte>(new std::byte[n], std::default_delete<std::byte[]>());
}

TensorData TensorData::wrap(Shape shape, DType dtype, std::shared_ptr<std::byte> data) {
  if (!shape.is_static()) throw Error("[tensor_data] shape " + shape.str() + " is not static");
  TensorData t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.buf_ = std::move(data);
  return t;
}

TensorData TensorData::from_vector(Shape shape, DType dtype, const std::vector<double>& values) {
  TensorData t(std::move(shape), dtype);
  if (static_cast<int64_t>(values.size()) != t.num_elements())
    throw Error("[tensor_data] " + std::to_string(values.size()) + " values given for shape " +
                t.shape().str());
  for (size_t i = 0; i < values.size(); ++i) t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

TensorData TensorData::from_floats(Shape shape, const std::vector<float>& values) {
  return from_vector(std::move(shape), DType::f32, std::vector<double>(values.begin(), values.end()));
}

TensorData TensorData::scalar(double v, DType dtype) { return from_vector(Shape{}, dtype, {v}); }

TensorData TensorData::zeros(Shape shape, DType dtype) { return full(std::move(shape), 0.0, dtype); }

TensorData TensorData::full(Shape shape, double value, DType dtype) {
  TensorData t(std::move(shape), dtype);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, value);
  return t;
}

namespace {
// splitmix64: a small, portable generator so host-side initialisers agree everywhere.
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double unit(uint64_t& s) { return static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53; }
}  // namespace

TensorData TensorData::randn(Shape shape, DType dtype, uint64_t seed) {
  TensorData t(std::move(shape), dtype);
  uint64_t s = seed * 0x2545F4914F6CDD1DULL + 1;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double u1 = unit(s), u2 = unit(s);
    t.set(i, std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2));
  }
  return t;
}

TensorData TensorData::uniform(Shape shape, double lo, double hi, DType dtype, uint64_t seed) {
  TensorData t(std::move(shape), dtype);
  uint64_t s = seed * 0x2545F4914F6CDD1DULL + 7;
  for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, lo + (hi - lo) * unit(s));
  return t;
}

double TensorData::at(int64_t i) const { return detail::load_element(data(), dtype_, i); }
void TensorData::set(int64_t i, double v) { detail::store_element(data(), dtype_, i, v); }

std::vector<double> TensorData::to_vector() const {
  std::vector<double> out(static_cast<size_t>(num_elements()));
  for (int64_t i = 0; i < num_elements(); ++i) out[static_cast<size_t>(i)] = at(i);
  return out;
}

TensorData TensorData::clone() const {
  if (empty()) return {};
  TensorData t(shape_, dtype_);
  std::memcpy(t.data(), data(), nbytes());
  return t;
}

TensorData TensorData::reshaped(Shape shape) const {
  if (shape.num_elements() != num_elements())
    throw Error("[tensor_data] cannot reshape " + shape_.str() + " to " + shape.str());
  TensorData t = *this;
  t.shape_ = std::move(shape);
  return t;
}

TensorData TensorData::cast(DType to) const {
  TensorData t(shape_, to);
  for (int64_t i = 0; i < num_elements(); ++i) t.set(i, at(i));
  return t;
}

std::string TensorData::str(int max_values) const {
  std::ostringstream os;
  os << type().str() << " {";
  int64_t n = empty() ? 0 : num_elements();
  for (int64_t i = 0; i < n && i < max_values; ++i) os << (i ? ", " : "") << at(i);
  if (n > max_values) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace tg
