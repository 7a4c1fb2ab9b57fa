#include "backends/cuda/nvrtc_compiler.h"

#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "backends/cuda/cuda_check.h"

namespace tg::detail {
namespace {

std::mutex mu;
std::map<std::string, cudaLibrary_t> libraries;  // key -> loaded library
NvrtcStats stats;

std::string cache_dir() {
  if (const char* d = std::getenv("TGRAPH_CACHE_DIR")) return d;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/tgraph/kernels";
  return "/tmp/tgraph-kernels";
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
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
  const char* opts[] = {arch.c_str(), "--std=c++17", "-default-device", inc.c_str()};
  nvrtcResult r = nvrtcCompileProgram(prog, 4, opts);
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

CompiledKernel nvrtc_kernel(const std::string& source, const std::string& name, int device) {
  cudaDeviceProp prop{};
  static thread_local int cached_device = -1, major = 0, minor = 0;
  if (cached_device != device) {
    TG_CUDA(cudaGetDeviceProperties(&prop, device));
    cached_device = device;
    major = prop.major;
    minor = prop.minor;
  }
  std::string key = std::to_string(major) + std::to_string(minor) + ":" + source;
  std::lock_guard<std::mutex> lock(mu);
  auto it = libraries.find(key);
  if (it == libraries.end()) {
    std::string path = cache_dir() + "/" + hex(std::hash<std::string>()(key)) + ".cubin";
    std::vector<char> cubin;
    if (std::ifstream f{path, std::ios::binary}) {
      cubin.assign(std::istreambuf_iterator<char>(f), {});
      ++stats.disk_hits;
    }
    if (cubin.empty()) {
      cubin = nvrtc_compile(source, major, minor);
      ++stats.compiled;
      std::error_code ec;
      std::filesystem::create_directories(cache_dir(), ec);
      // unique per process and thread: several processes may compile the same kernel at once
      std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(reinterpret_cast<uintptr_t>(&cubin));
      if (std::ofstream o{tmp, std::ios::binary}) {
        o.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
        o.close();
        std::filesystem::rename(tmp, path, ec);  // atomic: readers never see half a file
      }
    }
    cudaLibrary_t lib;
    TG_CUDA(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    it = libraries.emplace(key, lib).first;
  } else {
    ++stats.memory_hits;
  }
  CompiledKernel k;
  TG_CUDA(cudaLibraryGetKernel(&k.kernel, it->second, name.c_str()));
  return k;
}

NvrtcStats nvrtc_stats() {
  std::lock_guard<std::mutex> lock(mu);
  return stats;
}

}  // namespace tg::detail
