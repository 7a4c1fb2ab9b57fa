#pragma once
// Files that are replaced whole or not at all (saved executables, checkpoints, caches): a reader
// sees the old file or the complete new one, never a mix, whatever other writers and crashes do.
#include <cstddef>
#include <string>

namespace tg::detail {

/// A file being written to a temp name beside `path` that is unique per process and per writer
/// (`path.tmp.<pid>.<n>`), so two processes or threads saving to one path never write into
/// each other's file. commit() flushes it to disk (fsync) and renames it over `path` (atomic);
/// a writer destroyed without commit() removes its temp file. Errors are tg::Error naming `op`,
/// the file and the system's reason. Creating one first removes the temp files of `path` that
/// processes which no longer run left behind (a killed save).
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t size);
  /// Overwrites bytes already written, at `offset` (a header completed last).
  void write_at(size_t offset, const void* data, size_t size);
  void commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what);
  std::string path_, op_, tmp_;
  int fd_ = -1;
};

/// Writes `size` bytes to `path` through an AtomicFile.
void write_file_atomic(const std::string& path, const void* data, size_t size, const std::string& op);

/// Removes `path.tmp.<pid>[.<n>]` files whose process no longer runs.
void remove_stale_temps(const std::string& path);

}  // namespace tg::detail
