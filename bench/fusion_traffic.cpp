// The memory traffic of the CUDA fusion plan of tgraph's ResNet-50 training step, without a GPU:
// what each generated kernel (fused groups, stitched reductions, lone elementwise ops) reads and
// writes, by the plan the CUDA backend makes (cuda_fusion_options) after the pipeline compile()
// runs for a CUDA device. Generated kernels are bound by memory, so these bytes over 4.26 TB/s
// are their floor; comparing two builds' totals tells whether a planning change moves fewer
// bytes before any GPU time is spent.
// Usage: bench_fusion_traffic [--batch 256] [--precision bf16|tf32|f32] [--model resnet50|resnet18] [--top N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <tgraph/nn.h>
#include <tgraph/optim.h>
#include <tgraph/tgraph.h>

#include "backends/cuda/matmul_epilogue.h"
#include "ops/infer.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "passes/reduce_stitch.h"

using namespace tg::detail;

namespace {

int64_t bytes_of(const GraphImpl& g, int32_t v) {
  const tg::TensorType& t = g.type(v);
  return t.shape.ranked() && t.shape.is_static() ? t.shape.num_elements() * static_cast<int64_t>(tg::dtype_size(t.dtype)) : 0;
}

struct Traffic {
  int kernels = 0;
  int64_t read = 0, written = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 256;
  std::string precision = "bf16", model = "resnet50";
  int top = 15;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--precision") precision = v;
    else if (k == "--model") model = v;
    else if (k == "--top") top = std::atoi(v.c_str());
  }
  tg::Graph g;
  tg::Tensor x = g.placeholder({batch, 224, 224, 3}, tg::f32, "images");
  tg::Tensor labels = g.placeholder({batch, 1000}, tg::f32, "labels");
  tg::nn::ResNetConfig cfg;
  auto net = model == "resnet18" ? tg::nn::resnet18(g, cfg) : tg::nn::resnet50(g, cfg);
  net->train();
  tg::Tensor loss = g.softmax_cross_entropy(net->forward(g, x), labels);
  std::vector<tg::Tensor> params = net->parameters();
  tg::optim::GradMap grads = g.gradients(loss, params);
  std::vector<tg::Operation> ops = net->updates();
  ops.push_back(tg::optim::sgd(g, params, grads, g.scalar(0.01), {.momentum = 0.9}));

  // What compile() does for a CUDA device, up to the plan the executor makes at the first run.
  Module m;
  m.graph = g.impl();
  m.feeds = {x.id(), labels.id()};
  m.targets = {loss.id()};
  for (const tg::Operation& o : ops) m.target_ops.push_back(o.id());
  reinfer(m.graph);
  const tg::Precision p = precision == "f32" ? tg::Precision::f32 : precision == "tf32" ? tg::Precision::tf32 : tg::Precision::bf16;
  run_pipeline(m, true, true, p, true);
  const FusionPlan plan = plan_fusion(m, 0, cuda_fusion_options());
  const GraphImpl& mg = m.graph;

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
      const Node& n = mg.nodes[static_cast<size_t>(s.node)];
      if (s.pinned || !fusible_elementwise(mg, n)) continue;  // library calls, views, sources
      kind = "lone elementwise";
      outs = n.outputs;
    }
    Traffic t;
    for (int32_t v : step_inputs(mg, s)) t.read += bytes_of(mg, v);
    for (int32_t v : outs) t.written += bytes_of(mg, v);
    Traffic& k = by_kind[kind];
    ++k.kernels;
    k.read += t.read;
    k.written += t.written;
    std::string what = kind + ":";
    for (int32_t id : step_nodes(s)) what += std::string(" ") + op_name(mg.nodes[static_cast<size_t>(id)].kind);
    if (what.size() > 150) what = what.substr(0, 147) + "...";
    kernels.emplace_back(t.read + t.written, what);
  }
  Traffic all;
  std::printf("%s training step, batch %lld, %s: generated kernels of the CUDA plan\n", model.c_str(),
              static_cast<long long>(batch), precision.c_str());
  for (const auto& [kind, t] : by_kind) {
    std::printf("  %-20s %5d kernels  read %8.2f GB  written %8.2f GB  floor %6.2f ms\n", kind.c_str(), t.kernels,
                t.read / 1e9, t.written / 1e9, (t.read + t.written) / 4.26e9);
    all.kernels += t.kernels;
    all.read += t.read;
    all.written += t.written;
  }
  std::printf("  %-20s %5d kernels  read %8.2f GB  written %8.2f GB  floor %6.2f ms (at 4.26 TB/s)\n", "total",
              all.kernels, all.read / 1e9, all.written / 1e9, (all.read + all.written) / 4.26e9);
  std::sort(kernels.rbegin(), kernels.rend());
  std::printf("the %d kernels moving the most bytes (MB):\n", top);
  for (int i = 0; i < top && i < static_cast<int>(kernels.size()); ++i)
    std::printf("  %8.1f  %s\n", kernels[static_cast<size_t>(i)].first / 1e6, kernels[static_cast<size_t>(i)].second.c_str());
  return 0;
}
