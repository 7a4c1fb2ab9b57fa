// The memory traffic of the CUDA fusion plan of tgraph's ResNet-50 training step, without a GPU:
// what each generated kernel (fused groups, stitched reductions, lone elementwise ops) reads and
// writes, by the plan the CUDA backend makes (cuda_fusion_options) after the pipeline compile()
// runs for a CUDA device. Generated kernels are bound by memory, so these bytes over 4.26 TB/s
// are their floor; comparing two builds' totals tells whether a planning change moves fewer
// bytes before any GPU time is spent.
// Usage: bench_fusion_traffic [--batch 256] [--precision bf16|tf32|f32] [--model resnet50|resnet18] [--top N]
//                             [--compile 1]   (also NVRTC-compiles every stitched reduction's kernel)
//                             [--dump DIR]    (writes the generated kernels' sources there, one .cu each,
//                                              fused groups as flat kernels: to time NVRTC on them)
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <fstream>
#include <cstdlib>
#include <string>
#include <vector>

#include <tgraph/nn.h>
#include <tgraph/optim.h>
#include <tgraph/tgraph.h>

#include "backends/cuda/elementwise_codegen.h"
#include "backends/cuda/matmul_epilogue.h"
#include "backends/cuda/plan_traffic.h"
#include "backends/cuda/reduce_stitch_kernel.h"
#include "passes/fusion.h"
#include "runtime/executable_impl.h"

using namespace tg::detail;

int main(int argc, char** argv) {
  int64_t batch = 256;
  std::string precision = "bf16", model = "resnet50";
  int top = 15;
  bool compile = false;
  std::string dump;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") batch = std::atoll(v.c_str());
    else if (k == "--precision") precision = v;
    else if (k == "--model") model = v;
    else if (k == "--top") top = std::atoi(v.c_str());
    else if (k == "--compile") compile = v == "1";
    else if (k == "--dump") dump = v;
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
  tg::detail::Module m;
  const tg::Precision p = precision == "f32" ? tg::Precision::f32 : precision == "tf32" ? tg::Precision::tf32 : tg::Precision::bf16;
  prepare_module(m, g.impl(), {{x, x.type()}, {labels, labels.type()}}, {loss}, ops,
                 {.device = tg::Device::cuda(0), .precision = p});
  std::printf("%s training step, batch %lld, %s: generated kernels of the CUDA plan\n%s", model.c_str(),
              static_cast<long long>(batch), precision.c_str(), cuda_plan_traffic(m, top).c_str());
  std::printf("memory of the plan:\n%s", cuda_plan_memory(m).c_str());
  if (!dump.empty()) {
    std::filesystem::create_directories(dump);
    int n = 0;
    const GraphImpl& gi = m.graph;
    for (const Step& s : plan_fusion(m, 0, cuda_fusion_options()).steps) {
      std::string src;
      if (s.reduce) {
        std::vector<tg::TensorType> types;
        for (int32_t v : s.reduce->inputs) types.push_back(gi.type(v));
        if (auto l = prepare_reduce_stitch(gi, *s.reduce, types, 132, 9)) src = l->source;
      } else if (s.is_group() && !s.group.nodes.empty() && elementwise_supported(gi, s.group)) {
        src = elementwise_source(gi, s.group, Indexing::flat, -1, nullptr, 1);
      }
      if (src.empty()) continue;
      ++n;  // equal sources (one kernel, compiled once) land in one file
      std::ofstream(dump + "/k" + std::to_string(std::hash<std::string>()(src)) + ".cu") << src;
    }
    std::printf("%d kernels, %zu distinct sources written to %s\n", n,
                static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dump), {})), dump.c_str());
  }
  if (!compile) return 0;
  const std::vector<std::string> errors = cuda_plan_compile_errors(m);
  for (const std::string& e : errors) std::printf("compile error: %s\n", e.c_str());
  std::printf("stitched kernels: %zu failed to compile\n", errors.size());
  return errors.empty() ? 0 : 1;
}
