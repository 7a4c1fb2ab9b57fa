// The machine's compile cache (runtime/disk_cache.h): keyed entries, the size bound (least
// recently used out), and two processes writing one entry at once (issue 22).
#include "runtime/disk_cache.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace tg::detail;

namespace {

// TGRAPH_CACHE_DIR pointed at a fresh directory while in scope (the cache's directory is read
// per process, not per thread, so this one test-only setenv is the only way to move it).
class CacheDir {
 public:
  explicit CacheDir(const std::string& name)
      : dir_(fs::temp_directory_path() / ("tgraph_disk_cache_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    if (const char* old = std::getenv("TGRAPH_CACHE_DIR")) old_ = old, had_ = true;
    setenv("TGRAPH_CACHE_DIR", dir_.c_str(), 1);
  }
  ~CacheDir() {
    if (had_) setenv("TGRAPH_CACHE_DIR", old_.c_str(), 1);
    else unsetenv("TGRAPH_CACHE_DIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
  std::string old_;
  bool had_ = false;
};

uint64_t entry_bytes(const fs::path& dir, int* count = nullptr) {
  uint64_t total = 0;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().find(".tmp") == std::string::npos)
      total += e.file_size(), ++n;
  if (count) *count = n;
  return total;
}

void age(const fs::path& p, int minutes) {
  fs::last_write_time(p, fs::file_time_type::clock::now() - std::chrono::minutes(minutes));
}

}  // namespace

TEST(DiskCache, KeyedEntriesReadBackAndACollisionReadsAsAMiss) {
  CacheDir d("keyed");
  disk_cache_write_keyed("sig|conv|problem one", ".choice", "3 1 4096");
  EXPECT_EQ(disk_cache_read_keyed("sig|conv|problem one", ".choice"), "3 1 4096");
  EXPECT_EQ(disk_cache_read_keyed("sig|conv|problem two", ".choice"), "");
  // Another key's bytes under this key's file name (a hash collision): not taken.
  const std::string other = std::string("sig|conv|problem other") + '\0' + "7 0 0";
  disk_cache_write(disk_cache_path("sig|conv|problem two", ".choice"), other.data(), other.size());
  EXPECT_EQ(disk_cache_read_keyed("sig|conv|problem two", ".choice"), "");
  // A truncated entry (the key alone) is a miss too.
  const std::string cut = "sig|conv|problem three";
  disk_cache_write(disk_cache_path(cut, ".choice"), cut.data(), cut.size());
  EXPECT_EQ(disk_cache_read_keyed(cut, ".choice"), "");
}

TEST(DiskCache, PruningDropsTheLeastRecentlyUsedEntriesOnly) {
  CacheDir d("prune");
  const std::string kb100(100 << 10, 'x');
  std::vector<std::string> paths;
  for (int i = 0; i < 10; ++i) {
    paths.push_back(disk_cache_path("entry " + std::to_string(i), ".cubin"));
    disk_cache_write(paths.back(), kb100.data(), kb100.size());
    age(paths.back(), 100 - i);  // entry 0 the oldest
  }
  ASSERT_EQ(entry_bytes(d.path()), 10u * kb100.size());
  EXPECT_EQ(disk_cache_read(paths[0]).size(), kb100.size());  // used now: the newest
  // Files that are not entries stay whatever their age: another cache's folder, a note, and a
  // temp file of a write in progress; a temp file a crash left (hours old) goes.
  fs::create_directories(d.path() / "torch");
  std::ofstream(d.path() / "torch" / "model.tgx") << std::string(300 << 10, 'y');
  std::ofstream(d.path() / "README") << "notes";
  const fs::path writing = paths[1] + ".tmpAbC123", crashed = paths[2] + ".tmpXyZ789";
  std::ofstream(writing) << "partial";
  std::ofstream(crashed) << "partial";
  age(d.path() / "README", 1000);
  age(crashed, 180);

  disk_cache_prune(d.path().string(), 500 << 10);
  // Down to three quarters of 500 KB: the three newest 100 KB entries stay, entry 0 among them.
  int count = 0;
  EXPECT_LE(entry_bytes(d.path(), &count), uint64_t{375} << 10);
  EXPECT_TRUE(fs::exists(paths[0]));
  EXPECT_TRUE(fs::exists(paths[9]));
  EXPECT_TRUE(fs::exists(paths[8]));
  for (int i = 1; i <= 7; ++i) EXPECT_FALSE(fs::exists(paths[static_cast<size_t>(i)])) << i;
  EXPECT_TRUE(fs::exists(d.path() / "torch" / "model.tgx"));
  EXPECT_TRUE(fs::exists(d.path() / "README"));
  EXPECT_TRUE(fs::exists(writing));
  EXPECT_FALSE(fs::exists(crashed));
  // Under the bound nothing goes.
  disk_cache_prune(d.path().string(), 500 << 10);
  EXPECT_TRUE(fs::exists(paths[8]));
}

TEST(DiskCache, WritesKeepTheCacheWithinItsBound) {
  CacheDir d("bound");
  setenv("TGRAPH_KERNEL_CACHE_MB", "1", 1);
  const std::string kb100(100 << 10, 'z');
  for (int i = 0; i < 60; ++i) {
    const std::string p = disk_cache_path("bounded " + std::to_string(i), ".cubin");
    disk_cache_write(p, kb100.data(), kb100.size());
    disk_cache_settle();  // pruning runs on a thread of its own
    age(p, 60 - i);
  }
  unsetenv("TGRAPH_KERNEL_CACHE_MB");
  // Measured every eighth of the bound written: at most the bound, an eighth and one entry.
  EXPECT_LE(entry_bytes(d.path()), (uint64_t{1} << 20) + (uint64_t{1} << 17) + kb100.size());
  EXPECT_TRUE(fs::exists(disk_cache_path("bounded 59", ".cubin")));  // the newest stays
  EXPECT_FALSE(fs::exists(disk_cache_path("bounded 0", ".cubin")));
}

TEST(DiskCache, TwoProcessesWritingOneEntryLeaveAWholeOne) {
  CacheDir d("racing");
  const std::string path = disk_cache_path("one entry", ".cubin");
  constexpr size_t kSize = 256 << 10;
  std::vector<pid_t> kids;
  for (char fill : {'a', 'b'}) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // a writer: its own whole entry, again and again
      const std::string bytes(kSize, fill);
      for (int i = 0; i < 200; ++i) disk_cache_write(path, bytes.data(), bytes.size());
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  // Meanwhile every read is nothing yet or one writer's whole entry, never a mix or a part: read
  // until both writers are done (at least 400 times).
  int whole = 0, running = 2;
  for (int i = 0; running > 0 || i < 400; ++i) {
    const std::vector<char> got = disk_cache_read(path);
    if (!got.empty()) {
      ASSERT_EQ(got.size(), kSize);
      ASSERT_TRUE(got.front() == 'a' || got.front() == 'b');
      ASSERT_EQ(std::count(got.begin(), got.end(), got.front()), static_cast<std::ptrdiff_t>(kSize));
      ++whole;
    }
    for (pid_t& k : kids) {
      int status = 0;
      if (k > 0 && ::waitpid(k, &status, WNOHANG) == k) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        k = 0;
        --running;
      }
    }
  }
  const std::vector<char> last = disk_cache_read(path);
  ASSERT_EQ(last.size(), kSize);
  EXPECT_EQ(std::count(last.begin(), last.end(), last.front()), static_cast<std::ptrdiff_t>(kSize));
  EXPECT_GT(whole, 0);
  for (const auto& e : fs::directory_iterator(d.path()))  // no temp file left behind
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}
