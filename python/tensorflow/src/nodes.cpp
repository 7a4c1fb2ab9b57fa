#include "nodes.h"

#include <map>

#include "convert.h"
#include "functionalize.h"
#include "plugin.h"
#include "tensorflow/c/c_api.h"

namespace tgraph_tf {
namespace {

// Every op TensorFlow has registered, by name (read once: the registry only grows by plugins,
// loaded before any graph is optimised).
const std::map<std::string, tensorflow::OpDef>& op_defs() {
  static const std::map<std::string, tensorflow::OpDef> defs = [] {
    std::map<std::string, tensorflow::OpDef> m;
    TF_Buffer* b = TF_GetAllOpList();
    tensorflow::OpList ops;
    if (b && ops.ParseFromArray(b->data, static_cast<int>(b->length)))
      for (const tensorflow::OpDef& d : ops.op()) m.emplace(d.name(), d);
    if (b) TF_DeleteBuffer(b);
    return m;
  }();
  return defs;
}

// The node's attribute `name`, or the op's default for it.
const tensorflow::AttrValue* attr_of(const tensorflow::NodeDef& n, const tensorflow::OpDef& d, const std::string& name) {
  auto it = n.attr().find(name);
  if (it != n.attr().end()) return &it->second;
  for (const auto& a : d.attr())
    if (a.name() == name && a.has_default_value()) return &a.default_value();
  return nullptr;
}

}  // namespace

std::string tensor_name(const std::string& input) {
  const size_t colon = input.rfind(':');
  if (colon != std::string::npos && colon + 1 < input.size() &&
      input.find_first_not_of("0123456789", colon + 1) == std::string::npos)
    return input;
  return input + ":0";
}

std::string node_of(const std::string& input) {
  std::string s = !input.empty() && input[0] == '^' ? input.substr(1) : input;
  const size_t colon = s.rfind(':');
  return colon == std::string::npos ? s : s.substr(0, colon);
}

const tensorflow::OpDef* op_def(const std::string& name) {
  auto it = op_defs().find(name);
  return it == op_defs().end() ? nullptr : &it->second;
}

std::vector<tensorflow::DataType> arg_types(const tensorflow::NodeDef& n, bool inputs) {
  const tensorflow::OpDef* d = op_def(n.op());
  if (!d) return {};
  std::vector<tensorflow::DataType> out;
  for (const tensorflow::OpDef::ArgDef& a : inputs ? d->input_arg() : d->output_arg()) {
    if (!a.type_list_attr().empty()) {
      const tensorflow::AttrValue* v = attr_of(n, *d, a.type_list_attr());
      if (!v) return {};
      for (int t : v->list().type()) out.push_back(static_cast<tensorflow::DataType>(t));
      continue;
    }
    tensorflow::DataType t = a.type();
    if (t == tensorflow::DT_INVALID) {
      const tensorflow::AttrValue* v = attr_of(n, *d, a.type_attr());
      if (!v) return {};
      t = v->type();
    }
    int64_t count = 1;
    if (!a.number_attr().empty()) {
      const tensorflow::AttrValue* v = attr_of(n, *d, a.number_attr());
      if (!v) return {};
      count = v->i();
    }
    for (int64_t i = 0; i < count; ++i) out.push_back(t);
  }
  return out;
}

bool on_tgraph(const tensorflow::NodeDef& n) {
  return n.device().find(std::string("device:") + kDeviceType + ":") != std::string::npos;
}

bool clusterable(const tensorflow::NodeDef& n, const std::set<std::string>& preserve) {
  if (n.op() == kIfOp || n.op() == kWhileOp) return on_tgraph(n) && !preserve.count(n.name());
  if (!on_tgraph(n) || !has_converter(n.op()) || preserve.count(n.name())) return false;
  auto t = n.attr().find("T");
  return t != n.attr().end() && (t->second.type() == tensorflow::DT_FLOAT || t->second.type() == tensorflow::DT_DOUBLE);
}

}  // namespace tgraph_tf
