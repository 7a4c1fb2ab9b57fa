// Reading whole files fast: a file of 16 MB or more is read by several threads into fresh
// anonymous memory (huge pages where the kernel gives them). One read into a new buffer, every
// page faulted in on its turn, took 147 ms of a 440 MB executable's load on the GPU machine;
// 15 ms so. Not a mapping of the file: a file rewritten in place while loaded would change (or,
// truncated, fault) the weights in use.
#include "core/read_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>

#include "core/parallel.h"

namespace tg::detail {
namespace {

// pread of [0, bytes) of fd into dst by up to 8 threads, one contiguous part each (a part's
// pages are faulted in by its own thread); false when a read fails or ends early.
bool read_in_parts(int fd, void* dst, size_t bytes) {
  const size_t parts = parallel_parts(bytes >> 24);
  std::atomic<bool> ok{true};
  run_in_parts(parts, [&](size_t i) {
    size_t at = bytes / parts * i;
    const size_t end = i + 1 == parts ? bytes : bytes / parts * (i + 1);
    while (at < end) {
      const ssize_t got = ::pread(fd, static_cast<char*>(dst) + at, end - at, static_cast<off_t>(at));
      if (got <= 0) {
        ok = false;
        return;
      }
      at += static_cast<size_t>(got);
    }
  });
  return ok;
}

}  // namespace

std::shared_ptr<std::byte> read_file_aligned(const std::string& path, const char* op, size_t& n) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(std::string("[") + op + "] " + path + " is a directory, not a file");
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (16 << 20)) {
      const size_t bytes = static_cast<size_t>(st.st_size);
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) {
        std::shared_ptr<std::byte> buf(static_cast<std::byte*>(p), [bytes](std::byte* q) { ::munmap(q, bytes); });
        ::madvise(p, bytes, MADV_HUGEPAGE);
        const bool ok = read_in_parts(fd, p, bytes);
        ::close(fd);
        if (!ok) throw Error(std::string("[") + op + "] cannot read " + path);
        n = bytes;
        return buf;
      }
    }
    ::close(fd);
  }
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error(std::string("[") + op + "] cannot open " + path);
  const std::streamoff size = f.tellg();
  n = size > 0 ? static_cast<size_t>(size) : 0;
  std::shared_ptr<std::byte> buf(new (std::align_val_t(64)) std::byte[n > 0 ? n : 1],
                                 [](std::byte* p) { ::operator delete[](p, std::align_val_t(64)); });
  if (n > 0) {
    f.seekg(0);
    if (!f.read(reinterpret_cast<char*>(buf.get()), size)) throw Error(std::string("[") + op + "] cannot read " + path);
  }
  return buf;
}

}  // namespace tg::detail
