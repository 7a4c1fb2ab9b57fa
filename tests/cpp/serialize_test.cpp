// Executable files: save, load, run the same; corrupt files refused; state preserved.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ir/printer.h"
#include "runtime/executable_impl.h"
#include "runtime/serialize.h"
#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/nvrtc_compiler.h"
#endif
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

// A loaded executable with dynamic feed dims runs each size as a copy compiled from the graph
// the saved one was compiled from (version 5 keeps it in the file): the same copies, op for op,
// as the saved executable's, the same results as a dynamic run, and its variables shared.
// (Compiled from the loaded optimised graph instead, as before, the copies lost fused groups:
// BERT from tgraph.torch's compile cache ran 2.2-5.7x slower on the H200.)
TEST(Serialize, LoadedDynamicExecutableRunsTheSavedOnesCopies) {
  // Two graphs alike: executables of one graph share its variables.
  auto compile = [](const std::map<std::string, std::string>& switches) {
    Graph g;
    Tensor x = g.placeholder({-1, -1, 8}, f32, "x");
    Tensor w = g.variable(TensorData::randn({8, 8}, f32, 3), "w");
    Tensor h = g.gelu(g.add(g.matmul(x, w), g.constant(TensorData::randn({8}, f32, 4))));
    Tensor n = g.layer_norm(g.add(h, x), g.constant(TensorData::randn({8}, f32, 5)),
                            g.constant(TensorData::randn({8}, f32, 6)));
    const int64_t B = dim_from_source(0), S = dim_from_source(1);
    Tensor q = g.transpose(g.reshape(n, {B, S, 2, 4}, {x}), {0, 2, 1, 3});  // two heads of 4
    Tensor keep = g.reshape(g.greater(g.reduce_sum(x, {2}), g.scalar(-1.0)), {B, 1, 1, S}, {x});  // a padding mask
    Tensor a = g.scaled_dot_product_attention(q, q, q, keep);
    Tensor y = g.sub(g.reshape(g.transpose(a, {0, 2, 1, 3}), {B, S, 8}, {x}), n);
    Operation up = g.assign(w, g.mul(w, g.scalar(0.5)));
    CompileOptions dyn{.device = Device::cpu(), .disable_type_inference = true};
    dyn.switches = switches;
    return g.compile({{x, x.type()}}, {y}, {up}, dyn);
  };
  Executable e = compile({});
  Executable ref = compile({{"TGRAPH_NO_SPECIALIZE", "1"}});  // stays dynamic
  std::string path = tmp("tgraph_dynamic.tgx");
  e.save(path);
  Executable l = Executable::load(path);
  ASSERT_NE(l.impl().specialize, nullptr);
  for (auto [b, s] : {std::pair<int64_t, int64_t>{2, 3}, {4, 5}, {2, 3}}) {
    TensorData in = TensorData::randn({b, s, 8}, f32, static_cast<uint64_t>(b + s));
    auto want = ref.run({in}), got = l.run({in}), own = e.run({in});
    ASSERT_EQ(got[0].shape(), (Shape{b, s, 8}));
    for (int64_t i = 0; i < want[0].num_elements(); ++i) {
      EXPECT_NEAR(got[0].at(i), want[0].at(i), 1e-5);
      EXPECT_EQ(got[0].at(i), own[0].at(i));
    }
    EXPECT_EQ(l.variable("w").to_vector(), ref.variable("w").to_vector());  // each halved every run
    EXPECT_EQ(e.variable("w").to_vector(), ref.variable("w").to_vector());
  }
  EXPECT_EQ(ref.impl().specialized.size(), 0u);
  ASSERT_EQ(l.impl().specialized.size(), 2u);
  ASSERT_EQ(e.impl().specialized.size(), 2u);
  for (const auto& [types, copy] : l.impl().specialized) EXPECT_NE(copy, nullptr) << "a size ran dynamic";
  for (const auto& [types, copy] : e.impl().specialized) {
    auto it = std::find_if(l.impl().specialized.begin(), l.impl().specialized.end(),
                           [&](const auto& p) { return p.first == types; });
    ASSERT_NE(it, l.impl().specialized.end());
    EXPECT_EQ(detail::print_text(it->second->module.graph), detail::print_text(copy->module.graph));
  }
  // The source's constant is the optimised graph's bytes: written once.
  const detail::GraphImpl& src = l.impl().specialize->graph;
  const detail::GraphImpl& opt = l.impl().module.graph;
  int shared = 0;
  for (const auto& n : src.nodes)
    for (const auto& m : opt.nodes)
      if (n.kind == detail::OpKind::Constant && !n.data.empty() && n.data.data() == m.data.data()) ++shared;
  EXPECT_GE(shared, 1);
  std::filesystem::remove(path);
}

// Compiled with free output layouts (and none taken: save refuses those), a loaded dynamic
// executable still runs its copies per size (they return the layouts the loaded one does).
TEST(Serialize, LoadedCopiesOfAFreeLayoutExecutableAreUsed) {
  Graph g;
  Tensor x = g.placeholder({-1, 6}, f32, "x");
  Tensor y = g.tanh(g.matmul(x, g.constant(TensorData::randn({6, 3}, f32, 2))));
  CompileOptions o{.device = Device::cpu(), .disable_type_inference = true};
  o.free_output_layouts = true;
  Executable e = g.compile({{x, x.type()}}, {y}, {}, o);
  const std::string path = tmp("tgraph_free_layouts.tgx");
  e.save(path);
  Executable l = Executable::load(path);
  for (int64_t b : {2, 5}) {
    TensorData in = TensorData::randn({b, 6}, f32, static_cast<uint64_t>(b));
    EXPECT_EQ(l.run({in})[0].to_vector(), e.run({in})[0].to_vector());
  }
  ASSERT_EQ(l.impl().specialized.size(), 2u);
  for (const auto& [types, copy] : l.impl().specialized) EXPECT_NE(copy, nullptr) << "a size ran dynamic";
  std::filesystem::remove(path);
}

// An executable's switches travel with its file: one saved with TGRAPH_NO_SPECIALIZE stays
// dynamic when loaded. TGRAPH_DUMP (a directory of the saving machine) does not travel.
TEST(Serialize, SwitchesTravelWithTheFile) {
  Graph g;
  Tensor x = g.placeholder({-1, 4}, f32, "x");
  CompileOptions dyn{.device = Device::cpu(), .disable_type_inference = true};
  const std::string dump = tmp("tgraph_switches_dump");
  dyn.switches = {{"TGRAPH_NO_SPECIALIZE", "1"}, {"TGRAPH_DUMP", dump}};
  Executable e = g.compile({{x, x.type()}}, {g.exp(x)}, {}, dyn);
  const std::string path = tmp("tgraph_switches.tgx");
  e.save(path);
  Executable l = Executable::load(path);
  EXPECT_EQ(l.impl().switches, (std::map<std::string, std::string>{{"TGRAPH_NO_SPECIALIZE", "1"}}));
  std::filesystem::remove_all(dump);
  EXPECT_EQ(l.impl().specialize, nullptr);
  TensorData in = TensorData::randn({3, 4}, f32, 1);
  EXPECT_EQ(l.run({in})[0].to_vector(), e.run({in})[0].to_vector());
  EXPECT_EQ(l.impl().specialized.size(), 0u);
  std::filesystem::remove(path);
}

// Files of version 2 (before the device code section) still load and run.
TEST(Serialize, VersionTwoFilesLoad) {
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x");
  Executable e = g.compile({{x, x.type()}}, {g.exp(x)}, {}, {.device = Device::cpu()});
  const std::string path = tmp("tgraph_v2.tgx");
  e.save(path);
  std::vector<char> b = bytes_of(path);
  // A static CPU executable's device code, library plans and (version 5) switches sections are
  // their counts, 0, and its source graph flag 0: drop them, then rewrite the header's
  // version, payload size and checksum (FNV-1a over the payload).
  ASSERT_GE(b.size(), 64u);
  b.resize(b.size() - 32);
  const int64_t version = 2, size = static_cast<int64_t>(b.size() - 32);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 32; i < b.size(); ++i) h = (h ^ static_cast<unsigned char>(b[i])) * 1099511628211ULL;
  std::memcpy(b.data() + 8, &version, 8);
  std::memcpy(b.data() + 16, &size, 8);
  std::memcpy(b.data() + 24, &h, 8);
  write(path, b);
  Executable l = Executable::load(path);
  TensorData in = TensorData::randn({3}, f32, 1);
  EXPECT_EQ(l.run({in})[0].to_vector(), e.run({in})[0].to_vector());
  std::filesystem::remove(path);
}

#ifdef TGRAPH_HAVE_CUDA
// The generated kernels an executable's runs used travel in its file with their cubins. No GPU
// needed: a CPU executable is given one kernel by hand (NVRTC compiles without a device), saved
// with a fresh kernel cache that is then deleted, so the cubin the load returns can only have
// come from the file; a second save of the loaded executable compiles nothing.
TEST(Serialize, DeviceCodeTravelsWithTheFile) {
  const std::filesystem::path cache = std::filesystem::temp_directory_path() / "tgraph_device_code_cache";
  std::filesystem::remove_all(cache);
  const char* old = std::getenv("TGRAPH_CACHE_DIR");
  const std::string saved_env = old ? old : "";
  setenv("TGRAPH_CACHE_DIR", cache.c_str(), 1);
  // Unique per run of the test binary: the process's own caches must not know it.
  const std::string source = "extern \"C\" __global__ void tg_test_twice(float* p) { p[threadIdx.x] *= 2.f; }\n// " +
                             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n";
  Graph g;
  Tensor x = g.placeholder({3}, f32, "x");
  Executable e = g.compile({{x, x.type()}}, {g.exp(x)}, {}, {.device = Device::cpu()});
  e.impl().device_code->record(9, 0, source, detail::DeviceCode::Origin::compiled);
  const std::string path = tmp("tgraph_device_code.tgx"), again = tmp("tgraph_device_code2.tgx");
  e.save(path);
  std::filesystem::remove_all(cache);

  Executable l = Executable::load(path);
  const auto& kernels = l.impl().device_code->kernels;
  ASSERT_EQ(kernels.size(), 1u);
  const detail::DeviceCode::Kernel& k = kernels.begin()->second;
  EXPECT_EQ(k.source, source);
  EXPECT_EQ(k.major, 9);
  EXPECT_EQ(k.minor, 0);
  ASSERT_GT(k.cubin.size(), 4u);
  EXPECT_EQ(std::string(k.cubin.data() + 1, 3), "ELF");  // a cubin is an ELF image
  const int compiled = detail::nvrtc_stats().compiled;
  l.save(again);  // its cubin is held: nothing compiles, and the kernel is in the new file
  EXPECT_EQ(detail::nvrtc_stats().compiled, compiled);
  EXPECT_EQ(Executable::load(again).impl().device_code->kernels.begin()->second.cubin, k.cubin);
  // Handed to NVRTC's cache as a load for this architecture does: asked for, nothing compiles.
  detail::nvrtc_provide(9, 0, source, k.cubin);
  EXPECT_EQ(detail::nvrtc_cubin(source, 9, 0), k.cubin);
  EXPECT_EQ(detail::nvrtc_stats().compiled, compiled);

  // A bit flipped inside the cubin is refused by the file's checksum.
  std::vector<char> b = bytes_of(path);
  b[b.size() - k.cubin.size() / 2] ^= 0x10;
  write(path, b);
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "checksum");
  std::filesystem::remove(path);
  std::filesystem::remove(again);
  std::filesystem::remove_all(cache);
  if (old) setenv("TGRAPH_CACHE_DIR", saved_env.c_str(), 1);
  else unsetenv("TGRAPH_CACHE_DIR");
}
#endif

// The fuzz target's seed with a device code section (tests/fuzz/seeds) parses, and every
// truncation of it fails cleanly.
TEST(Serialize, DeviceCodeSectionSeedParses) {
  const std::vector<char> b = bytes_of(std::string(TGRAPH_SOURCE_DIR) + "/tests/fuzz/seeds/tgx_device_code.bin");
  ASSERT_FALSE(b.empty());
  auto exe = detail::deserialize_payload(b.data(), b.size());
  ASSERT_EQ(exe->device_code->kernels.size(), 1u);
  EXPECT_EQ(exe->device_code->kernels.begin()->second.major, 9);
  for (size_t n = 0; n < b.size(); n += 5) EXPECT_THROW(detail::deserialize_payload(b.data(), n), Error) << n;
}

// The version 4 seed: the same payload with two library plans after the device code; every
// truncation fails cleanly, and read as version 3 its plans are trailing bytes.
TEST(Serialize, LibraryPlansSectionSeedParses) {
  const std::vector<char> b = bytes_of(std::string(TGRAPH_SOURCE_DIR) + "/tests/fuzz/seeds/tgx_library_plans.bin");
  ASSERT_FALSE(b.empty());
  auto exe = detail::deserialize_payload(b.data(), b.size(), 4);
  ASSERT_EQ(exe->device_code->plans.size(), 2u);
  EXPECT_EQ(exe->device_code->plans.begin()->first.find("|conv|") != std::string::npos, true);
  EXPECT_THROW(detail::deserialize_payload(b.data(), b.size(), 3), Error);
  for (size_t n = 0; n < b.size(); n += 5) EXPECT_THROW(detail::deserialize_payload(b.data(), n, 4), Error) << n;
}

// The version 5 seed (a dynamic CPU executable with a switch: its source graph follows the
// switches) parses with its source and switch; every truncation fails cleanly, and read as
// version 4 the new sections are trailing bytes.
TEST(Serialize, SpecializeSourceSeedParses) {
  const std::vector<char> b = bytes_of(std::string(TGRAPH_SOURCE_DIR) + "/tests/fuzz/seeds/tgx_specialize_source.bin");
  ASSERT_FALSE(b.empty());
  auto exe = detail::deserialize_payload(b.data(), b.size(), 5);
  EXPECT_EQ(exe->switches.size(), 1u);
  ASSERT_NE(exe->specialize, nullptr);
  EXPECT_EQ(exe->specialize->feeds.size(), 1u);
  EXPECT_EQ(exe->specialize->graph.variables.count("w"), 1u);
  EXPECT_THROW(detail::deserialize_payload(b.data(), b.size(), 4), Error);
  for (size_t n = 0; n < b.size(); n += 3) EXPECT_THROW(detail::deserialize_payload(b.data(), n, 5), Error) << n;
  // Bytes changed anywhere (a hostile file with its checksum redone): loaded or refused with
  // tg::Error, nothing else (the fuzz target does this at length under ASan: make fuzz).
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int i = 0; i < 3000; ++i) {
    std::vector<char> m = b;
    for (int k = 0; k < 1 + i % 3; ++k) m[(next() >> 33) % m.size()] = static_cast<char>(next() >> 56);
    try {
      detail::deserialize_payload(m.data(), m.size(), 5);
    } catch (const Error&) {
    }
  }
}

// Version 3 places tensor data at 64-byte file offsets and a load uses it where it lies (the
// file's buffer, no copy): constants and variables are aligned views that run the same, and a
// variable written after the load changes only itself.
TEST(Serialize, TensorsAreReadInPlaceFromTheFile) {
  Graph g;
  Tensor x = g.placeholder({4, 33}, f32, "x");
  Tensor w = g.variable(TensorData::randn({33, 7}, f32, 3), "w");
  Tensor b = g.constant(TensorData::randn({7}, f32, 4));
  Tensor c = g.constant(TensorData::randn({3}, f64, 5));
  Tensor y = g.add(g.matmul(x, w), b);
  Executable e = g.compile({{x, x.type()}}, {y, g.mul(c, c)}, {}, {.device = Device::cpu()});
  const std::string path = tmp("tgraph_in_place.tgx");
  e.save(path);
  Executable l = Executable::load(path);
  int constants = 0;
  for (const auto& n : l.impl().module.graph.nodes)
    if (n.kind == detail::OpKind::Constant && !n.data.empty()) {
      ++constants;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(n.data.data()) % 64, 0u);
    }
  EXPECT_GE(constants, 2);
  TensorData in = TensorData::randn({4, 33}, f32, 9);
  auto a = e.run({in}), r = l.run({in});
  EXPECT_EQ(a[0].to_vector(), r[0].to_vector());
  EXPECT_EQ(a[1].to_vector(), r[1].to_vector());
  l.set_variable("w", TensorData::randn({33, 7}, f32, 11));
  EXPECT_NE(l.run({in})[0].to_vector(), a[0].to_vector());
  EXPECT_EQ(e.run({in})[0].to_vector(), a[0].to_vector());
  std::filesystem::remove(path);
}

// A file of 16 MB or more is read by several threads (core/read_file.h): a corrupted or
// truncated one is still refused, and the loaded executable outlives its file (saved over,
// then removed) and writes to its variables without touching the file.
TEST(Serialize, LargeFilesAreReadInPartsAndOutliveTheirPath) {
  Graph g;
  Tensor x = g.placeholder({2, 512}, f32, "x");
  Tensor w = g.variable(TensorData::randn({512, 8200}, f32, 3), "w");  // 16.8 MB
  Tensor y = g.add(g.matmul(x, w), g.constant(TensorData::randn({8200}, f32, 4)));
  Executable e = g.compile({{x, x.type()}}, {y}, {}, {.device = Device::cpu()});
  const std::string path = tmp("tgraph_mapped.tgx");
  e.save(path);
  const std::vector<char> good = bytes_of(path);
  ASSERT_GE(good.size(), size_t{16} << 20);
  std::vector<char> b = good;
  b[b.size() - 100] ^= 0x01;
  write(path, b);
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "checksum");
  write(path, std::vector<char>(good.begin(), good.end() - 4096));
  EXPECT_TG_ERROR(Executable::load(path), "[load]", "truncated");
  write(path, good);
  Executable l = Executable::load(path);
  TensorData in = TensorData::randn({2, 512}, f32, 9);
  const auto want = e.run({in})[0].to_vector();
  EXPECT_EQ(l.run({in})[0].to_vector(), want);
  e.save(path);  // a new file in its place (saves are atomic: a new inode)
  std::filesystem::remove(path);
  EXPECT_EQ(l.run({in})[0].to_vector(), want);
  l.set_variable("w", TensorData::randn({512, 8200}, f32, 11));
  EXPECT_NE(l.run({in})[0].to_vector(), want);
}

// Inputs of fuzz_tgx_load that crashed (tests/fuzz/regressions/tgx_crash_*.bin, payloads past
// the checksum) must fail with tg::Error: tgx_crash_1 listed node -1 in a block.
TEST(Serialize, LoaderFuzzRegressions) {
  for (int i = 1;; ++i) {
    const std::string path =
        std::string(TGRAPH_SOURCE_DIR) + "/tests/fuzz/regressions/tgx_crash_" + std::to_string(i) + ".bin";
    if (!std::filesystem::exists(path)) {
      EXPECT_GT(i, 1) << "no regression inputs found";
      break;
    }
    const std::vector<char> b = bytes_of(path);
    EXPECT_THROW(detail::deserialize_payload(b.data(), b.size()), Error) << path;
  }
}
