// Executable files: save, load, run the same; corrupt files refused; state preserved.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/executable_impl.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {
std::string tmp(const std::string& name) { return (std::filesystem::temp_directory_path() / name).string(); }
std::vector<char> bytes_of(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write(const std::string& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}
}  // namespace

TEST(Serialize, RoundTripRunsTheSameAndKeepsVariables) {
  Graph g;
  Tensor x = g.placeholder({-1, 8}, f32, "x");
  Tensor w = g.variable(TensorData::randn({8, 4}, f32, 3), "w");
  Tensor y = g.softmax(g.add(g.matmul(x, w), g.constant(TensorData::randn({4}, f32, 4))));
  Tensor r = g.for_loop(g.scalar(3, i32), {y}, [](Graph& b, Tensor, std::vector<Tensor> a) {
    return std::vector{b.mul(a[0], b.scalar(2.0))};
  })[0];
  Operation up = g.assign(w, g.mul(w, g.scalar(0.5)));
  Executable e = g.compile({{x, TensorType({-1, 8}, f32)}}, {r}, {up}, {.device = Device::cpu()});
  TensorData in = TensorData::randn({5, 8}, f32, 9);
  e.run({in});  // w is now halved once
  std::string path = tmp("tgraph_roundtrip.tgx");
  e.save(path);
  Executable l = Executable::load(path);
  EXPECT_EQ(l.variable("w").to_vector(), e.variable("w").to_vector());
  auto a = e.run({in}), b = l.run({in});
  EXPECT_EQ(a[0].to_vector(), b[0].to_vector());
  EXPECT_EQ(l.variable("w").to_vector(), e.variable("w").to_vector());  // both halved again
  EXPECT_EQ(l.input_types(), e.input_types());
  EXPECT_EQ(l.str(), e.str());
  std::filesystem::remove(path);
}

TEST(Serialize, CorruptFilesAreRefused) {
  Graph g;
  Tensor x = g.placeholder({4}, f32, "x");
  Executable e = g.compile({{x, x.type()}}, {g.exp(x)}, {}, {.device = Device::cpu()});
  std::string path = tmp("tgraph_corrupt.tgx");
  e.save(path);
  std::vector<char> good = bytes_of(path);
  EXPECT_TG_ERROR(Executable::load(tmp("does_not_exist.tgx")), "[load] cannot open");
  std::vector<char> b = good;
  b.resize(b.size() - 3);
  write(path, b);
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "truncated");
  b = good;
  b[b.size() / 2] ^= 0x5a;
  write(path, b);
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "checksum");
  b = good;
  b[0] = 'X';
  write(path, b);
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "bad magic");
  b = good;
  b[8] = 99;
  write(path, b);
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "version 99");
  // Every single-byte truncation point is refused cleanly (never a crash).
  for (size_t n = 0; n < good.size(); n += 7) {
    write(path, std::vector<char>(good.begin(), good.begin() + static_cast<long>(n)));
    EXPECT_THROW(Executable::load(path), Error) << n;
  }
  write(path, good);
  EXPECT_EQ(Executable::load(path).run({TensorData::zeros({4})})[0].to_vector(), (std::vector<double>{1, 1, 1, 1}));
  std::filesystem::remove(path);
}

// A variable's value is written once (version 2): a .tgx holding 4 MiB of weights is about
// 4 MiB, not twice that; the loaded executable keeps the saved value as its initial value too.
TEST(Serialize, WeightsAreWrittenOnce) {
  Graph g;
  Tensor x = g.placeholder({4, 1024}, f32, "x");
  Tensor w = g.variable(TensorData::randn({1024, 1024}, f32, 5), "w");
  Executable e = g.compile({{x, x.type()}}, {g.matmul(x, w)}, {g.assign(w, g.mul(w, g.scalar(0.5)))},
                           {.device = Device::cpu()});
  TensorData in = TensorData::randn({4, 1024}, f32, 6);
  e.run({in});
  const std::string path = tmp("tgraph_weights_once.tgx");
  e.save(path);
  const auto size = std::filesystem::file_size(path);
  EXPECT_GT(size, 4u << 20);
  EXPECT_LT(size, (4u << 20) + (64u << 10));
  Executable l = Executable::load(path);
  EXPECT_EQ(l.variable("w").to_vector(), e.variable("w").to_vector());
  EXPECT_EQ(l.run({in})[0].to_vector(), e.run({in})[0].to_vector());
  std::filesystem::remove(path);
}

// A loaded executable with dynamic feed dims runs each size as a copy compiled from the loaded
// graph (specialize.cpp), giving the saved executable's results and sharing its variables.
TEST(Serialize, LoadedDynamicExecutableRunsACopyPerSize) {
  Graph g;
  Tensor x = g.placeholder({-1, -1, 8}, f32, "x");
  Tensor w = g.variable(TensorData::randn({8, 8}, f32, 3), "w");
  Tensor h = g.gelu(g.matmul(x, w));
  Tensor y = g.softmax(g.sub(h, g.reduce_mean(h, {2}, true)));
  Operation up = g.assign(w, g.mul(w, g.scalar(0.5)));
  CompileOptions dyn{.device = Device::cpu(), .disable_type_inference = true};
  dyn.switches = {{"TGRAPH_NO_SPECIALIZE", "1"}};  // the saved one stays dynamic: the reference
  Executable e = g.compile({{x, x.type()}}, {y}, {up}, dyn);
  std::string path = tmp("tgraph_dynamic.tgx");
  e.save(path);
  Executable l = Executable::load(path);
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 3}, {4, 5}, {2, 3}}) {
    TensorData in = TensorData::randn({b, s, 8}, f32, static_cast<uint64_t>(b + s));
    auto want = e.run({in}), got = l.run({in});
    ASSERT_EQ(got[0].shape(), (Shape{b, s, 8}));
    for (int64_t i = 0; i < want[0].num_elements(); ++i) EXPECT_NEAR(got[0].at(i), want[0].at(i), 1e-6);
    EXPECT_EQ(l.variable("w").to_vector(), e.variable("w").to_vector());  // both halved each run
  }
  EXPECT_EQ(e.impl().specialized.size(), 0u);
  EXPECT_EQ(l.impl().specialized.size(), 2u);
  std::filesystem::remove(path);
}
