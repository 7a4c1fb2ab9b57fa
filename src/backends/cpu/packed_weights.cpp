// The packed copies of constant weights (packed_weights.h).
#include "backends/cpu/packed_weights.h"

#include <list>
#include <map>
#include <mutex>
#include <utility>

#include "backends/cpu/fast_kernels.h"

namespace tg::detail::fast {
namespace {

struct Packed {
  TensorData keep;
  dnnl::memory::desc from, layout;  // the bytes as stored, and as packed
  dnnl::memory mem;
};
std::mutex mu;
// By the weights' address, each layout they were packed in: primitives of other problems that
// want the same layout share one copy — a dynamic executable's per-size copies (a new batch or
// sequence length is a new matmul primitive, the weights the same) packed BERT-base's 340 MB
// again at every new size, ~480 ms of its first call there on 2 cores, and filled the budget
// after a few sizes.
std::map<const void*, std::list<Packed>> packed_copies;  // (a list: entries stay put)
size_t packed_bytes = 0;
constexpr size_t kBudget = size_t(2) << 30;

}  // namespace

bool constant_input(const GraphImpl& g, const Node& n, const std::vector<TensorData>& in, size_t i) {
  if (i >= n.inputs.size() || i >= in.size()) return false;
  const Node* p = g.producer(n.inputs[i]);
  return p && p->kind == OpKind::Constant && !p->data.empty() && p->data.data() == in[i].data();
}

const dnnl::memory* packed_weights(const TensorData& w, const dnnl::memory::desc& user,
                                   const dnnl::memory::desc& packed, dnnl::stream& s) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = packed_copies.find(w.data());
  if (it != packed_copies.end())
    for (const Packed& p : it->second)
      if (p.from == user && p.layout == packed) return &p.mem;
  const size_t bytes = packed.get_size();
  if (packed_bytes + bytes > kBudget) return nullptr;
  auto& eng = dnnl_cpu_engine();
  dnnl::memory m(packed, eng);
  dnnl::memory from(user, eng, const_cast<void*>(w.data()));
  dnnl::reorder(dnnl::reorder::primitive_desc(eng, user, eng, packed)).execute(s, from, m);
  s.wait();
  packed_bytes += bytes;
  std::list<Packed>& copies = packed_copies[w.data()];  // made only for a copy kept
  copies.push_back(Packed{w, user, packed, m});
  return &copies.back().mem;
}

size_t packed_weights_bytes() {
  std::lock_guard<std::mutex> lock(mu);
  return packed_bytes;
}

}  // namespace tg::detail::fast
