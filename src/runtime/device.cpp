#include "tgraph/device.h"

#include <omp.h>

#ifdef TGRAPH_HAVE_CUDA
#include "backends/cuda/cuda_info.h"
#endif

namespace tg {

int Device::cuda_device_count() {
#ifdef TGRAPH_HAVE_CUDA
  return detail::cuda_usable_devices();
#else
  return 0;
#endif
}

// The CPU until the CUDA executor lands (issue 6): compile() refuses cuda devices today, so
// "best" must not pick one. The GPU is still detected and reported (Device::cuda_device_count).
Device Device::best() { return cpu(); }

std::string Device::describe() const {
  if (kind == Kind::cpu) return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
#ifdef TGRAPH_HAVE_CUDA
  std::string d = detail::cuda_device_description(index);
  if (!d.empty()) return str() + " (" + d + ")";
#endif
  return str() + " (unavailable)";
}

std::string Device::str() const {
  return kind == Kind::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace tg
