// Data-parallel steps (distributed.h): bucketed gradient averaging, few large all_reduces
// (one per ~25 MiB, as PyTorch's DDP) instead of one per parameter, in reverse order; and the
// initial weights made the same on every rank.
#include "tgraph/distributed.h"

#include <algorithm>

namespace tg::distributed {

std::vector<Tensor> average_gradients(Graph& g, const std::vector<Tensor>& grads, size_t bucket_bytes) {
  std::vector<Tensor> out(grads.size());
  std::vector<size_t> bucket;  // indices into grads, in the order they joined
  size_t bytes = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    if (bucket.size() == 1) {
      out[bucket[0]] = g.all_reduce(grads[bucket[0]], CollectiveReduce::mean);
    } else {
      std::vector<Tensor> flat;
      std::vector<int64_t> sizes;
      for (size_t i : bucket) {
        flat.push_back(g.reshape(grads[i], {-1}));
        sizes.push_back(grads[i].shape().num_elements());
      }
      std::vector<Tensor> parts = g.split(g.all_reduce(g.concat(flat, 0), CollectiveReduce::mean), sizes, 0);
      for (size_t k = 0; k < bucket.size(); ++k) {
        const std::vector<int64_t> dims = grads[bucket[k]].shape().dims();  // a copy: shape() is a temporary
        out[bucket[k]] = g.reshape(parts[k], dims);
      }
    }
    bucket.clear();
    bytes = 0;
  };
  for (size_t j = grads.size(); j-- > 0;) {
    const Tensor& t = grads[j];
    if (!t.valid()) continue;
    if (!t.shape().is_static()) {  // its size is known only at run time: a collective of its own
      out[j] = g.all_reduce(t, CollectiveReduce::mean);
      continue;
    }
    if (!bucket.empty() && grads[bucket[0]].dtype() != t.dtype()) flush();
    bucket.push_back(j);
    bytes += static_cast<size_t>(t.shape().num_elements()) * dtype_size(t.dtype());
    if (bytes >= bucket_bytes) flush();
  }
  flush();
  return out;
}

}  // namespace tg::distributed

namespace tg::distributed {

void broadcast_variables(const Executable& exe, int root) {
  std::vector<std::string> names = exe.variable_names();
  std::sort(names.begin(), names.end());  // the same order on every rank
  for (const std::string& n : names) {
    TensorData v = exe.variable(n);
    broadcast(v, root);
    exe.set_variable(n, v);
  }
}

}  // namespace tg::distributed
