// Gloo (Debian's libgloo-dev) as the CPU engine of tg::distributed: a full mesh of TCP pairs,
// set up through a FileStore in the rendezvous folder; each collective gets the next tag, the
// same on every rank since every rank issues the same collectives in the same order.
// Built as the module libtgraph_gloo.so (backend.h says why), which depends on libgloo and the
// C++ runtime only: errors leave it as std::exception, and communicator.cpp words them.
#include <cstdio>
#include <stdexcept>

#include "distributed/backend.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <filesystem>

namespace tg::detail {
namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
ReduceFn reduce_fn(CollectiveReduce op) {
  switch (op) {
    case CollectiveReduce::max: return &gloo::max<T>;
    case CollectiveReduce::min: return &gloo::min<T>;
    default: return &gloo::sum<T>;
  }
}

class GlooBackend final : public CollectiveBackend {
 public:
  explicit GlooBackend(const Rendezvous& r) : timeout_(static_cast<int64_t>(r.timeout_s * 1000)) {
    std::error_code ec;
    std::filesystem::create_directories(r.store, ec);
    gloo::transport::tcp::attr attr;
    attr.hostname = r.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore files(r.store);
    gloo::rendezvous::PrefixStore store(r.run_id, files);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(r.rank, r.world);
    ctx->setTimeout(timeout_);
    ctx->connectFullMesh(store, device);
    ctx_ = ctx;
  }

  void all_reduce(void* data, size_t count, DType dtype, CollectiveReduce op) override {
    gloo::AllreduceOptions o(ctx_);
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    switch (dtype) {
      case DType::f32: set(o, static_cast<float*>(data), count, reduce_fn<float>(op)); break;
      case DType::f64: set(o, static_cast<double*>(data), count, reduce_fn<double>(op)); break;
      case DType::i32: set(o, static_cast<int32_t*>(data), count, reduce_fn<int32_t>(op)); break;
      case DType::i64: set(o, static_cast<int64_t*>(data), count, reduce_fn<int64_t>(op)); break;
      default: throw std::invalid_argument("Gloo reduces f32, f64, i32 and i64 here");
    }
    gloo::allreduce(o);
  }

  void all_gather(const void* in, void* out, size_t bytes) override {
    gloo::AllgatherOptions o(ctx_);
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes);
    o.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(ctx_->size));
    gloo::allgather(o);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    gloo::BroadcastOptions o(ctx_);
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    o.setRoot(root);
    o.setOutput(static_cast<uint8_t*>(data), bytes);
    gloo::broadcast(o);
  }

  void barrier() override {
    gloo::BarrierOptions o(ctx_);
    o.setTag(next_tag());
    o.setTimeout(timeout_);
    gloo::barrier(o);
  }

 private:
  template <class T>
  static void set(gloo::AllreduceOptions& o, T* data, size_t count, ReduceFn fn) {
    o.setOutput(data, count);
    o.setReduceFunction(fn);
  }
  uint32_t next_tag() { return tag_++; }

  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::Context> ctx_;
  uint32_t tag_ = 0;
};

}  // namespace

}  // namespace tg::detail

extern "C" __attribute__((visibility("default"))) tg::detail::CollectiveBackend* tgraph_gloo_backend(
    const tg::detail::Rendezvous* r, char* error, size_t error_size) {
  try {
    return new tg::detail::GlooBackend(*r);
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return nullptr;
  }
}
