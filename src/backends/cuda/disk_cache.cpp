#include "backends/cuda/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

namespace tg::detail {

std::string disk_cache_dir() {
  if (const char* d = std::getenv("TGRAPH_CACHE_DIR")) return d;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/tgraph/kernels";
  return "/tmp/tgraph-kernels";
}

std::string disk_cache_path(const std::string& key, const std::string& ext) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(std::hash<std::string>()(key)));
  return disk_cache_dir() + "/" + b + ext;
}

std::vector<char> disk_cache_read(const std::string& path) {
  std::vector<char> bytes;
  if (std::ifstream f{path, std::ios::binary}) bytes.assign(std::istreambuf_iterator<char>(f), {});
  return bytes;
}

void disk_cache_write(const std::string& path, const char* data, size_t n) {
  static std::atomic<uint64_t> serial{0};
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // unique per process and write: several processes (and threads) may write one entry at once
  const std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(serial++);
  std::ofstream o{tmp, std::ios::binary};
  if (!o) return;
  o.write(data, static_cast<std::streamsize>(n));
  o.close();
  if (!o) {
    std::filesystem::remove(tmp, ec);
    return;
  }
  std::filesystem::rename(tmp, path, ec);  // atomic: readers never see half a file
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace tg::detail
