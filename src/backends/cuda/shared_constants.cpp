// The host bytes identify a constant: the key is their address and size, and the entry also
// remembers the storage that held them (weakly), so bytes freed and allocated again at the same
// address never find the old device copy. An entry lives while some executable holds its device
// copy; expired entries are swept as new ones come.
#include "backends/cuda/shared_constants.h"

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

namespace tg::detail {
namespace {

constexpr size_t kMinShared = size_t{64} << 10;  // smaller constants upload faster than they look up

struct Entry {
  std::weak_ptr<std::byte> storage;  // the host buffer holding the bytes
  std::weak_ptr<std::byte> device;
};

std::mutex mu;
std::map<std::tuple<int, const void*, size_t, int>, Entry> entries;
std::atomic<long long> reused{0};

}  // namespace

DeviceBuffer shared_device_constant(int device, const TensorData& host, const std::function<DeviceBuffer()>& upload) {
  const size_t bytes = host.nbytes();
  if (bytes < kMinShared || !host.storage()) return upload();
  const auto key = std::make_tuple(device, host.data(), bytes, static_cast<int>(host.dtype()));
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = entries.find(key);
    if (it != entries.end() && it->second.storage.lock() == host.storage())
      if (DeviceBuffer d = it->second.device.lock()) {
        reused += static_cast<long long>(bytes);
        return d;
      }
  }
  DeviceBuffer d = upload();  // outside the lock: a copy of hundreds of megabytes
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = entries.begin(); it != entries.end();)
    it = it->second.device.expired() ? entries.erase(it) : std::next(it);
  entries[key] = Entry{host.storage(), d};
  return d;
}

long long shared_constant_bytes_reused() { return reused.load(); }

}  // namespace tg::detail
