// sized_op (descriptors.h, SizedDesc): its inference rule, the evaluation of sizes computed in
// the graph, and the op it becomes once they are known.
#include "ops/sized_op.h"

#include <algorithm>
#include <climits>

#include "backends/cpu/reference.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg::detail {

size_t sized_data_inputs(const SizedDesc& d) { return d.op == SizedKind::arange ? 0 : 1; }

namespace {

std::string kind_name(SizedKind k) { return enum_name(k); }

// How many size operands each kind takes.
size_t size_operands(SizedKind k) {
  switch (k) {
    case SizedKind::slice: case SizedKind::arange: return 3;
    default: return 1;
  }
}

bool integer(DType t) {
  return t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8;
}

}  // namespace

InferResult infer_sized_dims(const InferContext& c, const SizedDesc& d);

InferResult infer_sized(const InferContext& c) {
  const auto& d = std::get<SizedDesc>(c.attr);
  const size_t data = sized_data_inputs(d), sizes = size_operands(d.op);
  const std::string what = "(" + kind_name(d.op) + ") ";
  if (c.inputs.size() != data + sizes)
    return op_error(c, what + "expects " + std::to_string(data + sizes) + " inputs, got " + std::to_string(c.inputs.size()));
  for (size_t i = data; i < c.inputs.size(); ++i) {
    const TensorType& s = c.inputs[i];
    const bool scalar_ok = d.op == SizedKind::arange;
    if (!s.shape.ranked() || s.shape.rank() > 1 || (!scalar_ok && s.shape.rank() != 1))
      return op_error(c, what + "its sizes are 1-D tensors, operand " + std::to_string(i) + " is " + s.str());
    if (scalar_ok ? s.dtype == DType::boolean || !(integer(s.dtype) || is_float(s.dtype)) : !integer(s.dtype))
      return op_error(c, what + "its sizes are integer tensors, operand " + std::to_string(i) + " is " + s.str());
  }
  if (d.op == SizedKind::arange) return {{TensorType(Shape({-1}), d.arange.dtype)}, {}};
  InferResult r = infer_sized_dims(c, d);
  // What the builder knew of the dims (a channel count beside dynamic dims) replaces -1s.
  if (r.ok() && r.types.size() == 1 && r.types[0].shape.ranked() &&
      static_cast<int64_t>(d.dims.size()) == r.types[0].shape.rank()) {
    std::vector<int64_t> dims = r.types[0].shape.dims();
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] < 0 && d.dims[i] >= 0) dims[i] = d.dims[i];
    r.types[0] = TensorType(Shape(dims), r.types[0].dtype);
  }
  return r;
}

InferResult infer_sized_dims(const InferContext& c, const SizedDesc& d) {
  const std::string what = "(" + kind_name(d.op) + ") ";
  const TensorType& x = c.inputs[0];
  if (!x.shape.ranked()) return {{TensorType(Shape::unranked(), x.dtype)}, {}};
  const int64_t r = x.shape.rank();
  const int64_t n = c.inputs[1].shape.ranked() && c.inputs[1].shape.rank() == 1 ? c.inputs[1].shape[0] : -1;
  auto dynamic = [&](int64_t rank) { return TensorType(Shape(std::vector<int64_t>(static_cast<size_t>(rank), -1)), x.dtype); };
  switch (d.op) {
    case SizedKind::reshape:
      if (n < 0) return op_error(c, what + "needs a target shape of static length, got " + c.inputs[1].str());
      return {{dynamic(n)}, {}};
    case SizedKind::broadcast_to:
      if (n < 0) return op_error(c, what + "needs a target shape of static length, got " + c.inputs[1].str());
      return {{dynamic(std::max(n, r))}, {}};
    case SizedKind::pad:
      if (n >= 0 && n != 2 * r)
        return op_error(c, what + "takes 2 amounts per dim of x " + x.shape.str() + ", got " + c.inputs[1].str());
      return {{dynamic(r)}, {}};
    case SizedKind::tile:
      if (n >= 0 && n != r) return op_error(c, what + "takes one multiple per dim of x " + x.shape.str() + ", got " + c.inputs[1].str());
      return {{dynamic(r)}, {}};
    case SizedKind::slice: {
      std::vector<int64_t> dims = x.shape.dims();
      for (int64_t a : d.axes) {
        auto k = normalize_axis(a, r);
        if (!k) return op_error(c, what + "axis " + std::to_string(a) + " out of range for x " + x.shape.str());
        dims[static_cast<size_t>(*k)] = -1;
      }
      for (size_t i = 1; i < 4; ++i)
        if (c.inputs[i].shape[0] >= 0 && c.inputs[i].shape[0] != static_cast<int64_t>(d.axes.size()))
          return op_error(c, what + "takes one begin, end and stride per axis " + Shape(d.axes).str() + ", operand " +
                                 std::to_string(i) + " is " + c.inputs[i].str());
      return {{TensorType(Shape(dims), x.dtype)}, {}};
    }
    case SizedKind::resize: {
      int64_t h, w, ch;
      if (!spatial_axes(d.resize.data_layout, h, w, ch) || r != 4)
        return op_error(c, what + "needs a rank-4 nhwc or nchw x, got " + x.shape.str());
      if (n >= 0 && n != 2) return op_error(c, what + "takes the size as [h, w], got " + c.inputs[1].str());
      std::vector<int64_t> dims = x.shape.dims();
      dims[static_cast<size_t>(h)] = dims[static_cast<size_t>(w)] = -1;
      return {{TensorType(Shape(dims), x.dtype)}, {}};
    }
    case SizedKind::arange: break;
  }
  return op_error(c, what + "unknown kind");
}

std::optional<TensorData> known_size_value(const GraphImpl& g, int32_t v,
                                           std::unordered_map<int32_t, std::optional<TensorData>>& memo) {
  if (auto it = memo.find(v); it != memo.end()) return it->second;
  constexpr int64_t kMaxElements = 1 << 12;  // sizes are short vectors; anything larger is data
  std::optional<TensorData> out;
  const Value& val = g.values[static_cast<size_t>(v)];
  const Node* n = val.node < 0 ? nullptr : &g.nodes[static_cast<size_t>(val.node)];
  if (n && n->kind == OpKind::Constant && !n->data.empty()) {
    if (n->data.num_elements() <= kMaxElements) out = n->data;
  } else if (n && n->kind == OpKind::ShapeOf) {
    const TensorType& x = g.type(n->inputs[0]);
    if (x.shape.is_static()) {
      std::vector<double> dims(x.shape.dims().begin(), x.shape.dims().end());
      out = TensorData::from_vector(Shape({x.shape.rank()}), val.type.dtype, dims);
    }
  } else if (n && n->outputs.size() == 1 && n->regions.empty()) {
    const OpDef& d = op_def(n->kind);
    const bool evaluable = (n->kind == OpKind::SizedOp || reference_evaluates(n->kind)) && !d.has(kStateful) &&
                           !d.has(kSideEffects) && n->kind != OpKind::NonZeroIndices;
    std::vector<TensorData> in;
    bool known = evaluable;
    for (size_t i = 0; known && i < n->inputs.size(); ++i) {
      std::optional<TensorData> t = known_size_value(g, n->inputs[i], memo);
      if (!t) known = false;
      else in.push_back(std::move(*t));
    }
    if (known) try {
        std::vector<TensorData> r = reference_eval(g, *n, in);
        if (r.size() == 1 && r[0].num_elements() <= kMaxElements) out = std::move(r[0]);
      } catch (const Error&) {
        // not evaluable here (the op's error is reported where it runs)
      }
  }
  memo[v] = out;
  return out;
}

namespace {

using Elems = std::vector<std::optional<int64_t>>;

// partial_size_value with one memo of known values for the whole walk.
Elems partial_elems(const GraphImpl& g, int32_t v, std::unordered_map<int32_t, std::optional<TensorData>>& memo) {
  if (auto t = known_size_value(g, v, memo)) {
    if (t->shape().rank() > 1) return {};
    Elems r;
    for (int64_t i = 0; i < t->num_elements(); ++i) r.push_back(static_cast<int64_t>(t->at(i)));
    return r;
  }
  const TensorType& type = g.type(v);
  const int32_t p = g.values[static_cast<size_t>(v)].node;
  if (p < 0 || !type.shape.ranked() || type.shape.rank() > 1 || !type.shape.is_static()) return {};
  const Node& n = g.nodes[static_cast<size_t>(p)];
  const int64_t len = type.shape.rank() == 0 ? 1 : type.shape[0];
  Elems r;
  if (n.kind == OpKind::ShapeOf) {
    for (int64_t d : g.type(n.inputs[0]).shape.dims()) r.push_back(d >= 0 ? std::optional<int64_t>(d) : std::nullopt);
  } else if (n.kind == OpKind::Concat) {
    for (int32_t i : n.inputs) {
      Elems e = partial_elems(g, i, memo);
      if (static_cast<int64_t>(e.size()) != (g.type(i).shape.rank() == 0 ? 1 : g.type(i).shape[0])) return {};
      r.insert(r.end(), e.begin(), e.end());
    }
  } else if (n.kind == OpKind::Cast || n.kind == OpKind::Reshape || n.kind == OpKind::Identity) {
    if (is_float(type.dtype)) return {};
    r = partial_elems(g, n.inputs[0], memo);
  } else if (n.kind == OpKind::StridedSlice) {  // a static slice of a shape vector
    const auto& d = std::get<SliceDesc>(n.attr);
    Elems in = partial_elems(g, n.inputs[0], memo);
    if (in.empty() || d.strides.size() != 1 || d.strides[0] != 1 || d.squeeze_mask) return {};
    const int64_t m = static_cast<int64_t>(in.size());
    auto at = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + m : i, 0, m); };
    const int64_t b = d.begin_mask & 1 ? 0 : at(d.begin[0]), e = d.end_mask & 1 ? m : at(d.end[0]);
    for (int64_t i = b; i < e; ++i) r.push_back(in[static_cast<size_t>(i)]);
  }
  if (static_cast<int64_t>(r.size()) != len) return Elems(static_cast<size_t>(len));
  return r;
}

}  // namespace

std::vector<std::optional<int64_t>> partial_size_value(const GraphImpl& g, int32_t v) {
  std::unordered_map<int32_t, std::optional<TensorData>> memo;
  return partial_elems(g, v, memo);
}

std::vector<int64_t> sized_known_dims(const SizedDesc& d, const Shape& x,
                                      const std::vector<std::vector<std::optional<int64_t>>>& sizes) {
  if (sizes.empty() || sizes[0].empty() || !x.ranked()) return {};
  const auto& s = sizes[0];
  std::vector<int64_t> out;
  if (d.op == SizedKind::reshape) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t v = s[i] && *s[i] >= 0 ? *s[i] : -1;
      if (s[i] && *s[i] == 0 && d.copy_zeros) v = static_cast<int64_t>(i) < x.rank() ? x[static_cast<int64_t>(i)] : -1;
      out.push_back(v);
    }
  } else if (d.op == SizedKind::broadcast_to) {
    const int64_t r = std::max<int64_t>(static_cast<int64_t>(s.size()), x.rank());
    for (int64_t i = 0; i < r; ++i) {
      const int64_t ti = i - (r - static_cast<int64_t>(s.size())), xi = i - (r - x.rank());
      const std::optional<int64_t> t = ti >= 0 ? s[static_cast<size_t>(ti)] : std::optional<int64_t>(1);
      const int64_t xd = xi >= 0 ? x[xi] : 1;
      out.push_back(!t ? (xd > 1 ? xd : -1) : *t == 1 ? xd : *t);
    }
  } else if (d.op == SizedKind::tile && static_cast<int64_t>(s.size()) == x.rank()) {
    for (int64_t i = 0; i < x.rank(); ++i)
      out.push_back(s[static_cast<size_t>(i)] && x[i] >= 0 ? x[i] * *s[static_cast<size_t>(i)] : -1);
  } else if (d.op == SizedKind::pad && static_cast<int64_t>(s.size()) == 2 * x.rank()) {
    for (int64_t i = 0; i < x.rank(); ++i) {
      const auto& b = s[static_cast<size_t>(i)];
      const auto& a = s[static_cast<size_t>(i + x.rank())];
      out.push_back(b && a && x[i] >= 0 ? x[i] + *b + *a : -1);
    }
  }
  return out;
}

bool depends_on_values(const GraphImpl& g, int32_t v) {
  std::vector<int32_t> stack{v};
  std::vector<bool> seen(g.values.size(), false);
  while (!stack.empty()) {
    const int32_t u = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(u)]) continue;
    seen[static_cast<size_t>(u)] = true;
    const int32_t p = g.values[static_cast<size_t>(u)].node;
    if (p < 0) return true;  // a region's parameter: a loop's carried value
    const Node& n = g.nodes[static_cast<size_t>(p)];
    if (n.kind == OpKind::ShapeOf || n.kind == OpKind::Constant || n.kind == OpKind::Arange) continue;
    const OpDef& d = op_def(n.kind);
    if (d.has(kSource) || d.has(kStateful) || !n.regions.empty() || n.kind == OpKind::NonZeroIndices) return true;
    for (int32_t i : n.inputs) stack.push_back(i);
  }
  return false;
}

namespace {

// A size's elements (ONNX's "to the end" INT64_MAX arrives through double as 2^63: saturated).
std::vector<int64_t> ints(const TensorData& t) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.at(i);
    r.push_back(v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : static_cast<int64_t>(v));
  }
  return r;
}

}  // namespace

PlainOp sized_as_plain(const Node& n, const std::vector<TensorData>& sizes, const std::vector<TensorType>& data_types) {
  const auto& d = std::get<SizedDesc>(n.attr);
  const std::string tag = "[sized_op] (" + kind_name(d.op) + ") ";
  const size_t data = sized_data_inputs(d);
  if (sizes.size() != size_operands(d.op) || data_types.size() != data)
    throw Error(tag + "expects " + std::to_string(data) + " data inputs and " + std::to_string(size_operands(d.op)) + " sizes");
  for (size_t i = 0; i < sizes.size(); ++i)
    if (d.op == SizedKind::arange ? sizes[i].dtype() == DType::boolean : !integer(sizes[i].dtype()))
      throw Error(tag + "its sizes are integer tensors, operand " + std::to_string(data + i) + " is " + sizes[i].type().str());
  PlainOp p{OpKind::SizedOp, NoDesc{}, std::vector<int32_t>(n.inputs.begin(), n.inputs.begin() + static_cast<long>(data))};
  const Shape x = data ? data_types[0].shape : Shape();
  const std::vector<int64_t> s0 = ints(sizes[0]);
  switch (d.op) {
    case SizedKind::reshape: {
      std::vector<int64_t> shape = s0;
      for (size_t i = 0; i < shape.size() && d.copy_zeros; ++i)
        if (shape[i] == 0) {
          if (static_cast<int64_t>(i) >= x.rank()) throw Error(tag + "a 0 at " + std::to_string(i) + " past x " + x.str());
          shape[i] = x[static_cast<int64_t>(i)];
        }
      p.kind = OpKind::Reshape;
      p.attr = ShapeDesc{shape};
      break;
    }
    case SizedKind::broadcast_to: {  // numpy's bidirectional broadcast of x and the target (ONNX Expand)
      const bool negative = std::any_of(s0.begin(), s0.end(), [](int64_t v) { return v < 0; });
      const std::optional<Shape> out = negative ? std::nullopt : broadcast_shapes(x, Shape(s0));
      if (!out) throw Error(tag + "cannot broadcast x " + x.str() + " to " + Shape(s0).str());
      p.kind = OpKind::BroadcastTo;
      p.attr = ShapeDesc{out->dims()};
      break;
    }
    case SizedKind::pad: {
      const size_t r = static_cast<size_t>(x.rank());
      if (s0.size() != 2 * r) throw Error(tag + "takes 2 amounts per dim of x " + x.str() + ", got " + Shape(s0).str());
      PadDesc pd = d.pad;
      pd.before.assign(s0.begin(), s0.begin() + static_cast<long>(r));
      pd.after.assign(s0.begin() + static_cast<long>(r), s0.end());
      p.kind = OpKind::Pad;
      p.attr = pd;
      break;
    }
    case SizedKind::tile:
      p.kind = OpKind::Tile;
      p.attr = TileDesc{s0};
      break;
    case SizedKind::resize: {
      ResizeDesc rd = d.resize;
      rd.size = s0;
      p.kind = OpKind::Resize;
      p.attr = rd;
      break;
    }
    case SizedKind::arange: {
      for (const TensorData& t : sizes)
        if (t.num_elements() != 1) throw Error(tag + "start, limit and delta are single numbers, got " + t.type().str());
      ArangeDesc ad = d.arange;
      ad.start = sizes[0].at(0);
      ad.limit = sizes[1].at(0);
      ad.delta = sizes[2].at(0);
      if (ad.delta == 0) throw Error(tag + "delta is 0");
      p.kind = OpKind::Arange;
      p.attr = ad;
      break;
    }
    case SizedKind::slice: {
      // numpy's slicing of each listed axis: strided_slice counts negative positions from the
      // end and clamps as numpy does (as the ONNX importer's Slice relies on); other axes whole.
      const std::vector<int64_t> b = s0, e = ints(sizes[1]), st = ints(sizes[2]);
      if (b.size() != d.axes.size() || e.size() != d.axes.size() || st.size() != d.axes.size())
        throw Error(tag + "takes one begin, end and stride per axis " + Shape(d.axes).str());
      const int64_t r = x.rank(), big = int64_t{1} << 62;
      SliceDesc sd{std::vector<int64_t>(static_cast<size_t>(r), 0), std::vector<int64_t>(static_cast<size_t>(r), 0),
                   std::vector<int64_t>(static_cast<size_t>(r), 1), (int64_t(1) << r) - 1, (int64_t(1) << r) - 1, 0};
      for (size_t k = 0; k < d.axes.size(); ++k) {
        auto a = normalize_axis(d.axes[k], r);
        if (!a) throw Error(tag + "axis " + std::to_string(d.axes[k]) + " out of range for x " + x.str());
        if (st[k] == 0) throw Error(tag + "a stride of 0 on axis " + std::to_string(*a));
        const auto at = static_cast<size_t>(*a);
        sd.begin[at] = std::clamp(b[k], -big, big);
        sd.end[at] = std::clamp(e[k], -big, big);
        sd.strides[at] = st[k];
        sd.begin_mask &= ~(int64_t(1) << *a);
        sd.end_mask &= ~(int64_t(1) << *a);
      }
      p.kind = OpKind::StridedSlice;
      p.attr = sd;
      break;
    }
  }
  return p;
}

}  // namespace tg::detail
