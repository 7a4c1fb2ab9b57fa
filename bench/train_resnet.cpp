// One ResNet training step (forward, backward, SGD with momentum) through the C++ API on the
// GPU: nn::resnet50 (NHWC), softmax cross-entropy, optim::sgd, run_device on inputs already on
// the device. Prints one JSON line that bench/train_models.py puts beside PyTorch's figures.
//
// Usage: bench_train_resnet [--batch 256] [--precision bf16|tf32|f32] [--iters 20]
//                           [--warmup 3] [--size 224] [--curve N] [--model resnet50|resnet18]
//                           [--save PATH | --load PATH] [--distributed]
//
// Figures: first step = compile() + the first run (kernel generation, library heuristics,
// capture); step = median span on the GPU of steps queued back to back on a stream (CUDA events
// between them, as a training loop runs); synced = median wall time of a synchronised
// run_device call after warm-up (the captured CUDA graph replayed, variables updated in place,
// the host's work before the GPU starts included); device = median of CUDA events
// around replays of the captured step; peak = the most tgraph held at once (tg::device_memory:
// pool allocations plus captured graphs' memory). --curve N prints the loss of the first N steps on fixed
// data (the figure the issue compares with eager's curve). --save PATH writes the trained
// executable (.tgx, with the generated kernels its runs used) at the end; --load PATH takes it
// instead of building and compiling the graph, so "compile" is then Executable::load (run in a
// fresh process with an empty TGRAPH_CACHE_DIR: the first step of an executable that loads ready).
// --distributed: one rank of a data-parallel job (`python -m tgraph.distributed --nproc N`,
// torchrun): its own GPU (LOCAL_RANK), --batch images per rank (as DDP's per-process batch), the
// gradients averaged across the ranks in buckets inside the step (NCCL on GPUs), the weights
// broadcast from rank 0; rank 0 prints the line, images_per_s counting every rank's images.
// bench/scaling.py puts 1 and N GPUs beside PyTorch DDP's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <tgraph/distributed.h>
#include <tgraph/nn.h>
#include <tgraph/optim.h>
#include <tgraph/tgraph.h>

#include "runtime/executable_impl.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Args {
  int64_t batch = 256, size = 224;
  std::string precision = "bf16", model = "resnet50";
  int iters = 20, warmup = 3, curve = 0;
  std::string save, load;
  bool distributed = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc;) {
    const std::string k = argv[i++];
    if (k == "--distributed") {  // the one flag without a value
      a.distributed = true;
      continue;
    }
    if (i >= argc) {
      std::fprintf(stderr, "bench_train_resnet: %s needs a value\n", k.c_str());
      std::exit(2);
    }
    const std::string v = argv[i++];
    if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--size") a.size = std::stoll(v);
    else if (k == "--precision") a.precision = v;
    else if (k == "--model") a.model = v;
    else if (k == "--iters") a.iters = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--curve") a.curve = std::stoi(v);
    else if (k == "--save") a.save = v;
    else if (k == "--load") a.load = v;
    else {
      std::fprintf(stderr, "bench_train_resnet: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

tg::Precision precision_of(const std::string& p) {
  if (p == "bf16") return tg::Precision::bf16;
  if (p == "f16") return tg::Precision::f16;
  if (p == "tf32") return tg::Precision::tf32;
  if (p == "f32") return tg::Precision::f32;
  std::fprintf(stderr, "bench_train_resnet: unknown precision %s\n", p.c_str());
  std::exit(2);
}

// The most tgraph held at once: its pool's allocations plus its captured graphs' memory (the
// pool's own high-water mark alone misses the graph's memory, where a captured step's
// activations live).
size_t peak_bytes(const tg::Device& d) { return tg::device_memory(d).peak; }

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.distributed) tg::distributed::init();
  const int world = tg::distributed::world_size();
  const tg::Device dev = tg::Device::cuda(a.distributed ? tg::distributed::local_rank() % std::max(1, tg::Device::cuda_device_count()) : 0);
  cudaSetDevice(dev.index);  // the benchmark's own stream and events live there
  const auto t_start = Clock::now();
  auto t_compile = Clock::now();
  tg::Executable exe;
  if (!a.load.empty()) {
    exe = tg::Executable::load(a.load);
  } else {
    tg::Graph g;
    tg::Tensor x = g.placeholder({a.batch, a.size, a.size, 3}, tg::f32, "images");
    tg::Tensor labels = g.placeholder({a.batch, 1000}, tg::f32, "labels");
    tg::nn::ResNetConfig cfg;
    auto net = a.model == "resnet18" ? tg::nn::resnet18(g, cfg) : tg::nn::resnet50(g, cfg);
    net->train();  // batch statistics, and running statistics updated as PyTorch's train() does
    tg::Tensor loss = g.softmax_cross_entropy(net->forward(g, x), labels);
    std::vector<tg::Tensor> params = net->parameters();
    tg::optim::GradMap grads = g.gradients(loss, params);
    if (world > 1) {  // averaged across the ranks, in buckets, inside the step
      std::vector<tg::Tensor> gs;
      for (const tg::Tensor& p : params) gs.push_back(grads.count(p) ? grads.at(p) : tg::Tensor());
      gs = tg::distributed::average_gradients(g, gs);
      for (size_t i = 0; i < params.size(); ++i)
        if (gs[i].valid()) grads[params[i]] = gs[i];
    }
    std::vector<tg::Operation> targets = net->updates();
    targets.push_back(tg::optim::sgd(g, params, grads, g.scalar(0.01), {.momentum = 0.9}));
    t_compile = Clock::now();
    exe = g.compile({{x, x.type()}, {labels, labels.type()}}, {loss}, targets,
                    {.device = dev, .precision = precision_of(a.precision)});
  }
  if (world > 1) tg::distributed::broadcast_variables(exe);
  const double compile_s = seconds_since(t_compile);

  // Random images, one-hot labels of random classes; uploaded once.
  tg::TensorData xh = tg::TensorData::randn({a.batch, a.size, a.size, 3}, tg::f32, 1);
  tg::TensorData yh = tg::TensorData::zeros({a.batch, 1000}, tg::f32);
  auto* yp = static_cast<float*>(yh.data());
  for (int64_t i = 0; i < a.batch; ++i) yp[i * 1000 + (i * 7919) % 1000] = 1.0f;
  std::vector<tg::DeviceTensor> in{tg::DeviceTensor::from_host(xh, dev), tg::DeviceTensor::from_host(yh, dev)};

  auto loss_of = [](const std::vector<tg::DeviceTensor>& out) {
    return static_cast<const float*>(out[0].to_host().data())[0];
  };
  const auto t_first = Clock::now();
  std::vector<float> curve{loss_of(exe.run_device(in))};
  const double first_run_s = seconds_since(t_first);
  const double first_step_s = compile_s + first_run_s;  // not the benchmark's own data generation
  const size_t peak_first = peak_bytes(dev);
  for (int i = 1; i < a.curve; ++i) curve.push_back(loss_of(exe.run_device(in)));

  for (int i = 0; i < a.warmup; ++i) exe.run_device(in);
  std::vector<double> wall;
  for (int i = 0; i < a.iters; ++i) {
    const auto t = Clock::now();
    exe.run_device(in);
    wall.push_back(seconds_since(t) * 1e3);
  }
  // As a training loop runs: steps queued back to back on one stream (run_device(in, stream)
  // does not block the host), CUDA events between them; a step is its span on the GPU.
  std::vector<double> steady;
  {
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    std::vector<cudaEvent_t> ev(static_cast<size_t>(a.iters) + 1);
    for (auto& e : ev) cudaEventCreate(&e);
    for (int i = 0; i < a.warmup; ++i) exe.run_device(in, stream);
    cudaEventRecord(ev[0], stream);
    for (int i = 0; i < a.iters; ++i) {
      exe.run_device(in, stream);
      cudaEventRecord(ev[static_cast<size_t>(i) + 1], stream);
    }
    cudaEventSynchronize(ev.back());
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
      steady.push_back(ms);
    }
    for (auto& e : ev) cudaEventDestroy(e);
    cudaStreamDestroy(stream);
  }
  // Where the peak was set: the first step, the capture at the second, or the steady steps.
  const size_t peak_steps = peak_bytes(dev), in_use = tg::device_memory(dev).in_use;
  std::vector<double> dev_ms;
  if (world == 1) try {  // replays of one rank alone would wait for the others' collectives
      dev_ms = tg::detail::cuda_time_replays(exe.impl(), {xh, yh}, 2, a.iters);
    } catch (const tg::Error& e) {
      std::fprintf(stderr, "bench_train_resnet: no captured replay: %s\n", e.what());
    }
  const double step_ms = median(steady);
  if (world > 1) {
    tg::distributed::barrier();
    if (tg::distributed::rank() != 0) {
      if (!a.save.empty()) exe.save(a.save + "." + std::to_string(tg::distributed::rank()));
      return 0;
    }
  }
  std::printf("{\"path\": \"tgraph C++ API\", \"model\": \"%s\", \"batch\": %lld, \"ranks\": %d, \"precision\": \"%s\", "
              "\"step_ms\": %.3f, \"synced_ms\": %.3f, \"device_ms\": %.3f, \"images_per_s\": %.1f, \"first_step_s\": %.2f, "
              "\"compile_s\": %.2f, \"first_run_s\": %.2f, \"build_s\": %.2f, \"peak_gib\": %.2f, \"loss\": [",
              a.model.c_str(), static_cast<long long>(a.batch), world, a.precision.c_str(), step_ms, median(wall),
              median(dev_ms), static_cast<double>(a.batch) * world / step_ms * 1e3, first_step_s, compile_s, first_run_s,
              std::chrono::duration<double>(t_compile - t_start).count(), peak_steps / 1073741824.0);
  for (size_t i = 0; i < curve.size(); ++i) std::printf("%s%.5f", i ? ", " : "", curve[i]);
  const tg::RunStats rs = exe.run_stats();
  std::printf("], \"kernels_compiled\": %d, \"kernels_from_file\": %d, \"graph_gib\": %.2f, "
              "\"graph_live_peak_gib\": %.2f, \"peak_first_step_gib\": %.2f, \"in_use_gib\": %.2f, "
              "\"peak_with_device_timing_gib\": %.2f}\n",
              rs.kernels_compiled, rs.kernels_from_file, rs.graph_bytes / 1073741824.0,
              rs.graph_live_peak / 1073741824.0, peak_first / 1073741824.0, in_use / 1073741824.0,
              peak_bytes(dev) / 1073741824.0);
  if (!a.save.empty()) exe.save(a.save);
  return 0;
}
