#include "ir/printer.h"

#include <sstream>

namespace tg::detail {
namespace {

const char* region_label(OpKind k, size_t i) {
  if (k == OpKind::IfElse) return i == 0 ? "then" : "else";
  if (k == OpKind::WhileLoop) return i == 0 ? "before" : "after";
  return "body";
}

void print_block(const GraphImpl& g, int32_t b, int indent, std::ostringstream& os) {
  std::string pad(static_cast<size_t>(indent), ' ');
  for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    os << pad;
    for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << g.value_name(n.outputs[i]);
    if (!n.outputs.empty()) os << " = ";
    os << op_name(n.kind) << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << g.value_name(n.inputs[i]);
    os << ")";
    std::string a = attr_str(n.attr);
    if (!a.empty()) os << " " << a;
    if (n.kind == OpKind::Constant && !n.data.empty()) os << " value=" << n.data.str(4);
    if (!n.control_deps.empty()) {
      os << " after(";
      for (size_t i = 0; i < n.control_deps.size(); ++i) os << (i ? ", " : "") << "^" << n.control_deps[i];
      os << ")";
    }
    if (!n.outputs.empty()) {
      os << " : ";
      for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << g.type(n.outputs[i]).str();
    }
    os << "  // ^" << id << "\n";
    for (size_t r = 0; r < n.regions.size(); ++r) {
      const Block& rb = g.blocks[static_cast<size_t>(n.regions[r])];
      os << pad << "  " << region_label(n.kind, r) << "(";
      for (size_t i = 0; i < rb.params.size(); ++i)
        os << (i ? ", " : "") << g.value_name(rb.params[i]) << ": " << g.type(rb.params[i]).str();
      os << ") {\n";
      print_block(g, n.regions[r], indent + 4, os);
      os << pad << "    return";
      for (size_t i = 0; i < rb.results.size(); ++i) os << (i ? ", " : " ") << g.value_name(rb.results[i]);
      os << "\n" << pad << "  }\n";
    }
  }
}

std::string escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

void dot_block(const GraphImpl& g, int32_t b, std::ostringstream& os) {
  for (int32_t id : g.blocks[static_cast<size_t>(b)].nodes) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    std::string label = op_name(n.kind);
    if (!n.name.empty()) label += "\\n" + escape(n.name);
    for (int32_t v : n.outputs) label += "\\n" + g.type(v).str();
    os << "  n" << id << " [label=\"" << label << "\"];\n";
    for (size_t r = 0; r < n.regions.size(); ++r) {
      os << "  subgraph cluster_" << n.regions[r] << " {\n  label=\"" << op_name(n.kind) << " "
         << region_label(n.kind, r) << "\";\n";
      const Block& rb = g.blocks[static_cast<size_t>(n.regions[r])];
      for (int32_t p : rb.params) os << "  v" << p << " [shape=ellipse,label=\"arg " << g.value_name(p) << "\"];\n";
      dot_block(g, n.regions[r], os);
      os << "  ret" << n.regions[r] << " [shape=plaintext,label=\"return\"];\n";
      for (int32_t v : rb.results) {
        int32_t p = g.values[static_cast<size_t>(v)].node;
        os << "  " << (p >= 0 ? "n" + std::to_string(p) : "v" + std::to_string(v)) << " -> ret" << n.regions[r] << ";\n";
      }
      os << "  }\n";
    }
  }
}

}  // namespace

std::string print_text(const GraphImpl& g) {
  std::ostringstream os;
  os << "graph {\n";
  print_block(g, 0, 2, os);
  os << "}\n";
  return os.str();
}

std::string print_dot(const GraphImpl& g) {
  std::ostringstream os;
  os << "digraph tgraph {\n  node [shape=box, fontname=\"monospace\"];\n";
  dot_block(g, 0, os);
  for (size_t id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    for (int32_t v : n.inputs) {
      int32_t p = g.values[static_cast<size_t>(v)].node;
      os << "  " << (p >= 0 ? "n" + std::to_string(p) : "v" + std::to_string(v)) << " -> n" << id << ";\n";
    }
    for (int32_t d : n.control_deps) os << "  n" << d << " -> n" << id << " [style=dashed];\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace tg::detail
