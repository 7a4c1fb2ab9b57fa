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
  std::map<std::string, std::pair<int, int64_t>> library;  // other launches by op: count, bytes moved
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
      if (s.pinned || !fusible_elementwise(g, n)) {  // library calls, layout changes, views, sources
        if (!op_def(n.kind).has(kView) && !n.inputs.empty()) {
          auto& [count, bytes] = library[op_name(n.kind)];
          ++count;
          for (int32_t v : n.inputs) bytes += bytes_of(g, v);
          for (int32_t v : n.outputs) bytes += bytes_of(g, v);
        }
        continue;
      }
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
  out += "  other steps (library calls, layout changes; launches, GB moved):";
  for (const auto& [name, cb] : library) out += line(" %s x%d %.2f,", name.c_str(), cb.first, cb.second / 1e9);
  out += "\n";
  std::sort(kernels.rbegin(), kernels.rend());
  if (top > 0) out += line("the %d kernels moving the most bytes (MB):\n", top);
  for (int i = 0; i < top && i < static_cast<int>(kernels.size()); ++i)
    out += line("  %8.1f  %s\n", kernels[static_cast<size_t>(i)].first / 1e6, kernels[static_cast<size_t>(i)].second.c_str());
  return out;
}

std::string cuda_plan_memory(const Module& m, int top) {
  const FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
  const GraphImpl& g = m.graph;
  // Each value's buffer: a view's output shares its operand's (the kView ops alias, as the
  // executor does); a buffer dies after the last step that reads any value in it.
  std::vector<int32_t> root(g.values.size());
  for (size_t v = 0; v < root.size(); ++v) root[v] = static_cast<int32_t>(v);
  for (const Step& s : plan.steps)
    for (int32_t id : step_nodes(s)) {
      const Node& n = g.nodes[static_cast<size_t>(id)];
      if (op_def(n.kind).has(kView) && !n.inputs.empty() && n.outputs.size() == 1)
        root[static_cast<size_t>(n.outputs[0])] = root[static_cast<size_t>(n.inputs[0])];
    }
  std::vector<int64_t> born(g.values.size(), -1), last(g.values.size(), -1);
  std::vector<std::string> maker(g.values.size());
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const Step& s = plan.steps[i];
    std::vector<int32_t> outs = s.reduce ? s.reduce->outputs : s.stitch ? s.stitch->outputs
                                : s.is_group() ? s.group.outputs : g.nodes[static_cast<size_t>(s.node)].outputs;
    const std::string kind = s.reduce ? "stitched reduction" : s.stitch ? "stitched stencil"
                             : s.is_group() ? "fused group" : op_name(g.nodes[static_cast<size_t>(s.node)].kind);
    for (int32_t v : outs) {
      const int32_t r = root[static_cast<size_t>(v)];
      if (r == v && born[static_cast<size_t>(v)] < 0) {
        born[static_cast<size_t>(v)] = static_cast<int64_t>(i);
        maker[static_cast<size_t>(v)] = kind;
      }
      last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], static_cast<int64_t>(i));
    }
    for (int32_t v : step_inputs(g, s)) {
      const int32_t r = root[static_cast<size_t>(v)];
      last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], static_cast<int64_t>(i));
    }
  }
  for (int32_t v : m.targets) last[static_cast<size_t>(root[static_cast<size_t>(v)])] = static_cast<int64_t>(plan.steps.size());
  std::vector<int64_t> delta(plan.steps.size() + 2, 0);
  for (size_t v = 0; v < born.size(); ++v) {
    if (born[v] < 0) continue;  // inputs, variables and constants: counted apart
    delta[static_cast<size_t>(born[v])] += bytes_of(g, static_cast<int32_t>(v));
    delta[static_cast<size_t>(std::max(last[v], born[v])) + 1] -= bytes_of(g, static_cast<int32_t>(v));
  }
  int64_t live = 0, peak = 0;
  size_t at = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    live += delta[i];
    if (live > peak) peak = live, at = i;
  }
  std::map<std::string, int64_t> by_maker;
  for (size_t v = 0; v < born.size(); ++v)
    if (born[v] >= 0 && static_cast<size_t>(born[v]) <= at && static_cast<size_t>(std::max(last[v], born[v])) >= at)
      by_maker[maker[v] + " " + dtype_name(g.type(static_cast<int32_t>(v)).dtype)] += bytes_of(g, static_cast<int32_t>(v));
  int64_t sources = 0;
  for (const Node& n : g.nodes)
    if (n.kind == OpKind::Placeholder || n.kind == OpKind::Variable || n.kind == OpKind::Constant)
      for (int32_t v : n.outputs) sources += bytes_of(g, v);
  std::vector<std::pair<int64_t, std::string>> rows;
  for (const auto& [k, b] : by_maker) rows.emplace_back(b, k);
  std::sort(rows.rbegin(), rows.rend());
  std::string out = line("  live values at most %.2f GiB (at step %zu of %zu), beside %.2f GiB of inputs, variables "
                         "and constants; live at the peak, by what made them:\n",
                         static_cast<double>(peak) / (1 << 30), at, plan.steps.size(),
                         static_cast<double>(sources) / (1 << 30));
  for (int i = 0; i < top && i < static_cast<int>(rows.size()); ++i)
    out += line("  %8.2f GiB  %s\n", static_cast<double>(rows[static_cast<size_t>(i)].first) / (1 << 30),
                rows[static_cast<size_t>(i)].second.c_str());
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
