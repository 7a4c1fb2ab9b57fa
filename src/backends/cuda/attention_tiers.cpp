// The tiered path of scaled_dot_product_attention on CUDA (issue 22): a shape whose cuDNN plan
// no process on the machine built (cuDNN compiles a kernel for it: 0.1-0.8 s on the H200) runs
// tgraph's own fused attention kernel (kernels_attention.cu) while the plan is built on a
// builder thread with a cuDNN handle of its own; the first run after the plan is ready uses it
// and is captured. docs/decisions.md ("A cold attention shape runs tgraph's own kernel while
// cuDNN builds its plan") says why and what stays synchronous; attention_plans.h is what this
// file and the plans (cudnn_attention.cpp) ask of each other.
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/attention_plans.h"
#include "backends/cuda/kernels_attention.h"
#include "backends/cuda/library_warmup.h"
#include "core/env.h"
#include "runtime/device_code.h"
#include "runtime/size_classes.h"

namespace tg::detail {

#if TGRAPH_HAVE_CUDNN_FRONTEND
namespace {

// Plans being built on the builder's thread while tgraph's own kernel runs the shape's calls
// (InterimKernels, library_warmup.h), by plan key. Never destroyed: a build may outlive the run
// that started it (the exit handler waits for it).
struct Deferred;
void forget_deferred(const std::string& key, const std::shared_ptr<Deferred>& d);
struct Deferred : PendingWork, std::enable_shared_from_this<Deferred> {
  explicit Deferred(std::string k) : key(std::move(k)) {}
  const std::string key;  // attention_plan_key
  std::atomic<bool> started{false};  // taken by the builder, or claimed by a run or a drop
  std::atomic<bool> done{false};
  std::mutex mu;
  std::condition_variable cv;
  std::string blob;  // the built plan serialised (empty: refused, dropped, or not serialisable)
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done.load(); });
  }
  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
  }
  // Drops the build if the builder has not begun it (the queue's bound, an exit, an executable
  // destroyed): true then, and a run meeting the shape again defers it again.
  bool cancel() {
    if (started.exchange(true)) return false;
    cancelled = true;
    finish();
    return true;
  }
  std::atomic<bool> cancelled{false};
  // PendingWork: an executable destroyed drops the build if not begun, else waits for it.
  bool finished() const override { return done.load(); }
  void settle() override {
    if (cancel()) forget_deferred(key, shared_from_this());
    else wait();
  }
};
std::mutex& deferred_mutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::map<std::string, std::shared_ptr<Deferred>>& deferred() {
  static auto* d = new std::map<std::string, std::shared_ptr<Deferred>>;
  return *d;
}
std::shared_ptr<Deferred> deferred_of(const std::string& key) {
  std::lock_guard<std::mutex> lock(deferred_mutex());
  auto it = deferred().find(key);
  return it == deferred().end() ? nullptr : it->second;
}
// Drops the entry of `key` if it is still `d` (the key may have been deferred again since).
void forget_deferred(const std::string& key, const std::shared_ptr<Deferred>& d) {
  std::lock_guard<std::mutex> lock(deferred_mutex());
  auto it = deferred().find(key);
  if (it != deferred().end() && it->second == d) deferred().erase(it);
}
std::atomic<long long> stand_ins{0};
std::atomic<long long> own_calls{0};
std::atomic<long long> builds_made{0}, builds_dropped{0};
std::atomic<int> builds_held{0};  // cudnn_attention_hold_builds
std::atomic<std::chrono::steady_clock::rep> held_until{0};  // one deadline per hold

// TGRAPH_OWN_ATTENTION=1: every kept attention call runs tgraph's own kernel (tests, and
// measuring it beside cuDNN's).
bool own_kernel_forced() { return env_flag("TGRAPH_OWN_ATTENTION"); }

// Whether tgraph's kernel takes call c (cuDNN's kinds of call, head dims to 256).
bool own_kernel_takes(const AttentionCall& c) {
  std::vector<int64_t> q, k, v, mask;
  return attention_geometry(c, q, k, v, mask) && attention_kernel_takes(q[3], v[3]);
}

// The cuDNN handle deferred builds use, one per device (made once, kept): the device's own
// handle stays free for the run meanwhile, and a plan is handed to it serialised, as a saved
// one is (read_saved_plan).
CudnnDevice* builder_handle(int device) {
  static auto* mu = new std::mutex;  // (never destroyed: used by builds that outlive the program's statics)
  static auto* handles = new std::map<int, CudnnDevice*>;
  std::lock_guard<std::mutex> lock(*mu);
  CudnnDevice*& h = (*handles)[device];
  if (!h) {
    auto fresh = std::make_unique<CudnnDevice>();
    if (cudnnCreate(&fresh->handle) != CUDNN_STATUS_SUCCESS) return nullptr;
    h = fresh.release();
  }
  return h;
}

// cuDNN loads its run-time compiled engines' library when it first builds such a plan: on the
// build's thread, after the exit handler that waits for the build was registered, so an exit
// during that build would destroy the library's statics first. Loaded here (from the directory
// of the cuDNN this process runs, as cuDNN itself does; never unloaded) before the build's
// thread registers a handler of its own. Best effort: a cuDNN without the library builds as before.
void load_runtime_compiled_engines() {
  static std::atomic<bool> tried{false};
  if (tried.exchange(true)) return;
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cudnnCreate), &info) || !info.dli_fname) return;
  const std::string lib = (std::filesystem::path(info.dli_fname).parent_path() /
                           ("libcudnn_engines_runtime_compiled.so." + std::to_string(CUDNN_MAJOR))).string();
  if (!dlopen(lib.c_str(), RTLD_LAZY | RTLD_LOCAL)) dlerror();
}

// Whether call c's plan may be deferred: tgraph's kernel takes it, and neither
// TGRAPH_NO_INTERIM_ATTENTION=1 nor TGRAPH_NO_LIBRARY_WARMUP=1 (nor the shared-kernel experiment).
bool deferrable(const AttentionCall& c) {
  return !attention_kernels_shared(c) && library_warmup_enabled() && !env_flag("TGRAPH_NO_INTERIM_ATTENTION") &&
         own_kernel_takes(c);
}

// Deferred builds wait in one queue, newest first, for one builder thread at a time (started
// when there is work, gone when there is none): builds share the builder's cuDNN handle and one
// at a time is as fast, and a stream of new shapes (a decoder's growing key length) must not
// become a thread per shape. Past kMaxQueued waiting, the oldest are dropped: a shape met once
// needs no plan, and one met again is deferred again.
struct BuildJob {
  int device;
  AttentionCall call;
  std::shared_ptr<Deferred> d;  // (its key: the plan's)
  std::shared_ptr<const std::map<std::string, std::string>> switches;
};
constexpr size_t kMaxQueued = 16;
struct BuildQueue {
  std::mutex mu;
  std::deque<BuildJob> jobs;  // newest first
  bool running = false;
};
BuildQueue& build_queue() {
  static auto* q = new BuildQueue;  // never destroyed: the builder may outlive the program's statics
  return *q;
}

// Builds one job's plan on the builder's handle and hands it over (or its refusal).
void run_job(const BuildJob& job) {
  struct Done {  // however the build ends
    Deferred& d;
    ~Done() { d.finish(); }
  } done{*job.d};
  SwitchScope scope(*job.switches);
  CudnnDevice* on = cudaSetDevice(job.device) == cudaSuccess ? builder_handle(job.device) : nullptr;
  if (!on) {
    cudaGetLastError();
    return;  // plan_for builds it on the device's handle
  }
  // Another thread's capture in global mode (PyTorch's CUDA graphs) must neither fail this
  // build's calls nor be invalidated by them.
  cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&relaxed);
  const OffThreadPlan p = build_attention_plan_on(job.device, job.call, *on);
  ++builds_made;
  job.d->blob = p.blob;
  // Runs find the plan among the saved ones, or the refusal among the plans, from now on;
  // otherwise the entry stays done without a plan and the next run builds it in turn.
  if (!p.blob.empty() || p.refused) forget_deferred(job.d->key, job.d);
}

// The builder thread: jobs newest first until none is left (or the program exits).
void builder_loop() {
  load_runtime_compiled_engines();
  library_warmup_wait_at_exit();  // (after what the line above made)
  BuildQueue& q = build_queue();
  for (;;) {
    // Held by a test (cudnn_attention_hold_builds): 30 s from the hold at most, so a run that
    // waits for a plan while the test holds the builds fails the test late instead of hanging.
    while (builds_held.load() > 0 && !library_warmup_exiting() &&
           std::chrono::steady_clock::now().time_since_epoch().count() < held_until.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    BuildJob job;
    {
      std::lock_guard<std::mutex> lock(q.mu);
      if (q.jobs.empty() || library_warmup_exiting()) {
        for (BuildJob& left : q.jobs) left.d->cancel();  // (exiting: nobody waits for a plan any more)
        q.jobs.clear();
        q.running = false;
        return;
      }
      job = std::move(q.jobs.front());
      q.jobs.pop_front();
    }
    if (job.d->started.exchange(true)) continue;  // claimed by a run that built it itself
    try {
      run_job(job);  // (finishes the job however it ends)
    } catch (...) {  // a build that throws (the frontend, memory) is left to the run: the next job
    }
  }
}

// Starts building call c's plan on the builder thread when none is built, being built or saved
// and tgraph's kernel can run the call meanwhile; returns the entry runs look at (null: not
// deferred: the plan is built, saved, or must be built in turn). Then, until it is done,
// cudnn_attention runs the call with tgraph's kernel where the run allows it.
std::shared_ptr<Deferred> defer_build(int device, const AttentionCall& c) {
  if (!deferrable(c)) return nullptr;
  const std::string key = attention_plan_key(device, c);
  if (auto d = deferred_of(key); d && !d->cancelled) return d;
  if (attention_plan_made(device, c) || attention_plan_saved(device, c)) return nullptr;
  auto d = std::make_shared<Deferred>(key);
  {
    std::lock_guard<std::mutex> lock(deferred_mutex());
    auto [it, fresh] = deferred().try_emplace(key, d);
    if (!fresh && !it->second->cancelled) return it->second;  // another compile or run was first
    it->second = d;
  }
  BuildQueue& q = build_queue();
  std::vector<BuildJob> dropped;
  bool start = false;
  try {
    BuildJob job{device, c, d,
                 std::make_shared<const std::map<std::string, std::string>>(
                     switch_overrides() ? *switch_overrides() : std::map<std::string, std::string>{})};
    std::lock_guard<std::mutex> lock(q.mu);
    q.jobs.push_front(std::move(job));
    while (q.jobs.size() > kMaxQueued) {
      dropped.push_back(std::move(q.jobs.back()));
      q.jobs.pop_back();
    }
    start = !q.running;
    q.running = true;
  } catch (...) {  // (memory): not deferred
    d->cancel();
    forget_deferred(key, d);
    return nullptr;
  }
  for (BuildJob& j : dropped)
    if (j.d->cancel()) {
      ++builds_dropped;
      forget_deferred(j.d->key, j.d);
    }
  if (start) try {
      library_warmup_detached(builder_loop);
    } catch (const std::exception&) {  // no thread: every queued build is made in turn instead
      std::vector<BuildJob> left;
      {
        std::lock_guard<std::mutex> lock(q.mu);
        left.assign(std::make_move_iterator(q.jobs.begin()), std::make_move_iterator(q.jobs.end()));
        q.jobs.clear();
        q.running = false;
      }
      for (BuildJob& j : left)
        if (j.d->cancel()) forget_deferred(j.d->key, j.d);
      return nullptr;
    }
  return d;
}

}  // namespace

bool own_attention(const AttentionCall& c, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                   cudaStream_t stream) {
  std::vector<int64_t> q, k, v, mask;
  if (!attention_geometry(c, q, k, v, mask) || !attention_kernel_takes(q[3], v[3])) return false;
  AttentionArgs a;
  a.q = in[0].ptr;
  a.k = in[1].ptr;
  a.v = in[2].ptr;
  a.o = out[0].ptr;
  a.batch = q[0], a.heads = q[1], a.lq = q[2], a.lk = k[2], a.dqk = q[3], a.dv = v[3];
  if (c.masked) {  // dense over its own dims, a dim of 1 broadcast (keys always full)
    a.bias = in[3].ptr;
    long long stride = mask[3];
    for (int d = 2; d >= 0; --d) {
      a.bias_strides[d] = mask[static_cast<size_t>(d)] == 1 ? 0 : stride;
      stride *= mask[static_cast<size_t>(d)];
    }
  }
  a.scale = static_cast<float>(c.scale);
  a.causal = c.causal;
  a.bf16 = c.dtype == DType::bf16;
  if (launch_attention(a, stream) != cudaSuccess) return false;  // (the launch's error taken)
  ++own_calls;
  return true;
}

bool attention_starts_on_own_kernel(int device, const AttentionCall& c) {
  return own_kernel_forced() || deferred_of(attention_plan_key(device, c)) ||
         (deferrable(c) && !attention_plan_saved(device, c));
}

bool attention_stand_in(const AttentionCall& c, const std::vector<DevArg>& in, const std::vector<DevOut>& out,
                        cudaStream_t stream, int device) {
  if (own_kernel_forced() && own_attention(c, in, out, stream)) return true;
  const std::string key = attention_plan_key(device, c);
  std::shared_ptr<Deferred> d = deferred_of(key);
  if (d && d->cancelled) {  // dropped before it was built: deferred again below if it may be
    forget_deferred(key, d);
    d = nullptr;
  }
  InterimKernels* interim = env_flag("TGRAPH_NO_INTERIM_ATTENTION") ? nullptr : InterimKernels::current();
  // No plan built or being built (a loaded executable's shape, a dropped build): deferred now.
  if (!d && interim && !attention_plan_made(device, c)) d = defer_build(device, c);
  if (!d) return false;
  if (!d->done) {
    // The plan is still being built: tgraph's kernel stands in where the run allows it (not
    // captured, a later run looks again); a capture, or a caller that cannot, waits for it — or
    // builds it itself if the builder has not begun.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
    if (interim && cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
        capturing == cudaStreamCaptureStatusNone && own_attention(c, in, out, stream)) {
      interim->note(d);  // settled before the executable is destroyed
      ++stand_ins;
      // A save after this run waits for the plan and writes it with the executable.
      record_library_plan_later(attention_saved_plan_key(device, c), [d, device, c] {
        d->wait();
        return d->blob.empty() ? attention_plan_from_disk(device, c) : d->blob;  // (built by a run instead)
      });
      return true;
    }
    if (!d->started.exchange(true)) d->finish();  // not begun (or dropped): made here now
    d->wait();
  }
  make_attention_plan(device, c);
  forget_deferred(key, d);  // (after the shape's plan is made: nothing defers it again meanwhile)
  return false;
}

bool cudnn_attention_kept(int device, const AttentionCall& c, std::string* why) {
  if (own_kernel_forced() && own_kernel_takes(c)) return true;
  // A size compiled ahead (runtime/size_classes.h) takes the form a compile for use would, and
  // starts no build: a plan for a size nobody may run would hold the builder (~1 s).
  if (compiling_ahead() && deferrable(c) && !attention_plan_made(device, c) && !attention_plan_saved(device, c))
    return true;
  return defer_build(device, c) != nullptr || cudnn_attention_supported(device, c, why);
}

void cudnn_attention_settle() {
  std::vector<std::shared_ptr<Deferred>> all;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex());
    for (const auto& [key, d] : deferred()) all.push_back(d);
  }
  for (const auto& d : all) d->wait();
}

long long cudnn_attention_stand_ins() { return stand_ins.load(); }

std::shared_ptr<void> cudnn_attention_hold_builds() {
  held_until = (std::chrono::steady_clock::now() + std::chrono::seconds(30)).time_since_epoch().count();
  ++builds_held;
  return std::shared_ptr<void>(nullptr, [](void*) { --builds_held; });
}

long long cudnn_attention_own_calls() { return own_calls.load(); }

long long cudnn_attention_builds_made() { return builds_made.load(); }

long long cudnn_attention_builds_dropped() { return builds_dropped.load(); }

#else  // no cuDNN frontend: attention is decomposed, nothing stands in

bool own_attention(const AttentionCall&, const std::vector<DevArg>&, const std::vector<DevOut>&, cudaStream_t) {
  return false;
}

bool attention_starts_on_own_kernel(int, const AttentionCall&) { return false; }

bool attention_stand_in(const AttentionCall&, const std::vector<DevArg>&, const std::vector<DevOut>&, cudaStream_t,
                        int) {
  return false;
}

bool cudnn_attention_kept(int device, const AttentionCall& c, std::string* why) {
  return cudnn_attention_supported(device, c, why);
}

void cudnn_attention_settle() {}

long long cudnn_attention_stand_ins() { return 0; }

std::shared_ptr<void> cudnn_attention_hold_builds() { return nullptr; }

long long cudnn_attention_own_calls() { return 0; }

long long cudnn_attention_builds_made() { return 0; }

long long cudnn_attention_builds_dropped() { return 0; }

#endif

}  // namespace tg::detail
