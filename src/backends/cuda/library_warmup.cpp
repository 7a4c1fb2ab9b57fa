#include "backends/cuda/library_warmup.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/cuda/cudnn_util.h"
#include "core/env.h"

namespace tg::detail {
namespace {

constexpr int kThreads = 4;  // 4 and 8 threads loaded ResNet-50's convolutions equally fast
std::atomic<long long> calls_made{0};

// A warm-up thread's stream and cuDNN handle, per device and thread slot: made on first use and
// kept for the process (as the device's own stream and handle are), so later first runs do
// not pay cudnnCreate (1.5-4 ms) again.
struct Slot {
  cudaStream_t stream = nullptr;
  CudnnDevice cudnn;
};

struct Slots {
  std::mutex mu;
  std::map<std::pair<int, int>, std::unique_ptr<Slot>> by_device_and_index;
};
Slots& slots() {
  static Slots s;
  return s;
}

Slot* slot(int device, int index) {
  Slots& all = slots();
  std::lock_guard<std::mutex> lock(all.mu);
  auto& s = all.by_device_and_index[{device, index}];
  if (!s) {
    auto fresh = std::make_unique<Slot>();
    if (cudaStreamCreateWithFlags(&fresh->stream, cudaStreamNonBlocking) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    if (cudnnCreate(&fresh->cudnn.handle) != CUDNN_STATUS_SUCCESS) return nullptr;  // (the stream is kept)
    s = std::move(fresh);
  }
  return s.get();
}

// Warm-up threads still running, process-wide. Questions a first run put off may still be
// asked when the program ends (one call at a new size, then exit): an exit handler stops the
// calls not yet begun and waits (10 s at most) for those under way, before the statics they
// use are destroyed. A handler runs before the destructors of statics made before it was
// registered, so one is registered each time calls may outlive a run
// (library_warmup_wait_at_exit), after the run that needs them made what they use (the
// choices' statics and the device contexts are never destroyed anyway).
// Not covered: a static that cuDNN itself first makes inside a put-off query (a sub-library it
// loads lazily), if the program exits within the few tens of milliseconds the queries take.
// The handlers share one deadline (the first to run sets it) and wait only in the process
// that registered them (a forked child inherits the count, not the threads); at most 64 are
// registered (a server meeting many sizes), the later batches relying on the earlier ones.
struct InFlight {
  std::mutex mu;
  std::condition_variable done;
  int threads = 0;
  std::atomic<bool> exiting{false};
  std::chrono::steady_clock::time_point deadline{};
  int handlers = 0;
  pid_t pid = 0;
};
InFlight& in_flight() {
  static InFlight* f = new InFlight;  // never destroyed: exit handlers and late threads use it
  return *f;
}

// A thread running `body`, counted in flight from before it starts until it ends (not counted
// when it cannot start: the exception goes to the caller). An exception out of body is dropped.
std::thread counted_thread(std::function<void()> body) {
  InFlight& flying = in_flight();
  auto land = [&flying] {
    std::lock_guard<std::mutex> lock(flying.mu);
    if (--flying.threads == 0) flying.done.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(flying.mu);
    ++flying.threads;
  }
  try {
    return std::thread([body = std::move(body), land] {
      struct Landed {  // however the thread ends
        decltype(land) f;
        ~Landed() { f(); }
      } landed{land};
      try {
        body();
      } catch (...) {
      }
    });
  } catch (...) {
    land();
    throw;
  }
}

// A warm-up thread taking calls from `calls` (owned by its LibraryWarmup, which joins it) in
// turn, in slot t's stream and cuDNN handle.
std::thread warm_thread(const std::vector<WarmCall>* calls, int t, std::shared_ptr<std::atomic<size_t>> next,
                        int device, std::shared_ptr<const std::map<std::string, std::string>> switches) {
  return counted_thread([calls, next, device, t, switches] {
    SwitchScope scope(*switches);
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    Slot* s = slot(device, t);
    if (!s) return;
    cudnn_thread_handle() = CudnnThreadHandle{device, &s->cudnn};
    for (size_t i; !in_flight().exiting && (i = next->fetch_add(1)) < calls->size();) {
      try {
        (*calls)[i](s->stream);
        ++calls_made;
      } catch (...) {  // only a head start: the run makes this call itself
        cudaGetLastError();
      }
    }
    if (cudaStreamSynchronize(s->stream) != cudaSuccess) cudaGetLastError();
    cudnn_thread_handle() = CudnnThreadHandle{};
  });
}

}  // namespace

void library_warmup_wait_at_exit() {
  (void)slots();
  InFlight& f = in_flight();
  {
    std::lock_guard<std::mutex> lock(f.mu);
    if (f.handlers >= 64) return;
    ++f.handlers;
    f.pid = ::getpid();
  }
  std::atexit([] {
    InFlight& f = in_flight();
    if (f.pid != ::getpid()) return;
    f.exiting = true;
    std::unique_lock<std::mutex> lock(f.mu);
    if (f.deadline == std::chrono::steady_clock::time_point{})
      f.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    f.done.wait_until(lock, f.deadline, [&] { return f.threads == 0; });
  });
}

void library_warmup_detached(std::function<void()> body) { counted_thread(std::move(body)).detach(); }

bool library_warmup_exiting() { return in_flight().exiting.load(); }

long long library_warmup_calls_made() { return calls_made.load(); }

bool library_warmup_enabled() { return !env_flag("TGRAPH_NO_LIBRARY_WARMUP"); }

LibraryWarmup::LibraryWarmup(std::vector<WarmCall> calls, int device) : calls_(std::move(calls)) {
  if (calls_.empty()) return;
  const int n = std::min<int>(kThreads, static_cast<int>(calls_.size()));
  auto next = std::make_shared<std::atomic<size_t>>(0);
  // The executable's switches (CompileOptions::switches) hold on the warm-up threads too: a
  // call made there reads them as it would in the run (cuDNN's per-batch choice, padding). A
  // copy: questions a first run put off outlive the run (ProvisionalChoices).
  auto switches = std::make_shared<const std::map<std::string, std::string>>(
      switch_overrides() ? *switch_overrides() : std::map<std::string, std::string>{});
  threads_.reserve(static_cast<size_t>(n));  // a push_back never reallocates (a thread lost)
  for (int t = 0; t < n; ++t) {
    try {
      threads_.push_back(warm_thread(&calls_, t, next, device, switches));
    } catch (...) {  // no thread: the calls not taken are made by the run itself
      break;
    }
  }
}

void LibraryWarmup::wait() {
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

LibraryWarmup::~LibraryWarmup() { wait(); }

namespace {
thread_local ProvisionalChoices* installed = nullptr;
thread_local InterimKernels* interim = nullptr;
}  // namespace

InterimKernels::InterimKernels() : saved_(interim) { interim = this; }
InterimKernels::~InterimKernels() { interim = saved_; }
InterimKernels* InterimKernels::current() { return interim; }

ProvisionalChoices::ProvisionalChoices(bool on)
    : on_(on && library_warmup_enabled() && !env_flag("TGRAPH_NO_PROVISIONAL_CHOICES")) {
  if (!on_) return;
  saved_ = installed;
  installed = this;
}

ProvisionalChoices::~ProvisionalChoices() {
  if (on_) installed = saved_;
}

ProvisionalChoices* ProvisionalChoices::current() { return installed; }

std::unique_ptr<LibraryWarmup> ProvisionalChoices::ask_later(int device) {
  if (asks_.empty()) return nullptr;
  library_warmup_wait_at_exit();
  return std::make_unique<LibraryWarmup>(std::move(asks_), device);
}

}  // namespace tg::detail
