// The switches CompileOptions::switches may set: the table of docs/switches.md (checked equal by
// tests/check_switches.py), but for the ones read once per process or on other threads (the
// device, the kernel cache and its source dump, profiling, the fallback log, the CPU convolution
// layout, the PyTorch frontend's strict mode).
#include <algorithm>
#include <array>
#include <string>

#include "core/env.h"
#include "tgraph/error.h"

namespace tg::detail {
namespace {

constexpr std::array<const char*, 32> kPerExecutable{
    "TGRAPH_DUMP",          "TGRAPH_VERIFY",           "TGRAPH_NO_FUSION",        "TGRAPH_NO_REDUCE_FUSION",
    "TGRAPH_NO_LAYOUT",     "TGRAPH_NO_SPACE_TO_DEPTH", "TGRAPH_F32_ACTIVATIONS", "TGRAPH_NO_ARENA",
    "TGRAPH_NO_CUDA_GRAPH", "TGRAPH_NO_BORROW",        "TGRAPH_NO_KERNEL_PREFETCH", "TGRAPH_NO_SIZE_PREFETCH", "TGRAPH_NO_LIBRARY_WARMUP", "TGRAPH_NO_PROVISIONAL_CHOICES", "TGRAPH_NO_LOOP_IN_PLACE",
    "TGRAPH_NO_EPILOGUE",   "TGRAPH_DRELU",            "TGRAPH_CUDNN_FIND",       "TGRAPH_CUDNN_PER_BATCH", "TGRAPH_CUDNN_NO_CHANNEL_PAD",
    "TGRAPH_STENCIL_CONFIG", "TGRAPH_ROUND_HALF_OPS",  "TGRAPH_NO_SPECIALIZE",
    "TGRAPH_NO_CONV_POST_OPS", "TGRAPH_CPU_NO_WINOGRAD", "TGRAPH_RS_STAGES", "TGRAPH_NO_FUSED_ATTENTION", "TGRAPH_ATTENTION_SHARED_KERNELS",
    "TGRAPH_NO_INTERIM_ATTENTION", "TGRAPH_OWN_ATTENTION", "TGRAPH_INTERIM_MATMUL",
    "TGRAPH_DIST_SAME_STREAM"};

}  // namespace

void check_switch_name(const std::string& name) {
  if (std::find(kPerExecutable.begin(), kPerExecutable.end(), name) != kPerExecutable.end()) return;
  std::string known;
  for (const char* k : kPerExecutable) known += (known.empty() ? "" : ", ") + std::string(k);
  throw Error("[compile] '" + name + "' is not a switch CompileOptions::switches can set (docs/switches.md): " + known);
}

}  // namespace tg::detail
