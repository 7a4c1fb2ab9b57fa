#include "backends/cuda/lent_outputs.h"

#include <map>
#include <mutex>
#include <utility>

namespace tg::detail::cuda_run {
namespace {

struct LentMap {
  std::mutex mu;
  std::map<const void*, std::pair<const Captured*, std::weak_ptr<Captured>>> by_address;
};
LentMap& lent_map() {
  static LentMap* m = new LentMap;  // never destroyed: leases may end during exit
  return *m;
}

struct Lease {
  std::shared_ptr<Captured> instance;
  std::vector<const void*> addresses;
  ~Lease() {
    LentMap& m = lent_map();
    std::lock_guard<std::mutex> lock(m.mu);
    for (const void* a : addresses) {
      auto it = m.by_address.find(a);
      if (it != m.by_address.end() && it->second.first == instance.get()) m.by_address.erase(it);
    }
  }
};

}  // namespace

std::shared_ptr<void> lend(const std::shared_ptr<Captured>& instance, const std::vector<const void*>& addresses) {
  auto lease = std::make_shared<Lease>();
  lease->instance = instance;
  lease->addresses = addresses;
  instance->lent = lease;
  LentMap& m = lent_map();
  std::lock_guard<std::mutex> lock(m.mu);
  for (const void* a : addresses) m.by_address[a] = {instance.get(), instance};
  return lease;
}

DevTensor find_lent(const void* data, const TensorType& type) {
  LentMap& m = lent_map();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.by_address.find(data);
  if (it == m.by_address.end()) return {};
  std::shared_ptr<Captured> owner = it->second.second.lock();
  if (!owner) return {};
  return DevTensor{type, DeviceBuffer(owner, static_cast<std::byte*>(const_cast<void*>(data)))};
}

}  // namespace tg::detail::cuda_run
