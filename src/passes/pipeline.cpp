#include "passes/pipeline.h"
#include "tgraph/error.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/profile.h"
#include "core/env.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "ops/op_def.h"
#include "passes/algebraic_simplify.h"
#include "passes/autocast.h"
#include "passes/constant_folding.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/decompose.h"
#include "passes/fold_batch_norm.h"
#include "passes/half_storage.h"
#include "passes/layout.h"
#include "passes/sink_broadcasts.h"
#include "passes/space_to_depth.h"

namespace tg::detail {
namespace {

// Writes the graph after each pass that changed it (TGRAPH_DUMP), and under TGRAPH_PROFILE adds
// the time since the last such pass to the profile as "compile: <pass>" (a pass that changed
// nothing is counted in the next one that did): where a first call's compile goes.
struct Dumper {
  std::string dir;
  int step = 0;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  Dumper() {
    if (const char* d = env_value("TGRAPH_DUMP")) {
      dir = d;
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) throw Error("[compile] TGRAPH_DUMP: cannot create the directory " + dir + ": " + ec.message());
    }
  }
  void mark(const char* pass) {
    if (!cpu_profiling()) return;
    const auto now = std::chrono::steady_clock::now();
    cpu_profile_add(std::string("compile: ") + pass, std::chrono::duration<double>(now - last).count());
    last = now;
  }
  void dump(const Module& m, const char* pass) {
    mark(pass);
    if (dir.empty()) return;
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%02d-", step++);
    std::string base = dir + "/" + prefix + pass;
    std::ofstream(base + ".txt") << print_text(m.graph);
    std::ofstream(base + ".dot") << print_dot(m.graph);
  }
};

bool verify_each_pass() {
#ifndef NDEBUG
  return true;
#else
  return env_flag("TGRAPH_VERIFY");
#endif
}

}  // namespace

void run_pipeline(Module& m, bool optimize, bool decompose_composites, Precision precision, bool channels_last) {
  run_pipeline(m, PipelineOptions{optimize, decompose_composites, precision, channels_last, false, {}, {}, {}});
}

void run_pipeline(Module& m, const PipelineOptions& o) {
  const bool optimize = o.optimize, decompose_composites = o.decompose_composites, channels_last = o.channels_last;
  const Precision precision = o.precision;
  Dumper dumper;
  verify_or_throw(m.graph);
  dumper.dump(m, "input");
  // Before decomposition, which would take inference batch norms apart first.
  if (optimize && FoldBatchNorm().run(m)) {
    dumper.dump(m, "fold_batch_norm");
    if (verify_each_pass()) verify_or_throw(m.graph, "fold_batch_norm");
  }
  if (o.before_decompose && o.before_decompose(m)) {
    dumper.dump(m, "before_decompose");
    if (verify_each_pass()) verify_or_throw(m.graph, "before_decompose");
  }
  DecomposeComposites decompose;
  decompose.keep = o.keep_composite;
  if (decompose_composites && decompose.run(m)) {
    dumper.dump(m, "decompose");
    if (verify_each_pass()) verify_or_throw(m.graph, "decompose");
  }
  // Precision is what the user asked for, so it applies with or without optimisation; after
  // decomposition, so the matmuls composites expand into are cast too.
  if (apply_precision(m, precision)) {
    dumper.dump(m, "autocast");
    if (verify_each_pass()) verify_or_throw(m.graph, "autocast");
  }
  if (decompose_composites && o.lower_kept && o.lower_kept(m)) {
    dumper.dump(m, "lower_kept");
    if (verify_each_pass()) verify_or_throw(m.graph, "lower_kept");
  }
  // Half storage is part of what bf16 / f16 mean (activations kept in half, as PyTorch's
  // autocast keeps them), so it runs with or without optimisation; last, so CSE cannot merge
  // the per-reader casts it makes.
  // TGRAPH_F32_ACTIVATIONS=1 keeps them f32 (to tell a numerical difference from it apart).
  const bool half = (precision == Precision::bf16 || precision == Precision::f16) && !env_flag("TGRAPH_F32_ACTIVATIONS");
  auto store_half = [&] {
    if (half && HalfStorage(precision == Precision::bf16 ? DType::bf16 : DType::f16).run(m)) {
      dumper.dump(m, "half_storage");
      if (verify_each_pass()) verify_or_throw(m.graph, "half_storage");
    }
  };
  if (!optimize) return store_half();
  if (channels_last) {
    // Per-channel terms computed per channel first, so their broadcasts move past transposes.
    if (SinkBroadcasts().run(m)) {
      dumper.dump(m, "sink_broadcasts");
      if (verify_each_pass()) verify_or_throw(m.graph, "sink_broadcasts");
    }
    if (ChannelsLast().run(m)) {
      dumper.dump(m, "channels_last");
      if (verify_each_pass()) verify_or_throw(m.graph, "channels_last");
    }
  }
  if (o.space_to_depth && !env_flag("TGRAPH_NO_SPACE_TO_DEPTH") && SpaceToDepthConv().run(m)) {
    dumper.dump(m, "space_to_depth_conv");
    if (verify_each_pass()) verify_or_throw(m.graph, "space_to_depth_conv");
  }
  std::vector<std::unique_ptr<Pass>> round;
  round.push_back(std::make_unique<DeadCodeElimination>());
  round.push_back(std::make_unique<ConstantFolding>());
  round.push_back(std::make_unique<CommonSubexpressionElimination>());
  round.push_back(std::make_unique<AlgebraicSimplify>());
  const bool check = verify_each_pass();
  for (int iter = 0; iter < 4; ++iter) {
    bool changed = false;
    for (auto& p : round) {
      bool c = p->run(m);
      changed |= c;
      if (c) dumper.dump(m, p->name());
      if (check) verify_or_throw(m.graph, p->name());
    }
    if (!changed) break;
  }
  DeadCodeElimination final_dce;
  if (final_dce.run(m)) dumper.dump(m, "dce");
  store_half();
  dumper.mark("passes that changed nothing, at the end");
}

}  // namespace tg::detail
