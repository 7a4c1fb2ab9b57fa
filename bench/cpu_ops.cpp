// CPU figures through tgraph's public API (compile for Device::cpu(), Executable::run):
//   (a) per-op overhead: a chain of 1,000 tiny elementwise ops (alternating add / mul on [4] f32)
//   (b) matmul throughput at ResNet-50-like GEMM shapes
//   (c) conv2d throughput at ResNet-50 shapes (batch 8, NHWC / HWIO and NCHW / OIHW)
//   (d) one training step (forward + backward) of a small CNN on 28x28x1, batch 128:
//       conv3x3(1->32)+BN+ReLU, conv3x3(32->64, stride 2)+BN+ReLU, global avg pool,
//       linear 64->10, softmax cross-entropy; gradients of every weight from Graph::gradients
// Each figure: warm-up runs, then the median of many timed runs. bench/cpu_ops_torch.py
// measures the same with PyTorch. Usage: bench_cpu_ops [runs_scale=1] [cnn: only (d)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tgraph/tgraph.h"

using namespace tg;

namespace {

// Median and minimum of timed runs after warm-up. On a shared machine the median shows the
// contention too; the minimum is the run that had the cores to itself.
struct Timing {
  double median, min;
};
Timing time_runs(const std::function<void()>& f, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front()};
}

const CompileOptions kCpu{.device = Device::cpu()};

int count_of(const std::string& text, const std::string& word) {
  int n = 0;
  for (size_t p = text.find(word); p != std::string::npos; p = text.find(word, p + 1)) ++n;
  return n;
}

void chain(int scale) {
  const int kOps = 1000;
  Graph g;
  Tensor x = g.placeholder({4}, f32, "x"), c = g.placeholder({4}, f32, "c");
  Tensor h = x;
  for (int i = 0; i < kOps; ++i) h = i % 2 ? g.mul(h, c) : g.add(h, c);
  Executable exe = g.compile({{x, x.type()}, {c, c.type()}}, {h}, {}, kCpu);
  std::string text = exe.str();
  int kept = count_of(text, " add(") + count_of(text, " mul(");
  std::vector<TensorData> in{TensorData::uniform({4}, -1, 1, f32, 1), TensorData::full({4}, 1.0001)};
  Timing t = time_runs([&] { exe.run(in); }, 20, 200 * scale);
  std::printf("chain  1000 x add/mul [4] f32 (%d ops in the compiled graph): median %.1f us/run = %.3f us/op"
              " (min %.3f us/op)\n", kept, t.median * 1e6, t.median * 1e6 / kOps, t.min * 1e6 / kOps);
}

void matmul(int64_t m, int64_t k, int64_t n, int scale) {
  Graph g;
  Tensor a = g.placeholder({m, k}, f32, "a"), b = g.placeholder({k, n}, f32, "b");
  Executable exe = g.compile({{a, a.type()}, {b, b.type()}}, {g.matmul(a, b)}, {}, kCpu);
  std::vector<TensorData> in{TensorData::uniform({m, k}, -1, 1, f32, 2), TensorData::uniform({k, n}, -1, 1, f32, 3)};
  Timing t = time_runs([&] { exe.run(in); }, 3, 20 * scale);
  double flop = 2.0 * m * k * n;
  std::printf("matmul [%ld,%ld]x[%ld,%ld]: median %.3f ms = %.1f GFLOP/s (min %.3f ms = %.1f GFLOP/s)\n",
              long(m), long(k), long(k), long(n), t.median * 1e3, flop / t.median * 1e-9, t.min * 1e3,
              flop / t.min * 1e-9);
}

void conv(bool nhwc, int64_t n, int64_t hw, int64_t ci, int64_t co, int64_t kk, int scale) {
  Graph g;
  ConvDesc d;
  d.padding = PaddingStyle::same;
  d.data_layout = nhwc ? Layout::nhwc : Layout::nchw;
  d.weights_layout = nhwc ? Layout::hwio : Layout::oihw;
  Shape xs = nhwc ? Shape{n, hw, hw, ci} : Shape{n, ci, hw, hw};
  Shape ws = nhwc ? Shape{kk, kk, ci, co} : Shape{co, ci, kk, kk};
  Tensor x = g.placeholder(xs, f32, "x"), w = g.placeholder(ws, f32, "w");
  Executable exe = g.compile({{x, x.type()}, {w, w.type()}}, {g.conv2d(x, w, d)}, {}, kCpu);
  std::vector<TensorData> in{TensorData::uniform(xs, -1, 1, f32, 4), TensorData::uniform(ws, -1, 1, f32, 5)};
  Timing t = time_runs([&] { exe.run(in); }, 3, 15 * scale);
  double flop = 2.0 * n * hw * hw * co * ci * kk * kk;
  std::printf("conv2d %s batch %ld %ldx%ldx%ld -> %ldx%ld x%ld same: median %.3f ms = %.1f GFLOP/s"
              " (min %.3f ms = %.1f GFLOP/s)\n",
              nhwc ? "NHWC/HWIO" : "NCHW/OIHW", long(n), long(hw), long(hw), long(ci), long(kk), long(kk),
              long(co), t.median * 1e3, flop / t.median * 1e-9, t.min * 1e3, flop / t.min * 1e-9);
}

// (d): NHWC / HWIO, same padding; the targets are the loss and the 8 weight gradients.
void cnn_step(int scale) {
  const int64_t B = 128;
  Graph g;
  Tensor x = g.placeholder({B, 28, 28, 1}, f32, "x"), labels = g.placeholder({B, 10}, f32, "labels");
  Tensor w1 = g.placeholder({3, 3, 1, 32}, f32, "w1"), g1 = g.placeholder({32}, f32, "g1"),
         b1 = g.placeholder({32}, f32, "b1");
  Tensor w2 = g.placeholder({3, 3, 32, 64}, f32, "w2"), g2 = g.placeholder({64}, f32, "g2"),
         b2 = g.placeholder({64}, f32, "b2");
  Tensor wf = g.placeholder({64, 10}, f32, "wf"), bf = g.placeholder({10}, f32, "bf");
  ConvDesc c1;
  c1.padding = PaddingStyle::same;
  ConvDesc c2 = c1;
  c2.stride = {2, 2};
  Tensor h = g.relu(g.batch_norm_training(g.conv2d(x, w1, c1), g1, b1)[0]);
  h = g.relu(g.batch_norm_training(g.conv2d(h, w2, c2), g2, b2)[0]);
  h = g.reshape(g.global_avg_pool2d(h), {B, 64});
  Tensor logits = g.add(g.matmul(h, wf), bf);
  Tensor loss = g.softmax_cross_entropy(logits, labels);
  std::vector<Tensor> ws{w1, g1, b1, w2, g2, b2, wf, bf};
  auto grads = g.gradients(loss, ws);
  std::vector<Tensor> targets{loss};
  for (Tensor w : ws) targets.push_back(grads.at(w));
  std::vector<Tensor> feeds{x, labels, w1, g1, b1, w2, g2, b2, wf, bf};
  std::vector<std::pair<Tensor, TensorType>> ft;
  for (Tensor f : feeds) ft.push_back({f, f.type()});
  Executable exe = g.compile(ft, targets, {}, kCpu);
  TensorData lab = TensorData::full({B, 10}, 0.0);
  for (int64_t i = 0; i < B; ++i) lab.set(i * 10 + (i * 7) % 10, 1.0);
  std::vector<TensorData> in{TensorData::uniform({B, 28, 28, 1}, -1, 1, f32, 11), lab,
                             TensorData::uniform({3, 3, 1, 32}, -0.5, 0.5, f32, 12), TensorData::full({32}, 1.0),
                             TensorData::full({32}, 0.0), TensorData::uniform({3, 3, 32, 64}, -0.1, 0.1, f32, 13),
                             TensorData::full({64}, 1.0), TensorData::full({64}, 0.0),
                             TensorData::uniform({64, 10}, -0.3, 0.3, f32, 14), TensorData::full({10}, 0.0)};
  std::vector<TensorData> r = exe.run(in);
  std::printf("cnn step: loss %.6f\n", r[0].at(0));
  Timing t = time_runs([&] { exe.run(in); }, 2, 10 * scale);
  std::printf("cnn train step (batch %ld, 28x28x1, conv-bn-relu x2, gap, linear, xent; fwd+bwd): median %.2f ms"
              " (min %.2f ms)\n", long(B), t.median * 1e3, t.min * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  int scale = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  if (argc > 2 && std::string(argv[2]) == "cnn") {
    cnn_step(scale);
    return 0;
  }
  chain(scale);
  matmul(256, 2048, 1000, scale);  // ResNet-50 classifier at batch 256
  matmul(784, 1152, 128, scale);   // im2col GEMM of the 3x3x128 conv at 28x28, batch 1
  matmul(3136, 64, 256, scale);    // 1x1 conv 64 -> 256 at 56x56, batch 1
  for (bool nhwc : {true, false}) {
    conv(nhwc, 8, 56, 64, 64, 3, scale);
    conv(nhwc, 8, 28, 128, 128, 3, scale);
    conv(nhwc, 8, 56, 256, 64, 1, scale);
  }
  cnn_step(scale);
  return 0;
}
