// The smallest complete tgraph program: build a graph, compile it, run it twice with
// batches of different sizes, update a variable, and print what came out.
#include <cstdio>
#include <cstring>

#include <tgraph/tgraph.h>

int main(int argc, char** argv) {
  bool quiet = argc > 1 && std::strcmp(argv[1], "--quiet") == 0;
  tg::Device dev = tg::Device::best();
  if (!quiet) {
    std::printf("tgraph demo on %s\n", dev.describe().c_str());
    if (tg::Device::cuda_device_count() > 0 && dev.kind == tg::Device::Kind::cpu)
      std::printf("(%d CUDA device(s) present but TGRAPH_DEVICE=cpu chose the CPU: %s)\n",
                  tg::Device::cuda_device_count(), tg::Device::cuda(0).describe().c_str());
  }

  tg::Graph g;
  tg::Tensor x = g.placeholder({-1, 4}, tg::f32, "x");  // batch size known only at run time
  tg::Tensor w = g.variable(tg::TensorData::randn({4, 3}, tg::f32, /*seed=*/0), "w");
  tg::Tensor b = g.variable(tg::TensorData::full({3}, 0.1), "b");
  tg::Tensor h = g.relu(g.add(g.matmul(x, w), b));
  tg::Tensor y = g.reduce_mean(g.square(h), {1});
  // Three steps of "w <- 0.9 w" as a loop, then store it: a side effect the run must keep.
  tg::Tensor w3 = g.for_loop(g.scalar(3, tg::i32), {w}, [](tg::Graph& body, tg::Tensor, std::vector<tg::Tensor> a) {
    return std::vector{body.mul(a[0], body.scalar(0.9))};
  })[0];
  tg::Operation shrink = g.assign(w, w3);

  tg::CompileOptions opt{.device = dev, .disable_type_inference = true};
  tg::Executable exe = g.compile({{x, tg::TensorType({-1, 4}, tg::f32)}}, {y}, {shrink}, opt);
  if (!quiet) std::printf("\ncompiled graph:\n%s\n", exe.str().c_str());

  for (int64_t batch : {2, 5}) {
    tg::TensorData in = tg::TensorData::uniform({batch, 4}, -1.0, 1.0, tg::f32, static_cast<uint64_t>(batch));
    std::vector<tg::TensorData> out = exe.run({in});
    std::printf("batch %lld -> y = %s\n", static_cast<long long>(batch), out[0].str().c_str());
  }
  std::printf("w after two runs (0.9^6 of its start) = %s\n", exe.variable("w").str(4).c_str());
  return 0;
}
