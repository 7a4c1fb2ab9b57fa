#pragma once
// Files of the machine's compile cache ($TGRAPH_CACHE_DIR, default ~/.cache/tgraph/kernels):
// generated kernels' cubins (nvrtc_compiler.cpp), cuDNN's built attention plans
// (cudnn_attention.cpp) and the libraries' algorithm choices (cudnn_conv.cpp, matmul_lt.cpp),
// each named by a hash of what it was made from. Written to a temp file and renamed, so two
// processes writing one entry at once, or a crash mid-write, leave a whole file or none.
// Bounded by TGRAPH_KERNEL_CACHE_MB (default 2048): the least recently used entries go first.
// Kept apart from the CUDA backend (it needs no CUDA), so every build tests it.
#include <cstdint>
#include <string>
#include <vector>

namespace tg::detail {

/// The cache directory.
std::string disk_cache_dir();
/// The path of the entry made from `key`, ending in `ext` (".cubin").
std::string disk_cache_path(const std::string& key, const std::string& ext);
/// The entry's bytes, empty when there is none (a read marks the entry as recently used).
std::vector<char> disk_cache_read(const std::string& path);
/// Writes the entry (best effort: a cache that cannot be written is only slower).
void disk_cache_write(const std::string& path, const char* data, size_t n);

/// An entry that holds its key before its bytes (key, NUL, bytes), so a hash collision of two
/// keys reads as a miss: the bytes filed under `key`, empty when there are none.
std::string disk_cache_read_keyed(const std::string& key, const std::string& ext);
void disk_cache_write_keyed(const std::string& key, const std::string& ext, const std::string& bytes);

/// Deletes the least recently used entries of `dir` (only files named as entries are, and
/// temp files a crash left behind) until they hold at most `keep_bytes` (counted in whole 4 KiB
/// blocks, as they take the disk). Writes call it when
/// the cache may have grown past its bound; public for the tests.
void disk_cache_prune(const std::string& dir, uint64_t keep_bytes);
/// The bound in bytes (TGRAPH_KERNEL_CACHE_MB, read at each call).
uint64_t disk_cache_bound();
/// Returns once no pruning a write started is under way (writes prune on a thread of their own).
void disk_cache_settle();

}  // namespace tg::detail
