// One CPU training step through a for_loop: h = tanh(h @ w) for T trips on a [16, 256] state,
// the gradient of sum(h^2) with respect to w. The backward pass reads a tape of every
// iteration's state that the forward loop writes one row at a time; this measures how the step
// grows with T (linear once the tape is updated in place, not copied each iteration).
// usage: bench_cpu_loop_tape [T ...]
#include <tgraph/tgraph.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace tg;

namespace {

void step(int T) {
  Graph g;
  Tensor h0 = g.placeholder({16, 256}, DType::f32), n = g.placeholder({}, DType::i32);
  Tensor w = g.variable(TensorData::uniform({256, 256}, -0.05, 0.05, DType::f32, 1), "w");
  auto r = g.for_loop(n, {h0}, [&](Graph& b, Tensor, std::vector<Tensor> s) {
    return std::vector{b.tanh(b.matmul(s[0], w))};
  });
  Tensor loss = g.reduce_sum(g.square(r[0]));
  auto gr = g.gradients(loss, {w});
  Executable e = g.compile({{h0, h0.type()}, {n, n.type()}}, {loss, gr[w]});
  std::vector<TensorData> in{TensorData::uniform({16, 256}, -1, 1, DType::f32, 2),
                             TensorData::scalar(T, DType::i32)};
  e.run(in);  // warm-up
  std::vector<double> ms;
  for (int k = 0; k < 5; ++k) {
    auto t0 = std::chrono::steady_clock::now();
    e.run(in);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(ms.begin(), ms.begin() + 2, ms.end());
  std::printf("T=%d: %.1f ms per training step, median of 5 (state 16 KB, tape %.1f MB)\n", T, ms[2],
              T * 16.0 / 1024);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2)
    for (int T : {250, 500, 1000, 2000}) step(T);
  for (int i = 1; i < argc; ++i) step(std::atoi(argv[i]));
  return 0;
}
