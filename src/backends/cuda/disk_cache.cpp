#include "backends/cuda/disk_cache.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
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
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // A temp file of a unique name (mkstemp: created exclusively, never through a link), written
  // whole, then renamed over the entry: several processes may write one entry at once.
  std::string tmp = path + ".tmpXXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return;
  bool ok = true;
  for (size_t at = 0; ok && at < n;) {
    const ssize_t k = ::write(fd, data + at, n - at);
    if (k < 0 && errno == EINTR) continue;
    ok = k > 0;
    if (ok) at += static_cast<size_t>(k);
  }
  ok = (::close(fd) == 0) && ok;
  if (ok) std::filesystem::rename(tmp, path, ec);  // atomic: readers never see half a file
  if (!ok || ec) std::filesystem::remove(tmp, ec);
}

std::string disk_cache_read_keyed(const std::string& key, const std::string& ext) {
  const std::vector<char> b = disk_cache_read(disk_cache_path(key, ext));
  if (b.size() <= key.size() + 1 || std::string(b.data(), key.size()) != key || b[key.size()] != '\0') return {};
  return std::string(b.begin() + static_cast<std::ptrdiff_t>(key.size()) + 1, b.end());
}

void disk_cache_write_keyed(const std::string& key, const std::string& ext, const std::string& bytes) {
  std::string entry = key;
  entry.push_back('\0');
  entry += bytes;
  disk_cache_write(disk_cache_path(key, ext), entry.data(), entry.size());
}

}  // namespace tg::detail
