// Builders of the shape ops whose sizes are tensors computed in the graph (sized_op.h): the
// plain op where the sizes are known now, a sized_op where they are known per size.
#include <algorithm>
#include <unordered_map>

#include "ops/builder.h"
#include "ops/infer.h"
#include "ops/sized_op.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace {

SizedDesc of(SizedKind k) {
  SizedDesc d;
  d.op = k;
  return d;
}

Tensor sized(Graph& g, SizedDesc d, std::vector<Tensor> data, const std::vector<Tensor>& sizes) {
  const std::string tag = "[sized_op] (" + enum_name(d.op) + ") ";
  GraphImpl& impl = g.impl();
  std::vector<TensorData> known;
  std::unordered_map<int32_t, std::optional<TensorData>> memo;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int32_t v = use(g, sizes[i], OpKind::SizedOp, "sizes");
    if (depends_on_values(impl, v))
      throw Error(tag + "size operand " + std::to_string(i) + " (" + sizes[i].type().str() +
                  ") depends on tensor values, not only on sizes: data-dependent shapes are not supported");
    if (auto t = known_size_value(impl, v, memo)) known.push_back(std::move(*t));
  }
  std::vector<TensorType> types;
  bool static_data = true;
  for (const Tensor& t : data) {
    types.push_back(t.type());
    static_data &= t.shape().is_static();
  }
  if (known.size() == sizes.size() && static_data) {  // known now: the plain op
    for (const Tensor& t : data) use(g, t, OpKind::SizedOp, "x");
    Node n;
    n.kind = OpKind::SizedOp;
    n.attr = d;
    for (const Tensor& t : data) n.inputs.push_back(t.id());
    PlainOp p = sized_as_plain(n, known, types);
    return make(g, p.kind, data, std::move(p.attr));
  }
  if (!data.empty()) {
    std::vector<std::vector<std::optional<int64_t>>> partial;
    for (const Tensor& t : sizes) partial.push_back(partial_size_value(impl, t.id()));
    d.dims = sized_known_dims(d, data[0].shape(), partial);
    if (std::all_of(d.dims.begin(), d.dims.end(), [](int64_t v) { return v < 0; })) d.dims.clear();
  }
  data.insert(data.end(), sizes.begin(), sizes.end());
  return make(g, OpKind::SizedOp, data, std::move(d));
}

}  // namespace

Tensor Graph::reshape_sized(Tensor x, Tensor shape, bool copy_zeros) {
  SizedDesc d = of(SizedKind::reshape);
  d.copy_zeros = copy_zeros;
  return sized(*this, d, {x}, {shape});
}
Tensor Graph::broadcast_to_sized(Tensor x, Tensor shape) {
  return sized(*this, of(SizedKind::broadcast_to), {x}, {shape});
}
Tensor Graph::pad_sized(Tensor x, Tensor pads, PadMode mode, double constant) {
  SizedDesc d = of(SizedKind::pad);
  d.pad.mode = mode;
  d.pad.constant = constant;
  return sized(*this, d, {x}, {pads});
}
Tensor Graph::slice_sized(Tensor x, Tensor begin, Tensor end, Tensor strides, std::vector<int64_t> axes) {
  SizedDesc d = of(SizedKind::slice);
  d.axes = std::move(axes);
  return sized(*this, d, {x}, {begin, end, strides});
}
Tensor Graph::tile_sized(Tensor x, Tensor multiples) { return sized(*this, of(SizedKind::tile), {x}, {multiples}); }
Tensor Graph::arange_sized(Tensor start, Tensor limit, Tensor delta, DType dtype) {
  SizedDesc d = of(SizedKind::arange);
  d.arange.dtype = dtype;
  return sized(*this, d, {}, {start, limit, delta});
}
Tensor Graph::resize_sized(Tensor x, Tensor size, const ResizeDesc& r) {
  SizedDesc d = of(SizedKind::resize);
  d.resize = r;
  return sized(*this, d, {x}, {size});
}

}  // namespace tg
