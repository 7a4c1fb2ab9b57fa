// scaled_dot_product_attention as one cuDNN fused attention kernel (its flash-attention engine,
// built through the cuDNN frontend's graph API): softmax(q k^T * scale + bias) v without the
// [Lq, Lk] scores ever reaching memory. The decomposed form (passes/decompose.cpp) wrote and
// read the scores and probabilities in f32, several times the bytes of q, k and v at BERT's
// sizes. What is taken (attention_lowering.cpp decides, asking cudnn_attention_supported):
// f16 / bf16 q, k, v of rank 3 or 4 with equal batch dims, an additive bias of q's dtype
// broadcast over batch, heads and queries (dims 1 or full), causal (top-left) or not.
// Plans are built once per shape and kept for the process; under an experimental switch shapes
// that differ in the batch alone share compiled kernels (shares_kernels says why it is off).
// A shape with no plan built or saved anywhere (cuDNN compiles a kernel for it: 0.1-0.8 s on the
// H200) is built on a thread of its own while tgraph's own kernel (kernels_attention.cu) runs
// its first calls: the tiered path, attention_tiers.cpp (attention_plans.h between the two).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_ops.h"
#include "core/env.h"

#if TGRAPH_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

#include "backends/cpu/profile.h"
#include "backends/cuda/cudnn_util.h"
#include "backends/cuda/attention_plans.h"
#include "runtime/disk_cache.h"
#include "backends/cuda/library_plans.h"
#include "runtime/device_code.h"
#include "tgraph/error.h"

namespace tg::detail {

AttentionCall attention_call(const AttentionDesc& d, DType dtype, const Shape& q, const Shape& k,
                             const Shape& v) {
  AttentionCall c;
  c.dtype = dtype;
  c.q = q;
  c.k = k;
  c.v = v;
  c.causal = d.causal;
  const int64_t D = q.ranked() && q.rank() > 0 ? q.dims().back() : 0;
  c.scale = d.scale != 0 ? d.scale : 1.0 / std::sqrt(static_cast<double>(D > 0 ? D : 1));
  return c;
}

// [b, h, s, d] of a rank-3 or rank-4 operand (rank 3: one batch of `heads` = its first dim).
static bool bhsd(const Shape& s, std::vector<int64_t>& out) {
  if (!s.ranked() || !s.is_static() || (s.rank() != 3 && s.rank() != 4)) return false;
  out = s.rank() == 4 ? std::vector<int64_t>{s[0], s[1], s[2], s[3]}
                      : std::vector<int64_t>{1, s[0], s[1], s[2]};
  return true;
}

// The call's geometry in cuDNN's terms; false when the shapes are not of the kind taken.
bool attention_geometry(const AttentionCall& c, std::vector<int64_t>& q, std::vector<int64_t>& k,
                               std::vector<int64_t>& v, std::vector<int64_t>& mask) {
  if (c.dtype != DType::f16 && c.dtype != DType::bf16) return false;
  if (!bhsd(c.q, q) || !bhsd(c.k, k) || !bhsd(c.v, v) || c.q.rank() != c.k.rank() || c.q.rank() != c.v.rank())
    return false;
  if (q[0] != k[0] || q[0] != v[0] || q[1] != k[1] || q[1] != v[1] || k[2] != v[2] || q[3] != k[3])
    return false;
  if (q[3] % 8 != 0 || v[3] % 8 != 0 || q[3] > 256 || v[3] > 256) return false;
  mask.clear();
  if (c.masked) {
    const Shape& m = c.mask;
    if (!m.is_static() || m.rank() != 4) return false;
    const std::vector<int64_t> full{q[0], q[1], q[2], k[2]};
    for (int i = 0; i < 4; ++i) {
      if (m[i] != full[static_cast<size_t>(i)] && !(m[i] == 1 && i < 3)) return false;
      mask.push_back(m[i]);
    }
  }
  return true;
}

#if TGRAPH_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

namespace {

constexpr int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kBias = 5;

// Row-major strides of dims (every tensor of the call is dense; a bias dim of 1 broadcasts).
std::vector<int64_t> packed(const std::vector<int64_t>& dims) {
  std::vector<int64_t> st(dims.size(), 1);
  for (size_t i = dims.size() - 1; i-- > 0;) st[i] = st[i + 1] * dims[i + 1];
  return st;
}

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  bool ok = false;
  std::string why;   // when not ok: cuDNN's reason
  std::string blob;  // the plan serialised by cuDNN (a static plan's): saved with executables
  bool read_back = false;  // made from a saved blob, not built here
};

// The scale to the last bit (std::to_string keeps 6 decimals).
std::string exact(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

// The call without its device: what a saved plan is filed under (library_plans.h). It names
// the cuDNN frontend's version and how this file builds a plan (tensor uids, outputs, data
// types: kPlanForm, changed with them), besides what the library signature names, so a plan
// is only read back by code that built it the same way.
constexpr int kPlanForm = 1;
std::string problem_of(const AttentionCall& c) {
  return "fe" + std::to_string(CUDNN_FRONTEND_VERSION) + ".p" + std::to_string(kPlanForm) + "|" +
         dtype_name(c.dtype) + "|" + c.q.str() + c.k.str() + c.v.str() + (c.masked ? c.mask.str() : "-") + "|" +
         exact(c.scale) + (c.causal ? "|c" : "|n");
}

// The process's key of a problem on a device (plans, and saved plans handed over by loads).
std::string device_key(int device, const std::string& problem) { return std::to_string(device) + "|" + problem; }
std::string key_of(int device, const AttentionCall& c) { return device_key(device, problem_of(c)); }

// Saved plans. Building a shape's plan asks cuDNN's heuristics and, for its fused attention
// engine, compiles the kernel at run time: 0.6-0.8 s at the first lengths a machine meets, 40-55
// ms at others on the H200 (bench/RESULTS.md, session 32). A built plan serialised by cuDNN
// (kernel included) is kept in the compile cache's directory and with saved executables; a
// plan read back skips both. The blob is cuDNN's to check: it is only ever read by the cuDNN
// and architecture that wrote it (the file's key and the executable's library signature name
// them), and one it refuses is built again.
std::mutex& saved_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::string>& saved_plans() {  // key_of -> blob, from loaded executables
  static std::map<std::string, std::string> m;
  return m;
}

// A saved plan's key, in the disk cache and among an executable's library choices.
std::string saved_key(int device, const AttentionCall& c) {
  return library_signature(device) + "|attn|" + problem_of(c);
}
constexpr const char* kPlanExt = ".cudnnplan";

std::shared_ptr<Plan> read_saved_plan(int device, const AttentionCall& c) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string blob, where = "an executable's file";
  {
    std::lock_guard<std::mutex> lock(saved_mutex());
    auto it = saved_plans().find(key_of(device, c));
    if (it != saved_plans().end()) blob = it->second;
  }
  if (blob.empty()) {
    blob = disk_cache_read_keyed(saved_key(device, c), kPlanExt);
    if (blob.empty()) return nullptr;
    where = "the disk cache";
  }
  auto g = std::make_shared<fe::graph::Graph>();
  int64_t ws = 0;
  {
    CudnnDevice& dev = cudnn_device(device);
    std::lock_guard<std::mutex> lock(dev.mu);
    try {
      if (!g->deserialize(dev.handle, std::vector<uint8_t>(blob.begin(), blob.end())).is_good() ||
          !g->get_workspace_size(ws).is_good())
        return nullptr;
    } catch (const std::exception&) {  // the frontend's parser throws on a malformed blob
      return nullptr;
    }
  }
  if (cpu_profiling())
    cpu_profile_add("cudnn attention plan read from " + where,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  auto plan = std::make_shared<Plan>();
  plan->graph = std::move(g);
  plan->workspace = ws;
  plan->blob = std::move(blob);
  plan->read_back = true;
  plan->ok = true;
  return plan;
}

// A plan read back that cuDNN then refuses to run is forgotten — in the process, among the
// executables' saved plans and on disk — so the next lookup builds the shape's plan afresh.
void forget_saved_plan(int device, const AttentionCall& c);

// Serialises a freshly built static plan into plan.blob and the disk cache.
void save_plan(int device, const AttentionCall& c, fe::graph::Graph& g, Plan& plan) {
  std::vector<uint8_t> data;
  try {
    if (!g.serialize(data, false).is_good() || data.empty()) return;
  } catch (const std::exception&) {
    return;
  }
  plan.blob.assign(data.begin(), data.end());
  disk_cache_write_keyed(saved_key(device, c), kPlanExt, plan.blob);
}

std::mutex& plans_mutex() {
  static std::mutex mu;
  return mu;
}
// A shape's plan, built once: a second thread asking for the same shape while the first builds
// it (the run's attention op while the library warm-up builds its plan) waits for that plan
// instead of building and compiling another. A mutex and not std::once_flag: a build that throws
// must leave the slot for the next caller to try again, and with libstdc++ an exception out of
// std::call_once can leave the flag stuck (GCC bug 66146), hanging every later call.
struct PlanSlot {
  std::mutex mu;
  std::shared_ptr<Plan> plan;  // null until built
};
std::map<std::string, std::shared_ptr<PlanSlot>>& plans() {
  static std::map<std::string, std::shared_ptr<PlanSlot>> p;
  return p;
}

// The calls whose plans can share compiled kernels: those that differ in the batch alone. cuDNN's
// "same topology" would let heads and sequence lengths vary too, and on cuDNN 9.14 (the system's
// on the H200) every length bound the first length's kernel correctly; but under cuDNN 9.19 —
// the one PyTorch's wheel brings, which a tgraph.torch process runs on — a kernel compiled at
// one sequence length computed garbage at every other (max error 1-5 against a float64
// reference, 12 heads of 64, lengths 16-512), while batch 1 bound batch 16's kernel correctly
// on both (bench/RESULTS.md, session 31) — though a larger batch binding a smaller one's did
// not (shares_kernels). One kernel cache per class, kept for the process (not
// yet saved with an executable: on cuDNN 9.14 the frontend's to_json serialised it to nothing).
std::string topology_of(int device, const AttentionCall& c, const std::vector<int64_t>& q,
                        const std::vector<int64_t>& k, const std::vector<int64_t>& v,
                        const std::vector<int64_t>& mask) {
  std::string key = std::to_string(device) + "|" + dtype_name(c.dtype) + "|r" + std::to_string(c.q.rank()) +
                    "|h" + std::to_string(q[1]) + "|s" + std::to_string(q[2]) + "," + std::to_string(k[2]) +
                    "|d" + std::to_string(q[3]) + "," + std::to_string(v[3]) + "|" + exact(c.scale) +
                    (c.causal ? "|c" : "|n") + "|m";
  for (size_t i = 0; i < mask.size(); ++i)
    key += i == 0 ? std::string(mask[i] == 1 ? "1" : "x") : "," + std::to_string(mask[i]);
  return key;
}

std::mutex& caches_mutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::shared_ptr<fe::KernelCache>>& caches() {  // by topology
  static std::map<std::string, std::shared_ptr<fe::KernelCache>> c;
  return c;
}

std::shared_ptr<fe::KernelCache> kernel_cache_for(const std::string& topology) {
  std::lock_guard<std::mutex> lock(caches_mutex());
  auto& kc = caches()[topology];
  if (!kc) kc = std::make_shared<fe::KernelCache>();
  return kc;
}

// Whether calls of other batch sizes may bind the kernel this call's class compiled: only under
// TGRAPH_ATTENTION_SHARED_KERNELS=1, an experiment. Under cuDNN 9.19 (a PyTorch process on the
// H200) even batch-only sharing computed garbage — 16 x 128 binding the kernel compiled at
// 2 x 128 (max error 1.5-1.9; python test test_attention_at_several_sizes_in_a_torch_process) —
// and it did not pay there either: binding took ~50 ms (5 ms under 9.14), a dynamic-shape plan's
// compile up to 830 ms. So each shape builds a static plan (session 31).
bool shares_kernels(const AttentionCall&) { return env_flag("TGRAPH_ATTENTION_SHARED_KERNELS"); }

// Builds the plan for one shape. With `shared` the graph is a dynamic-shape graph bound to its
// class's kernel cache: the first batch size of a class compiles cuDNN's kernel, every later
// one binds the compiled kernel (issue 22's first call at a new size). Without it, a static
// plan: read back where one was saved (read_saved_plan), else built and saved to the disk cache.
// `on`: the cuDNN handle to build on (default the device's; a deferred build has one of its own).
std::shared_ptr<Plan> build(int device, const AttentionCall& c, bool shared, CudnnDevice* on = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  auto plan = std::make_shared<Plan>();
  std::vector<int64_t> q, k, v, mask;
  if (!attention_geometry(c, q, k, v, mask)) {
    plan->why = "shape or dtype not taken";
    return plan;
  }
  auto g = std::make_shared<fe::graph::Graph>();
  if (shared)
    g->set_dynamic_shape_enabled(true).set_kernel_cache(
        kernel_cache_for(topology_of(device, c, q, k, v, mask)));
  const fe::DataType_t io = c.dtype == DType::f16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& dims) {
    return g->tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(packed(dims)));
  };
  auto Q = tensor("Q", kQ, q), K = tensor("K", kK, k), V = tensor("V", kV, v);
  auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(false).set_attn_scale(
      static_cast<float>(c.scale));
  if (c.causal) opts.set_causal_mask(true);
  if (!mask.empty()) opts.set_bias(tensor("bias", kBias, mask));
  auto [O, stats] = g->sdpa(Q, K, V, opts);
  (void)stats;
  const std::vector<int64_t> od{q[0], q[1], q[2], v[3]};
  O->set_output(true).set_uid(kO).set_dim(od).set_stride(packed(od));

  CudnnDevice& dev = on ? *on : cudnn_device(device);
  std::lock_guard<std::mutex> lock(dev.mu);
  auto step = [&](fe::error_t e, const char* what) {
    if (e.is_good()) return true;
    plan->why = std::string(what) + ": " + e.get_message();
    return false;
  };
  if (!step(g->validate(), "validate") || !step(g->build_operation_graph(dev.handle), "operation graph") ||
      !step(g->create_execution_plans({fe::HeurMode_t::A}), "execution plans"))
    return plan;
  if (!step(g->check_support(dev.handle), "support") ||
      !step(g->build_plans(dev.handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build plans"))
    return plan;
  int64_t ws = 0;
  if (!step(g->get_workspace_size(ws), "workspace")) return plan;
  if (cpu_profiling()) {  // TGRAPH_PROFILE: which engine each plan took, and what building it cost
    std::string engine;
    if (!g->get_plan_name(engine).is_good()) engine = "?";
    cpu_profile_add("cudnn attention plan built: " + engine + (shared ? " (shared)" : on ? " (on a thread)" : ""),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!shared) save_plan(device, c, *g, *plan);
  plan->graph = std::move(g);
  plan->workspace = ws;
  plan->ok = true;
  return plan;
}

// The plan cache's key: the shape, and the switches that change how its plan is built (they may
// be set per executable, the cache is the process's).
std::string slot_key(int device, const AttentionCall& c, bool shared) {
  return key_of(device, c) + (shared ? "|shared" : "");
}

std::shared_ptr<Plan> plan_for(int device, const AttentionCall& c) {
  const bool shared = shares_kernels(c);
  std::shared_ptr<PlanSlot> slot;
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    auto& s = plans()[slot_key(device, c, shared)];
    if (!s) s = std::make_shared<PlanSlot>();
    slot = s;
  }
  std::lock_guard<std::mutex> building(slot->mu);  // outside the map's lock: building takes a while
  if (!slot->plan) {
    std::shared_ptr<Plan> p = shared ? nullptr : read_saved_plan(device, c);
    if (!p) p = build(device, c, shared);
    // This cuDNN may refuse dynamic shapes for the call: a static plan then.
    if (shared && !p->ok && p->why != "shape or dtype not taken") {
      std::shared_ptr<Plan> fixed = build(device, c, false);
      if (fixed->ok) p = fixed;
    }
    slot->plan = std::move(p);
  }
  return slot->plan;
}

void forget_saved_plan(int device, const AttentionCall& c) {
  {
    std::lock_guard<std::mutex> lock(saved_mutex());
    saved_plans().erase(key_of(device, c));
  }
  std::error_code ec;
  std::filesystem::remove(disk_cache_path(saved_key(device, c), kPlanExt), ec);
  std::lock_guard<std::mutex> lock(plans_mutex());
  plans().erase(slot_key(device, c, shares_kernels(c)));
}

}  // namespace

// attention_plans.h: what the tiered path (attention_tiers.cpp) asks of the plans.

std::string attention_plan_key(int device, const AttentionCall& c) { return slot_key(device, c, shares_kernels(c)); }

bool attention_kernels_shared(const AttentionCall& c) { return shares_kernels(c); }

bool attention_plan_made(int device, const AttentionCall& c) {
  std::lock_guard<std::mutex> lock(plans_mutex());
  return plans().count(attention_plan_key(device, c)) > 0;
}

bool attention_plan_saved(int device, const AttentionCall& c) {
  {
    std::lock_guard<std::mutex> lock(saved_mutex());
    if (saved_plans().count(key_of(device, c))) return true;
  }
  std::error_code ec;
  return std::filesystem::exists(disk_cache_path(saved_key(device, c), kPlanExt), ec);
}

OffThreadPlan build_attention_plan_on(int device, const AttentionCall& c, CudnnDevice& on) {
  OffThreadPlan out;
  std::shared_ptr<Plan> p = build(device, c, false, &on);
  const bool cuda_failed = cudaGetLastError() != cudaSuccess;
  if (p->ok && !p->blob.empty()) {  // handed to the device's handle as a saved plan
    out.blob = p->blob;
    std::lock_guard<std::mutex> lock(saved_mutex());
    saved_plans().try_emplace(key_of(device, c), p->blob);
  } else if (!p->ok && !cuda_failed) {  // refused: tgraph's kernel keeps running the shape (cudnn_attention)
    if (env_flag("TGRAPH_LOG_FALLBACK"))
      std::fprintf(stderr, "[tgraph] attention q %s k %s v %s: cuDNN refused (%s); tgraph's own kernel runs it\n",
                   c.q.str().c_str(), c.k.str().c_str(), c.v.str().c_str(), p->why.c_str());
    auto refused = std::make_shared<PlanSlot>();
    refused->plan = p;
    std::lock_guard<std::mutex> lock(plans_mutex());
    plans().try_emplace(slot_key(device, c, false), refused);
    out.refused = true;
  }
  // Otherwise (a CUDA error on the builder's thread, or a plan cuDNN would not serialise):
  // neither; the next run builds it in turn on the device's handle.
  return out;
}

void make_attention_plan(int device, const AttentionCall& c) { (void)plan_for(device, c); }

std::string attention_saved_plan_key(int device, const AttentionCall& c) { return saved_key(device, c); }

std::string attention_plan_from_disk(int device, const AttentionCall& c) {
  return disk_cache_read_keyed(saved_key(device, c), kPlanExt);
}

void cudnn_attention_provide(const std::string& problem, const std::string& value, int device) {
  std::lock_guard<std::mutex> lock(saved_mutex());
  saved_plans().try_emplace(device_key(device, problem), value);
}

bool cudnn_attention_supported(int device, const AttentionCall& c, std::string* why) {
  std::shared_ptr<Plan> p = plan_for(device, c);
  if (!p->ok && why) *why = p->why;
  return p->ok;
}

namespace {

// The call of attention node `n` with these operand and result types; false when cuDNN's
// kernel does not take their dtypes.
bool call_of(const Node& n, const std::vector<TensorType>& in, const std::vector<TensorType>& out,
             AttentionCall& c) {
  if (n.kind != OpKind::Attention || in.size() < 3 || out.size() != 1) return false;
  c = attention_call(std::get<AttentionDesc>(n.attr), in[0].dtype, in[0].shape, in[1].shape, in[2].shape);
  if (in.size() > 3) {
    if (in[3].dtype != c.dtype) return false;
    c.mask = in[3].shape;
    c.masked = true;
  }
  return in[1].dtype == c.dtype && in[2].dtype == c.dtype && out[0].dtype == c.dtype;
}

}  // namespace

bool cudnn_attention_cold(const GraphImpl&, const Node& n, const std::vector<TensorType>& in,
                          const std::vector<TensorType>& out, int device) {
  AttentionCall c;
  std::vector<int64_t> q, k, v, mask;
  if (!call_of(n, in, out, c) || !attention_geometry(c, q, k, v, mask)) return false;
  const bool shared = shares_kernels(c);
  if (attention_starts_on_own_kernel(device, c))
    return false;  // tgraph's kernel runs it while its plan is built on the builder's thread
  {
    std::lock_guard<std::mutex> lock(plans_mutex());
    if (plans().count(slot_key(device, c, shared)))
      return false;  // built, or being built
  }
  if (!shared) return true;
  // (The experiment:) a new batch of a class whose kernel is compiled binds it: no compile ahead.
  std::lock_guard<std::mutex> lock(caches_mutex());
  return !caches().count(topology_of(device, c, q, k, v, mask));
}

bool cudnn_attention(const GraphImpl& g, const Node& n, const std::vector<DevArg>& in,
                     const std::vector<DevOut>& out, cudaStream_t stream, int device) {
  std::vector<TensorType> it, ot;
  for (const DevArg& a : in) it.push_back(a.type);
  for (const DevOut& o : out) ot.push_back(o.type);
  AttentionCall c;
  if (!call_of(n, it, ot, c)) return false;
  if (attention_stand_in(c, in, out, stream, device)) return true;  // (attention_tiers.cpp)
  std::shared_ptr<Plan> p = plan_for(device, c);
  // Refused (a deferred build: the lowering kept the node before cuDNN answered): tgraph's kernel.
  if (!p->ok) return own_attention(c, in, out, stream);
  if (!p->blob.empty() && current_device_code())  // travels with the executable when it is saved
    record_library_plan(saved_key(device, c), p->blob, false);
  DeviceBuffer ws;
  if (p->workspace > 0) ws = op_workspace(static_cast<size_t>(p->workspace), stream, device);
  std::unordered_map<int64_t, void*> pack{{kQ, const_cast<void*>(in[0].ptr)},
                                          {kK, const_cast<void*>(in[1].ptr)},
                                          {kV, const_cast<void*>(in[2].ptr)},
                                          {kO, out[0].ptr}};
  if (in.size() > 3) pack.emplace(kBias, const_cast<void*>(in[3].ptr));
  CudnnDevice& dev = cudnn_device(device);
  fe::error_t e;
  {
    std::lock_guard<std::mutex> lock(dev.mu);
    TG_CUDNN(cudnnSetStream(dev.handle, stream));
    e = p->graph->execute(dev.handle, pack, ws.get());
  }
  if (!e.is_good() && p->read_back) {  // a saved plan this cuDNN will not run: built afresh
    forget_saved_plan(device, c);
    p = plan_for(device, c);
    if (!p->ok) return own_attention(c, in, out, stream);
    if (p->workspace > 0) ws = op_workspace(static_cast<size_t>(p->workspace), stream, device);
    std::lock_guard<std::mutex> lock(dev.mu);
    TG_CUDNN(cudnnSetStream(dev.handle, stream));
    e = p->graph->execute(dev.handle, pack, ws.get());
  }
  if (!e.is_good())
    throw Error("[scaled_dot_product_attention] cuDNN fused attention failed on q " + c.q.str() + ", k " +
                c.k.str() + ", v " + c.v.str() + ": " + e.get_message());
  return true;
}

#else  // no cuDNN frontend: attention is decomposed

void cudnn_attention_provide(const std::string&, const std::string&, int) {}

bool cudnn_attention_supported(int, const AttentionCall&, std::string* why) {
  if (why) *why = "built without the cuDNN frontend";
  return false;
}

bool cudnn_attention(const GraphImpl&, const Node&, const std::vector<DevArg>&, const std::vector<DevOut>&,
                     cudaStream_t, int) {
  return false;
}

bool cudnn_attention_cold(const GraphImpl&, const Node&, const std::vector<TensorType>&,
                          const std::vector<TensorType>&, int) {
  return false;
}

#endif

bool cudnn_attention_available() {
#if TGRAPH_HAVE_CUDNN_FRONTEND
  return true;
#else
  return false;
#endif
}

bool attention_geometry_taken(const AttentionCall& c) {
  std::vector<int64_t> q, k, v, m;
  return attention_geometry(c, q, k, v, m);
}

}  // namespace tg::detail
