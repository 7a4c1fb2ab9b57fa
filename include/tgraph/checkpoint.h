#pragma once
// Checkpoints: every variable of an executable (weights, optimizer state, running statistics)
// in one checksummed file. Format (little-endian): magic "TGCKPT\r\n", u32 version, u32 count,
// u64 payload bytes, u64 FNV-1a of the payload; payload: per variable u32 name length, name,
// u8 dtype, u32 rank, i64 dims, u64 byte count, bytes.
#include <string>
#include <vector>

#include "tgraph/executable.h"

namespace tg {

/// Writes every variable the executable uses to `path`, atomically (temp file + rename).
void save_checkpoint(const Executable& exe, const std::string& path);

/// Options of load_checkpoint.
struct LoadCheckpointOptions {
  /// Refuse a file that lacks a variable the executable uses (false: such variables keep
  /// their values). Variables in the file that the executable does not use are ignored.
  bool strict = true;
};

/// Restores the variables saved in `path`; returns the names restored. The whole file is
/// checked first (magic, version, sizes, checksum, names, types): on any problem it throws
/// tg::Error and no variable changes.
std::vector<std::string> load_checkpoint(const Executable& exe, const std::string& path,
                                         const LoadCheckpointOptions& options = {});

}  // namespace tg
