#pragma once
// A whole file's bytes in one read (models and executables reach hundreds of megabytes; reading
// them through istreambuf_iterator goes a character at a time).
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tgraph/error.h"

namespace tg::detail {

/// The bytes of `path`; throws tg::Error("[<op>] cannot open <path>") when it cannot be read.
inline std::string read_file(const std::string& path, const char* op) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))  // an ifstream "opens" one and reports its size as -1
    throw Error(std::string("[") + op + "] " + path + " is a directory, not a file");
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw Error(std::string("[") + op + "] cannot open " + path);
  const std::streamoff size = f.tellg();
  std::string bytes;
  if (size > 0) {
    bytes.resize(static_cast<size_t>(size));
    f.seekg(0);
    if (!f.read(bytes.data(), size)) throw Error(std::string("[") + op + "] cannot read " + path);
  }
  return bytes;
}

/// The bytes of `path` in a 64-byte aligned buffer, not zero-filled first (an executable's
/// tensors may then point into it); `n` is set to their count. Large files are read by several
/// threads (read_file.cpp).
std::shared_ptr<std::byte> read_file_aligned(const std::string& path, const char* op, size_t& n);

}  // namespace tg::detail
