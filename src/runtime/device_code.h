#pragma once
// The generated device code an executable has used: the architecture and source of each NVRTC
// kernel its runs compiled or loaded. Executable::save writes them with their cubins, and a load
// hands the cubins back (nvrtc_provide), so a saved executable runs in a fresh process without
// compiling (issue 22). Kept apart from the CUDA backend so a build without CUDA reads and
// writes the same files.
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tg::detail {

struct DeviceCode {
  struct Kernel {
    int major = 0, minor = 0;  // sm_<major><minor>
    std::string source;
    std::vector<char> cubin;   // filled when written to or read from a file
  };
  /// Where a kernel came from when a run asked for it.
  enum class Origin { compiled, disk_cache, file, memory };

  std::mutex mu;
  std::map<std::string, Kernel> kernels;  // by device_code_key
  /// The library choices the runs made (cuDNN's convolution algorithms, cuBLASLt's matmul
  /// algorithms), by "<libraries and architecture>|<kind>|<problem>": written with the
  /// executable and handed back to the libraries' caches on load, so a loaded executable asks
  /// no heuristic what it had chosen (issue 22). Entries for other libraries are ignored.
  std::map<std::string, std::string> plans;
  /// Library plans a run used no value of yet: cuDNN's attention plan for a shape still being
  /// built on a thread while tgraph's own kernel stood in (attention_tiers.cpp). Executable::save
  /// asks each for its value (waiting for the build) and records a non-empty one in `plans`.
  std::map<std::string, std::function<std::string()>> later;
  int compiled = 0;                       // kernels NVRTC compiled for this executable's runs
  int from_file = 0;                      // kernels whose cubin came from the executable's file

  void record(int major, int minor, const std::string& source, Origin origin);
};

/// Records a library choice in the DeviceCode of the run in progress on this thread (if any);
/// `replace` false keeps a value already recorded (no copy of a large one on every run).
void record_library_plan(const std::string& key, const std::string& value, bool replace = true);

/// Records in the DeviceCode of the run in progress on this thread (if any) a library plan whose
/// value `value_later` gives when asked (DeviceCode::later).
void record_library_plan_later(const std::string& key, std::function<std::string()> value_later);

/// The key of a kernel: "<major><minor>:<source>" (NVRTC's caches use the same).
std::string device_code_key(int major, int minor, const std::string& source);

/// While alive, the kernels this thread compiles or loads are recorded in `code` (null: none).
class DeviceCodeScope {
 public:
  explicit DeviceCodeScope(DeviceCode* code);
  ~DeviceCodeScope();
  DeviceCodeScope(const DeviceCodeScope&) = delete;
  DeviceCodeScope& operator=(const DeviceCodeScope&) = delete;

 private:
  DeviceCode* saved_;
};

/// The DeviceCode of the run in progress on this thread, or null.
DeviceCode* current_device_code();

}  // namespace tg::detail
