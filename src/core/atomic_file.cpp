#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tgraph/error.h"

namespace tg::detail {
namespace {

std::atomic<unsigned long> writers{0};

// The pid in a temp name `<file>.tmp.<pid>` or `<file>.tmp.<pid>.<n>`; 0 when it is not one.
long temp_pid(const std::string& name, const std::string& file) {
  const std::string prefix = file + ".tmp.";
  if (name.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  const std::string pid = rest.substr(0, dot), n = dot == std::string::npos ? "1" : rest.substr(dot + 1);
  auto digits = [](const std::string& s) { return !s.empty() && s.size() < 12 && s.find_first_not_of("0123456789") == std::string::npos; };
  return digits(pid) && digits(n) ? std::stol(pid) : 0;
}

}  // namespace

void remove_stale_temps(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string file = p.filename().string();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const long pid = temp_pid(it->path().filename().string(), file);
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);
    }
  }
}

AtomicFile::AtomicFile(std::string path, std::string op) : path_(std::move(path)), op_(std::move(op)) {
  remove_stale_temps(path_);
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++writers);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("[" + op_ + "] cannot create " + tmp_ + ": " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(const std::string& what) {
  const int e = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw Error("[" + op_ + "] " + what + ": " + std::strerror(e));
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw Error("[" + op_ + "] " + path_ + " is already committed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + tmp_);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::write_at(size_t offset, const void* data, size_t size) {
  if (fd_ < 0) throw Error("[" + op_ + "] " + path_ + " is already committed");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write " + tmp_);
    p += n;
    offset += static_cast<size_t>(n);
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw Error("[" + op_ + "] " + path_ + " is already committed");
  if (::fsync(fd_) != 0) fail("cannot flush " + tmp_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("cannot close " + tmp_);
  }
  fd_ = -1;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw Error("[" + op_ + "] cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(e));
  }
}

void write_file_atomic(const std::string& path, const void* data, size_t size, const std::string& op) {
  AtomicFile f(path, op);
  f.write(data, size);
  f.commit();
}

}  // namespace tg::detail
