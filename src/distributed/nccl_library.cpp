// Loads NCCL with dlopen (nccl_library.h says why) and checks, where nccl.h is present at build
// time, that the types declared by hand match NCCL's own.
#include "distributed/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "tgraph/error.h"

#if defined(TGRAPH_HAVE_CUDA) && __has_include(<nccl.h>)  // nccl.h includes the CUDA runtime's headers
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == sizeof(tg::detail::nccl::UniqueId));
static_assert(static_cast<int>(ncclInProgress) == tg::detail::nccl::in_progress);
static_assert(static_cast<int>(ncclFloat16) == tg::detail::nccl::float16 &&
              static_cast<int>(ncclBfloat16) == tg::detail::nccl::bfloat16 &&
              static_cast<int>(ncclInt64) == tg::detail::nccl::int64 &&
              static_cast<int>(ncclFloat64) == tg::detail::nccl::float64);
static_assert(static_cast<int>(ncclMax) == tg::detail::nccl::max && static_cast<int>(ncclMin) == tg::detail::nccl::min);
#endif

namespace tg::detail::nccl {
namespace {

constexpr int kOldest = 21000;  // 2.10: stream capture of every collective, bf16

struct Loaded {
  Api api;
  std::string error;  // why it is not available ("" once loaded)
};

std::vector<std::string> candidates() {
  if (const char* p = std::getenv("TGRAPH_NCCL_LIBRARY"); p && *p) return {p};
  std::vector<std::string> c{"libnccl.so.2"};
#ifdef TGRAPH_CUDA_INCLUDE_DIR
  const std::filesystem::path root = std::filesystem::path(TGRAPH_CUDA_INCLUDE_DIR).parent_path();
  for (const char* lib : {"lib", "lib64"})
    if (std::filesystem::exists(root / lib / "libnccl.so.2")) c.push_back((root / lib / "libnccl.so.2").string());
#endif
  return c;
}

template <class F>
bool bind(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  return f != nullptr;
}

Loaded load() {
  Loaded l;
  std::string tried;
  for (const std::string& path : candidates()) {
    tried += (tried.empty() ? "" : ", ") + path;
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      l.error = dlerror();
      continue;
    }
    Api& a = l.api;
    Result (*get_version)(int*) = nullptr;
    if (!bind(h, "ncclGetVersion", get_version) || !bind(h, "ncclGetUniqueId", a.get_unique_id) ||
        !bind(h, "ncclCommInitRank", a.comm_init_rank) || !bind(h, "ncclCommDestroy", a.comm_destroy) ||
        !bind(h, "ncclCommAbort", a.comm_abort) || !bind(h, "ncclCommGetAsyncError", a.comm_get_async_error) ||
        !bind(h, "ncclGetErrorString", a.get_error_string) || !bind(h, "ncclAllReduce", a.all_reduce) ||
        !bind(h, "ncclAllGather", a.all_gather) || !bind(h, "ncclReduceScatter", a.reduce_scatter) ||
        !bind(h, "ncclBroadcast", a.broadcast)) {
      l.error = path + " lacks NCCL's entry points";
      continue;
    }
    bind(h, "ncclGetLastError", a.get_last_error);
    if (get_version(&a.version) != success || a.version < kOldest) {
      l.error = path + " is NCCL " + std::to_string(a.version) + ", older than 2.10";
      continue;
    }
    a.path = path;
    l.error.clear();
    return l;
  }
  l.error = "tried " + tried + (l.error.empty() ? "" : ": " + l.error);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Api& api(const std::string& what) {
  const Loaded& l = loaded();
  if (!l.error.empty())
    throw Error("[" + what + "] NCCL could not be loaded (" + l.error +
                "); install NCCL 2.10 or newer (libnccl.so.2), point TGRAPH_NCCL_LIBRARY at it, or use the gloo "
                "backend");
  return l.api;
}

bool available() { return loaded().error.empty(); }

std::string describe(const Api& a, Result r, Comm comm) {
  std::string s = a.get_error_string ? a.get_error_string(r) : "NCCL error " + std::to_string(r);
  if (a.get_last_error)
    if (const char* last = a.get_last_error(comm); last && *last) s += std::string(" (") + last + ")";
  return s;
}

}  // namespace tg::detail::nccl
