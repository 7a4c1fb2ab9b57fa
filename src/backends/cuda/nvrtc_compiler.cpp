#include "backends/cuda/nvrtc_compiler.h"

#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "runtime/disk_cache.h"
#include "runtime/device_code.h"

namespace tg::detail {
namespace {

std::mutex mu;
std::map<std::string, cudaLibrary_t> libraries;  // key -> loaded library
std::map<std::string, std::vector<char>> provided;  // key -> cubin from an executable's file
NvrtcStats stats;

void note(int major, int minor, const std::string& source, DeviceCode::Origin origin) {
  if (DeviceCode* c = current_device_code()) c->record(major, minor, source, origin);
}

void nvrtc_check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw Error(std::string("[nvrtc] ") + what + ": " + nvrtcGetErrorString(r));
}

}  // namespace

std::vector<char> nvrtc_compile(const std::string& source, int major, int minor) {
  nvrtcProgram prog;
  nvrtc_check(nvrtcCreateProgram(&prog, source.c_str(), "tgraph_kernel.cu", 0, nullptr, nullptr), "create");
  std::string arch = "--gpu-architecture=sm_" + std::to_string(major) + std::to_string(minor);
  std::string inc = std::string("-I") + TGRAPH_CUDA_INCLUDE_DIR;
  // No fast math (IEEE division, sqrt and denormals, as the reference). FMA contraction stays
  // on: it costs nothing in accuracy and 20% of speed on erf-heavy kernels when off; fused and
  // unfused results may then differ in the last bit (docs/decisions.md).
  // --pch (NVRTC 12.8+): the cuda_fp16.h / cuda_bf16.h every kernel includes are parsed once
  // per process, not per kernel: 40% less compile time, byte-identical cubins (measured).
  // Compiles on parallel threads scale on a machine with the cores (H200 machine, 16 cores: 41
  // kernels 7.7 s on one thread, 0.74 s on four; bench_nvrtc_parallel). ResNet-50's cold first
  // step was slow because it compiled 377 sources for 38 distinct kernels (values were named by
  // graph id; elementwise_codegen.cpp names them by position now), not for want of threads.
  static const bool pch = [] {
    int major = 0, minor = 0;
    return nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && (major > 12 || (major == 12 && minor >= 8));
  }();
  const char* opts[] = {arch.c_str(), "--std=c++17", "-default-device", inc.c_str(), "--pch"};
  nvrtcResult r = nvrtcCompileProgram(prog, pch ? 5 : 4, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    throw Error("[nvrtc] compiling a generated kernel failed:\n" + log + "\n--- source ---\n" + source);
  }
  size_t n = 0;
  nvrtc_check(nvrtcGetCUBINSize(prog, &n), "cubin size");
  std::vector<char> cubin(n);
  nvrtc_check(nvrtcGetCUBIN(prog, cubin.data()), "cubin");
  nvrtcDestroyProgram(&prog);
  return cubin;
}

namespace {

}  // namespace

// The device's architecture (cached per thread).
std::pair<int, int> nvrtc_arch(int device) {
  static thread_local int cached_device = -1, major = 0, minor = 0;
  if (cached_device != device) {
    cudaDeviceProp prop{};
    TG_CUDA(cudaGetDeviceProperties(&prop, device));
    cached_device = device;
    major = prop.major;
    minor = prop.minor;
  }
  return {major, minor};
}

namespace {

std::string disk_path(const std::string& key) { return disk_cache_path(key, ".cubin"); }

std::vector<char> read_cached(const std::string& key) { return disk_cache_read(disk_path(key)); }

void write_cached(const std::string& key, const std::vector<char>& cubin) {
  disk_cache_write(disk_path(key), cubin.data(), cubin.size());
}

// The cubin of `source` from the disk cache (hit), or compiled now and cached there.
std::vector<char> disk_or_compile(const std::string& key, const std::string& source, int major, int minor, bool& hit) {
  std::vector<char> cubin = read_cached(key);
  hit = !cubin.empty();
  if (!hit) {
    cubin = nvrtc_compile(source, major, minor);
    write_cached(key, cubin);
  }
  return cubin;
}

// Compiles in flight or done, by key; taken by the nvrtc_kernel that loads them.
std::map<std::string, std::shared_future<std::vector<char>>> pending;

// Worker threads for prefetched compiles: started on first use, one per core, detached (they
// only wait on the queue when idle, so a process may exit with them blocked there).
struct CompilePool {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::function<void()>> jobs;
  CompilePool() {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i)
      std::thread([this] {
        for (;;) {
          std::function<void()> job;
          {
            std::unique_lock<std::mutex> lock(m);
            cv.wait(lock, [this] { return !jobs.empty(); });
            job = std::move(jobs.front());
            jobs.pop_front();
          }
          job();
        }
      }).detach();
  }
  void submit(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(m);
      jobs.push_back(std::move(job));
    }
    cv.notify_one();
  }
};
CompilePool& compile_pool() {
  static auto* p = new CompilePool;  // never destroyed (detached workers use it)
  return *p;
}

}  // namespace

void nvrtc_prefetch(const std::string& source, int device) {
  const auto [major, minor] = nvrtc_arch(device);
  std::string key = device_code_key(major, minor, source);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (libraries.count(key) || pending.count(key) || provided.count(key)) return;  // recorded when loaded
  }
  if (std::filesystem::exists(disk_path(key))) return;  // loading it later is cheap
  note(major, minor, source, DeviceCode::Origin::compiled);
  auto job = std::make_shared<std::packaged_task<std::vector<char>()>>([source, key, major = major, minor = minor] {
    std::vector<char> cubin = nvrtc_compile(source, major, minor);
    write_cached(key, cubin);
    return cubin;
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!pending.emplace(key, job->get_future().share()).second) return;
    ++stats.compiled;
    ++stats.prefetched;
  }
  compile_pool().submit([job] { (*job)(); });
}

// TGRAPH_DUMP_KERNELS=dir: each generated kernel's source, once, as dir/<name>-<hash>.cu (to
// read what a slow kernel in a profile does).
static void dump_source(const std::string& source, const std::string& name) {
  const char* dir = std::getenv("TGRAPH_DUMP_KERNELS");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char h[17];
  std::snprintf(h, sizeof h, "%016llx", static_cast<unsigned long long>(std::hash<std::string>()(source)));
  std::ofstream(std::string(dir) + "/" + name + "-" + h + ".cu") << source;
}

CompiledKernel nvrtc_kernel(const std::string& source, const std::string& name, int device) {
  const auto [major, minor] = nvrtc_arch(device);
  std::string key = device_code_key(major, minor, source);
  std::unique_lock<std::mutex> lock(mu);
  auto it = libraries.find(key);
  if (it == libraries.end()) {
    dump_source(source, name);
    // Compiled outside the lock: other threads' kernels (and prefetched ones) go on meanwhile.
    std::vector<char> cubin;
    auto p = pending.find(key);
    auto from_file = provided.find(key);
    if (from_file != provided.end()) {
      cubin = from_file->second;
      ++stats.provided;
      note(major, minor, source, DeviceCode::Origin::file);
    } else if (p != pending.end()) {
      std::shared_future<std::vector<char>> f = p->second;
      lock.unlock();
      cubin = f.get();  // a compile error is thrown here, with NVRTC's log
      lock.lock();
      // Recorded for this run's executable too: the prefetch may have been another's (a size
      // prepared ahead, runtime/size_classes.h), and a save must carry the kernel.
      note(major, minor, source, DeviceCode::Origin::memory);
    } else {
      lock.unlock();
      bool hit;
      cubin = disk_or_compile(key, source, major, minor, hit);
      lock.lock();
      ++(hit ? stats.disk_hits : stats.compiled);
      note(major, minor, source, hit ? DeviceCode::Origin::disk_cache : DeviceCode::Origin::compiled);
    }
    pending.erase(key);
    it = libraries.find(key);  // another thread may have loaded it meanwhile
    if (it == libraries.end()) {
      cudaLibrary_t lib;
      TG_CUDA(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
      it = libraries.emplace(key, lib).first;
    }
  } else {
    ++stats.memory_hits;
    lock.unlock();
    note(major, minor, source, DeviceCode::Origin::memory);
  }
  CompiledKernel k;
  TG_CUDA(cudaLibraryGetKernel(&k.kernel, it->second, name.c_str()));
  return k;
}

std::vector<char> nvrtc_cubin(const std::string& source, int major, int minor) {
  const std::string key = device_code_key(major, minor, source);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto f = provided.find(key); f != provided.end()) return f->second;
  }
  bool hit;
  std::vector<char> cubin = disk_or_compile(key, source, major, minor, hit);
  std::lock_guard<std::mutex> lock(mu);
  ++(hit ? stats.disk_hits : stats.compiled);
  return cubin;
}

void nvrtc_provide(int major, int minor, const std::string& source, std::vector<char> cubin) {
  if (cubin.empty()) return;
  std::lock_guard<std::mutex> lock(mu);
  provided.try_emplace(device_code_key(major, minor, source), std::move(cubin));
}

void nvrtc_note_use(const std::string& source, int device) {
  if (!current_device_code()) return;
  const auto [major, minor] = nvrtc_arch(device);
  note(major, minor, source, DeviceCode::Origin::memory);
}

NvrtcStats nvrtc_stats() {
  std::lock_guard<std::mutex> lock(mu);
  return stats;
}

}  // namespace tg::detail
