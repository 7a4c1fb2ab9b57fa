#include "runtime/backend.h"

#include "tgraph/error.h"

namespace tg::detail {

#ifndef TGRAPH_HAVE_CUDA
const Backend* cuda_backend() { return nullptr; }  // this build has no CUDA backend
#endif

const Backend* find_backend(Device::Kind kind) {
  return kind == Device::Kind::cuda ? cuda_backend() : cpu_backend();
}

const Backend& backend_for(Device::Kind kind, const std::string& what) {
  const Backend* b = find_backend(kind);
  if (!b) throw Error(what + " this build of tgraph has no " + (kind == Device::Kind::cuda ? "CUDA" : "CPU") + " backend");
  return *b;
}

}  // namespace tg::detail
