// Graph-building cost: time and memory to build a 100,000-node graph.
// Usage: ir_build [nodes]   (prints ns per node and bytes per node from the process RSS)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <tgraph/tgraph.h>

static long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string k;
  while (f >> k)
    if (k == "VmRSS:") {
      long v;
      f >> v;
      return v;
    }
  return -1;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  long before = rss_kib();
  auto t0 = std::chrono::steady_clock::now();
  tg::Graph g;
  tg::Tensor x = g.placeholder({-1, 256}, tg::f32, "x");
  tg::Tensor y = x;
  for (int i = 0; i < n; ++i) y = (i % 2) ? g.add(y, x) : g.relu(y);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long after = rss_kib();
  std::printf("nodes=%lld build=%.1f ms (%.0f ns/node) memory=%.0f bytes/node (RSS delta)\n",
              static_cast<long long>(g.num_nodes()), s * 1e3, s * 1e9 / n,
              (after - before) * 1024.0 / n);
  return 0;
}
