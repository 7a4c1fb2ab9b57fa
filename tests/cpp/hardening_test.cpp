// Hostile and careless input (issue 25): element counts that overflow int64, dims that are
// neither sizes nor -1, files written by two writers at once or left half-written by a killed
// process, directories where files are expected. Each case failed before its fix.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <atomic>
#include <chrono>
#include <functional>
#include <fstream>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "tgraph/checkpoint.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

// broadcast_to(ones(1), [2^62, 4]).sum() returned 0.0: the element count wrapped to 0.
TEST(Hardening, ElementCountsThatOverflowAreErrorsNamingTheOp) {
  Graph g;
  Tensor one = g.constant(TensorData::from_vector({1}, f32, {1.0}));
  const std::string e = error_of([&] { g.broadcast_to(one, {int64_t{1} << 62, 4}); });
  EXPECT_TRUE(has(e, "[broadcast_to]")) << e;
  EXPECT_TRUE(has(e, "[4611686018427387904,4]")) << e;
  EXPECT_TRUE(has(e, "64 bits")) << e;
  // Bytes overflow too: 2^61 f32 elements are 2^63 bytes.
  EXPECT_TRUE(has(error_of([&] { g.broadcast_to(one, {int64_t{1} << 61}); }), "64 bits"));
  EXPECT_TRUE(has(error_of([] { Shape({int64_t{1} << 62, 4}).num_elements(); }), "64 bits"));
  EXPECT_TRUE(has(error_of([] { TensorData(Shape({int64_t{1} << 40, int64_t{1} << 30}), f32); }), "64 bits"));
  EXPECT_EQ(Shape({int64_t{1} << 40, 0}).num_elements(), 0);
  // Found by fuzz_graph_build: an empty tensor whose other dims overflow still has overflowing
  // strides (the CPU kernels computed them), and a reshape target's product overflowed.
  EXPECT_TRUE(has(error_of([&] { g.placeholder({0, int64_t{1} << 62, 4}, f32, "e"); }), "64 bits"));
  Tensor x = g.placeholder({2, 3}, f32, "x");
  EXPECT_TRUE(has(error_of([&] { g.reshape(x, {int64_t{1} << 62, int64_t{1} << 61, -1}); }), "[reshape]"));
  EXPECT_EQ(Shape({3, 4, 5}).num_elements(), 60);
}

// g.placeholder([-5, 3]) was accepted as dynamic; only -1 means "unknown".
TEST(Hardening, DimsAreSizesOrMinusOne) {
  Graph g;
  const std::string e = error_of([&] { g.placeholder({-5, 3}, f32, "x"); });
  EXPECT_TRUE(has(e, "[placeholder]")) << e;
  EXPECT_TRUE(has(e, "-5")) << e;
  Tensor x = g.placeholder({-1, 3}, f32, "y");  // -1 still means dynamic
  EXPECT_EQ(x.shape(), Shape({-1, 3}));
  EXPECT_TRUE(has(error_of([&] { g.reshape(x, {-2, 3}); }), "[reshape]"));
}

// Two writers of one path (threads here; processes use the same per-writer temp names): the
// file ends as one writer's whole content, never a mix, and no temp file is left.
TEST(Hardening, ConcurrentAtomicWritesLeaveOneWholeFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / "tgraph_atomic";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "f.bin").string();
  const std::string a(1 << 20, 'a'), b((1 << 20) + 7, 'b');
  auto writer = [&](const std::string& content) {
    for (int i = 0; i < 20; ++i) detail::write_file_atomic(path, content.data(), content.size(), "test");
  };
  std::thread t1(writer, a), t2(writer, b);
  t1.join();
  t2.join();
  const std::string got = slurp(path);
  EXPECT_TRUE(got == a || got == b) << got.size();
  int files = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) ++files;
  EXPECT_EQ(files, 1);
  fs::remove_all(dir);
}

// A save killed mid-write leaves path.tmp.<pid>.<n>; the next save or load removes the temp
// files of processes that no longer run (and not those of live ones).
TEST(Hardening, StaleTempFilesOfDeadProcessesAreRemoved) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / "tgraph_stale";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.bin").string();
  const std::string dead = path + ".tmp.2147483000.1", old_style = path + ".tmp.2147483001",
                    live = path + ".tmp." + std::to_string(::getppid()) + ".3", other = (dir / "other.tmp.2147483000.1").string();
  for (const std::string& f : {dead, old_style, live, other}) std::ofstream(f) << "half";
  Graph g;
  Tensor v = g.variable(TensorData::from_vector({2}, f32, {1.0, 2.0}), "v");
  Executable exe = g.compile({}, {g.mul(v, g.scalar(2.0))}, {}, {.device = Device::cpu()});
  save_checkpoint(exe, path);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(old_style));
  EXPECT_TRUE(fs::exists(live));   // its writer may still be writing
  EXPECT_TRUE(fs::exists(other));  // another file's
  std::ofstream(dead) << "half";
  EXPECT_EQ(load_checkpoint(exe, path), std::vector<std::string>{"v"});
  EXPECT_FALSE(fs::exists(dead));
  fs::remove_all(dir);
}

// Executable::load / save_checkpoint on a directory: bad_alloc before; now one clear line.
TEST(Hardening, DirectoriesWhereFilesAreExpected) {
  const std::string dir = testing::TempDir();
  EXPECT_TRUE(has(error_of([&] { Executable::load(dir); }), "is a directory")) << error_of([&] { Executable::load(dir); });
  Graph g;
  Tensor v = g.variable(TensorData::from_vector({1}, f32, {1.0}), "v");
  Executable exe = g.compile({}, {v}, {}, {.device = Device::cpu()});
  EXPECT_TRUE(has(error_of([&] { load_checkpoint(exe, dir); }), "is a directory"));
  EXPECT_TRUE(has(error_of([&] { exe.save(dir); }), "[save]"));
}

// Two threads saving different executables to one .tgx: afterwards it loads and holds one of
// them whole.
TEST(Hardening, ConcurrentSavesOfOneExecutable) {
  const std::string path = testing::TempDir() + "/tgraph_concurrent.tgx";
  auto make = [](double value) {
    Graph g;
    Tensor v = g.variable(TensorData::from_vector({256}, f32, std::vector<double>(256, value)), "v");
    return g.compile({}, {g.add(v, g.scalar(0.0))}, {}, {.device = Device::cpu()});
  };
  Executable a = make(1.0), b = make(2.0);
  std::thread t1([&] { for (int i = 0; i < 20; ++i) a.save(path); });
  std::thread t2([&] { for (int i = 0; i < 20; ++i) b.save(path); });
  t1.join();
  t2.join();
  const double got = Executable::load(path).run({})[0].at(0);
  EXPECT_TRUE(got == 1.0 || got == 2.0) << got;
  std::remove(path.c_str());
}

namespace {

// A loop that never ends (its condition is always true), beside an assignment to a variable.
struct Endless {
  Graph g;
  Executable exe;
  Endless() {
    Tensor v = g.variable(TensorData::from_vector({1}, f32, {5.0}), "v");
    Tensor x = g.placeholder({}, f32, "x");
    auto out = g.while_loop(
        {x}, [](Graph& g, std::vector<Tensor> a) { return std::make_pair(g.greater_equal(a[0], g.scalar(0.0)), a); },
        [](Graph& g, std::vector<Tensor> a) { return std::vector<Tensor>{g.add(a[0], g.scalar(1.0))}; });
    exe = g.compile({{x, x.type()}}, {out[0]}, {g.assign(v, g.add(v, g.scalar(1.0)))}, {.device = Device::cpu()});
  }
  std::vector<TensorData> in() const { return {TensorData::scalar(1.0, f32)}; }
};

}  // namespace

// A while_loop that never ends ignored Ctrl-C and had no timeout: runs stop between steps on a
// timeout, a cancel flag or interrupt_runs() (the CLI's SIGINT), and no variable changes.
TEST(Hardening, EndlessRunsStopOnTimeoutCancelAndInterrupt) {
  Endless e;
  std::string err = error_of([&] { e.exe.run(e.in(), {.timeout_s = 0.2}); });
  EXPECT_TRUE(has(err, "[run] timed out (timeout 0.2 s) after")) << err;
  EXPECT_EQ(e.exe.variable("v").at(0), 5.0);

  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  err = error_of([&] { e.exe.run(e.in(), {.cancel = &cancel}); });
  canceller.join();
  EXPECT_TRUE(has(err, "[run] cancelled after")) << err;

  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    interrupt_runs();
  });
  err = error_of([&] { e.exe.run(e.in()); });
  interrupter.join();
  EXPECT_TRUE(has(err, "[run] interrupted after")) << err;
  EXPECT_EQ(e.exe.variable("v").at(0), 5.0);
  // Later runs are not affected by an earlier interrupt.
  EXPECT_TRUE(has(error_of([&] { e.exe.run(e.in(), {.timeout_s = 0.05}); }), "timed out"));
  EXPECT_TRUE(has(error_of([&] { e.exe.run(e.in(), {.timeout_s = -1}); }), "timeout_s must be >= 0"));
}

// Found by fuzz_graph_build: a softmax of an empty [2^40, 0] walked 2^40 empty rows (a hang).
// Ops whose results are empty run no kernel.
TEST(Hardening, EmptyResultsWithHugeDimsRunNoKernel) {
  Graph g;
  Tensor x = g.placeholder({int64_t{1} << 40, 0}, f32, "x");
  Tensor y = g.softmax(g.mul(x, g.scalar(2.0)), -1);
  Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu()});
  const auto out = e.run({TensorData(Shape({int64_t{1} << 40, 0}), f32)}, {.timeout_s = 10});
  EXPECT_EQ(out[0].shape(), Shape({int64_t{1} << 40, 0}));
}

#ifdef TGRAPH_SOURCE_DIR
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// Inputs of fuzz_graph_build that crashed (tests/fuzz/regressions/graph_crash_*.bin) replay
// through the same target: graph_crash_1 fused an empty broadcast operand (a period of 0
// divided the CPU kernel's tile size); graph_crash_2 concatenated dims adding past 2^63.
TEST(Hardening, GraphBuilderFuzzRegressions) {
  int replayed = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(TGRAPH_SOURCE_DIR) + "/tests/fuzz/regressions")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("graph_crash_", 0) != 0) continue;
    const std::string bytes = slurp(e.path().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0) << name;
    ++replayed;
  }
  EXPECT_GE(replayed, 1);
}
#endif
