#include "backends/cuda/library_plans.h"

#include "backends/cuda/cudnn_conv_graph.h"

#include <cublasLt.h>
#include <cudnn.h>

#include <mutex>

#include "backends/cuda/nvrtc_compiler.h"
#include "runtime/disk_cache.h"

namespace tg::detail {

std::string library_signature(int device) {
  // Never destroyed (warm-up threads may ask while the program exits: library_warmup.h).
  static auto* mu = new std::mutex;
  static auto* made = new std::map<int, std::string>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = made->find(device);
  if (it != made->end()) return it->second;
  const auto [major, minor] = nvrtc_arch(device);
  return (*made)[device] = "cudnn" + std::to_string(cudnnGetVersion()) + ".cublasLt" +
                        std::to_string(cublasLtGetVersion()) + ".sm" + std::to_string(major) + std::to_string(minor);
}

namespace {
constexpr const char* kChoiceExt = ".choice";
}  // namespace

std::string library_choice_from_disk(const std::string& key) { return disk_cache_read_keyed(key, kChoiceExt); }

void library_choice_to_disk(const std::string& key, const std::string& value) {
  disk_cache_write_keyed(key, kChoiceExt, value);
}

void provide_library_plans(const std::map<std::string, std::string>& plans, int device) {
  if (plans.empty()) return;
  const std::string sig = library_signature(device) + "|";
  for (const auto& [key, value] : plans) {
    if (key.compare(0, sig.size(), sig) != 0) continue;  // another library version or GPU: asked again
    const size_t kind_end = key.find('|', sig.size());
    if (kind_end == std::string::npos) continue;
    const std::string kind = key.substr(sig.size(), kind_end - sig.size()), problem = key.substr(kind_end + 1);
    if (kind == "conv") cudnn_conv_provide(problem, value, device);
    else if (kind == "convg") cudnn_conv_graph_provide(problem, value, device);
    else if (kind == "lt") matmul_lt_provide(problem, value, device);
    else if (kind == "attn") cudnn_attention_provide(problem, value, device);
  }
}

}  // namespace tg::detail
