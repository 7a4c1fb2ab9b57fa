// libFuzzer target: the graph builder driven by random op sequences on random shapes, near-
// overflow dims included. Every call builds a node or throws tg::Error; a graph whose values are
// all small and static is then compiled and run on the CPU on random data, which must finish
// or throw tg::Error. Anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tgraph/tgraph.h"

namespace {

struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n ? (--n, *p++) : 0; }
  // A dim: mostly small, sometimes 0, -1, -5 or near 2^62.
  int64_t dim() {
    const uint8_t b = byte();
    if (b < 200) return b % 7 + 1;
    if (b < 215) return 0;
    if (b < 230) return -1;
    if (b < 240) return -5;
    return (int64_t{1} << (40 + b % 23)) + (b & 1);
  }
  std::vector<int64_t> dims(size_t max_rank) {
    std::vector<int64_t> d(byte() % (max_rank + 1));
    for (auto& x : d) x = dim();
    return d;
  }
  int64_t axis() { return static_cast<int64_t>(byte() % 9) - 4; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  tg::Graph g;
  std::vector<tg::Tensor> vals, feeds;
  std::vector<tg::TensorData> inputs;
  try {
    for (int k = 0, n = 1 + in.byte() % 3; k < n; ++k) {
      const tg::DType t = in.byte() % 4 == 0 ? tg::i32 : tg::f32;
      vals.push_back(g.placeholder(tg::Shape(in.dims(4)), t, "x" + std::to_string(k)));
      feeds.push_back(vals.back());
    }
  } catch (const tg::Error&) {
    return 0;
  }
  for (int step = 0; step < 12 && in.n; ++step) {
    tg::Tensor a = vals[in.byte() % vals.size()], b = vals[in.byte() % vals.size()];
    try {
      switch (in.byte() % 16) {
        case 0: vals.push_back(g.add(a, b)); break;
        case 1: vals.push_back(g.mul(a, b)); break;
        case 2: vals.push_back(g.matmul(a, b, in.byte() & 1, in.byte() & 1)); break;
        case 3: vals.push_back(g.reshape(a, in.dims(4))); break;
        case 4: vals.push_back(g.broadcast_to(a, in.dims(5))); break;
        case 5: vals.push_back(g.transpose(a, {in.axis(), in.axis(), in.axis()})); break;
        case 6: vals.push_back(g.reduce_sum(a, {in.axis()}, in.byte() & 1)); break;
        case 7: vals.push_back(g.concat({a, b}, in.axis())); break;
        case 8: vals.push_back(g.slice(a, {in.dim() - 1, in.dim() - 1}, {in.dim(), in.dim()})); break;
        case 9: vals.push_back(g.softmax(g.cast(a, tg::f32), in.axis())); break;
        case 10: vals.push_back(g.relu(a)); break;
        case 11: vals.push_back(g.expand_dims(a, {in.axis()})); break;
        case 12: vals.push_back(g.tile(a, in.dims(4))); break;
        case 13: vals.push_back(g.pad(a, in.dims(4), in.dims(4))); break;
        case 14: vals.push_back(g.gather(a, g.cast(b, tg::i32), in.axis())); break;
        default: vals.push_back(g.squeeze(a)); break;
      }
    } catch (const tg::Error&) {
    }
  }
  // Run it when every value is small and static.
  int64_t total = 0;
  for (const tg::Tensor& v : vals) {
    const int64_t e = v.shape().num_elements();
    if (e < 0 || e > 4096) return 0;
    total += e;
  }
  try {
    std::vector<std::pair<tg::Tensor, tg::TensorType>> fl;
    for (const tg::Tensor& f : feeds) {
      fl.emplace_back(f, f.type());
      inputs.push_back(f.dtype() == tg::i32 ? tg::TensorData::uniform(f.shape(), 0, 3, tg::i32, 1)
                                            : tg::TensorData::uniform(f.shape(), -2, 2, tg::f32, 2));
    }
    tg::Executable exe = g.compile(fl, {vals.back()}, {}, {.device = tg::Device::cpu()});
    exe.run(inputs);
  } catch (const tg::Error&) {
  }
  (void)total;
  return 0;
}
