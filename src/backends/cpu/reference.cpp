// The reference interpreter's entry points: concrete inference, dispatch on the op family,
// and the index/element helpers shared by the family files.
#include "backends/cpu/reference.h"
#include "ops/sized_op.h"

#include <cstring>

#include "backends/cpu/ref_util.h"
#include "core/element.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace ref {

void Ctx::fail(const std::string& msg) const { throw Error(op_tag(n.kind) + msg); }

TensorData Ctx::output(size_t i) const { return TensorData(out_types.at(i).shape, out_types[i].dtype); }

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

Dims row_strides(const Dims& d) {
  Dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

Dims unravel(int64_t i, const Dims& d) {
  Dims idx(d.size(), 0);
  for (size_t k = d.size(); k-- > 0;) {
    if (d[k] > 0) {
      idx[k] = i % d[k];
      i /= d[k];
    }
  }
  return idx;
}

int64_t ravel(const Dims& idx, const Dims& d) {
  int64_t f = 0;
  for (size_t k = 0; k < d.size(); ++k) f = f * d[k] + idx[k];
  return f;
}

int64_t broadcast_index(const Dims& idx, const Dims& in) {
  size_t off = idx.size() - in.size();
  int64_t f = 0;
  for (size_t k = 0; k < in.size(); ++k) f = f * in[k] + (in[k] == 1 ? 0 : idx[off + k]);
  return f;
}

int64_t norm_axis(const Ctx& c, int64_t axis, int64_t rank) {
  auto a = normalize_axis(axis, rank);
  if (!a) c.fail("axis " + std::to_string(axis) + " out of range for rank " + std::to_string(rank));
  return *a;
}

bool int_like(DType t) { return is_integer(t) || t == DType::boolean; }

int bit_width(DType t) { return t == DType::boolean ? 1 : static_cast<int>(dtype_size(t) * 8); }

int64_t int_min(DType t) {
  switch (t) {
    case DType::i8: return INT8_MIN;
    case DType::i16: return INT16_MIN;
    case DType::i32: return INT32_MIN;
    case DType::i64: return INT64_MIN;
    default: return 0;  // u8, bool
  }
}

int64_t int_max(DType t) {
  switch (t) {
    case DType::i8: return INT8_MAX;
    case DType::i16: return INT16_MAX;
    case DType::i32: return INT32_MAX;
    case DType::i64: return INT64_MAX;
    case DType::u8: return UINT8_MAX;
    default: return 1;  // bool
  }
}

int64_t load_int(const TensorData& t, int64_t i) {
  if (t.dtype() == DType::i64) return t.ptr<int64_t>()[i];
  if (is_float(t.dtype())) return saturate<int64_t>(t.at(i));
  return static_cast<int64_t>(t.at(i));  // exact: every other integer type fits a double
}

void store_int(TensorData& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::i8: t.ptr<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::i16: t.ptr<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DType::i32: t.ptr<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::i64: t.ptr<int64_t>()[i] = v; break;
    case DType::u8: t.ptr<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::boolean: t.ptr<uint8_t>()[i] = v != 0; break;
    default: t.set(i, static_cast<double>(v));
  }
}

void copy_elem(TensorData& dst, int64_t di, const TensorData& src, int64_t si) {
  if (dst.dtype() != src.dtype()) {
    dst.set(di, src.at(si));
    return;
  }
  size_t w = dtype_size(src.dtype());
  std::memcpy(static_cast<std::byte*>(dst.data()) + static_cast<size_t>(di) * w,
              static_cast<const std::byte*>(src.data()) + static_cast<size_t>(si) * w, w);
}

}  // namespace ref

std::vector<TensorType> concrete_output_types(const GraphImpl& g, const Node& n,
                                              const std::vector<TensorData>& inputs) {
  std::vector<TensorType> in;
  in.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty())
      throw Error(op_tag(n.kind) + "input " + std::to_string(i) + " has no data");
    in.push_back(inputs[i].type());
  }
  return g.output_types_for(n, in);
}

namespace {

using FamilyEval = std::vector<TensorData> (*)(const ref::Ctx&);

// The reference's evaluator of each family; nullptr for the families the executor runs itself
// (sources, state, control flow) and for any family without one (op_contract_test finds it).
FamilyEval family_eval(Family f) {
  switch (f) {
    case Family::unary: case Family::unary_float: case Family::unary_logical:
    case Family::unary_bitwise: case Family::unary_predicate: case Family::cast:
    case Family::bitcast: case Family::binary: case Family::binary_float: case Family::compare:
    case Family::binary_logical: case Family::binary_bitwise: case Family::select:
    case Family::clamp:
      return ref::eval_elementwise;
    case Family::reduce: case Family::reduce_float: case Family::reduce_logical:
    case Family::arg_reduce: case Family::cumulative: case Family::top_k: case Family::sort:
      return ref::eval_reduce;
    case Family::matmul: case Family::scaled_matmul: case Family::band_part:
      return ref::eval_linalg;
    case Family::reshape: case Family::transpose: case Family::broadcast_to:
    case Family::broadcast_like: case Family::sum_to_like:
    case Family::expand_dims: case Family::squeeze: case Family::concat: case Family::split:
    case Family::shape_of: case Family::arange: case Family::strided_slice:
    case Family::slice_update: case Family::pad: case Family::tile: case Family::reverse:
    case Family::one_hot: case Family::space_depth: case Family::resize:
      return ref::eval_shape;
    case Family::conv: case Family::conv_grad:
      return ref::eval_conv;
    case Family::pool: case Family::pool_grad:
      return ref::eval_pool;
    case Family::norm: case Family::softmax: case Family::loss: case Family::attention:
      return ref::eval_nn;
    case Family::random_state: case Family::random: case Family::dropout:
      return ref::eval_random;
    case Family::gather: case Family::scatter: case Family::non_zero:
      return ref::eval_indexing;
    case Family::stencil:
      return ref::eval_stencil;
    case Family::collective:
      return ref::eval_collective;
    default:
      return nullptr;
  }
}

bool executor_runs(Family f) {
  switch (f) {
    case Family::source: case Family::variable: case Family::read_variable: case Family::assign:
    case Family::if_else: case Family::for_loop: case Family::while_loop:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool reference_evaluates(OpKind k) { return k == OpKind::SizedOp || family_eval(op_def(k).family) != nullptr; }

bool executor_evaluates(OpKind k) { return executor_runs(op_def(k).family); }

std::vector<TensorData> reference_eval(const GraphImpl& g, const Node& n,
                                       const std::vector<TensorData>& inputs) {
  if (n.kind == OpKind::Constant) return {n.data};
  if (n.kind == OpKind::SizedOp) {  // its sizes are here: run the op it stands for
    const size_t data = sized_data_inputs(std::get<SizedDesc>(n.attr));
    if (inputs.size() < data) throw Error(op_tag(n.kind) + "misses its data input");
    std::vector<TensorType> types;
    for (size_t i = 0; i < data; ++i) types.push_back(inputs[i].type());
    PlainOp p = sized_as_plain(n, std::vector<TensorData>(inputs.begin() + static_cast<long>(data), inputs.end()), types);
    Node plain = n;
    plain.kind = p.kind;
    plain.attr = std::move(p.attr);
    plain.inputs = std::move(p.inputs);
    return reference_eval(g, plain, std::vector<TensorData>(inputs.begin(), inputs.begin() + static_cast<long>(data)));
  }
  const OpDef& def = op_def(n.kind);
  if (executor_runs(def.family))
    throw Error(op_tag(n.kind) + "is run by the executor, not by the reference interpreter");
  const FamilyEval eval = family_eval(def.family);
  if (!eval) throw Error(op_tag(n.kind) + "has no reference implementation");
  ref::Ctx c{g, n, inputs, concrete_output_types(g, n, inputs)};
  return eval(c);
}

}  // namespace tg::detail
