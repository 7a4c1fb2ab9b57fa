// How long NVRTC takes over a set of generated kernels, on 1..N threads, through the same
// nvrtc_compile the runtime uses (options, precompiled header). The sources come from
// `bench_fusion_traffic --dump DIR` (no GPU needed) or TGRAPH_DUMP_KERNELS=DIR on a run.
// Usage: bench_nvrtc_parallel DIR [--arch 90] [--threads 1,4,16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/nvrtc_compiler.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_nvrtc_parallel DIR [--arch 90] [--threads 1,4,16]\n");
    return 2;
  }
  int arch = 90;
  std::vector<int> threads = {1, 4, 16};
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--arch") arch = std::atoi(v.c_str());
    if (k == "--threads") {
      threads.clear();
      std::stringstream s(v);
      for (std::string t; std::getline(s, t, ',');) threads.push_back(std::atoi(t.c_str()));
    }
  }
  std::vector<std::string> sources;
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() != ".cu") continue;
    std::ifstream f(e.path());
    std::stringstream s;
    s << f.rdbuf();
    sources.push_back(s.str());
  }
  std::printf("%zu kernel sources, sm_%d\n", sources.size(), arch);
  tg::detail::nvrtc_compile(sources.empty() ? "" : sources[0], arch / 10, arch % 10);  // the header, once
  for (int n : threads) {
    std::atomic<size_t> next{0};
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < n; ++i)
      pool.emplace_back([&] {
        for (size_t k; (k = next++) < sources.size();) tg::detail::nvrtc_compile(sources[k], arch / 10, arch % 10);
      });
    for (std::thread& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%2d threads: %.2f s (%.1f ms a kernel)\n", n, s, 1e3 * s / std::max<size_t>(1, sources.size()));
  }
}
