#include "backends/cuda/matmul_epilogue.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tg::detail {

bool epilogue_disabled() {
  const char* v = std::getenv("TGRAPH_NO_EPILOGUE");
  return v && std::strcmp(v, "1") == 0;
}

bool bias_fits(const Shape& bias, const Shape& out) {
  if (!bias.ranked() || !out.ranked() || bias.rank() < 1 || out.rank() < 2 || bias.rank() > out.rank()) return false;
  for (int64_t i = 0; i + 1 < bias.rank(); ++i)
    if (bias[i] != 1) return false;
  return bias.dim(-1) == out.dim(-1);
}

namespace {

bool is_broadcast(OpKind k) { return k == OpKind::BroadcastTo || k == OpKind::BroadcastLike; }

const Node* producer(const GraphImpl& g, int32_t v) {
  int32_t id = g.values[static_cast<size_t>(v)].node;
  return id < 0 ? nullptr : &g.nodes[static_cast<size_t>(id)];
}

// The epilogue when the nodes `seen` (of whole plan steps after the matmul with result y) are
// exactly [broadcast of the bias], add, [relu | gelu_tanh], leaving only the last result for
// later steps; kind none otherwise.
EpilogueMatch match_nodes(const GraphImpl& g, const std::vector<int32_t>& uses, int32_t y,
                          const std::vector<int32_t>& seen) {
  EpilogueMatch none;
  auto in_seen = [&](const Node* n) {
    return n && std::find(seen.begin(), seen.end(), static_cast<int32_t>(n - g.nodes.data())) != seen.end();
  };
  const Node* add = nullptr;
  for (int32_t id : seen) {
    const Node& n = g.nodes[static_cast<size_t>(id)];
    if (std::find(n.inputs.begin(), n.inputs.end(), y) != n.inputs.end()) add = &n;
  }
  if (!add || add->kind != OpKind::Add || add->inputs.size() != 2 || !add->control_deps.empty()) return none;
  const TensorType& yt = g.type(y);
  const int32_t sum = add->outputs[0];
  int32_t bias = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
  if (bias == y || g.type(sum) != yt) return none;  // the sum must have y's shape and dtype
  size_t pattern = 1;
  if (const Node* b = producer(g, bias); b && is_broadcast(b->kind)) {
    // The graph builder broadcasts the bias explicitly: read its source instead.
    if (in_seen(b)) {
      if (uses[static_cast<size_t>(bias)] != 1 || !b->control_deps.empty()) return none;
      ++pattern;
    }
    bias = b->inputs[0];
  } else if (in_seen(b)) {
    return none;
  }
  if (g.type(bias).dtype != yt.dtype || !bias_fits(g.type(bias).shape, yt.shape)) return none;
  EpilogueMatch m{bias, sum, MatmulShape::Epilogue::bias, 0};
  if (seen.size() == pattern + 1) {
    const Node& act = g.nodes[static_cast<size_t>(seen.back())];
    m.kind = act.kind == OpKind::Relu       ? MatmulShape::Epilogue::relu_bias
             : act.kind == OpKind::GeluTanh ? MatmulShape::Epilogue::gelu_tanh_bias
                                            : MatmulShape::Epilogue::none;
    if (m.kind == MatmulShape::Epilogue::none || &act == add || act.inputs.size() != 1 || act.inputs[0] != sum ||
        uses[static_cast<size_t>(sum)] != 1 || !act.control_deps.empty() || g.type(act.outputs[0]) != yt)
      return none;
    m.output = act.outputs[0];
  } else if (seen.size() != pattern) {
    return none;
  }
  return m;
}

}  // namespace

EpilogueMatch match_epilogue(const GraphImpl& g, const std::vector<int32_t>& uses, const FusionPlan& plan,
                             size_t step) {
  EpilogueMatch best;
  const Step& s = plan.steps[step];
  if (s.stitch || s.fused()) return best;
  const Node& mm = g.nodes[static_cast<size_t>(s.node)];
  if (mm.kind != OpKind::MatMul) return best;
  int32_t y = mm.outputs[0];
  const TensorType yt = g.type(y);
  if (yt.dtype != DType::f32 && yt.dtype != DType::f16 && yt.dtype != DType::bf16) return best;
  // Static shapes only (dynamic ones would need the broadcast checked per run); the add must be
  // the matmul result's only reader (a target counts as a use).
  if (!yt.shape.ranked() || !yt.shape.is_static() || uses[static_cast<size_t>(y)] != 1) return best;
  // Linear on [.., in] inputs reshapes the 2-D result before the add: a view of the same
  // buffer, and the bias still runs along its last dim.
  size_t first = 1;
  if (step + 1 < plan.steps.size() && !plan.steps[step + 1].fused() && !plan.steps[step + 1].stitch) {
    const Node& v = g.nodes[static_cast<size_t>(plan.steps[step + 1].node)];
    if ((v.kind == OpKind::Reshape || v.kind == OpKind::ExpandDims || v.kind == OpKind::Squeeze) &&
        v.inputs[0] == y && v.control_deps.empty() && g.type(v.outputs[0]).shape.is_static() &&
        g.type(v.outputs[0]).shape.rank() >= 2 && g.type(v.outputs[0]).shape.dim(-1) == yt.shape.dim(-1) &&
        uses[static_cast<size_t>(v.outputs[0])] == 1) {
      y = v.outputs[0];
      first = 2;
    }
  }
  // The longest run of whole steps (at most three: broadcast, add, activation when unfused)
  // that is exactly the pattern.
  std::vector<int32_t> seen;
  for (size_t k = first; k < first + 3 && step + k < plan.steps.size(); ++k) {
    const Step& t = plan.steps[step + k];
    if (t.stitch) break;
    if (t.fused()) seen.insert(seen.end(), t.group.nodes.begin(), t.group.nodes.end());
    else seen.push_back(t.node);
    EpilogueMatch m = match_nodes(g, uses, y, seen);
    if (m.kind != MatmulShape::Epilogue::none) {
      m.steps = k;
      best = m;
    }
  }
  return best;
}

std::vector<EpilogueMatch> match_epilogues(const Module& m, const FusionPlan& plan) {
  std::vector<EpilogueMatch> r(plan.steps.size());
  if (epilogue_disabled()) return r;
  std::vector<int32_t> uses = use_counts(m);
  for (size_t i = 0; i < plan.steps.size(); ++i) r[i] = match_epilogue(m.graph, uses, plan, i);
  return r;
}

}  // namespace tg::detail
