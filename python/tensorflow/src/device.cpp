// The device half of the TGRAPH PluggableDevice (StreamExecutor C API, SE_InitPlugin).
//
// One platform of type TGRAPH; its devices are tgraph's devices: one per CUDA device where the
// plugin is built with CUDA and a GPU is present (device_cuda.cpp: device memory, CUDA streams
// and events), else one device backed by host memory (below: 64-byte aligned, synchronous
// streams, events and copies), which is what tgraph's CPU backend needs. One platform registers
// one device type, and mixing host and device memory under one type would make TensorFlow's
// copies wrong, so it is one or the other per process (TGRAPH_TF_DEVICE=cpu forces the host).
// TensorFlow allocates the tensors of ops placed on TGRAPH (variables included, through its
// DEVICE_DEFAULT kernels) with allocate().
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "device_cuda.h"
#include "plugin.h"
#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/tf_status.h"

namespace {

// ---- device: host memory, synchronous "streams" ---------------------------------------
struct Handle {
  int dummy;
};  // non-null stream / event / timer handles

void get_device_count(const SP_Platform*, int* n, TF_Status* s) {
  *n = tgraph_tf::on_cuda() ? tgraph_tf::cuda_devices() : 1;
  TF_SetStatus(s, TF_OK, "");
}
void create_device(const SP_Platform*, SE_CreateDeviceParams* p, TF_Status* s) {
  p->device->struct_size = SP_DEVICE_STRUCT_SIZE;
  p->device->device_handle = nullptr;
  p->device->ordinal = p->ordinal;
  p->device->hardware_name = tgraph_tf::on_cuda() ? "tgraph-cuda" : "tgraph-cpu";
  p->device->device_vendor = "tgraph";
  TF_SetStatus(s, TF_OK, "");
}
void destroy_device(const SP_Platform*, SP_Device*) {}
void create_device_fns(const SP_Platform*, SE_CreateDeviceFnsParams* p, TF_Status* s) {
  p->device_fns->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
  TF_SetStatus(s, TF_OK, "");
}
void destroy_device_fns(const SP_Platform*, SP_DeviceFns*) {}

void allocate(const SP_Device*, uint64_t size, int64_t, SP_DeviceMemoryBase* m) {
  m->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  m->opaque = size ? std::aligned_alloc(64, (size + 63) / 64 * 64) : nullptr;
  m->size = size;
}
void deallocate(const SP_Device*, SP_DeviceMemoryBase* m) {
  std::free(m->opaque);
  m->opaque = nullptr;
  m->size = 0;
}
void* host_alloc(const SP_Device*, uint64_t size) { return std::aligned_alloc(64, (size + 63) / 64 * 64); }
void host_free(const SP_Device*, void* p) { std::free(p); }
TF_Bool allocator_stats(const SP_Device*, SP_AllocatorStats* st) {
  st->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
  return false;
}
TF_Bool memory_usage(const SP_Device*, int64_t* f, int64_t* t) {
  *f = int64_t(8) << 30;
  *t = int64_t(8) << 30;
  return true;
}

void create_stream(const SP_Device*, SP_Stream* st, TF_Status* s) {
  *st = reinterpret_cast<SP_Stream>(new Handle{});
  TF_SetStatus(s, TF_OK, "");
}
void destroy_stream(const SP_Device*, SP_Stream st) { delete reinterpret_cast<Handle*>(st); }
void stream_dep(const SP_Device*, SP_Stream, SP_Stream, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
void stream_status(const SP_Device*, SP_Stream, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
void create_event(const SP_Device*, SP_Event* e, TF_Status* s) {
  *e = reinterpret_cast<SP_Event>(new Handle{});
  TF_SetStatus(s, TF_OK, "");
}
void destroy_event(const SP_Device*, SP_Event e) { delete reinterpret_cast<Handle*>(e); }
SE_EventStatus event_status(const SP_Device*, SP_Event) { return SE_EVENT_COMPLETE; }
void record_event(const SP_Device*, SP_Stream, SP_Event, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
void wait_event(const SP_Device*, SP_Stream, SP_Event, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
void create_timer(const SP_Device*, SP_Timer* t, TF_Status* s) {
  *t = reinterpret_cast<SP_Timer>(new Handle{});
  TF_SetStatus(s, TF_OK, "");
}
void destroy_timer(const SP_Device*, SP_Timer t) { delete reinterpret_cast<Handle*>(t); }
void timer_mark(const SP_Device*, SP_Stream, SP_Timer, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }

void dtoh(const SP_Device*, SP_Stream, void* dst, const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* s) {
  std::memcpy(dst, src->opaque, n);
  TF_SetStatus(s, TF_OK, "");
}
void htod(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* dst, const void* src, uint64_t n, TF_Status* s) {
  std::memcpy(dst->opaque, src, n);
  TF_SetStatus(s, TF_OK, "");
}
void dtod(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t n,
          TF_Status* s) {
  std::memcpy(dst->opaque, src->opaque, n);
  TF_SetStatus(s, TF_OK, "");
}
void sdtoh(const SP_Device*, void* dst, const SP_DeviceMemoryBase* src, uint64_t n, TF_Status* s) {
  std::memcpy(dst, src->opaque, n);
  TF_SetStatus(s, TF_OK, "");
}
void shtod(const SP_Device*, SP_DeviceMemoryBase* dst, const void* src, uint64_t n, TF_Status* s) {
  std::memcpy(dst->opaque, src, n);
  TF_SetStatus(s, TF_OK, "");
}
void sdtod(const SP_Device*, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t n,
           TF_Status* s) {
  std::memcpy(dst->opaque, src->opaque, n);
  TF_SetStatus(s, TF_OK, "");
}
void mem_zero(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* m, uint64_t n, TF_Status* s) {
  std::memset(m->opaque, 0, n);
  TF_SetStatus(s, TF_OK, "");
}
void mem_set(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* m, uint8_t v, uint64_t n, TF_Status* s) {
  std::memset(m->opaque, v, n);
  TF_SetStatus(s, TF_OK, "");
}
void mem_set32(const SP_Device*, SP_Stream, SP_DeviceMemoryBase* m, uint32_t v, uint64_t n, TF_Status* s) {
  auto* p = static_cast<uint32_t*>(m->opaque);
  for (uint64_t i = 0; i < n / 4; ++i) p[i] = v;
  TF_SetStatus(s, TF_OK, "");
}
void block_for_event(const SP_Device*, SP_Event, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
void block_until_done(const SP_Device*, SP_Stream, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
void sync_all(const SP_Device*, TF_Status* s) { TF_SetStatus(s, TF_OK, ""); }
TF_Bool host_callback(const SP_Device*, SP_Stream, SE_StatusCallbackFn fn, void* arg) {
  TF_Status* s = TF_NewStatus();  // work is synchronous: run the callback now
  fn(arg, s);
  TF_DeleteStatus(s);
  return true;
}

void create_stream_executor(const SP_Platform*, SE_CreateStreamExecutorParams* p, TF_Status* s) {
  SP_StreamExecutor* se = p->stream_executor;
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
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
  se->start_timer = timer_mark;
  se->stop_timer = timer_mark;
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
  if (tgraph_tf::on_cuda()) tgraph_tf::fill_cuda_executor(se);
  TF_SetStatus(s, TF_OK, "");
}
void destroy_stream_executor(const SP_Platform*, SP_StreamExecutor*) {}
uint64_t timer_ns(SP_Timer) { return 0; }
void create_timer_fns(const SP_Platform*, SP_TimerFns* t, TF_Status* s) {
  t->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
  t->nanoseconds = tgraph_tf::on_cuda() ? tgraph_tf::cuda_timer_ns() : timer_ns;
  TF_SetStatus(s, TF_OK, "");
}
void destroy_timer_fns(const SP_Platform*, SP_TimerFns*) {}
void destroy_platform(SP_Platform*) {}
void destroy_platform_fns(SP_PlatformFns*) {}

}  // namespace

TGRAPH_TF_EXPORT void SE_InitPlugin(SE_PlatformRegistrationParams* const params, TF_Status* const status) {
  params->platform->struct_size = SP_PLATFORM_STRUCT_SIZE;
  params->platform->name = "TGRAPH";
  params->platform->type = tgraph_tf::kDeviceType;
  params->platform->supports_unified_memory = false;
  // On CUDA TensorFlow's BFC allocator sub-allocates from large cudaMalloc blocks (a cudaMalloc
  // per tensor would serialise the GPU); on the host, aligned_alloc per tensor is cheap.
  params->platform->use_bfc_allocator = tgraph_tf::on_cuda();
  params->platform->force_memory_growth = false;
  SP_PlatformFns* f = params->platform_fns;
  f->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
  f->get_device_count = get_device_count;
  f->create_device = create_device;
  f->destroy_device = destroy_device;
  f->create_device_fns = create_device_fns;
  f->destroy_device_fns = destroy_device_fns;
  f->create_stream_executor = create_stream_executor;
  f->destroy_stream_executor = destroy_stream_executor;
  f->create_timer_fns = create_timer_fns;
  f->destroy_timer_fns = destroy_timer_fns;
  params->destroy_platform = destroy_platform;
  params->destroy_platform_fns = destroy_platform_fns;
  TF_SetStatus(status, TF_OK, "");
}
