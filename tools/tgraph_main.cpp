// The tgraph command line: devices and the op list, and (with ONNX) info, run, bench,
// compile, dot and conformance on ONNX models.
#include <cstdio>
#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "ops/op_def.h"
#include "tgraph/tgraph.h"
#ifdef TGRAPH_HAVE_ONNX
#include "commands.h"
#endif

namespace {

int usage(FILE* f) {
  std::fprintf(f,
               "usage: tgraph <command> [options]\n"
               "commands:\n"
               "  devices     list the devices tgraph can run on\n"
               "  ops         list every op with its family and traits\n"
               "  version     print the version\n"
#ifdef TGRAPH_HAVE_ONNX
               "  info        inputs, outputs and op histogram of an ONNX model\n"
               "  run         run an ONNX model on .npy inputs, write .npy outputs\n"
               "  bench       median latency and throughput of an ONNX model\n"
               "  dot         Graphviz form of an imported ONNX model\n"
               "  compile     compile an ONNX model to a .tgx executable file\n"
               "  conformance run ONNX's backend node tests\n"
#endif
               "run 'tgraph <command> --help' for a command's options\n");
  return f == stderr ? 2 : 0;
}

int devices() {
  std::printf("%s\n", tg::Device::cpu().describe().c_str());
  for (int i = 0; i < tg::Device::cuda_device_count(); ++i)
    std::printf("%s\n", tg::Device::cuda(i).describe().c_str());
  std::printf("best: %s\n", tg::Device::best().str().c_str());
  return 0;
}

int ops() {
  using namespace tg::detail;
  const struct {
    Trait t;
    const char* name;
  } traits[] = {{kElementwise, "elementwise"}, {kReduction, "reduction"}, {kShapeOnly, "shape-only"},
                {kStateful, "stateful"},       {kSideEffects, "side-effects"}, {kHasRegions, "regions"},
                {kSource, "source"},           {kCommutative, "commutative"}};
  for (int i = 0; i < kNumOps; ++i) {
    const OpDef& d = op_def(static_cast<OpKind>(i));
    std::string tr;
    for (const auto& t : traits)
      if (d.has(t.t)) tr += (tr.empty() ? "" : ",") + std::string(t.name);
    std::printf("%-32s %s\n", d.name, tr.c_str());
  }
  std::printf("%d ops\n", kNumOps);
  return 0;
}

}  // namespace

// Ctrl-C: the first stops the run in progress between its steps (its variables and files stay
// as they were) and the command exits 130 with one line; a second ends the process at once.
static volatile std::sig_atomic_t interrupted = 0;
static void on_sigint(int) {
  if (interrupted) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  interrupted = 1;
  tg::interrupt_runs();
}

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  std::signal(SIGINT, on_sigint);
  std::string cmd = argv[1];
  bool help = argc > 2 && (std::strcmp(argv[2], "--help") == 0 || std::strcmp(argv[2], "-h") == 0);
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
#ifdef TGRAPH_HAVE_ONNX
    if (help && tg::tools::command_help(cmd)) {
      std::fputs(tg::tools::command_help(cmd), stdout);
      return 0;
    }
#endif
    if (help) {
      std::printf("usage: tgraph %s\n", cmd.c_str());
      return 0;
    }
    if (cmd == "devices") return devices();
    if (cmd == "ops") return ops();
    if (cmd == "version") {
      std::printf("tgraph 0.1.0\n");
      return 0;
    }
#ifdef TGRAPH_HAVE_ONNX
    std::vector<std::string> args(argv + 2, argv + argc);
    if (cmd == "__conformance-one" && args.size() == 2) return tg::tools::conformance_one(args[0], args[1]);
    if (cmd == "info") return tg::tools::cmd_info(args);
    if (cmd == "run") return tg::tools::cmd_run(args);
    if (cmd == "dot") return tg::tools::cmd_dot(args);
    if (cmd == "bench") return tg::tools::cmd_bench(args);
    if (cmd == "compile") return tg::tools::cmd_compile(args);
    if (cmd == "conformance") return tg::tools::cmd_conformance(args);
#endif
    std::fprintf(stderr, "tgraph: unknown command '%s' (try 'tgraph --help')\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tgraph %s: %s\n", cmd.c_str(), e.what());
    return interrupted ? 130 : 1;
  }
}
