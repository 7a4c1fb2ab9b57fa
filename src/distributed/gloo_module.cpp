// Loads the Gloo engine module (libtgraph_gloo.so, gloo_backend.cpp) on first use: from the
// folder of the library holding this code (an installed package), else where the build put it.
// RTLD_DEEPBIND makes the module and libgloo bind their own symbols before the process's, so
// PyTorch's bundled Gloo (whose symbols libtorch exports) and Debian's never mix.
#include <dlfcn.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "distributed/backend.h"
#include "tgraph/error.h"

namespace tg::detail {

#ifdef TGRAPH_HAVE_GLOO
namespace {

using Entry = CollectiveBackend* (*)(const Rendezvous*, char*, size_t);

Entry load_entry() {
  static Entry entry = [] {
    std::vector<std::string> tried;
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&load_entry), &self) && self.dli_fname)
      tried.push_back((std::filesystem::path(self.dli_fname).parent_path() / "libtgraph_gloo.so").string());
    tried.push_back(TGRAPH_GLOO_MODULE);
    std::string why;
    for (const std::string& path : tried) {
      if (!std::filesystem::exists(path)) continue;
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!h) {
        why = dlerror();
        continue;
      }
      if (auto* f = reinterpret_cast<Entry>(dlsym(h, "tgraph_gloo_backend"))) return f;
      why = path + " has no tgraph_gloo_backend";
    }
    throw Error("[distributed] the Gloo module libtgraph_gloo.so could not be loaded (looked in " + tried.front() +
                (tried.size() > 1 ? " and " + tried.back() : std::string()) + (why.empty() ? "" : "; " + why) + ")");
    return Entry{};
  }();
  return entry;
}

}  // namespace

std::unique_ptr<CollectiveBackend> make_gloo_backend(const Rendezvous& r) {
  char error[1024] = {};
  std::unique_ptr<CollectiveBackend> b(load_entry()(&r, error, sizeof error));
  if (!b) throw std::runtime_error(error);  // communicator.cpp words it with the rank and folder
  return b;
}

#else

std::unique_ptr<CollectiveBackend> make_gloo_backend(const Rendezvous& r) {
  throw Error("[distributed] a world of " + std::to_string(r.world) +
              " ranks needs Gloo, and this build has none (install libgloo-dev and rebuild)");
}

#endif

}  // namespace tg::detail
