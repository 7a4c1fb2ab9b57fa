// Converters of ONNX's sequence and optional ops. tgraph has no sequence type: a sequence whose
// length is known at import time is held by the importer as the list of its elements' values
// (Value::elems), an optional as its value or nothing. Positions and split sizes must be known
// at import time; whatever would make a length depend on the graph's inputs is refused.
#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

using Kind = Value::Kind;

Value make_seq(std::vector<Value> elems) {
  Value v;
  v.kind = Kind::sequence;
  v.elems = std::move(elems);
  return v;
}

Value make_optional(std::optional<Value> x) {
  Value v;
  v.kind = Kind::optional;
  if (x) v.elems.push_back(std::move(*x));
  return v;
}

// The tensor input i as a value record (constness kept), failing for sequences and optionals.
Value tensor_value(Ctx& c, int i) {
  c.in(i);
  return c.value_in(i);
}

// A position known at import time, normalised against n; `insert` allows n itself.
int64_t position(Ctx& c, int i, int64_t n, bool insert) {
  const auto p = c.ints_in(i);
  if (p.size() != 1) c.fail("the position must be a scalar");
  int64_t k = p[0] < 0 ? p[0] + n : p[0];
  if (k < 0 || k > n || (k == n && !insert))
    c.fail("position " + std::to_string(p[0]) + " is out of range for a sequence of " + std::to_string(n));
  return k;
}

void sequence_empty(Ctx& c) { c.out_value(0, make_seq({})); }

void sequence_construct(Ctx& c) {
  std::vector<Value> elems;
  for (int i = 0; i < c.num_inputs(); ++i) elems.push_back(tensor_value(c, i));
  c.out_value(0, make_seq(std::move(elems)));
}

void sequence_at(Ctx& c) {
  auto s = c.seq_in(0);
  c.out_value(0, s[static_cast<size_t>(position(c, 1, static_cast<int64_t>(s.size()), false))]);
}

void sequence_insert(Ctx& c) {
  auto s = c.seq_in(0);
  const int64_t n = static_cast<int64_t>(s.size());
  const int64_t k = c.has_input(2) ? position(c, 2, n, true) : n;
  s.insert(s.begin() + k, tensor_value(c, 1));
  c.out_value(0, make_seq(std::move(s)));
}

void sequence_erase(Ctx& c) {
  auto s = c.seq_in(0);
  const int64_t n = static_cast<int64_t>(s.size());
  if (n == 0) c.fail("cannot erase from an empty sequence");
  const int64_t k = c.has_input(1) ? position(c, 1, n, false) : n - 1;
  s.erase(s.begin() + k);
  c.out_value(0, make_seq(std::move(s)));
}

void sequence_length(Ctx& c) {
  c.out_const(0, TensorData::from_vector(Shape{}, DType::i64, {static_cast<double>(c.seq_in(0).size())}));
}

void split_to_sequence(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, c.attr_i("axis", 0), x.rank());
  const int64_t len = x.shape()[axis];
  if (len < 0) c.fail("the split axis must have a static size, got " + x.shape().str());
  std::vector<int64_t> sizes;
  if (c.has_input(1)) {
    TensorData d = c.const_in(1);
    auto v = c.ints_in(1);
    if (d.shape().rank() == 0) {
      if (v[0] <= 0) c.fail("the split size must be positive, got " + std::to_string(v[0]));
      for (int64_t at = 0; at < len; at += v[0]) sizes.push_back(std::min(v[0], len - at));
    } else {
      int64_t sum = 0;
      for (int64_t s : v) {
        if (s < 0) c.fail("split sizes must not be negative");
        sum += s;
      }
      if (sum != len)
        c.fail("split sizes add up to " + std::to_string(sum) + ", the axis has " + std::to_string(len));
      sizes = v;
    }
  } else {
    sizes.assign(static_cast<size_t>(len), 1);
  }
  require_size(c, static_cast<double>(sizes.size()), "the sequence");
  const bool squeeze = !c.has_input(1) && c.attr_i("keepdims", 1) == 0;
  std::vector<Value> elems;
  int64_t at = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> b(static_cast<size_t>(x.rank()), 0), e(static_cast<size_t>(x.rank()), -1);
    b[static_cast<size_t>(axis)] = at;
    e[static_cast<size_t>(axis)] = at + s;
    Tensor part = g.slice(x, b, e);
    elems.push_back(Value{squeeze ? g.squeeze(part, {axis}) : part, std::nullopt, false});
    at += s;
  }
  c.out_value(0, make_seq(std::move(elems)));
}

void concat_from_sequence(Ctx& c) {
  auto s = c.seq_in(0);
  if (s.empty()) c.fail("cannot concatenate an empty sequence");
  std::vector<Tensor> xs;
  for (const auto& v : s) {
    if (v.kind != Kind::tensor) c.fail("the sequence's elements must be tensors");
    xs.push_back(v.t);
  }
  const bool new_axis = c.attr_i("new_axis", 0) != 0;
  const int64_t axis = norm_axis(c, c.attr_i("axis", 0), xs[0].rank() + (new_axis ? 1 : 0));
  c.out(0, new_axis ? c.g.stack(xs, axis) : c.g.concat(xs, axis));
}

// SequenceMap: the body once per element (unrolled); tensor inputs are passed to every call.
void sequence_map(Ctx& c) {
  const onnx::GraphProto& body = c.attr_g("body");
  const size_t n = c.seq_in(0).size();
  std::vector<Value> ins(static_cast<size_t>(c.num_inputs()));
  for (int i = 0; i < c.num_inputs(); ++i) {
    ins[static_cast<size_t>(i)] = c.value_in(i);
    if (ins[static_cast<size_t>(i)].kind == Kind::sequence && ins[static_cast<size_t>(i)].elems.size() != n)
      c.fail("the input sequences have different lengths");
  }
  std::vector<std::vector<Value>> outs(static_cast<size_t>(c.num_outputs()));
  for (size_t k = 0; k < n; ++k) {
    std::vector<Value> args;
    for (const auto& v : ins) args.push_back(v.kind == Kind::sequence ? v.elems[k] : v);
    auto r = c.inline_subgraph(body, args);
    if (r.size() < outs.size()) c.fail("the body gives too few outputs");
    for (size_t j = 0; j < outs.size(); ++j) outs[j].push_back(r[j]);
  }
  for (size_t j = 0; j < outs.size(); ++j) c.out_value(static_cast<int>(j), make_seq(std::move(outs[j])));
}

void optional(Ctx& c) {
  if (!c.has_input(0) && !c.has_attr("type")) c.fail("an empty Optional needs its 'type' attribute");
  c.out_value(0, make_optional(c.has_input(0) ? std::optional<Value>(c.value_in(0)) : std::nullopt));
}

void optional_has_element(Ctx& c) {
  bool has = false;
  if (c.has_input(0)) {
    Value v = c.value_in(0);  // a tensor or sequence is a present optional (a Loop may carry one)
    has = v.kind != Kind::optional || !v.elems.empty();
  }
  c.out_const(0, TensorData::scalar(has ? 1 : 0, DType::boolean));
}

void optional_get_element(Ctx& c) {
  Value v = c.value_in(0);
  if (v.kind != Kind::optional) {  // a tensor or sequence: itself
    c.out_value(0, v);
    return;
  }
  if (v.elems.empty()) c.fail("the optional is empty");
  c.out_value(0, v.elems[0]);
}

}  // namespace

const std::vector<Converter>& sequence_converters() {
  static const std::vector<Converter> t = {
      {"SequenceEmpty", 11, kNewestOpset, sequence_empty},
      {"SequenceConstruct", 11, kNewestOpset, sequence_construct},
      {"SequenceAt", 11, kNewestOpset, sequence_at},
      {"SequenceInsert", 11, kNewestOpset, sequence_insert},
      {"SequenceErase", 11, kNewestOpset, sequence_erase},
      {"SequenceLength", 11, kNewestOpset, sequence_length},
      {"SplitToSequence", 11, kNewestOpset, split_to_sequence},
      {"ConcatFromSequence", 11, kNewestOpset, concat_from_sequence},
      {"SequenceMap", 17, kNewestOpset, sequence_map},
      {"Optional", 15, kNewestOpset, optional},
      {"OptionalHasElement", 15, kNewestOpset, optional_has_element},
      {"OptionalGetElement", 15, kNewestOpset, optional_get_element},
  };
  return t;
}

}  // namespace tg::onnx_import
