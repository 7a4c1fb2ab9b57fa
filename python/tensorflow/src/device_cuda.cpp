// The device half of the TGRAPH PluggableDevice on a machine with NVIDIA GPUs: one TGRAPH
// device per CUDA device, its memory device memory (TensorFlow's BFC allocator carves it from
// large cudaMalloc blocks: device.cpp turns it on), its streams CUDA streams, its events CUDA
// events, copies cudaMemcpyAsync on the stream, host callbacks cudaLaunchHostFunc. The kernels
// (kernels.cpp) run tgraph's CUDA executables on TensorFlow's compute stream (TF_GetStream).
//
// Every entry sets the CUDA device first: TensorFlow calls them from its own threads, for any
// of the devices. A CUDA error becomes a TF_Status naming the call, never an abort.
#include "device_cuda.h"

#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tgraph/device.h"

namespace tgraph_tf {
namespace {

struct Stream {
  cudaStream_t s = nullptr;
};
struct Event {
  cudaEvent_t e = nullptr;
};
struct Timer {
  cudaEvent_t start = nullptr, stop = nullptr;
};

Stream* stream_of(SP_Stream s) { return reinterpret_cast<Stream*>(s); }
Event* event_of(SP_Event e) { return reinterpret_cast<Event*>(e); }
Timer* timer_of(SP_Timer t) { return reinterpret_cast<Timer*>(t); }

bool check(cudaError_t e, const char* what, TF_Status* s) {
  if (e == cudaSuccess) {
    if (s) TF_SetStatus(s, TF_OK, "");
    return true;
  }
  if (s) TF_SetStatus(s, TF_INTERNAL, (std::string("tgraph (CUDA): ") + what + ": " + cudaGetErrorString(e)).c_str());
  return false;
}

bool use(const SP_Device* d, TF_Status* s) { return check(cudaSetDevice(d->ordinal), "cudaSetDevice", s); }

void allocate(const SP_Device* d, uint64_t size, int64_t, SP_DeviceMemoryBase* m) {
  m->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  m->opaque = nullptr;
  m->size = 0;
  if (!size || cudaSetDevice(d->ordinal) != cudaSuccess) return;
  void* p = nullptr;
  if (cudaMalloc(&p, size) != cudaSuccess) {  // TensorFlow reports the failed allocation
    cudaGetLastError();
    return;
  }
  m->opaque = p;
  m->size = size;
}
void deallocate(const SP_Device* d, SP_DeviceMemoryBase* m) {
  if (m->opaque) {
    cudaSetDevice(d->ordinal);
    cudaFree(m->opaque);
  }
  m->opaque = nullptr;
  m->size = 0;
}
void* host_alloc(const SP_Device*, uint64_t size) {  // pinned: copies from it are truly asynchronous
  void* p = nullptr;
  return cudaMallocHost(&p, size ? size : 1) == cudaSuccess ? p : nullptr;
}
void host_free(const SP_Device*, void* p) { cudaFreeHost(p); }
TF_Bool allocator_stats(const SP_Device*, SP_AllocatorStats* st) {
  st->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  return false;
}
TF_Bool memory_usage(const SP_Device* d, int64_t* free_bytes, int64_t* total_bytes) {
  size_t f = 0, t = 0;
  if (cudaSetDevice(d->ordinal) != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess) return false;
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
  return true;
}

void create_stream(const SP_Device* d, SP_Stream* st, TF_Status* s) {
  *st = nullptr;
  if (!use(d, s)) return;
  auto h = std::make_unique<Stream>();
  if (!check(cudaStreamCreateWithFlags(&h->s, cudaStreamNonBlocking), "cudaStreamCreate", s)) return;
  *st = reinterpret_cast<SP_Stream>(h.release());
}
void destroy_stream(const SP_Device* d, SP_Stream st) {
  if (!st) return;
  cudaSetDevice(d->ordinal);
  cudaStreamDestroy(stream_of(st)->s);
  delete stream_of(st);
}
void stream_dep(const SP_Device* d, SP_Stream dependent, SP_Stream other, TF_Status* s) {
  // `dependent` waits for the work queued on `other` so far.
  if (!use(d, s)) return;
  cudaEvent_t e;
  if (!check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", s)) return;
  const bool ok = check(cudaEventRecord(e, stream_of(other)->s), "cudaEventRecord", s) &&
                  check(cudaStreamWaitEvent(stream_of(dependent)->s, e, 0), "cudaStreamWaitEvent", s);
  cudaEventDestroy(e);  // released once the wait is done
  (void)ok;
}
void stream_status(const SP_Device* d, SP_Stream st, TF_Status* s) {
  if (!use(d, s)) return;
  const cudaError_t e = cudaStreamQuery(stream_of(st)->s);
  check(e == cudaErrorNotReady ? cudaSuccess : e, "the stream", s);
}
void create_event(const SP_Device* d, SP_Event* ev, TF_Status* s) {
  *ev = nullptr;
  if (!use(d, s)) return;
  auto h = std::make_unique<Event>();
  if (!check(cudaEventCreateWithFlags(&h->e, cudaEventDisableTiming), "cudaEventCreate", s)) return;
  *ev = reinterpret_cast<SP_Event>(h.release());
}
void destroy_event(const SP_Device* d, SP_Event ev) {
  if (!ev) return;
  cudaSetDevice(d->ordinal);
  cudaEventDestroy(event_of(ev)->e);
  delete event_of(ev);
}
SE_EventStatus event_status(const SP_Device* d, SP_Event ev) {
  if (cudaSetDevice(d->ordinal) != cudaSuccess) return SE_EVENT_ERROR;
  const cudaError_t e = cudaEventQuery(event_of(ev)->e);
  return e == cudaSuccess ? SE_EVENT_COMPLETE : e == cudaErrorNotReady ? SE_EVENT_PENDING : SE_EVENT_ERROR;
}
void record_event(const SP_Device* d, SP_Stream st, SP_Event ev, TF_Status* s) {
  if (use(d, s)) check(cudaEventRecord(event_of(ev)->e, stream_of(st)->s), "cudaEventRecord", s);
}
void wait_event(const SP_Device* const d, SP_Stream st, SP_Event ev, TF_Status* s) {
  if (use(d, s)) check(cudaStreamWaitEvent(stream_of(st)->s, event_of(ev)->e, 0), "cudaStreamWaitEvent", s);
}
void create_timer(const SP_Device* d, SP_Timer* t, TF_Status* s) {
  *t = nullptr;
  if (!use(d, s)) return;
  auto h = std::make_unique<Timer>();
  if (!check(cudaEventCreate(&h->start), "cudaEventCreate", s)) return;
  if (!check(cudaEventCreate(&h->stop), "cudaEventCreate", s)) {
    cudaEventDestroy(h->start);
    return;
  }
  *t = reinterpret_cast<SP_Timer>(h.release());
}
void destroy_timer(const SP_Device* d, SP_Timer t) {
  if (!t) return;
  cudaSetDevice(d->ordinal);
  cudaEventDestroy(timer_of(t)->start);
  cudaEventDestroy(timer_of(t)->stop);
  delete timer_of(t);
}
void start_timer(const SP_Device* d, SP_Stream st, SP_Timer t, TF_Status* s) {
  if (use(d, s)) check(cudaEventRecord(timer_of(t)->start, stream_of(st)->s), "cudaEventRecord", s);
}
void stop_timer(const SP_Device* d, SP_Stream st, SP_Timer t, TF_Status* s) {
  if (use(d, s)) check(cudaEventRecord(timer_of(t)->stop, stream_of(st)->s), "cudaEventRecord", s);
}
uint64_t timer_ns(SP_Timer t) {
  float ms = 0;
  if (cudaEventSynchronize(timer_of(t)->stop) != cudaSuccess ||
      cudaEventElapsedTime(&ms, timer_of(t)->start, timer_of(t)->stop) != cudaSuccess)
    return 0;
  return static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
}

void copy_async(const SP_Device* d, SP_Stream st, void* dst, const void* src, uint64_t n, cudaMemcpyKind kind,
                TF_Status* s) {
  if (!use(d, s) || !n) return;
  check(cudaMemcpyAsync(dst, src, n, kind, stream_of(st)->s), "cudaMemcpyAsync", s);
}
void dtoh(const SP_Device* d, SP_Stream st, void* dst, const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* s) {
  copy_async(d, st, dst, src->opaque, n, cudaMemcpyDeviceToHost, s);
}
void htod(const SP_Device* d, SP_Stream st, SP_DeviceMemoryBase* dst, const void* src, uint64_t n, TF_Status* s) {
  copy_async(d, st, dst->opaque, src, n, cudaMemcpyHostToDevice, s);
}
void dtod(const SP_Device* d, SP_Stream st, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t n,
          TF_Status* s) {
  copy_async(d, st, dst->opaque, src->opaque, n, cudaMemcpyDeviceToDevice, s);
}
void copy_sync(const SP_Device* d, void* dst, const void* src, uint64_t n, cudaMemcpyKind kind, TF_Status* s) {
  if (use(d, s) && n) check(cudaMemcpy(dst, src, n, kind), "cudaMemcpy", s);
}
void sdtoh(const SP_Device* d, void* dst, const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* s) {
  copy_sync(d, dst, src->opaque, n, cudaMemcpyDeviceToHost, s);
}
void shtod(const SP_Device* d, SP_DeviceMemoryBase* dst, const void* src, uint64_t n, TF_Status* s) {
  copy_sync(d, dst->opaque, src, n, cudaMemcpyHostToDevice, s);
}
void sdtod(const SP_Device* d, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* s) {
  copy_sync(d, dst->opaque, src->opaque, n, cudaMemcpyDeviceToDevice, s);
}
void mem_zero(const SP_Device* d, SP_Stream st, SP_DeviceMemoryBase* m, uint64_t n, TF_Status* s) {
  if (use(d, s) && n) check(cudaMemsetAsync(m->opaque, 0, n, stream_of(st)->s), "cudaMemsetAsync", s);
}
void mem_set(const SP_Device* d, SP_Stream st, SP_DeviceMemoryBase* m, uint8_t v, uint64_t n, TF_Status* s) {
  if (use(d, s) && n) check(cudaMemsetAsync(m->opaque, v, n, stream_of(st)->s), "cudaMemsetAsync", s);
}
void mem_set32(const SP_Device* d, SP_Stream st, SP_DeviceMemoryBase* m, uint32_t v, uint64_t n, TF_Status* s) {
  if (!use(d, s) || !n) return;
  const uint8_t b = static_cast<uint8_t>(v);
  if (v == b * 0x01010101u) {  // one byte repeated: a plain memset
    check(cudaMemsetAsync(m->opaque, b, n, stream_of(st)->s), "cudaMemsetAsync", s);
    return;
  }
  // The pattern copied from pageable host memory: CUDA stages it before the call returns, so
  // the buffer may go at once.
  std::vector<uint32_t> pattern(n / 4, v);
  check(cudaMemcpyAsync(m->opaque, pattern.data(), pattern.size() * 4, cudaMemcpyHostToDevice, stream_of(st)->s),
        "cudaMemcpyAsync", s);
}
void block_for_event(const SP_Device* d, SP_Event ev, TF_Status* s) {
  if (use(d, s)) check(cudaEventSynchronize(event_of(ev)->e), "cudaEventSynchronize", s);
}
void block_until_done(const SP_Device* d, SP_Stream st, TF_Status* s) {
  if (use(d, s)) check(cudaStreamSynchronize(stream_of(st)->s), "cudaStreamSynchronize", s);
}
void sync_all(const SP_Device* d, TF_Status* s) {
  if (use(d, s)) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", s);
}

struct Callback {
  SE_StatusCallbackFn fn;
  void* arg;
};
void CUDART_CB run_callback(void* p) {
  std::unique_ptr<Callback> c(static_cast<Callback*>(p));
  TF_Status* s = TF_NewStatus();
  c->fn(c->arg, s);
  TF_DeleteStatus(s);
}
TF_Bool host_callback(const SP_Device* d, SP_Stream st, SE_StatusCallbackFn fn, void* arg) {
  if (cudaSetDevice(d->ordinal) != cudaSuccess) return false;
  auto c = std::make_unique<Callback>(Callback{fn, arg});
  if (cudaLaunchHostFunc(stream_of(st)->s, run_callback, c.get()) != cudaSuccess) return false;
  c.release();  // run_callback owns it now
  return true;
}

}  // namespace

int cuda_devices() { return tg::Device::cuda_device_count(); }

void* cuda_stream(SP_Stream s) { return s ? stream_of(s)->s : nullptr; }

void fill_cuda_executor(SP_StreamExecutor* se) {
  se->allocate = allocate;
  se->deallocate = deallocate;
  se->host_memory_allocate = host_alloc;
  se->host_memory_deallocate = host_free;
  se->get_allocator_stats = allocator_stats;
  se->device_memory_usage = memory_usage;
  se->create_stream = create_stream;
  se->destroy_stream = destroy_stream;
  se->create_stream_dependency = stream_dep;
  se->get_stream_status = stream_status;
  se->create_event = create_event;
  se->destroy_event = destroy_event;
  se->get_event_status = event_status;
  se->record_event = record_event;
  se->wait_for_event = wait_event;
  se->create_timer = create_timer;
  se->destroy_timer = destroy_timer;
  se->start_timer = start_timer;
  se->stop_timer = stop_timer;
  se->memcpy_dtoh = dtoh;
  se->memcpy_htod = htod;
  se->memcpy_dtod = dtod;
  se->sync_memcpy_dtoh = sdtoh;
  se->sync_memcpy_htod = shtod;
  se->sync_memcpy_dtod = sdtod;
  se->block_host_for_event = block_for_event;
  se->block_host_until_done = block_until_done;
  se->synchronize_all_activity = sync_all;
  se->mem_zero = mem_zero;
  se->memset = mem_set;
  se->memset32 = mem_set32;
  se->host_callback = host_callback;
}

uint64_t (*cuda_timer_ns())(SP_Timer) { return timer_ns; }

bool device_memory(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // a pointer CUDA has never seen: host memory
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

bool copy_on_stream(void* dst, const void* src, size_t n, void* stream, std::string& error) {
  if (!n) return true;
  const cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  if (e == cudaSuccess) return true;
  error = std::string("cudaMemcpyAsync: ") + cudaGetErrorString(e);
  return false;
}

bool sync_stream(void* stream, std::string& error) {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (e == cudaSuccess) return true;
  error = std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e);
  return false;
}

}  // namespace tgraph_tf
