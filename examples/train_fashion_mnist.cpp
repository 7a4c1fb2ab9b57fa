// The main job: train a small ResNet-style CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist), on the GPU when one is present, else on the CPU. Shows a progress
// bar, evaluates on the 10,000 test images each epoch, writes metrics.csv, a loss/accuracy
// plot (curves.png, via scripts/plot_curves.py and matplotlib) and a checkpoint.
//
// usage: train_fashion_mnist [--epochs N] [--batch N] [--lr X] [--device cpu|cuda]
//                            [--precision f32|tf32|bf16|f16]
//                            [--data DIR] [--out DIR] [--limit N] [--test-limit N] [--distributed]
//
// --distributed: one rank of a data-parallel job (docs/distributed.md), launched N times by
// `python -m tgraph.distributed --nproc N`, torchrun or mpirun: each rank takes batch / N of
// every step's samples (a distributed sampler), the gradients are averaged across the ranks in
// the step (bucketed all_reduces), rank 0's initial weights are broadcast, and rank 0 reports.
//
// --precision sets CompileOptions::precision of the training step and the evaluation:
// bf16 / f16 compute convolutions and matmuls in half precision (fp32 accumulation, weights,
// norms, loss and optimizer in f32); f16 adds dynamic loss scaling. tf32 lets the GPU use
// TF32 tensor cores (on the CPU it is f32).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <tgraph/checkpoint.h>
#include <tgraph/nn.h>
#include <tgraph/optim.h>
#include <tgraph/tgraph.h>

namespace {

struct Options {
  int epochs = 4;
  int64_t batch = 128;  // the global batch: split across the ranks with --distributed
  bool distributed = false;
  double lr = 2e-3;
  std::string device = "best";
  std::string precision = "f32";
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "out/fashion_mnist";
  int64_t limit = 60000, test_limit = 10000;
};

// Reads a gzipped IDX file (gzip does the decompression).
std::vector<uint8_t> read_idx(const std::string& path, std::vector<int>& dims) {
  std::string cmd = "gzip -dc '" + path + "'";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) throw tg::Error("[fashion_mnist] cannot run gzip on " + path);
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  if (pclose(f) != 0 || bytes.size() < 8) throw tg::Error("[fashion_mnist] cannot read " + path);
  int ndim = bytes[3];
  size_t off = 4;
  dims.clear();
  for (int i = 0; i < ndim; ++i, off += 4)
    dims.push_back(bytes[off] << 24 | bytes[off + 1] << 16 | bytes[off + 2] << 8 | bytes[off + 3]);
  return std::vector<uint8_t>(bytes.begin() + static_cast<long>(off), bytes.end());
}

struct Dataset {
  std::vector<float> images;  // N x 28 x 28, normalised
  std::vector<int> labels;
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

Dataset load(const std::string& dir, const std::string& prefix, int64_t limit) {
  std::vector<int> di, dl;
  std::vector<uint8_t> img = read_idx(dir + "/" + prefix + "-images-idx3-ubyte.gz", di);
  std::vector<uint8_t> lab = read_idx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", dl);
  int64_t n = std::min<int64_t>(limit, dl.at(0));
  Dataset d;
  d.images.resize(static_cast<size_t>(n) * 784);
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = (img[i] / 255.0f - 0.2860f) / 0.3530f;
  d.labels.assign(lab.begin(), lab.begin() + n);
  return d;
}

// The batch of `idx[from, from + b)`: images [b,28,28,1] and one-hot labels [b,10].
void fill_batch(const Dataset& d, const std::vector<int64_t>& idx, int64_t from, int64_t b, tg::TensorData& x,
                tg::TensorData& y) {
  float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  std::fill(yp, yp + b * 10, 0.0f);
  for (int64_t i = 0; i < b; ++i) {
    int64_t k = idx[static_cast<size_t>(from + i)];
    std::copy_n(d.images.data() + k * 784, 784, xp + i * 784);
    yp[i * 10 + d.labels[static_cast<size_t>(k)]] = 1.0f;
  }
}

// A small ResNet: stem 32, residual block, stride-2 conv to 64, residual block, pool, fc.
struct Net {
  tg::nn::Sequential layers{"net"};
  tg::Tensor forward(tg::Graph& g, tg::Tensor x, bool training) {
    layers.train(training);
    size_t k = 0;
    auto next = [&]() -> tg::nn::Module& { return *layers.children()[k++]; };
    auto cbr = [&](tg::Tensor t, bool relu) {
      tg::Tensor y = next().forward(g, t);
      y = next().forward(g, y);
      return relu ? g.relu(y) : y;
    };
    x = cbr(x, true);
    x = g.relu(g.add(x, cbr(cbr(x, true), false)));
    x = cbr(x, true);
    x = g.relu(g.add(x, cbr(cbr(x, true), false)));
    x = g.reduce_mean(x, {1, 2});
    return next().forward(g, x);
  }
  void build(tg::Graph& g) {
    auto add_cb = [&](const std::string& name, int64_t cin, int64_t cout, int64_t stride, uint64_t seed) {
      layers.add(std::make_shared<tg::nn::Conv2d>(g, "net." + name + ".conv", cin, cout, 3,
                                                  tg::nn::Conv2d::Options{.stride = stride, .bias = false, .seed = seed}));
      layers.add(std::make_shared<tg::nn::BatchNorm2d>(g, "net." + name + ".bn", cout));
    };
    add_cb("stem", 1, 32, 1, 1);
    add_cb("b1a", 32, 32, 1, 2);
    add_cb("b1b", 32, 32, 1, 3);
    add_cb("down", 32, 64, 2, 4);
    add_cb("b2a", 64, 64, 1, 5);
    add_cb("b2b", 64, 64, 1, 6);
    layers.add(std::make_shared<tg::nn::Linear>(g, "net.fc", 64, 10));
  }
};

void progress(int epoch, int64_t step, int64_t steps, double loss, double ips) {
  const int width = 30;
  int filled = static_cast<int>(width * (step + 1) / steps);
  std::printf("\repoch %d [%s%s] %lld/%lld loss %.4f  %.0f img/s  ", epoch, std::string(filled, '=').c_str(),
              std::string(width - filled, ' ').c_str(), static_cast<long long>(step + 1), static_cast<long long>(steps),
              loss, ips);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--distributed") {
      o.distributed = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "train_fashion_mnist: %s needs a value\n", k.c_str());
      return 2;
    }
    std::string v = argv[++i];
    if (k == "--epochs") o.epochs = std::stoi(v);
    else if (k == "--batch") o.batch = std::stoll(v);
    else if (k == "--lr") o.lr = std::stod(v);
    else if (k == "--device") o.device = v;
    else if (k == "--precision") o.precision = v;
    else if (k == "--data") o.data = v;
    else if (k == "--out") o.out = v;
    else if (k == "--limit") o.limit = std::stoll(v);
    else if (k == "--test-limit") o.test_limit = std::stoll(v);
    else {
      std::fprintf(stderr, "train_fashion_mnist: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  tg::Precision precision;
  if (o.precision == "f32") precision = tg::Precision::f32;
  else if (o.precision == "tf32") precision = tg::Precision::tf32;
  else if (o.precision == "bf16") precision = tg::Precision::bf16;
  else if (o.precision == "f16") precision = tg::Precision::f16;
  else {
    std::fprintf(stderr, "train_fashion_mnist: unknown precision %s (f32, tf32, bf16 or f16)\n", o.precision.c_str());
    return 2;
  }
  try {
    if (o.distributed) tg::distributed::init();
    const int world = tg::distributed::world_size(), rank = tg::distributed::rank();
    const bool lead = rank == 0;  // the rank that reports and saves
    if (o.batch % world != 0)
      throw tg::Error("--batch " + std::to_string(o.batch) + " does not split over " + std::to_string(world) + " ranks");
    const int gpu = tg::distributed::local_rank() % std::max(1, tg::Device::cuda_device_count());
    tg::Device dev = o.device == "cpu"    ? tg::Device::cpu()
                     : o.device == "cuda" ? tg::Device::cuda(gpu)
                     : tg::Device::cuda_device_count() > 0 ? tg::Device::cuda(gpu) : tg::Device::cpu();
    if (lead) std::filesystem::create_directories(o.out);
    Dataset train = load(o.data, "train", o.limit), test = load(o.data, "t10k", o.test_limit);
    if (world > 1 && lead) std::printf("data-parallel: %d ranks, %lld images per rank per step\n", world, static_cast<long long>(o.batch / world));
    if (lead) std::printf("Fashion-MNIST: %lld training, %lld test images; device %s, precision %s\n",
                static_cast<long long>(train.size()), static_cast<long long>(test.size()), dev.describe().c_str(),
                o.precision.c_str());

    tg::Graph g;
    Net net;
    net.build(g);
    const int64_t B = o.batch / world, EB = 500;  // this rank's share of each step
    tg::Tensor x = g.placeholder({B, 28, 28, 1}, tg::f32, "images");
    tg::Tensor y = g.placeholder({B, 10}, tg::f32, "labels");
    tg::Tensor lr = g.placeholder({}, tg::f32, "lr");
    tg::Tensor logits = net.forward(g, x, /*training=*/true);
    tg::Tensor loss = g.softmax_cross_entropy(logits, y);
    std::vector<tg::Tensor> params = net.layers.parameters();
    std::vector<tg::Operation> targets_ops = net.layers.updates();
    tg::optim::AdamOptions adam{.weight_decay = 1e-4};
    tg::optim::GradMap grads;
    if (precision == tg::Precision::f16) {
      // f16 gradients underflow without loss scaling: scale the loss, unscale the gradients,
      // skip the step (and halve the scale) when any gradient is not finite.
      tg::optim::ScaledGradients sg = tg::optim::scaled_gradients(g, loss, params);
      grads = sg.grads;
      adam.apply_if = sg.finite;
      targets_ops.push_back(sg.update);
    } else {
      grads = g.gradients(loss, params);
    }
    if (world > 1) {  // each gradient averaged over the ranks, in buckets, inside the step
      std::vector<tg::Tensor> gs;
      for (const tg::Tensor& p : params) gs.push_back(grads.count(p) ? grads.at(p) : tg::Tensor());
      gs = tg::distributed::average_gradients(g, gs);
      for (size_t i = 0; i < params.size(); ++i)
        if (gs[i].valid()) grads[params[i]] = gs[i];
    }
    targets_ops.push_back(tg::optim::adamw(g, params, grads, lr, adam));
    const tg::CompileOptions copt{.device = dev, .precision = precision};
    tg::Executable train_exe = g.compile({{x, x.type()}, {y, y.type()}, {lr, lr.type()}}, {loss}, targets_ops, copt);
    if (world > 1) tg::distributed::broadcast_variables(train_exe);

    tg::Tensor ex = g.placeholder({EB, 28, 28, 1}, tg::f32, "eval_images");
    tg::Tensor ey = g.placeholder({EB, 10}, tg::f32, "eval_labels");
    tg::Tensor elogits = net.forward(g, ex, /*training=*/false);
    tg::Tensor eloss = g.softmax_cross_entropy(elogits, ey, -1, tg::LossReduction::sum);
    tg::Executable eval_exe = g.compile({{ex, ex.type()}, {ey, ey.type()}}, {elogits, eloss}, {}, copt);

    std::ofstream csv;
    if (lead) csv.open(o.out + "/metrics.csv");
    csv << "epoch,step,train_loss,test_loss,test_accuracy\n";
    std::vector<int64_t> order(static_cast<size_t>(train.size()));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(42);
    const int64_t steps = (world > 1 ? static_cast<int64_t>(tg::distributed::shard(train.size()).size()) : train.size()) / B;
    tg::TensorData bx({B, 28, 28, 1}, tg::f32), by({B, 10}, tg::f32);
    int64_t global_step = 0;
    double accuracy = 0;
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
      if (world > 1) order = tg::distributed::shard(train.size(), 42, epoch);  // this rank's samples
      else std::shuffle(order.begin(), order.end(), rng);
      auto t0 = std::chrono::steady_clock::now();
      double loss_sum = 0;
      for (int64_t s = 0; s < steps; ++s, ++global_step) {
        fill_batch(train, order, s * B, B, bx, by);
        double rate = tg::optim::cosine_lr(global_step, steps * o.epochs, o.lr, steps / 4);
        double l = train_exe.run({bx, by, tg::TensorData::scalar(rate)})[0].at(0);
        loss_sum += l;
        if (lead && (s % 10 == 0 || s + 1 == steps)) {
          double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          progress(epoch, s, steps, loss_sum / static_cast<double>(s + 1), static_cast<double>((s + 1) * B * world) / secs);
          csv << epoch << "," << global_step << "," << l << ",,\n";
        }
      }
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // Evaluate on the test set.
      std::vector<int64_t> tidx(static_cast<size_t>(test.size()));
      std::iota(tidx.begin(), tidx.end(), 0);
      int64_t correct = 0, seen = 0;
      double test_loss = 0;
      tg::TensorData tx({EB, 28, 28, 1}, tg::f32), ty({EB, 10}, tg::f32);
      for (int64_t s = 0; s + EB <= test.size(); s += EB) {
        fill_batch(test, tidx, s, EB, tx, ty);
        auto r = eval_exe.run({tx, ty});
        test_loss += r[1].at(0);
        const float* lp = r[0].ptr<float>();
        for (int64_t i = 0; i < EB; ++i) {
          int64_t best = std::max_element(lp + i * 10, lp + i * 10 + 10) - (lp + i * 10);
          correct += best == test.labels[static_cast<size_t>(s + i)];
        }
        seen += EB;
      }
      accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
      if (!lead) continue;  // every rank evaluates (the same weights); rank 0 reports and saves
      std::printf("\nepoch %d: train loss %.4f, %.1f s (%.0f img/s); test loss %.4f, test accuracy %.2f%%\n", epoch,
                  loss_sum / static_cast<double>(steps), secs, static_cast<double>(steps * B * world) / secs,
                  seen ? test_loss / static_cast<double>(seen) : 0.0, 100 * accuracy);
      csv << epoch << "," << global_step << ",," << (seen ? test_loss / static_cast<double>(seen) : 0.0) << ","
          << accuracy << "\n";
      csv.flush();
      tg::save_checkpoint(train_exe, o.out + "/fashion_mnist.ckpt");
    }
    if (!lead) return 0;
    std::printf("final test accuracy %.2f%%; checkpoint %s/fashion_mnist.ckpt\n", 100 * accuracy, o.out.c_str());
    std::string plot = "python3 scripts/plot_curves.py '" + o.out + "/metrics.csv' '" + o.out + "/curves.png' 2>&1";
    if (std::filesystem::exists("scripts/plot_curves.py") && std::system(plot.c_str()) == 0)
      std::printf("curves: %s/curves.png\n", o.out.c_str());
    else
      std::printf("(no plot: run scripts/plot_curves.py %s/metrics.csv with matplotlib installed)\n", o.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
