#include "backends/cuda/plan_traffic.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "backends/cuda/matmul_epilogue.h"
#include "backends/cuda/nvrtc_compiler.h"
#include "backends/cuda/reduce_stitch_kernel.h"
#include "passes/fusion.h"
#include "passes/reduce_stitch.h"

namespace tg::detail {
namespace {

int64_t bytes_of(const GraphImpl& g, int32_t v) {
  const TensorType& t = g.type(v);
  return t.shape.ranked() && t.shape.is_static() ? t.shape.num_elements() * static_cast<int64_t>(dtype_size(t.dtype))
                                                 : 0;
}

// "2 x bf16 25.7 MB, 1 x f32 51.4 MB": the operands that move bytes, by dtype and size.
std::string operands(const GraphImpl& g, const std::vector<int32_t>& vals) {
  std::map<std::pair<std::string, int64_t>, int> n;
  for (int32_t v : vals)
    if (int64_t b = bytes_of(g, v); b >= (1 << 20)) ++n[{dtype_name(g.type(v).dtype), b}];
  std::string out;
  for (const auto& [k, c] : n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s %d x %s %.1f MB", out.empty() ? "" : ",", c, k.first.c_str(), k.second / 1e6);
    out += buf;
  }
  return out.empty() ? " nothing over 1 MB" : out;
}

struct Traffic {
  int kernels = 0;
  int64_t read = 0, written = 0;
};

std::string line(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

}  // namespace

std::string cuda_plan_traffic(const Module& m, int top, double copy_gbps) {
  const FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
  const GraphImpl& g = m.graph;
  std::map<std::string, Traffic> by_kind;
  std::vector<std::pair<int64_t, std::string>> kernels;
  for (const Step& s : plan.steps) {
    std::string kind;
    std::vector<int32_t> outs;
    if (s.reduce) {
      kind = "stitched reduction";
      outs = s.reduce->outputs;
    } else if (s.stitch) {
      kind = "stitched stencil";
      outs = s.stitch->outputs;
    } else if (s.is_group()) {
      kind = "fused group";
      outs = s.group.outputs;
    } else {
      const Node& n = g.nodes[static_cast<size_t>(s.node)];
      if (s.pinned || !fusible_elementwise(g, n)) continue;  // library calls, views, sources
      kind = "lone elementwise";
      outs = n.outputs;
    }
    Traffic t;
    for (int32_t v : step_inputs(g, s)) t.read += bytes_of(g, v);
    for (int32_t v : outs) t.written += bytes_of(g, v);
    Traffic& k = by_kind[kind];
    ++k.kernels;
    k.read += t.read;
    k.written += t.written;
    std::string what = kind + ":";
    for (int32_t id : step_nodes(s)) what += std::string(" ") + op_name(g.nodes[static_cast<size_t>(id)].kind);
    if (what.size() > 110) what = what.substr(0, 107) + "...";
    what += "\n            reads" + operands(g, step_inputs(g, s)) + "; writes" + operands(g, outs);
    kernels.emplace_back(t.read + t.written, what);
  }
  std::string out;
  Traffic all;
  const double per_ms = copy_gbps * 1e6;  // bytes per millisecond
  for (const auto& [kind, t] : by_kind) {
    out += line("  %-20s %5d kernels  read %8.2f GB  written %8.2f GB  floor %6.2f ms\n", kind.c_str(), t.kernels,
                t.read / 1e9, t.written / 1e9, (t.read + t.written) / per_ms);
    all.kernels += t.kernels;
    all.read += t.read;
    all.written += t.written;
  }
  out += line("  %-20s %5d kernels  read %8.2f GB  written %8.2f GB  floor %6.2f ms (at %.0f GB/s)\n", "total",
              all.kernels, all.read / 1e9, all.written / 1e9, (all.read + all.written) / per_ms, copy_gbps);
  std::sort(kernels.rbegin(), kernels.rend());
  if (top > 0) out += line("the %d kernels moving the most bytes (MB):\n", top);
  for (int i = 0; i < top && i < static_cast<int>(kernels.size()); ++i)
    out += line("  %8.1f  %s\n", kernels[static_cast<size_t>(i)].first / 1e6, kernels[static_cast<size_t>(i)].second.c_str());
  return out;
}

std::vector<std::string> cuda_plan_compile_errors(const Module& m) {
  const FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
  const GraphImpl& g = m.graph;
  std::vector<std::string> errors;
  for (const Step& s : plan.steps) {
    if (!s.reduce) continue;
    std::vector<TensorType> types;
    for (int32_t v : s.reduce->inputs) types.push_back(g.type(v));
    std::string what = "stitched reduction:";
    for (int32_t id : step_nodes(s)) what += std::string(" ") + op_name(g.nodes[static_cast<size_t>(id)].kind);
    try {
      auto l = prepare_reduce_stitch(g, *s.reduce, types, 132);
      if (!l) continue;  // runs as its pieces
      if (nvrtc_compile(l->source, 9, 0).empty()) errors.push_back(what + ": no code");
    } catch (const std::exception& e) {
      errors.push_back(what + ": " + e.what());
    }
  }
  return errors;
}

}  // namespace tg::detail
