#include "ops/builder.h"
#include "ops/infer.h"

#include "tgraph/error.h"

namespace tg::detail {

int32_t use(const Graph& g, Tensor t, OpKind k, const char* operand) {
  if (!t.valid()) throw Error(op_tag(k) + "operand '" + operand + "' is an empty tensor handle");
  GraphImpl& impl = g.impl();
  if (t.graph_impl() != &impl)
    throw Error(op_tag(k) + "operand '" + operand + "' belongs to another graph");
  int32_t vb = impl.values[static_cast<size_t>(t.id())].block;
  if (!impl.block_within(g.current_block(), vb))
    throw Error(op_tag(k) + "operand '" + operand + "' (" + impl.value_name(t.id()) +
                ") was made inside a region that is not visible here");
  return t.id();
}

std::vector<Tensor> make_multi(Graph& g, OpKind k, const std::vector<Tensor>& inputs, Attr attr) {
  std::vector<int32_t> ids;
  ids.reserve(inputs.size());
  static const char* names[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
  for (size_t i = 0; i < inputs.size(); ++i) ids.push_back(use(g, inputs[i], k, names[std::min<size_t>(i, 7)]));
  GraphImpl& impl = g.impl();
  int32_t n = impl.add_node(g.current_block(), k, std::move(ids), std::move(attr));
  std::vector<Tensor> out;
  for (int32_t v : impl.nodes[static_cast<size_t>(n)].outputs) out.emplace_back(&impl, v);
  return out;
}

Tensor make(Graph& g, OpKind k, const std::vector<Tensor>& inputs, Attr attr) {
  auto out = make_multi(g, k, inputs, std::move(attr));
  return out.at(0);
}

Tensor cast_if(Graph& g, Tensor x, DType to) {
  if (x.dtype() == to) return x;
  return make(g, OpKind::Cast, {x}, CastDesc{to});
}

Tensor broadcast_if(Graph& g, OpKind k, Tensor x, const Shape& shape) {
  if (x.shape() == shape || !shape.is_static()) return x;  // dynamic: the op broadcasts at run time
  (void)k;
  return make(g, OpKind::BroadcastTo, {x}, ShapeDesc{shape.dims()});
}

std::pair<Tensor, Tensor> promote_broadcast(Graph& g, OpKind k, Tensor a, Tensor b) {
  use(g, a, k, "a");
  use(g, b, k, "b");
  auto s = broadcast_shapes(a.shape(), b.shape());
  if (!s)
    throw Error(op_tag(k) + "shapes do not broadcast: a is " + a.shape().str() + ", b is " +
                b.shape().str());
  DType t = promote_types(a.dtype(), b.dtype());
  a = broadcast_if(g, k, cast_if(g, a, t), *s);
  b = broadcast_if(g, k, cast_if(g, b, t), *s);
  return {a, b};
}

}  // namespace tg::detail
