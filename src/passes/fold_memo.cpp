#include "passes/fold_memo.h"

#include <algorithm>
#include <variant>

namespace tg::detail {

namespace {
thread_local FoldKeep* keeping = nullptr;
}  // namespace

FoldKeep::FoldKeep() : outermost_(keeping == nullptr) {
  if (outermost_) keeping = this;
}
FoldKeep::~FoldKeep() {
  if (outermost_) keeping = nullptr;
}
void FoldKeep::note(const std::shared_ptr<std::byte>& buffer) {
  if (keeping && buffer) keeping->held_.push_back(buffer);
}
std::vector<std::shared_ptr<std::byte>> FoldKeep::take() { return std::move(held_); }

FoldMemo& FoldMemo::get() {
  static FoldMemo memo;
  return memo;
}

std::string FoldMemo::step(const GraphImpl& g, const Node& n, const TensorData& x) {
  std::string k = "/" + std::to_string(static_cast<int>(n.kind)) + ":" + x.type().str() + ">" + g.type(n.outputs[0]).str();
  if (const auto* a = std::get_if<AxesDesc>(&n.attr))
    for (int64_t v : a->axes) k += "," + std::to_string(v);
  return k;
}

bool FoldMemo::find(const TensorData& x, const std::string& step, TensorData& out) {
  std::lock_guard<std::mutex> lock(mu_);
  const Origin o = origin(x);
  auto it = entries_.find({o.root_ptr, o.chain + step});
  if (it == entries_.end()) return false;
  std::shared_ptr<std::byte> root = it->second.root.lock(), folded = it->second.out.lock();
  if (!root || root.get() != o.root_ptr || !folded) return false;  // gone, or a new buffer at that address
  out = TensorData::wrap(it->second.type.shape, it->second.type.dtype, std::move(folded));
  return true;
}

void FoldMemo::add(const TensorData& x, const std::string& step, const TensorData& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.size() >= 2 * live_) {  // now and then, drop what is gone
    std::erase_if(entries_, [](const auto& e) { return e.second.root.expired() || e.second.out.expired(); });
    std::erase_if(origins_, [](const auto& e) { return e.second.self.expired() || e.second.root.expired(); });
    live_ = std::max<size_t>(64, entries_.size());
  }
  const Origin o = origin(x);
  entries_[{o.root_ptr, o.chain + step}] = Entry{o.root, out.storage(), out.type()};
  origins_[out.data()] = Origin{out.storage(), o.root, o.root_ptr, o.chain + step};
}

FoldMemo::Origin FoldMemo::origin(const TensorData& x) const {
  auto it = origins_.find(x.data());
  if (it != origins_.end()) {
    std::shared_ptr<std::byte> self = it->second.self.lock(), root = it->second.root.lock();
    if (self && self == x.storage() && root) return it->second;
  }
  return Origin{x.storage(), x.storage(), x.data(), ""};
}

}  // namespace tg::detail
