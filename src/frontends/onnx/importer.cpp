// ModelProto -> Graph: placeholders for inputs, constants for initializers, one converter call
// per node (nodes arrive in topological order, as ONNX requires).
#include <set>
#include <unordered_map>

#include "core/read_file.h"
#include "frontends/onnx/importer.h"
#include "ops/sized_op.h"
#include "tgraph/executable.h"
#include "tgraph/onnx.h"

namespace tg::onnx_import {

namespace {
constexpr int64_t kMaxOpset = kNewestOpset;

std::string node_label(const onnx::NodeProto& n) {
  if (!n.name().empty()) return n.name();
  for (const auto& o : n.output())
    if (!o.empty()) return "->" + o;
  return "<unnamed>";
}

const std::unordered_map<std::string, std::vector<const Converter*>>& table() {
  static const auto t = [] {
    std::unordered_map<std::string, std::vector<const Converter*>> m;
    for (const auto* fam :
         {&elementwise_converters(), &nn_converters(), &shape_converters(), &reduce_converters(),
          &misc_converters(), &control_converters(), &signal_converters(), &sampling_converters(),
          &rnn_converters(), &quant_converters(), &llm_converters(), &state_converters(), &image_converters(),
          &dynamic_converters(), &sequence_converters(), &ml_converters()})
      for (const Converter& c : *fam) m[c.op].push_back(&c);
    return m;
  }();
  return t;
}

// Ops whose results must not be computed at import time even from constants.
bool nondeterministic(const std::string& op) {
  return op == "If" || op == "Loop" || op == "Scan" || op == "RandomNormal" || op == "RandomUniform" || op == "RandomNormalLike" ||
         op == "RandomUniformLike" || op == "Bernoulli" || op == "Multinomial" || op == "Dropout";
}
}  // namespace

const Converter* find_converter(const std::string& op, int64_t opset, const std::string& domain) {
  auto it = table().find(op);
  if (it == table().end()) return nullptr;
  for (const Converter* c : it->second)
    if (opset >= c->since && opset <= c->until && domain == c->domain) return c;
  return nullptr;
}

const char* kind_name(Value::Kind k) {
  return k == Value::Kind::sequence ? "sequence" : k == Value::Kind::optional ? "optional" : "tensor";
}

bool knows_op(const std::string& op) { return table().count(op) > 0; }

std::string Ctx::where() const {
  return "[onnx] node '" + node_label(node) + "' (" + node.op_type() + ", opset " +
         std::to_string(opset) + ")";
}

void Ctx::fail(const std::string& msg) const { throw Error(where() + ": " + msg); }

Tensor Ctx::in(int i) const {
  Value v = value_in(i);
  if (v.kind != Value::Kind::tensor)
    fail("input " + std::to_string(i) + " ('" + node.input(i) + "') is a " + kind_name(v.kind) +
         "; the op takes a tensor");
  return v.t;
}

std::vector<Value> Ctx::seq_in(int i) const {
  Value v = value_in(i);
  if (v.kind != Value::Kind::sequence)
    fail("input " + std::to_string(i) + " ('" + node.input(i) + "') is a " + kind_name(v.kind) +
         ", not a sequence");
  return v.elems;
}

bool Ctx::is_const(int i) const {
  if (!has_input(i)) return false;
  auto it = values_.find(node.input(i));
  return it != values_.end() && (it->second.constant || it->second.const_derived);
}

bool Ctx::sized_in(int i) const {
  if (!has_input(i) || is_const(i)) return false;
  auto it = values_.find(node.input(i));
  if (it == values_.end() || it->second.kind != Value::Kind::tensor) return false;
  return !depends_on_values(g.impl(), in(i).id());
}

TensorData Ctx::const_in(int i) const {
  in(i);
  Value& v = values_.at(node.input(i));
  if (v.constant) return *v.constant;
  if (!v.const_derived)
    fail("input " + std::to_string(i) + " ('" + node.input(i) +
         "') must be known at import time (an initializer or a Constant), but it depends on the "
         "graph's inputs (data-dependent shapes are not supported)");
  v.constant = g.run(env_.known_feeds, {v.t})[0];
  return *v.constant;
}

std::vector<int64_t> Ctx::ints_in(int i) const {
  TensorData d = const_in(i);
  std::vector<int64_t> r(static_cast<size_t>(d.num_elements()));
  if (d.dtype() == DType::i64) {
    for (int64_t k = 0; k < d.num_elements(); ++k) r[static_cast<size_t>(k)] = d.ptr<int64_t>()[k];
    return r;
  }
  for (int64_t k = 0; k < d.num_elements(); ++k) {
    const double v = d.at(k);  // other dtypes through double: in range, or a clear error
    if (!(v >= -9.2233720368547758e18 && v < 9.2233720368547758e18))
      fail("input " + std::to_string(i) + " holds " + std::to_string(v) + ", not a 64-bit integer");
    r[static_cast<size_t>(k)] = static_cast<int64_t>(v);
  }
  return r;
}

const onnx::AttributeProto* Ctx::find(const std::string& name) const {
  for (const auto& a : node.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t Ctx::attr_i(const std::string& name, int64_t def) const {
  const auto* a = find(name);
  return a ? a->i() : def;
}
float Ctx::attr_f(const std::string& name, float def) const {
  const auto* a = find(name);
  return a ? a->f() : def;
}
std::string Ctx::attr_s(const std::string& name, const std::string& def) const {
  const auto* a = find(name);
  return a ? a->s() : def;
}
std::vector<int64_t> Ctx::attr_ints(const std::string& name, std::vector<int64_t> def) const {
  const auto* a = find(name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : def;
}
std::vector<float> Ctx::attr_floats(const std::string& name) const {
  const auto* a = find(name);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{};
}
std::optional<TensorData> Ctx::attr_t(const std::string& name) const {
  const auto* a = find(name);
  if (!a) return std::nullopt;
  return tensor_from_proto(a->t(), env_.base_dir);
}

const onnx::GraphProto& Ctx::attr_g(const std::string& name) const {
  const auto* a = find(name);
  if (!a || !a->has_g()) fail("graph attribute '" + name + "' is missing");
  return a->g();
}

Value Ctx::value_in(int i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is missing");
  auto it = values_.find(node.input(i));
  if (it == values_.end()) fail("input '" + node.input(i) + "' is not defined before the node");
  return it->second;
}

std::vector<Value> Ctx::inline_subgraph(const onnx::GraphProto& body, const std::vector<Value>& inputs) const {
  std::map<std::string, Value> scope = values_;
  if (static_cast<size_t>(body.input_size()) != inputs.size())
    fail("the body takes " + std::to_string(body.input_size()) + " inputs, " + std::to_string(inputs.size()) + " given");
  for (size_t i = 0; i < inputs.size(); ++i) scope[body.input(static_cast<int>(i)).name()] = inputs[i];
  convert_nodes(g, body, scope, env_, nullptr);
  std::vector<Value> r;
  for (const auto& o : body.output()) {
    auto it = scope.find(o.name());
    if (it == scope.end()) fail("the body does not produce '" + o.name() + "'");
    r.push_back(it->second);
  }
  return r;
}

void Ctx::alias(int i, int k) {
  Value v = value_in(k);
  if (wants_output(i)) values_[node.output(i)] = v;
}

void Ctx::out(int i, Tensor t) {
  if (!wants_output(i)) return;
  values_[node.output(i)] = Value{t, std::nullopt, false};
}

void Ctx::out_value(int i, const Value& v) {
  if (wants_output(i)) values_[node.output(i)] = v;
}

void Ctx::set_unsigned(int i, int32_t u) {
  if (wants_output(i)) values_[node.output(i)].unsigned_type = u;
}

void Ctx::set_onnx_type(int i, int32_t narrow) {
  if (wants_output(i)) values_[node.output(i)].onnx_type = narrow;
}

void Ctx::set_fp8_dequantized(int i, const Fp8Dequantized& d) {
  if (wants_output(i)) values_[node.output(i)].fp8 = d;
}

void Ctx::out_const(int i, const TensorData& v) {
  if (!wants_output(i)) return;
  values_[node.output(i)] = Value{g.constant(v, node.output(i)), v, true};
}

int64_t norm_axis(const Ctx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

void require_rank(const Ctx& c, Tensor x, int64_t lo, int64_t hi, const char* what) {
  int64_t r = x.rank();
  if (r < lo || r > hi)
    c.fail(std::string(what) + " must have rank " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)) +
           ", got " + x.type().str());
}

void require_size(const Ctx& c, double elements, const char* what) {
  if (!(elements >= 0 && elements <= double(int64_t{1} << 28))) c.fail(std::string(what) + " would be too large");
}

std::vector<int64_t> static_dims(const Ctx& c, Tensor x, const char* what) {
  Shape s = x.shape();
  if (!s.is_static()) c.fail(std::string(what) + " needs a static input shape, got " + s.str());
  return s.dims();
}

Tensor scalar_like(Graph& g, double v, Tensor x) { return g.scalar(v, x.dtype()); }

namespace {

constexpr int32_t kString = 8;

// A string input fails naming the first node that reads it: tgraph has no string dtype
// (docs/decisions.md).
[[noreturn]] void refuse_string_input(const onnx::GraphProto& gp, const std::string& name) {
  for (const auto& n : gp.node())
    for (const auto& i : n.input())
      if (i == name)
        throw Error("[onnx] node '" + node_label(n) + "' (" + n.op_type() + "): input '" + name +
                    "' is a string tensor; tgraph has no string dtype, so " + n.op_type() +
                    " on strings is not supported");
  throw Error("[onnx] input '" + name + "' is a string tensor; tgraph has no string dtype");
}

// The type of a tensor feed named `name`, the pos-th tensor fed.
TensorType tensor_feed_type(const onnx::TypeProto_Tensor& tt, const std::string& name,
                            const OnnxImportOptions& opt, size_t pos) {
  DType dt = dtype_from_onnx(tt.elem_type());
  if (pos < opt.input_shapes_in_order.size()) return {opt.input_shapes_in_order[pos], dt};
  auto it = opt.input_shapes.find(name);
  if (it != opt.input_shapes.end()) return {it->second, dt};
  if (!tt.has_shape())
    throw Error("[onnx] input '" + name + "' has no shape; give one in OnnxImportOptions::input_shapes");
  std::vector<int64_t> dims;
  for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : kDynamic);
  return {Shape(dims), dt};
}

OnnxValueForm::Kind form_kind(const onnx::TypeProto& t) {
  return t.has_sequence_type()   ? OnnxValueForm::Kind::sequence
         : t.has_optional_type() ? OnnxValueForm::Kind::optional
                                 : OnnxValueForm::Kind::tensor;
}

const char* form_name(OnnxValueForm::Kind k) {
  return k == OnnxValueForm::Kind::sequence   ? "sequence"
         : k == OnnxValueForm::Kind::optional ? "optional"
                                              : "tensor";
}

// Binds a graph input of ONNX type `type` held in `form`: one placeholder per tensor it holds,
// named `name` (an optional's value) or name[i] (a sequence's elements), fed in that order.
Value bind_input(Graph& g, const onnx::GraphProto& gp, const onnx::TypeProto& type, const OnnxValueForm& form,
                 const std::string& name, const OnnxImportOptions& opt, OnnxModel& r, Env& env) {
  if (form_kind(type) != form.kind)
    throw Error("[onnx] input '" + name + "' is a " + form_name(form_kind(type)) + ", given as a " +
                form_name(form.kind));
  Value v;
  if (form.kind == OnnxValueForm::Kind::sequence || form.kind == OnnxValueForm::Kind::optional) {
    const bool seq = form.kind == OnnxValueForm::Kind::sequence;
    if (!seq && form.elements.size() > 1)
      throw Error("[onnx] input '" + name + "': an optional holds one value at most");
    const onnx::TypeProto& elem = seq ? type.sequence_type().elem_type() : type.optional_type().elem_type();
    v.kind = seq ? Value::Kind::sequence : Value::Kind::optional;
    for (size_t i = 0; i < form.elements.size(); ++i)
      v.elems.push_back(bind_input(g, gp, elem, form.elements[i],
                                   seq ? name + "[" + std::to_string(i) + "]" : name, opt, r, env));
    return v;
  }
  if (!type.has_tensor_type())
    throw Error("[onnx] input '" + name + "' is not a tensor, a sequence or an optional");
  const int32_t elem = type.tensor_type().elem_type();
  if (elem == kString) refuse_string_input(gp, name);
  TensorType t = tensor_feed_type(type.tensor_type(), name, opt, r.inputs.size());
  Tensor p = g.placeholder(t.shape, t.dtype, name);
  v = Value{p, std::nullopt, false, narrow_type(elem), unsigned_type(elem)};
  size_t pos = r.inputs.size();
  if (pos < opt.input_values_in_order.size()) {
    const TensorData& known = opt.input_values_in_order[pos];
    if (known.dtype() != t.dtype || !shape_compatible(t.shape, known.shape()))
      throw Error("[onnx] the value given for input '" + name + "' is " + known.type().str() +
                  ", the model declares " + t.str());
    v.constant = known;
    env.known_feeds.emplace_back(p, known);
  }
  r.input_names.push_back(name);
  r.inputs.push_back(p);
  r.input_types.push_back(t);
  return v;
}

// Appends the tensors of a graph output to r's outputs; returns its form.
OnnxValueForm bind_output(const Value& v, const std::string& name, OnnxModel& r) {
  OnnxValueForm f;
  if (v.kind == Value::Kind::tensor) {
    r.output_names.push_back(name);
    r.outputs.push_back(v.t);
    return f;
  }
  const bool seq = v.kind == Value::Kind::sequence;
  f.kind = seq ? OnnxValueForm::Kind::sequence : OnnxValueForm::Kind::optional;
  for (size_t i = 0; i < v.elems.size(); ++i)
    f.elements.push_back(bind_output(v.elems[i], seq ? name + "[" + std::to_string(i) + "]" : name, r));
  return f;
}

}  // namespace

void convert_nodes(Graph& g, const onnx::GraphProto& gp, std::map<std::string, Value>& values, const Env& env,
                   std::map<std::string, int64_t>* histogram) {
  for (const auto& init : gp.initializer()) {
    TensorData v = tensor_from_proto(init, env.base_dir);
    values[init.name()] = Value{g.constant(v, init.name()), v, true, narrow_type(init.data_type()),
                                unsigned_type(init.data_type())};
  }
  for (const auto& node : gp.node()) {
    if (histogram) ++(*histogram)[node.op_type()];
    std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    auto oit = env.opsets.find(domain);
    int64_t opset = oit != env.opsets.end() ? oit->second : 0;
    Ctx c(g, node, opset, values, env);
    const bool ml = domain == "ai.onnx.ml";
    if (!domain.empty() && domain != "ai.onnx.preview.training" && !ml)
      c.fail("domain '" + domain + "' is not supported (only ai.onnx and ai.onnx.ml)");
    const Converter* conv = find_converter(node.op_type(), opset, ml ? domain : "");
    if (!conv) {
      const int64_t newest = ml ? kNewestMlOpset : kMaxOpset;
      if (opset > newest)
        c.fail("opset " + std::to_string(opset) + " is newer than the newest the importer knows (" +
               std::to_string(newest) + ")");
      c.fail(knows_op(node.op_type()) ? "this opset of the op is not supported"
                                      : "op type '" + node.op_type() + "' is not supported");
    }
    try {
      conv->fn(c);
      follow_sym(c);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("[onnx] node", 0) == 0) throw;
      c.fail(msg);
    }
    bool all_const = node.input_size() > 0 && !nondeterministic(node.op_type());
    for (int i = 0; i < node.input_size(); ++i)
      if (!node.input(i).empty() && !c.is_const(i)) all_const = false;
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;
      auto it = values.find(node.output(i));
      if (it == values.end()) c.fail("output " + std::to_string(i) + " ('" + node.output(i) + "') is not produced by the importer");
      if (all_const) it->second.const_derived = true;
    }
  }
}

OnnxModel import_model(const onnx::ModelProto& m, const OnnxImportOptions& opt, const std::string& base_dir) {
  OnnxModel r;
  r.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  Env env;
  env.base_dir = base_dir;
  auto& opsets = env.opsets;
  for (const auto& o : m.opset_import()) opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  if (!opsets.count("")) {
    if (m.opset_import_size() == 0) opsets[""] = 1;  // IR version 1 models have no opset import
  }
  r.opset = opsets.count("") ? opsets[""] : 0;
  if (!m.has_graph()) throw Error("[onnx] the model has no graph");
  const onnx::GraphProto& gp = m.graph();
  Graph& g = r.graph;
  std::map<std::string, Value> values;
  std::set<std::string> init_names;
  for (const auto& init : gp.initializer()) init_names.insert(init.name());
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // an initializer listed as an input (IR < 4)
    OnnxValueForm form;
    auto fit = opt.input_forms.find(vi.name());
    if (fit != opt.input_forms.end())
      form = fit->second;
    else if (form_kind(vi.type()) != OnnxValueForm::Kind::tensor)
      throw Error("[onnx] input '" + vi.name() + "' is a " + form_name(form_kind(vi.type())) +
                  "; give what it holds in OnnxImportOptions::input_forms");
    values[vi.name()] = bind_input(g, gp, vi.type(), form, vi.name(), opt, r, env);
    r.input_forms.emplace_back(vi.name(), form);
  }
  convert_nodes(g, gp, values, env, &r.op_histogram);
  for (const auto& vi : gp.output()) {
    auto it = values.find(vi.name());
    if (it == values.end()) throw Error("[onnx] graph output '" + vi.name() + "' is not produced by any node");
    r.output_forms.emplace_back(vi.name(), bind_output(it->second, vi.name(), r));
  }
  return r;
}

}  // namespace tg::onnx_import

namespace tg {

int64_t onnx_max_opset() { return onnx_import::kNewestOpset; }

size_t OnnxValueForm::num_tensors() const {
  if (kind == Kind::tensor) return 1;
  size_t n = 0;
  for (const auto& e : elements) n += e.num_tensors();
  return n;
}

std::string OnnxValueForm::str() const {
  if (kind == Kind::tensor) return "tensor";
  if (kind == Kind::optional) return elements.empty() ? "empty optional" : "optional " + elements[0].str();
  return "sequence of " + std::to_string(elements.size());
}

OnnxModel import_onnx_bytes(const std::string& bytes, const OnnxImportOptions& options,
                            const std::string& base_dir) {
  onnx::ModelProto m;
  if (bytes.empty()) throw Error("[onnx] the model is empty");
  if (!m.ParseFromString(bytes)) throw Error("[onnx] not a valid ONNX model (protobuf parse failed)");
  try {
    return onnx_import::import_model(m, options, base_dir);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a malformed model must fail cleanly, whatever broke
    throw Error(std::string("[onnx] malformed model: ") + e.what());
  }
}

OnnxModel import_onnx(const std::string& path, const OnnxImportOptions& options) {
  const std::string bytes = detail::read_file(path, "onnx");
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  try {
    return import_onnx_bytes(bytes, options, dir);
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.find("protobuf parse failed") != std::string::npos || msg.find("is empty") != std::string::npos)
      throw Error("[onnx] " + path + " is not a valid ONNX model (protobuf parse failed)");
    throw;
  }
}

namespace {
std::string type_string(const onnx::TypeProto& t) {
  if (!t.has_tensor_type()) return t.has_sequence_type() ? "sequence" : t.has_optional_type() ? "optional" : "non-tensor";
  const auto& tt = t.tensor_type();
  std::string shape = "[*]";
  if (tt.has_shape()) {
    shape = "[";
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      shape += (i ? "," : "") + (d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param().empty() ? "?" : d.dim_param());
    }
    shape += "]";
  }
  std::string dt;
  try {
    dt = dtype_name(onnx_import::dtype_from_onnx(tt.elem_type()));
  } catch (const Error&) {
    dt = "onnx-type-" + std::to_string(tt.elem_type());
  }
  return shape + " " + dt;
}

void count_ops(const onnx::GraphProto& g, std::map<std::string, int64_t>& h) {
  for (const auto& n : g.node()) {
    ++h[n.op_type()];
    for (const auto& a : n.attribute()) {
      if (a.has_g()) count_ops(a.g(), h);
      for (const auto& sg : a.graphs()) count_ops(sg, h);
    }
  }
}
}  // namespace

OnnxModelInfo inspect_onnx(const std::string& path) {
  const std::string bytes = detail::read_file(path, "onnx");
  onnx::ModelProto m;
  if (bytes.empty() || !m.ParseFromString(bytes))
    throw Error("[onnx] " + path + " is not a valid ONNX model (protobuf parse failed)");
  OnnxModelInfo r;
  r.ir_version = m.ir_version();
  r.producer = m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  for (const auto& o : m.opset_import()) r.opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = o.version();
  r.opset = r.opsets.count("") ? r.opsets[""] : 0;
  const auto& g = m.graph();
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) {
    inits.insert(t.name());
    ++r.num_initializers;
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    try {
      r.initializer_bytes += n * static_cast<int64_t>(dtype_size(onnx_import::dtype_from_onnx(t.data_type())));
    } catch (const Error&) {
    }
  }
  for (const auto& v : g.input()) {
    if (inits.count(v.name())) continue;
    r.inputs.emplace_back(v.name(), type_string(v.type()));
    TensorType t;
    const auto& tt = v.type().tensor_type();
    try {
      t.dtype = onnx_import::dtype_from_onnx(tt.elem_type());
    } catch (const Error&) {
    }
    std::vector<int64_t> dims;
    for (const auto& d : tt.shape().dim()) dims.push_back(d.has_dim_value() ? d.dim_value() : kDynamic);
    t.shape = Shape(dims);
    r.input_types.push_back(t);
  }
  for (const auto& v : g.output()) r.outputs.emplace_back(v.name(), type_string(v.type()));
  count_ops(g, r.op_histogram);
  return r;
}

Executable OnnxModel::compile(const CompileOptions& options) const {
  std::vector<std::pair<Tensor, TensorType>> feeds;
  CompileOptions o = options;
  for (size_t i = 0; i < inputs.size(); ++i) {
    feeds.emplace_back(inputs[i], input_types[i]);
    if (!input_types[i].shape.is_static()) o.disable_type_inference = true;
  }
  Graph g = graph;
  return g.compile(feeds, outputs, {}, o);
}

}  // namespace tg
