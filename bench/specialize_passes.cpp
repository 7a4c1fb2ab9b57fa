// A new size's copy compile (issue 22) through the CUDA backend's passes, on any machine: a
// ResNet-50 as torch.export hands it over (NCHW, OIHW filters and inference batch norms as
// constants, dynamic batch), compiled first at one batch size, then at others as a dynamic
// executable's per-size copies are (runtime/specialize.cpp: the source graph again, feeds typed
// with the size), with the pass pipeline the CUDA backend asks for (decomposition, f16 autocast,
// channels-last, space-to-depth). Runs no kernel. Prints each compile's time; TGRAPH_PROFILE=1
// adds the time per pass.
// Usage: bench_specialize_passes [precision f16|bf16|f32] [batches 32,1,7,64]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <tgraph/tgraph.h>

#include "backends/cpu/profile.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/matmul_epilogue.h"
#endif
#include "passes/fold_memo.h"
#include "passes/fusion.h"
#include "passes/module.h"
#include "passes/pipeline.h"
#include "resnet50_graph.h"

int main(int argc, char** argv) {
  const std::string precision = argc > 1 ? argv[1] : "f16";
  std::vector<int64_t> batches;
  std::istringstream list(argc > 2 ? argv[2] : "32,1,7,64");
  for (std::string b; std::getline(list, b, ',');) batches.push_back(std::atoll(b.c_str()));
  tg::Graph g;
  bench::ResNet50 b{g, /*torch_like=*/true};
  tg::Tensor x = g.placeholder({-1, 3, 224, 224}, tg::f32, "images");
  tg::Tensor y = g.reduce_mean(b.features(x), {2, 3});
  y = g.add(g.matmul(y, b.weight({2048, 1000}, -0.05, 0.05, "fc")), b.weight({1000}, -0.1, 0.1, "fc_b"));
  tg::detail::PipelineOptions o;
  o.decompose_composites = true;
  o.precision = precision == "bf16" ? tg::Precision::bf16 : precision == "f32" ? tg::Precision::f32 : tg::Precision::f16;
  o.channels_last = true;
  o.space_to_depth = true;
  std::vector<tg::detail::Module> keep;  // the copies stay alive, as a dynamic executable's do
  tg::detail::FoldKeep folds;            // and what they fold, as its source holds it
  for (int64_t batch : batches) {
    const auto t0 = std::chrono::steady_clock::now();
    tg::detail::Module m;
    m.graph = g.impl();
    m.graph.values[static_cast<size_t>(x.id())].type = tg::TensorType{tg::Shape{batch, 3, 224, 224}, tg::f32};
    m.feeds.push_back(x.id());
    m.targets.push_back(y.id());
    tg::detail::reinfer(m.graph);
    tg::detail::run_pipeline(m, o);
    const auto t1 = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::printf("batch %lld (%s): compiled in %.1f ms, %zu nodes", static_cast<long long>(batch), precision.c_str(),
                ms, m.graph.nodes.size());
#ifdef TGRAPH_HAVE_CUDA
    // The first run's fusion plan (cuda_run_ops.cpp plans each block at its first run).
    const tg::detail::FusionPlan plan = tg::detail::plan_fusion(m, 0, tg::detail::cuda_fusion_options());
    std::printf("; CUDA fusion plan %.1f ms, %zu steps",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count(),
                plan.steps.size());
#endif
    std::printf("\n");
    keep.push_back(std::move(m));
    tg::detail::cpu_profile_flush("batch " + std::to_string(batch));
  }
  return 0;
}
