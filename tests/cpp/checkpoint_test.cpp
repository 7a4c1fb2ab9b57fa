// Checkpoints: resume gives the same losses; damaged files are refused and change nothing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "test_util.h"
#include "tgraph/checkpoint.h"
#include "tgraph/executable.h"
#include "tgraph/graph.h"
#include "tgraph/nn.h"
#include "tgraph/optim.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

CompileOptions cpu() { return CompileOptions{.device = Device::cpu()}; }

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("tgraph_ckpt_" + std::to_string(::getpid()) + "_" + name)).string();
}

// A tiny CNN with BatchNorm trained by AdamW: weights, optimizer state, step counter and
// running statistics all live in variables.
struct Trainer {
  Graph g;
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>("cnn");
  Tensor x, labels;
  Executable exe;
  Trainer() {
    net->add(std::make_shared<nn::Conv2d>(g, "cnn.conv", 1, 3, 3));
    net->add(std::make_shared<nn::BatchNorm2d>(g, "cnn.bn", 3));
    net->add("relu", [](Graph& gg, Tensor t) { return gg.relu(t); });
    net->add("flatten", [](Graph& gg, Tensor t) { return gg.flatten(t, 1); });
    net->add(std::make_shared<nn::Linear>(g, "cnn.fc", 4 * 4 * 3, 2));
    x = g.placeholder({4, 4, 4, 1}, f32, "x");
    labels = g.placeholder({4, 2}, f32, "labels");
    net->train();
    Tensor loss = g.softmax_cross_entropy(net->forward(g, x), labels);
    auto ps = net->parameters();
    auto grads = optim::clip_by_global_norm(g, g.gradients(loss, ps), 5.0);
    std::vector<Operation> ops = net->updates();
    ops.push_back(optim::adamw(g, ps, grads, g.scalar(0.01)));
    exe = g.compile({{x, TensorType({4, 4, 4, 1}, f32)}, {labels, TensorType({4, 2}, f32)}}, {loss}, ops, cpu());
  }
  double step(int i) {
    TensorData xd = TensorData::randn({4, 4, 4, 1}, f32, 100 + static_cast<uint64_t>(i));
    TensorData yd = TensorData::from_floats({4, 2}, {1, 0, 0, 1, 1, 0, 0, 1});
    return exe.run({xd, yd})[0].at(0);
  }
};

std::string read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

}  // namespace

TEST(Checkpoint, ResumeGivesTheSameLosses) {
  std::string path = temp_path("resume");
  Trainer a;
  for (int i = 0; i < 3; ++i) a.step(i);
  save_checkpoint(a.exe, path);
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
  std::vector<double> uninterrupted;
  for (int i = 3; i < 6; ++i) uninterrupted.push_back(a.step(i));

  Trainer b;  // a fresh process would build the same graph
  EXPECT_NE(b.step(99), 0.0);  // and may even have run a step before resuming
  auto restored = load_checkpoint(b.exe, path);
  EXPECT_EQ(restored.size(), b.exe.variable_names().size());
  for (const char* name : {"cnn.bn.running_mean", "cnn.conv.weight/adam_m", "adamw/step"})
    EXPECT_NE(std::find(restored.begin(), restored.end(), name), restored.end()) << name;
  for (int i = 3; i < 6; ++i) EXPECT_NEAR(b.step(i), uninterrupted[static_cast<size_t>(i - 3)], 1e-6) << "step " << i;
  std::remove(path.c_str());
}

TEST(Checkpoint, DamagedFilesAreRefusedAndVariablesKept) {
  std::string path = temp_path("damaged");
  Trainer a;
  a.step(0);
  save_checkpoint(a.exe, path);
  const std::string good = read_all(path);
  a.step(1);
  const TensorData before = a.exe.variable("cnn.fc.weight");

  auto expect_refused = [&](const std::string& bytes, const char* why) {
    write_all(path, bytes);
    EXPECT_TG_ERROR(load_checkpoint(a.exe, path), "[checkpoint]", why);
    EXPECT_EQ(a.exe.variable("cnn.fc.weight").to_vector(), before.to_vector()) << why;
  };
  expect_refused(good.substr(0, good.size() - 7), "truncated");
  expect_refused(good.substr(0, 20), "truncated");
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x10;
  expect_refused(flipped, "checksum");
  std::string magic = good;
  magic[0] = 'X';
  expect_refused(magic, "magic");
  std::string version = good;
  version[8] = 9;
  expect_refused(version, "version");
  expect_refused(good + "junk", "header says");
  EXPECT_TG_ERROR(load_checkpoint(a.exe, temp_path("missing")), "[checkpoint]", "cannot open");

  // The good file still loads.
  write_all(path, good);
  load_checkpoint(a.exe, path);
  EXPECT_NE(a.exe.variable("cnn.fc.weight").to_vector(), before.to_vector());
  std::remove(path.c_str());
}

TEST(Checkpoint, TypeMismatchAndMissingVariables) {
  std::string path = temp_path("types");
  {
    Graph g;
    Tensor w = g.variable(TensorData::full({3}, 2.0), "w");
    Tensor v = g.variable(TensorData::full({2}, 5.0), "v");
    save_checkpoint(g.compile({}, {g.add(g.reduce_sum(w), g.reduce_sum(v))}, {}, cpu()), path);
  }
  Graph g;
  Tensor w = g.variable(TensorData::full({4}, 1.0), "w");  // shape differs from the file's
  Tensor v = g.variable(TensorData::full({2}, 1.0), "v");
  Executable exe = g.compile({}, {g.add(g.reduce_sum(w), g.reduce_sum(v))}, {}, cpu());
  EXPECT_TG_ERROR(load_checkpoint(exe, path), "[checkpoint]", "'w'", "[3] f32", "[4] f32");
  EXPECT_EQ(exe.variable("v").to_vector(), std::vector<double>({1.0, 1.0}));  // v untouched too

  Graph h;
  Tensor v2 = h.variable(TensorData::full({2}, 1.0), "v");
  Tensor u = h.variable(TensorData::full({1}, 1.0), "u");  // not in the file
  Executable exe2 = h.compile({}, {h.add(h.reduce_sum(v2), h.reduce_sum(u))}, {}, cpu());
  EXPECT_TG_ERROR(load_checkpoint(exe2, path), "[checkpoint]", "'u'");
  EXPECT_EQ(exe2.variable("v").to_vector(), std::vector<double>({1.0, 1.0}));
  auto restored = load_checkpoint(exe2, path, {.strict = false});
  EXPECT_EQ(restored, std::vector<std::string>({"v"}));
  EXPECT_EQ(exe2.variable("v").to_vector(), std::vector<double>({5.0, 5.0}));
  EXPECT_EQ(exe2.variable("u").to_vector(), std::vector<double>({1.0}));
  std::remove(path.c_str());
}
