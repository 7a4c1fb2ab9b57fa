#pragma once
// Concrete tensor values: what goes into and comes out of an executable.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tgraph/shape.h"

namespace tg {

/// A dense, row-major tensor held in host memory (shared, copy-on-write by convention:
/// copies share the buffer; use clone() for a deep copy).
class TensorData {
 public:
  TensorData() = default;
  /// Uninitialised storage of a static type.
  TensorData(Shape shape, DType dtype);
  /// From values converted to dtype.
  static TensorData from_vector(Shape shape, DType dtype, const std::vector<double>& values);
  static TensorData from_floats(Shape shape, const std::vector<float>& values);
  static TensorData scalar(double v, DType dtype = DType::f32);
  static TensorData zeros(Shape shape, DType dtype = DType::f32);
  static TensorData full(Shape shape, double value, DType dtype = DType::f32);
  /// Standard normal values from a fixed seed (reproducible on every platform).
  static TensorData randn(Shape shape, DType dtype = DType::f32, uint64_t seed = 0);
  /// Wraps existing memory without copying; `data` keeps its owner alive.
  static TensorData wrap(Shape shape, DType dtype, std::shared_ptr<std::byte> data);
  /// Uniform values in [lo, hi) from a fixed seed.
  static TensorData uniform(Shape shape, double lo, double hi, DType dtype = DType::f32,
                            uint64_t seed = 0);

  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  TensorType type() const { return {shape_, dtype_}; }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t nbytes() const { return static_cast<size_t>(num_elements()) * dtype_size(dtype_); }
  bool empty() const { return !buf_; }
  /// True when no other TensorData (or view of it) shares these bytes: a temporary that an op
  /// consuming it may overwrite instead of copying.
  bool sole_owner() const { return buf_ && buf_.use_count() == 1; }

  /// The owner of the bytes (shared by every copy of this TensorData): for caches that key on
  /// a buffer's identity and must know when it is gone.
  const std::shared_ptr<std::byte>& storage() const { return buf_; }
  void* data() { return buf_.get(); }
  const void* data() const { return buf_.get(); }
  template <class T>
  T* ptr() { return static_cast<T*>(data()); }
  template <class T>
  const T* ptr() const { return static_cast<const T*>(data()); }

  /// Element i converted to double.
  double at(int64_t i) const;
  /// Sets element i from a double (rounded/converted to dtype).
  void set(int64_t i, double v);
  /// All elements as doubles.
  std::vector<double> to_vector() const;
  /// A deep copy.
  TensorData clone() const;
  /// The same bytes with a new static shape of equal element count.
  TensorData reshaped(Shape shape) const;
  /// A converted copy.
  TensorData cast(DType to) const;
  /// Short printable form: type and the first few values.
  std::string str(int max_values = 8) const;

 private:
  Shape shape_;
  DType dtype_ = DType::f32;
  std::shared_ptr<std::byte> buf_;
};

}  // namespace tg
