#pragma once
// Handles to values and operations inside a graph.
#include <cstdint>
#include <string>

#include "tgraph/shape.h"

namespace tg {
namespace detail {
struct GraphImpl;
}

class Operation;

/// A value produced by an operation of a graph (a cheap handle; copy freely).
class Tensor {
 public:
  Tensor() = default;
  Tensor(detail::GraphImpl* g, int32_t id) : g_(g), id_(id) {}
  bool valid() const { return g_ != nullptr; }
  /// The type (a copy: adding nodes to the graph may move its storage).
  TensorType type() const;
  Shape shape() const { return type().shape; }
  DType dtype() const { return type().dtype; }
  int64_t rank() const { return shape().rank(); }
  /// The operation that produced this tensor.
  Operation op() const;
  /// The name given at creation (or "%<id>").
  std::string name() const;
  int32_t id() const { return id_; }
  detail::GraphImpl* graph_impl() const { return g_; }
  bool operator==(const Tensor& o) const { return g_ == o.g_ && id_ == o.id_; }

 private:
  detail::GraphImpl* g_ = nullptr;
  int32_t id_ = -1;
};

/// An operation of a graph: used for targets with side effects and control dependencies.
class Operation {
 public:
  Operation() = default;
  Operation(detail::GraphImpl* g, int32_t id) : g_(g), id_(id) {}
  bool valid() const { return g_ != nullptr; }
  /// The op name from the op list ("add", "assign").
  std::string kind_name() const;
  int num_outputs() const;
  Tensor output(int i = 0) const;
  int32_t id() const { return id_; }
  detail::GraphImpl* graph_impl() const { return g_; }
  bool operator==(const Operation& o) const { return g_ == o.g_ && id_ == o.id_; }

 private:
  detail::GraphImpl* g_ = nullptr;
  int32_t id_ = -1;
};

}  // namespace tg

template <>
struct std::hash<tg::Tensor> {
  size_t operator()(const tg::Tensor& t) const noexcept {
    return std::hash<const void*>()(t.graph_impl()) ^ static_cast<size_t>(t.id());
  }
};
