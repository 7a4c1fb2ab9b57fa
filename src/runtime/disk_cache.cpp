#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>
#include <tuple>

namespace tg::detail {
namespace fs = std::filesystem;
namespace {

// "<16 hex digits>.<ext>" (disk_cache_path's names): what pruning may delete.
bool is_entry_name(const std::string& name) {
  if (name.size() < 18 || name[16] != '.') return false;
  return std::all_of(name.begin(), name.begin() + 16, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// The directory is measured at this process's first write and again after every eighth of the
// bound it has written since (a scan per write would cost more than the entries save).
std::atomic<bool> measured{false};
std::atomic<uint64_t> unmeasured{0};

// On a thread of its own (a scan of a large directory is milliseconds, and writes are made
// under library locks), one at a time.
std::atomic<bool> pruning{false};

void maybe_prune(const std::string& dir, size_t n) {
  const uint64_t bound = disk_cache_bound(), blocks = (n + 4095) / 4096 * 4096;  // as pruning counts
  if (measured.exchange(true) && unmeasured.fetch_add(blocks) + blocks < bound / 8) return;
  if (pruning.exchange(true)) return;  // the next write measures again
  unmeasured.store(0);
  try {
    std::thread([dir, bound] {
      disk_cache_prune(dir, bound);
      pruning.store(false);
    }).detach();
  } catch (const std::exception&) {  // no thread: pruned at a later write
    pruning.store(false);
  }
}

}  // namespace

std::string disk_cache_dir() {
  if (const char* d = std::getenv("TGRAPH_CACHE_DIR")) return d;
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/tgraph/kernels";
  return "/tmp/tgraph-kernels";
}

uint64_t disk_cache_bound() {
  uint64_t mb = 2048;
  if (const char* v = std::getenv("TGRAPH_KERNEL_CACHE_MB")) {
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v, &end, 10);
    if (end != v && *end == '\0') mb = x;
  }
  return mb << 20;
}

std::string disk_cache_path(const std::string& key, const std::string& ext) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(std::hash<std::string>()(key)));
  return disk_cache_dir() + "/" + b + ext;
}

std::vector<char> disk_cache_read(const std::string& path) {
  std::vector<char> bytes;
  if (std::ifstream f{path, std::ios::binary}) bytes.assign(std::istreambuf_iterator<char>(f), {});
  // Used now: its modification time is what pruning orders by (access times are often off).
  if (!bytes.empty()) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return bytes;
}

void disk_cache_write(const std::string& path, const char* data, size_t n) {
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  fs::create_directories(dir, ec);
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
  if (ok) fs::rename(tmp, path, ec);  // atomic: readers never see half a file
  if (!ok || ec) fs::remove(tmp, ec);
  if (ok && !ec) maybe_prune(dir.string(), n);
}

void disk_cache_prune(const std::string& dir, uint64_t keep_bytes) {
  std::error_code ec;
  std::vector<std::tuple<fs::file_time_type, uint64_t, fs::path>> entries;
  uint64_t total = 0;
  const auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_entry_name(name) || !it->is_regular_file(ec)) continue;
    const fs::file_time_type t = it->last_write_time(ec);
    if (ec) continue;
    if (name.find(".tmp") != std::string::npos) {  // a write that never finished (a crash)
      if (t < stale) fs::remove(it->path(), ec);
      continue;
    }
    // Its size on disk: whole 4 KiB blocks (a choice's ~100 bytes take one).
    const uint64_t size = (it->file_size(ec) + 4095) / 4096 * 4096;
    if (ec) continue;
    entries.emplace_back(t, size, it->path());
    total += size;
  }
  if (total <= keep_bytes) return;
  // Down to three quarters of the bound, oldest first: the next writes then find room without
  // a scan each. Another process may delete the same file first: that is no error.
  const uint64_t target = keep_bytes / 4 * 3;
  std::sort(entries.begin(), entries.end());
  for (const auto& [t, size, p] : entries) {
    if (total <= target) break;
    fs::remove(p, ec);
    total -= size;
  }
}

void disk_cache_settle() {
  while (pruning.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
