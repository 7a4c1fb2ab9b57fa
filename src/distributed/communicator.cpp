// tg::distributed (distributed.h): the process's place in the job, read from the environment as
// the launchers set it, and the host collectives every graph collective runs through. A world of
// one needs no engine: its collectives are copies. Any engine error leaves the communicator
// broken (peers may be mid-collective), so later collectives fail at once with the first error.
#include "tgraph/distributed.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>

#include "distributed/backend.h"
#include "distributed/watchdog.h"
#include "tgraph/device.h"
#include "tgraph/error.h"

namespace tg::distributed {
namespace {

struct State {
  // One collective at a time: every rank must issue them in the same order. Timed: the
  // watchdog's abort waits for it a second at most (watch_device_step).
  std::timed_mutex mu;
  bool initialized = false;
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  double timeout_s = 300;
  std::string backend = "none";
  // NCCL's communicator (the nccl backend) before the host engine, which may stage through it
  // (and so must go first).
  std::unique_ptr<detail::DeviceCollectives> device_engine;
  std::unique_ptr<detail::CollectiveBackend> engine;
  std::string broken;  // the error that broke the communicator
  // Watches CUDA steps' NCCL work (watch_device_step); made at the first, gone before the engines.
  std::unique_ptr<detail::Watchdog> watchdog;
  bool closing = false;  // shutdown() under way: nothing new is watched
  uint64_t generation = 0;  // joins so far (device_collectives_generation)
};

State& state() {
  static State s;
  return s;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = env(n)) {
      char* end = nullptr;
      const long x = std::strtol(v, &end, 10);
      if (end == v || *end) throw Error(std::string("[distributed] ") + n + "='" + v + "' is not an integer");
      return static_cast<int>(x);
    }
  return fallback;
}

std::string text(const char* v) { return v ? v : ""; }

std::string first_env(std::initializer_list<const char*> names, const std::string& fallback) {
  for (const char* n : names)
    if (const char* v = env(n)) return v;
  return fallback;
}

bool local_address(const std::string& a) { return a.empty() || a == "localhost" || a.rfind("127.", 0) == 0 || a == "::1"; }

std::string where() {
  const State& s = state();
  return "rank " + std::to_string(s.rank) + " of " + std::to_string(s.world);
}

// Runs f under the lock (the caller holds it); an engine error breaks the communicator.
// The watchdog's reason, once it fired, as the communicator's error (the caller holds the lock).
void take_watchdog_failure(State& s) {
  if (s.broken.empty() && s.watchdog && !s.watchdog->fired().empty())
    s.broken = where() + ": " + s.watchdog->fired() + "; the communicator was aborted";
}

template <class F>
void guarded(const char* op, F&& f) {
  State& s = state();
  take_watchdog_failure(s);
  if (!s.broken.empty())
    throw Error(std::string("[") + op + "] the communicator failed earlier (" + s.broken + ")");
  try {
    f();
  } catch (const std::exception& e) {
    s.broken = where() + ": " + e.what();
    throw Error(std::string("[") + op + "] " + where() + ": a peer failed, left or did not answer within " +
                std::to_string(static_cast<int>(s.timeout_s)) + " s (" + e.what() + ")");
  }
}

// Runs one engine call under the lock.
template <class F>
void collective(const char* op, F&& f) {
  State& s = state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  guarded(op, [&] { f(s.engine.get()); });
}

// The engine a job gets when none is asked for: NCCL when every rank on this host can have a
// GPU of its own (NCCL refuses two ranks on one device), Gloo otherwise; none for one rank.
std::string automatic_backend(int world) {
  if (world == 1) return "none";
  const int local_world = env_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, world);
  return Device::cuda_device_count() >= local_world && detail::nccl_available() ? "nccl" : "gloo";
}

bool reducible(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::i32 || t == DType::i64; }

}  // namespace

void init(const Options& o) {
  State& s = state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  if (s.initialized) throw Error("[distributed] init: already joined as " + where() + " (shutdown() first)");
  const int rank = o.rank >= 0 ? o.rank : env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0);
  const int world = o.world_size >= 0 ? o.world_size : env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
  if (world < 1 || rank < 0 || rank >= world)
    throw Error("[distributed] init: rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world));
  const int local = env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}, rank);
  double timeout = o.timeout_s;
  if (timeout <= 0) timeout = std::getenv("TGRAPH_DIST_TIMEOUT") ? std::atof(std::getenv("TGRAPH_DIST_TIMEOUT")) : 300.0;
  if (timeout <= 0) throw Error("[distributed] init: TGRAPH_DIST_TIMEOUT must be a positive number of seconds");
  std::string backend = !o.backend.empty() ? o.backend : text(std::getenv("TGRAPH_DIST_BACKEND"));
  if (backend.empty() || backend == "auto") backend = automatic_backend(world);
  if (backend != "nccl" && backend != "gloo" && backend != "none")
    throw Error("[distributed] init: backend '" + backend + "' is not one of nccl, gloo, auto");
  if (backend == "none" && world > 1)
    throw Error("[distributed] init: backend 'none' is for a world of one, not " + std::to_string(world) + " ranks");
  if (backend == "gloo" && world == 1) backend = "none";  // a world of one needs no engine

  detail::Rendezvous r;
  r.rank = rank;
  r.world = world;
  r.timeout_s = timeout;
  // NCCL meets its peers through NCCL_COMM_ID when the user set it; otherwise through the folder.
  const bool own_bootstrap = backend == "nccl" && (world == 1 || env("NCCL_COMM_ID"));
  if (world > 1) {
    const std::string master = first_env({"MASTER_ADDR"}, "");
    r.store = !o.store.empty() ? o.store : text(std::getenv("TGRAPH_DIST_STORE"));
    if (r.store.empty() && !own_bootstrap) {
      if (!env("MASTER_PORT"))
        throw Error("[distributed] init: " + std::to_string(world) +
                    " ranks need a rendezvous folder: set TGRAPH_DIST_STORE (or MASTER_ADDR and MASTER_PORT, "
                    "as torchrun does; or NCCL_COMM_ID for the nccl backend)");
      r.store = "/tmp/tgraph-dist-" + (master.empty() ? std::string("localhost") : master) + "-" + env("MASTER_PORT");
    }
    r.run_id = !o.run_id.empty() ? o.run_id : text(std::getenv("TGRAPH_DIST_RUN_ID"));
    // else the launcher's own job id: torchrun's rendezvous id, Open MPI's / PMIx's job
    if (r.run_id.empty()) r.run_id = first_env({"TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}, "tgraph");
    r.host = !o.host.empty() ? o.host : text(std::getenv("TGRAPH_DIST_HOST"));
    if (r.host.empty()) {
      char name[256] = {};
      r.host = local_address(master) || gethostname(name, sizeof name - 1) != 0 ? "127.0.0.1" : name;
    }
  }
  std::unique_ptr<detail::DeviceCollectives> device_engine;
  std::unique_ptr<detail::CollectiveBackend> engine;
  try {
    if (backend == "nccl") {
      device_engine = detail::make_nccl_engine(r, o.device >= 0 ? o.device : local);
      engine = detail::make_nccl_host_backend(*device_engine, r);
    } else if (backend == "gloo") {
      engine = detail::make_gloo_backend(r);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("[distributed] init: rank " + std::to_string(rank) + " of " + std::to_string(world) +
                " could not reach its peers through '" + r.store + "' within " +
                std::to_string(static_cast<int>(timeout)) + " s: " + e.what());
  }
  s.rank = rank;
  s.world = world;
  s.local_rank = local;
  s.timeout_s = timeout;
  s.backend = backend;
  s.engine = std::move(engine);
  s.device_engine = std::move(device_engine);
  s.broken.clear();
  s.initialized = true;
  ++s.generation;
}

bool initialized() { return state().initialized; }
int rank() { return state().rank; }
int world_size() { return state().world; }
int local_rank() { return state().local_rank; }
std::string backend() { return state().backend; }

void shutdown() {
  State& s = state();
  std::unique_ptr<detail::Watchdog> dog;
  {
    std::lock_guard<std::timed_mutex> lock(s.mu);
    s.closing = true;
    dog = std::move(s.watchdog);
  }
  // Outside the lock (its thread may be waiting for it to abort). Steps still unfinished would
  // make the engine's destruction wait for them forever if a peer is gone: aborted first.
  if (dog) dog->abandon("the job was shut down with collectives unfinished");
  dog.reset();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  s.closing = false;
  ++s.generation;  // graphs captured with this communicator's calls are not replayed after it
  s.engine.reset();
  s.device_engine.reset();
  s.backend = "none";
  s.initialized = false;
  s.rank = 0;
  s.world = 1;
  s.local_rank = 0;
  s.broken.clear();
}

void barrier() {
  collective("barrier", [](detail::CollectiveBackend* e) {
    if (e) e->barrier();
  });
}

void all_reduce(TensorData& t, CollectiveReduce op) {
  const DType dt = t.dtype();
  const bool half = dt == DType::f16 || dt == DType::bf16;
  if (!reducible(dt) && !half)
    throw Error(std::string("[all_reduce] takes f32, f64, f16, bf16, i32 or i64 tensors, not ") + t.type().str());
  if (op == CollectiveReduce::mean && !is_float(dt))
    throw Error("[all_reduce] a mean of integer tensors (" + t.type().str() + "): use sum");
  collective("all_reduce", [&](detail::CollectiveBackend* e) {
    if (!e || t.num_elements() == 0) return;
    const double world = state().world;
    if (!half) {
      e->all_reduce(t.data(), static_cast<size_t>(t.num_elements()), dt, op);  // mean: summed here
      if (op == CollectiveReduce::mean)
        for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, t.at(i) / world);
      return;
    }
    TensorData wide(t.shape(), DType::f32);  // 16-bit floats are combined in f32, rounded once
    for (int64_t i = 0; i < t.num_elements(); ++i) wide.set(i, t.at(i));
    e->all_reduce(wide.data(), static_cast<size_t>(wide.num_elements()), DType::f32, op);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, op == CollectiveReduce::mean ? wide.at(i) / world : wide.at(i));
  });
}

TensorData all_gather(const TensorData& t) {
  const int world = world_size();
  std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  if (dims.empty()) throw Error("[all_gather] takes tensors of rank 1 or more (they are joined on axis 0), not " + t.type().str());
  dims[0] *= world;
  TensorData out{Shape(dims), t.dtype()};
  collective("all_gather", [&](detail::CollectiveBackend* e) {
    if (!e) {
      if (t.nbytes()) std::memcpy(out.data(), t.data(), t.nbytes());
      return;
    }
    if (t.nbytes()) e->all_gather(t.data(), out.data(), t.nbytes());
  });
  return out;
}

TensorData reduce_scatter(const TensorData& t, CollectiveReduce op) {
  const int world = world_size();
  std::vector<int64_t> dims(t.shape().dims().begin(), t.shape().dims().end());
  if (dims.empty() || dims[0] % world != 0)
    throw Error("[reduce_scatter] axis 0 of " + t.type().str() + " must split into " + std::to_string(world) +
                " equal parts (one per rank)");
  // The whole reduced, then this rank's part: twice an optimal reduce-scatter's traffic, and
  // the same values (Gloo has no reduce-scatter with options and tags).
  TensorData all = t.clone();
  all_reduce(all, op);
  dims[0] /= world;
  TensorData out{Shape(dims), t.dtype()};
  if (out.nbytes())
    std::memcpy(out.data(), static_cast<const std::byte*>(all.data()) + out.nbytes() * static_cast<size_t>(rank()),
                out.nbytes());
  return out;
}

void broadcast(TensorData& t, int root) {
  if (root < 0 || root >= world_size())
    throw Error("[broadcast] root " + std::to_string(root) + " is not a rank of a world of " + std::to_string(world_size()));
  collective("broadcast", [&](detail::CollectiveBackend* e) {
    if (e && t.nbytes()) e->broadcast(t.data(), t.nbytes(), root);
  });
}

std::vector<int64_t> shard(int64_t n, uint64_t seed, int64_t epoch, bool shuffle, bool drop_last) {
  if (n < 0) throw Error("[distributed] shard: a dataset of " + std::to_string(n) + " samples");
  const int64_t world = world_size(), r = rank();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    for (int64_t i = n - 1; i > 0; --i)  // Fisher-Yates with the same draws on every rank
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(gen() % static_cast<uint64_t>(i + 1))]);
  }
  const int64_t total = drop_last ? n / world * world : (n + world - 1) / world * world;
  for (int64_t i = n; i < total; ++i) order.push_back(order[static_cast<size_t>((i - n) % std::max<int64_t>(n, 1))]);
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  for (int64_t i = r; i < total; i += world) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace tg::distributed

namespace tg::detail {

bool with_device_collectives(int device, const char* op, const std::function<void(DeviceCollectives&)>& f) {
  distributed::State& s = distributed::state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  if (!s.device_engine || s.device_engine->device() != device) return false;
  distributed::guarded(op, [&] { f(*s.device_engine); });
  return true;
}

void watch_device_step(int device, void* stream) {
  distributed::State& s = distributed::state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  if (!s.device_engine || s.device_engine->device() != device || !s.broken.empty() || s.closing) return;
  DeviceCollectives* e = s.device_engine.get();  // outlives the watchdog (shutdown's order)
  if (!s.watchdog)
    s.watchdog = std::make_unique<Watchdog>(
        [&s, e] {  // NCCL's asynchronous error; a poll that finds the communicator busy asks next time
          std::unique_lock<std::timed_mutex> busy(s.mu, std::try_to_lock);
          return busy.owns_lock() ? e->async_error() : std::string();
        },
        [&s, e](const std::string&) {
          // Under the communicator's lock when it can be had within a second; otherwise its
          // holder is stuck in a call behind the dead peer's work, and the abort is what frees
          // it (NCCL's abort is meant for a hung communicator), so it goes ahead without (the
          // next collective or check takes the watchdog's reason then).
          std::unique_lock<std::timed_mutex> held(s.mu, std::chrono::seconds(1));
          e->abort();
          if (held.owns_lock()) distributed::take_watchdog_failure(s);
        },
        std::chrono::milliseconds(2), [e] { e->bind_thread(); });
  void* event = e->record_event(stream);
  s.watchdog->watch([e, event] { return e->event_done(event); }, s.timeout_s, [e, event] { e->release_event(event); });
}

uint64_t device_collectives_generation() {
  distributed::State& s = distributed::state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  return s.generation;
}

void check_device_collectives(int device, const char* op) {
  distributed::State& s = distributed::state();
  std::lock_guard<std::timed_mutex> lock(s.mu);
  if (!s.device_engine || s.device_engine->device() != device) return;
  distributed::take_watchdog_failure(s);
  if (s.broken.empty()) return;
  throw Error(std::string("[") + op + "] " + distributed::where() + ": the communicator failed (" + s.broken +
              "); this step's results and variable writes are not valid: restart the job from a checkpoint");
}

}  // namespace tg::detail
