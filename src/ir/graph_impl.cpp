#include "ir/graph_impl.h"

#include "tgraph/error.h"

namespace tg::detail {

bool GraphImpl::block_within(int32_t inner, int32_t outer) const {
  for (int32_t b = inner; b >= 0; b = blocks[static_cast<size_t>(b)].parent_block)
    if (b == outer) return true;
  return false;
}

std::vector<std::vector<TensorType>> region_result_types(const GraphImpl& g, const Node& n) {
  std::vector<std::vector<TensorType>> out;
  for (int32_t b : n.regions) {
    std::vector<TensorType> ts;
    for (int32_t v : g.blocks[static_cast<size_t>(b)].results) ts.push_back(g.type(v));
    out.push_back(std::move(ts));
  }
  return out;
}

InferResult GraphImpl::infer(const Node& n) const {
  std::vector<TensorType> in;
  in.reserve(n.inputs.size());
  for (int32_t v : n.inputs) in.push_back(type(v));
  return infer_with(n, in);
}

std::vector<TensorType> GraphImpl::output_types_for(const Node& n, const std::vector<TensorType>& inputs) const {
  InferResult r = infer_with(n, inputs);
  if (!r.ok()) throw Error(r.error);
  return r.types;
}

InferResult GraphImpl::infer_with(const Node& n, const std::vector<TensorType>& in) const {
  std::vector<std::vector<TensorType>> rr;
  if (!n.regions.empty()) rr = region_result_types(*this, n);
  std::vector<TensorType> declared;
  for (int32_t v : n.outputs) declared.push_back(type(v));
  InferContext c{n.kind, in, n.attr, n.regions.empty() ? nullptr : &rr, &declared};
  return op_def(n.kind).infer(c);
}

int32_t GraphImpl::add_node(int32_t block, OpKind kind, std::vector<int32_t> inputs, Attr attr,
                            std::vector<TensorType> declared, std::vector<int32_t> regions) {
  std::vector<TensorType> in;
  in.reserve(inputs.size());
  for (int32_t v : inputs) in.push_back(type(v));
  std::vector<std::vector<TensorType>> rr;
  Node tmp{kind, block, {}, {}, {}, regions, {}, {}, {}};
  if (!regions.empty()) rr = region_result_types(*this, tmp);
  InferContext c{kind, in, attr, regions.empty() ? nullptr : &rr, &declared};
  InferResult r = op_def(kind).infer(c);
  if (!r.ok()) throw Error(r.error);
  // Every result is a valid type: dims sizes or -1, and a static size that fits in 64 bits
  // (broadcast_to(x, [2^62, 4]) would otherwise wrap its element count and compute garbage).
  for (size_t i = 0; i < r.types.size(); ++i) {
    const std::string problem = shape_problem(r.types[i].shape, r.types[i].dtype);
    if (problem.empty()) continue;
    std::string operands;
    for (const TensorType& t : in) operands += (operands.empty() ? "" : ", ") + t.str();
    throw Error("[" + std::string(op_name(kind)) + "] result " + (r.types.size() > 1 ? std::to_string(i) + " " : "") +
                problem + (operands.empty() ? "" : " (operands " + operands + ")"));
  }

  int32_t id = static_cast<int32_t>(nodes.size());
  Node n;
  n.kind = kind;
  n.block = block;
  n.inputs = std::move(inputs);
  n.attr = std::move(attr);
  n.regions = std::move(regions);
  for (size_t i = 0; i < r.types.size(); ++i) {
    n.outputs.push_back(static_cast<int32_t>(values.size()));
    values.push_back(Value{std::move(r.types[i]), id, static_cast<int32_t>(i), block, {}});
  }
  for (const auto& scope : control_scopes) n.control_deps.insert(n.control_deps.end(), scope.begin(), scope.end());
  for (int32_t b : n.regions) blocks[static_cast<size_t>(b)].parent_node = id;
  nodes.push_back(std::move(n));
  blocks[static_cast<size_t>(block)].nodes.push_back(id);
  return id;
}

int32_t GraphImpl::add_param(int32_t block, TensorType t) {
  int32_t v = static_cast<int32_t>(values.size());
  auto& b = blocks[static_cast<size_t>(block)];
  values.push_back(Value{std::move(t), -1, static_cast<int32_t>(b.params.size()), block, {}});
  b.params.push_back(v);
  return v;
}

int32_t GraphImpl::add_block(int32_t parent_block) {
  Block b;
  b.parent_block = parent_block;
  blocks.push_back(std::move(b));
  return static_cast<int32_t>(blocks.size() - 1);
}

std::string GraphImpl::value_name(int32_t v) const {
  const std::string& n = values[static_cast<size_t>(v)].name;
  return n.empty() ? "%" + std::to_string(v) : "%" + n;
}

}  // namespace tg::detail
