// NCCL between GPUs (backend.h): one communicator per process on its device, set up through
// NCCL's own bootstrap, and host collectives staged through it. NCCL is loaded at run time
// (nccl_library.h), so this builds and runs without it.
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "distributed/backend.h"
#include "tgraph/error.h"

#ifdef TGRAPH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "distributed/nccl_library.h"
#endif

namespace tg::detail {

#ifdef TGRAPH_HAVE_CUDA
namespace {

std::string where(const Rendezvous& r) { return "rank " + std::to_string(r.rank) + " of " + std::to_string(r.world); }

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
  }
}

// The communicator's id: NCCL makes it from NCCL_COMM_ID on every rank when the user set it
// (rank 0 then listens there); otherwise rank 0 makes one and leaves it in the rendezvous
// folder (written whole under another name, then renamed) for the others to read.
nccl::UniqueId unique_id(const nccl::Api& a, const Rendezvous& r) {
  nccl::UniqueId id{};
  const char* comm_id = std::getenv("NCCL_COMM_ID");
  if (r.world == 1 || (comm_id && *comm_id) || r.rank == 0) {
    if (nccl::Result e = a.get_unique_id(&id); e != nccl::success)
      throw Error("[distributed] init: " + where(r) + ": ncclGetUniqueId failed: " + nccl::describe(a, e, nullptr));
    if (r.world == 1 || (comm_id && *comm_id)) return id;
  }
  namespace fs = std::filesystem;
  const fs::path file = fs::path(r.store) / (r.run_id + ".nccl_id");
  if (r.rank == 0) {
    std::error_code ec;
    fs::create_directories(r.store, ec);
    const fs::path tmp = file.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, sizeof id.internal);
      if (!out) throw Error("[distributed] init: rank 0 could not write NCCL's id to " + tmp.string());
    }
    fs::rename(tmp, file, ec);
    if (ec) throw Error("[distributed] init: rank 0 could not write NCCL's id to " + file.string() + ": " + ec.message());
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(r.timeout_s);
  for (;;) {
    std::ifstream in(file, std::ios::binary);
    if (in.read(id.internal, sizeof id.internal)) return id;
    if (std::chrono::steady_clock::now() > deadline)
      throw Error("[distributed] init: " + where(r) + ": rank 0's NCCL id did not appear in " + file.string() +
                  " within " + std::to_string(static_cast<int>(r.timeout_s)) + " s (is rank 0 running, with the same "
                  "TGRAPH_DIST_STORE and run id?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class NcclEngine final : public DeviceCollectives {
 public:
  NcclEngine(const Rendezvous& r, int device) : a_(nccl::api("distributed")), device_(device), world_(r.world) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);  // the rule; a value the user set is kept
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) (void)cudaGetLastError();
    if (device < 0 || device >= count)
      throw Error("[distributed] init: " + where(r) + ": the nccl backend needs CUDA device " + std::to_string(device) +
                  ", and this process sees " + std::to_string(count) + " (set device=, or use the gloo backend)");
    const nccl::UniqueId id = unique_id(a_, r);
    int saved = 0;
    cuda_ok(cudaGetDevice(&saved), "cudaGetDevice");
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    nccl::Comm comm = nullptr;
    const nccl::Result e = a_.comm_init_rank(&comm, r.world, id, r.rank);
    comm_ = comm;
    cudaSetDevice(saved);
    if (e != nccl::success)
      throw Error("[distributed] init: " + where(r) + " on CUDA device " + std::to_string(device) +
                  ": ncclCommInitRank failed: " + nccl::describe(a_, e, nullptr));
  }
  ~NcclEngine() override {
    if (nccl::Comm c = comm_.load()) a_.comm_destroy(c);  // an aborted one is gone already
  }
  int device() const override { return device_; }
  int world() const { return world_; }
  void* record_event(void* stream) override {
    cudaEvent_t e = nullptr;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r == cudaSuccess) r = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
    if (r != cudaSuccess) {
      if (e) cudaEventDestroy(e);
      (void)cudaGetLastError();
      throw Error(std::string("[distributed] watching a step's collectives: ") + cudaGetErrorString(r));
    }
    return e;
  }
  void bind_thread() override {
    // The watchdog's thread: this device (a CUDA call there would otherwise make a context on
    // device 0), and captures elsewhere in the process neither break its queries nor are broken.
    if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&relaxed);
  }
  bool event_done(void* event) override {
    const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (q == cudaErrorNotReady) return false;
    if (q != cudaSuccess) (void)cudaGetLastError();  // (a device error: the run reports it, not the watch)
    return true;
  }
  void release_event(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  std::string async_error() override {
    std::lock_guard<std::timed_mutex> lock(calls_mu_);
    nccl::Comm c = comm_.load();
    if (!c) return "";
    nccl::Result async = nccl::success;
    a_.comm_get_async_error(c, &async);
    return async == nccl::success || async == nccl::in_progress ? "" : "NCCL: " + nccl::describe(a_, async, nullptr);
  }
  void abort() override {
    // After the short calls under way (calls_mu_, a second at most: the abort is what frees a
    // caller stuck behind a dead peer, so it does not wait longer).
    std::unique_lock<std::timed_mutex> lock(calls_mu_, std::chrono::seconds(1));
    if (nccl::Comm c = comm_.exchange(nullptr)) a_.comm_abort(c);
  }
  bool reducible(DType t) const override { return type_of(t) >= 0; }

  void all_reduce(const void* in, void* out, size_t count, DType dtype, CollectiveReduce op, void* stream) override {
    check(a_.all_reduce(in, out, count, data_type(dtype), red_op(op), comm_, stream), "ncclAllReduce");
  }
  void all_gather(const void* in, void* out, size_t bytes, void* stream) override {
    check(a_.all_gather(in, out, bytes, nccl::int8, comm_, stream), "ncclAllGather");
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, CollectiveReduce op, void* stream) override {
    check(a_.reduce_scatter(in, out, count, data_type(dtype), red_op(op), comm_, stream), "ncclReduceScatter");
  }
  void broadcast(const void* in, void* out, size_t bytes, int root, void* stream) override {
    check(a_.broadcast(in, out, bytes, nccl::int8, root, comm_, stream), "ncclBroadcast");
  }

  // Waits for `stream` (cudaStream_t) at most timeout_s; past it, or when NCCL reports a peer's
  // failure, the communicator is aborted (its kernels return, and the peers' then fail too).
  void wait(void* stream, double timeout_s) {
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      const cudaError_t q = cudaStreamQuery(static_cast<cudaStream_t>(stream));
      // Aborted meanwhile (the communicator's watchdog): the kernels returned without the data.
      if (!comm_.load()) throw std::runtime_error("the NCCL communicator was aborted (a peer failed or hung)");
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) cuda_ok(q, "waiting for NCCL");
      nccl::Result async = nccl::success;
      {
        std::lock_guard<std::timed_mutex> lock(calls_mu_);
        if (nccl::Comm c = comm_.load()) a_.comm_get_async_error(c, &async);
      }
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if ((async != nccl::success && async != nccl::in_progress) || waited > timeout_s) {
        abort();
        throw std::runtime_error(async != nccl::success ? "NCCL: " + nccl::describe(a_, async, nullptr)
                                                        : "NCCL did not finish within " +
                                                              std::to_string(static_cast<int>(timeout_s)) + " s");
      }
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  static int type_of(DType t) {
    switch (t) {
      case DType::f32: return nccl::float32;
      case DType::f64: return nccl::float64;
      case DType::f16: return nccl::float16;
      case DType::bf16: return nccl::bfloat16;
      case DType::i32: return nccl::int32;
      case DType::i64: return nccl::int64;
      default: return -1;
    }
  }
  static nccl::DataType data_type(DType t) {
    const int n = type_of(t);
    if (n < 0) throw std::runtime_error("NCCL does not reduce " + std::string(dtype_name(t)) + " tensors");
    return static_cast<nccl::DataType>(n);
  }
  static nccl::RedOp red_op(CollectiveReduce op) {
    switch (op) {
      case CollectiveReduce::max: return nccl::max;
      case CollectiveReduce::min: return nccl::min;
      default: return nccl::sum;  // mean: the caller divides
    }
  }
  void check(nccl::Result e, const char* call) {
    if (!comm_) throw std::runtime_error("the NCCL communicator was aborted after an earlier failure");
    if (e != nccl::success && e != nccl::in_progress)
      throw std::runtime_error(std::string(call) + ": " + nccl::describe(a_, e, comm_));
  }

  const nccl::Api& a_;
  int device_;
  int world_;
  // Atomic: the communicator's watchdog may abort it from its thread (communicator.cpp); the
  // short queries and the abort are serialised by calls_mu_.
  std::atomic<nccl::Comm> comm_{nullptr};
  std::timed_mutex calls_mu_;
};

// Host memory staged on the engine's device, one collective at a time on a stream of its own.
class NcclHost final : public CollectiveBackend {
 public:
  NcclHost(NcclEngine& e, double timeout_s) : e_(e), timeout_s_(timeout_s) {
    Device d(e_.device());
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~NcclHost() override {
    Device d(e_.device());
    cudaStreamDestroy(stream_);
  }
  void all_reduce(void* data, size_t count, DType dtype, CollectiveReduce op) override {
    const size_t bytes = count * dtype_size(dtype);
    run(data, bytes, data, bytes, [&](void* in, void* out) { e_.all_reduce(in, out, count, dtype, op, stream_); });
  }
  void all_gather(const void* in, void* out, size_t bytes) override {
    run(in, bytes, out, bytes * static_cast<size_t>(e_.world()),
        [&](void* din, void* dout) { e_.all_gather(din, dout, bytes, stream_); });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    run(data, bytes, data, bytes, [&](void* in, void* out) { e_.broadcast(in, out, bytes, root, stream_); });
  }
  void barrier() override {
    int one = 1;
    all_reduce(&one, 1, DType::i32, CollectiveReduce::sum);
  }

 private:
  // Makes `device` current for the scope (host collectives may come from any thread).
  struct Device {
    explicit Device(int d) {
      if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
      cudaSetDevice(d);
    }
    ~Device() {
      if (saved >= 0) cudaSetDevice(saved);
    }
    int saved = -1;
  };
  template <class F>
  void run(const void* in, size_t in_bytes, void* out, size_t out_bytes, F&& collective) {
    Device d(e_.device());
    void* din = nullptr;
    void* dout = nullptr;
    cuda_ok(cudaMallocAsync(&din, in_bytes + out_bytes, stream_), "cudaMallocAsync");
    dout = static_cast<char*>(din) + in_bytes;
    struct Free {
      void* p;
      cudaStream_t s;
      ~Free() { cudaFreeAsync(p, s); }
    } free_later{din, stream_};
    cuda_ok(cudaMemcpyAsync(din, in, in_bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    collective(din, dout);
    e_.wait(stream_, timeout_s_);  // before the copy back, which would block without a limit
    cuda_ok(cudaMemcpy(out, dout, out_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }

  NcclEngine& e_;
  double timeout_s_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_engine(const Rendezvous& r, int device) {
  return std::make_unique<NcclEngine>(r, device);
}

std::unique_ptr<CollectiveBackend> make_nccl_host_backend(DeviceCollectives& device, const Rendezvous& r) {
  return std::make_unique<NcclHost>(static_cast<NcclEngine&>(device), r.timeout_s);
}

bool nccl_available() { return nccl::available(); }

#else

std::unique_ptr<DeviceCollectives> make_nccl_engine(const Rendezvous& r, int device) {
  throw Error("[distributed] init: the nccl backend needs tgraph built with CUDA (this build has none): use gloo");
}

std::unique_ptr<CollectiveBackend> make_nccl_host_backend(DeviceCollectives& device, const Rendezvous& r) {
  throw Error("[distributed] init: the nccl backend needs tgraph built with CUDA");
}

bool nccl_available() { return false; }

#endif

}  // namespace tg::detail
