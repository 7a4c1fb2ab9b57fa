// Half-precision convolutions through cuDNN's graph API: plans built once per problem, kept,
// executed by every later call (cudnn_conv_graph.h says why).
#include "backends/cuda/cudnn_conv_graph.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "backends/cpu/profile.h"
#include "backends/cuda/conv_choices.h"
#include "backends/cuda/cuda_ops.h"
#include "backends/cuda/library_plans.h"
#include "backends/cuda/library_warmup.h"
#include "core/env.h"
#include "runtime/device_code.h"

#if TGRAPH_HAVE_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace tg::detail {

#if TGRAPH_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;
namespace {

// An engine and its knobs: what the heuristics chose for a problem, as a new batch size builds
// it again.
struct Engine {
  bool ok = false;
  int64_t id = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;  // (KnobType_t, value), sorted
};

std::string engine_text(const Engine& e) {
  std::string s = "g " + std::to_string(e.id) + ' ';
  if (e.knobs.empty()) s += '-';
  for (size_t i = 0; i < e.knobs.size(); ++i)
    s += (i ? "," : "") + std::to_string(e.knobs[i].first) + '=' + std::to_string(e.knobs[i].second);
  return s;
}

// A whole decimal integer (nothing before or after it), or nullopt.
std::optional<int64_t> whole_int(std::string_view t) {
  int64_t v = 0;
  const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (err != std::errc() || end != t.data() + t.size()) return std::nullopt;
  return v;
}

// The engine in `text` (a saved executable's or the disk cache's: untrusted), or not ok.
Engine parse_engine(const std::string& text) {
  std::istringstream in(text);
  std::string tag, id, knobs, extra;
  Engine e;
  if (!(in >> tag >> id >> knobs) || (in >> extra) || tag != "g") return {};
  const auto n = whole_int(id);
  if (!n || *n < 0 || *n > 100000) return {};
  e.id = *n;
  if (knobs != "-") {
    if (knobs.back() == ',') return {};  // (getline would drop the empty knob after it)
    std::istringstream ks(knobs);
    std::string kv;
    while (std::getline(ks, kv, ',')) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || e.knobs.size() >= 64) return {};
      const auto t = whole_int(std::string_view(kv).substr(0, eq)),
                 v = whole_int(std::string_view(kv).substr(eq + 1));
      if (!t || !v || *t < 0 || *t > 1000) return {};
      e.knobs.emplace_back(*t, *v);
    }
    if (e.knobs.empty()) return {};
  }
  std::sort(e.knobs.begin(), e.knobs.end());
  e.ok = true;
  return e;
}

// A built plan. Executions are serialised on it (the host part only, ~20 us): a warm-up thread
// and the run may hold the same one.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t index = 0;  // the plan's index in the graph
  int64_t workspace = 0;
  Engine engine;
  bool provisional = false;           // another batch size's engine, this first run only
  bool asked = false;                 // the heuristics chose it (else provided, on disk, another size's)
  std::atomic<bool> executed{false};  // its kernels loaded
  uint64_t last_use = 0;              // the store's clock at its last call (under the store's mutex)
  std::mutex mu;
};

// The process's graph-API convolutions. Never destroyed (warm-up threads may still run while
// the program exits).
struct Store {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Plan>> plans;         // by key
  std::map<std::string, Engine> chosen;                       // by key: asked, provided, on disk
  std::map<std::string, std::map<int64_t, Engine>> families;  // by family, then batch
  std::set<std::string> ran;                                  // family|engine executed
  std::set<std::string> declined;                             // keys the graph API does not run
  std::set<std::string> no_reuse;                             // keys another size's engine failed for
  std::set<std::string> ahead_provisional;                    // keys a warm-up builds provisionally
  uint64_t clock = 0;                                         // calls so far
  // At most this many plans are kept (a serving process meets new sizes without end; each plan
  // holds cuDNN descriptors): the least recently used goes. A captured graph does not need its
  // plans, and a call running one holds it.
  size_t max_plans = 2048;
};
Store& store() {
  static Store* s = new Store;
  return *s;
}

std::string ran_key(const std::string& family, const Engine& e) { return family + '|' + engine_text(e); }

// The engine at the batch size nearest `batch` within `max_ratio` (4: beyond it the best
// kernels differ, conv_choices.cpp's nearest_batch), among those whose kernels ran when
// `loaded`.
Engine nearest(const std::string& family, int64_t batch, double max_ratio, bool loaded) {
  Store& s = store();
  auto f = s.families.find(family);
  if (f == s.families.end()) return {};
  Engine best;
  double best_ratio = max_ratio + 1e-9;
  for (const auto& [b, e] : f->second) {
    if (!e.ok || b <= 0 || batch <= 0 || (loaded && !s.ran.count(ran_key(family, e)))) continue;
    const double r = b > batch ? double(b) / double(batch) : double(batch) / double(b);
    if (r <= best_ratio) best = e, best_ratio = r;
  }
  return best;
}

std::string saved_key(const GraphConvKeys& k, int device) {
  return library_signature(device) + "|convg|" + k.problem;
}

// The engine this process knows for the problem without asking: its own, a saved or cached one,
// the nearest batch size's within a factor of 4 (not under TGRAPH_CUDNN_PER_BATCH). Under mu.
Engine known(const GraphConvKeys& k, int device) {
  Store& s = store();
  if (auto it = s.chosen.find(k.key); it != s.chosen.end()) return it->second;
  if (s.no_reuse.count(k.key)) return {};
  if (const Engine e = parse_engine(library_choice_from_disk(saved_key(k, device))); e.ok) {
    if (profiling_first_runs())
      cpu_profile_add("cuda first run: convolution: cuDNN choice read from the disk cache", 0.0);
    s.families[k.family].try_emplace(k.batch, e);
    return e;
  }
  if (env_flag("TGRAPH_CUDNN_PER_BATCH")) return {};
  return nearest(k.family, k.batch, 4.0, false);
}

std::vector<int64_t> packed_strides(const std::vector<int64_t>& dims, bool channels_last) {
  // dims in N, C, spatial order; memory N, spatial, C when channels last.
  std::vector<size_t> order;  // memory order, outermost first
  order.push_back(0);
  if (channels_last) {
    for (size_t i = 2; i < dims.size(); ++i) order.push_back(i);
    order.push_back(1);
  } else {
    for (size_t i = 1; i < dims.size(); ++i) order.push_back(i);
  }
  std::vector<int64_t> st(dims.size());
  int64_t acc = 1;
  for (size_t j = order.size(); j-- > 0;) {
    st[order[j]] = acc;
    acc *= dims[order[j]];
  }
  return st;
}

enum Uid : int64_t { kX = 1, kW = 2, kY = 3 };

// The problem's plan: with `engine` when given, else the heuristics' first buildable plan
// (no runtime-compiled engines: a kernel compiled for the problem costs 0.1-1 s; nor reduced
// precision reductions: the legacy calls accumulate in float; workspace within kMaxWorkspace).
std::shared_ptr<Plan> build(const GraphConv& c, cudnnHandle_t h, const Engine* engine) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(c.dtype == DType::bf16  ? fe::DataType_t::BFLOAT16
                      : c.dtype == DType::f32 ? fe::DataType_t::FLOAT
                                              : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& dims) {
    return fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(
        packed_strides(dims, c.channels_last));
  };
  // The padding after each spatial dim is the padding before: the legacy descriptor's one value
  // per dim, which cudnn_conv.cpp checked gives the real output extents (or padded x itself).
  const std::vector<int64_t>& post = c.pad;
  std::shared_ptr<fe::graph::Tensor_attributes> out;
  switch (c.dir) {
    case 0: {
      auto X = g->tensor(tensor("x", kX, c.x)), W = g->tensor(tensor("w", kW, c.w));
      out = g->conv_fprop(X, W,
                          fe::graph::Conv_fprop_attributes()
                              .set_pre_padding(c.pad)
                              .set_post_padding(post)
                              .set_stride(c.stride)
                              .set_dilation(c.dil));
      out->set_uid(kY).set_dim(c.y).set_stride(packed_strides(c.y, c.channels_last));
      break;
    }
    case 1: {
      auto DY = g->tensor(tensor("dy", kY, c.y)), W = g->tensor(tensor("w", kW, c.w));
      out = g->conv_dgrad(DY, W,
                          fe::graph::Conv_dgrad_attributes()
                              .set_pre_padding(c.pad)
                              .set_post_padding(post)
                              .set_stride(c.stride)
                              .set_dilation(c.dil));
      out->set_uid(kX).set_dim(c.x).set_stride(packed_strides(c.x, c.channels_last));
      break;
    }
    default: {
      auto DY = g->tensor(tensor("dy", kY, c.y)), X = g->tensor(tensor("x", kX, c.x));
      out = g->conv_wgrad(DY, X,
                          fe::graph::Conv_wgrad_attributes()
                              .set_pre_padding(c.pad)
                              .set_post_padding(post)
                              .set_stride(c.stride)
                              .set_dilation(c.dil));
      out->set_uid(kW).set_dim(c.w).set_stride(packed_strides(c.w, c.channels_last));
      break;
    }
  }
  out->set_output(true);
  if (!g->validate().is_good() || !g->build_operation_graph(h).is_good()) return nullptr;
  if (engine) {  // (a saved or cached one may come from an untrusted file: filtered the same)
    std::unordered_map<fe::KnobType_t, int64_t> knobs;
    for (auto [t, v] : engine->knobs) knobs[static_cast<fe::KnobType_t>(t)] = v;
    if (!g->create_execution_plan(engine->id, knobs).is_good()) return nullptr;
  } else if (!g->create_execution_plans({fe::HeurMode_t::A}).is_good()) {
    return nullptr;
  }
  g->deselect_behavior_notes({fe::BehaviorNote_t::RUNTIME_COMPILATION});
  g->deselect_numeric_notes({fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION});
  g->deselect_workspace_greater_than(static_cast<int64_t>(conv_choices::kMaxWorkspace));
  if (!g->check_support(h).is_good()) return nullptr;
  const int64_t count = g->get_execution_plan_count();
  for (int64_t i = 0; i < count; ++i) {
    if (!g->build_plan_at_index(i).is_good()) continue;
    auto p = std::make_shared<Plan>();
    int64_t ws = 0;
    if (!g->get_workspace_size_plan_at_index(i, ws).is_good() ||
        ws > static_cast<int64_t>(conv_choices::kMaxWorkspace))
      continue;
    std::unordered_map<fe::KnobType_t, int64_t> knobs;
    if (!g->get_engine_and_knobs_at_index(i, p->engine.id, knobs).is_good()) continue;
    for (auto [t, v] : knobs) p->engine.knobs.emplace_back(static_cast<int64_t>(t), v);
    std::sort(p->engine.knobs.begin(), p->engine.knobs.end());
    p->engine.ok = true;
    p->graph = g;
    p->index = i;
    p->workspace = ws;
    return p;
  }
  return nullptr;
}

}  // namespace

static std::atomic<int64_t> graph_executions{0};  // graph_conv_executions

bool graph_conv_takes(DType dtype, bool tf32) {
  // TGRAPH_CUDNN_FIND times the legacy algorithms (cudnnFind): those calls then. Exact f32 stays
  // on them too: they pick FMA-only algorithms by math type.
  return (dtype == DType::f16 || dtype == DType::bf16 || (dtype == DType::f32 && tf32)) &&
         !env_flag("TGRAPH_CUDNN_LEGACY") && !env_flag("TGRAPH_CUDNN_FIND");
}

int64_t graph_conv_executions() { return graph_executions.load(); }

size_t graph_conv_plans_kept(size_t max_plans) {
  std::lock_guard<std::mutex> l(store().mu);
  if (max_plans > 0) store().max_plans = max_plans;
  return store().plans.size();
}

bool graph_conv_declined(const GraphConvKeys& k) {
  std::lock_guard<std::mutex> l(store().mu);
  return store().declined.count(k.key) > 0;
}

bool graph_conv_cold(const GraphConvKeys& k, int device, bool provisional_fits) {
  Store& s = store();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.declined.count(k.key)) return false;
  if (auto it = s.plans.find(k.key); it != s.plans.end()) return !it->second->executed;
  // A first run with no known engine takes another size's whose kernels ran, built ahead.
  if (provisional_fits && ProvisionalChoices::current() && !s.no_reuse.count(k.key) &&
      !env_flag("TGRAPH_CUDNN_PER_BATCH") && !known(k, device).ok &&
      nearest(k.family, k.batch, 1e18, true).ok)
    s.ahead_provisional.insert(k.key);
  return true;
}

void graph_conv_drop_provisional(const std::string& key) {
  Store& s = store();
  std::lock_guard<std::mutex> l(s.mu);
  s.ahead_provisional.erase(key);
  auto it = s.plans.find(key);
  if (it != s.plans.end() && it->second->provisional) s.plans.erase(it);
}

bool graph_conv_run(const GraphConv& c, const GraphConvKeys& k, cudnnHandle_t h, cudaStream_t stream,
                    int device, void* x, void* w, void* y, bool may_provisional, bool* provisional) {
  Store& s = store();
  std::shared_ptr<Plan> plan;
  Engine reuse, any;
  bool allow_provisional = false;
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (s.declined.count(k.key)) return false;
    // The run's own first call, or a warm-up thread making it ahead, may take another size's
    // engine (never one that failed for this problem).
    const bool ahead = s.ahead_provisional.erase(k.key) > 0;
    allow_provisional =
        (may_provisional || ahead) && !s.no_reuse.count(k.key) && !env_flag("TGRAPH_CUDNN_PER_BATCH");
    if (auto it = s.plans.find(k.key); it != s.plans.end()) {
      plan = it->second;
      plan->last_use = ++s.clock;
    }
    if (!plan) {
      reuse = known(k, device);
      if (!reuse.ok && allow_provisional) any = nearest(k.family, k.batch, 1e18, true);
    }
  }
  if (!plan) {
    std::shared_ptr<Plan> built;
    if (reuse.ok && !(built = build(c, h, &reuse))) {
      // A provided, cached or another size's engine does not run it: the heuristics from now on.
      std::lock_guard<std::mutex> l(s.mu);
      s.no_reuse.insert(k.key);
      s.chosen.erase(k.key);
    }
    if (!built && any.ok && (built = build(c, h, &any))) built->provisional = true;
    if (!built) {
      std::optional<CpuProfileScope> timed;
      if (profiling_first_runs())
        timed.emplace("cuda first run: convolution: cuDNN heuristics asked (graph)");
      if ((built = build(c, h, nullptr))) built->asked = true;
    }
    std::lock_guard<std::mutex> l(s.mu);
    if (!built) {
      s.declined.insert(k.key);
      return false;
    }
    auto it = s.plans.find(k.key);
    if (it == s.plans.end() || (it->second->provisional && !built->provisional)) {
      s.plans[k.key] = plan = built;
      if (!built->provisional) {
        s.chosen[k.key] = built->engine;
        if (built->asked) {
          s.families[k.family][k.batch] = built->engine;
          library_choice_to_disk(saved_key(k, device), engine_text(built->engine));
        }
      }
      while (s.plans.size() > s.max_plans) {
        auto oldest = s.plans.begin();
        for (auto p = s.plans.begin(); p != s.plans.end(); ++p)
          if (p->second->last_use < oldest->second->last_use) oldest = p;
        s.plans.erase(oldest);
      }
    } else {
      plan = it->second;  // another thread built it meanwhile: one plan per problem
    }
    plan->last_use = ++s.clock;
  }
  if (plan->provisional) {
    // Another size's engine serves one first run (its question put off, ProvisionalChoices), and
    // never goes into a graph being captured: otherwise the heuristics are asked now.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
      cudaGetLastError();
      capturing = cudaStreamCaptureStatusActive;
    }
    if (!allow_provisional || capturing != cudaStreamCaptureStatusNone) {
      graph_conv_drop_provisional(k.key);
      return graph_conv_run(c, k, h, stream, device, x, w, y, false, provisional);
    }
    if (provisional) *provisional = true;
  } else if (current_device_code()) {
    record_library_plan(saved_key(k, device), engine_text(plan->engine));
  }
  DeviceBuffer ws;
  if (plan->workspace > 0) ws = op_workspace(static_cast<size_t>(plan->workspace), stream, device);
  std::unordered_map<int64_t, void*> pack = {{kX, x}, {kW, w}, {kY, y}};
  bool ok = false;
  {
    std::lock_guard<std::mutex> pl(plan->mu);  // (never held while taking the store's mutex)
    ok = cudnnSetStream(h, stream) == CUDNN_STATUS_SUCCESS &&
         plan->graph->execute_plan_at_index(h, pack, ws.get(), plan->index).is_good();
  }
  if (!ok) {
    // Nothing launched; the legacy calls run this one. An engine the heuristics chose sends the
    // problem to them for good; another (provided, cached, another size's) is forgotten and the
    // heuristics asked next time, as the legacy path does with a reused algorithm.
    std::lock_guard<std::mutex> l(s.mu);
    if (plan->asked) {
      s.declined.insert(k.key);
    } else {
      s.no_reuse.insert(k.key);
      s.chosen.erase(k.key);
    }
    if (auto it = s.plans.find(k.key); it != s.plans.end() && it->second == plan) s.plans.erase(it);
    return false;
  }
  plan->executed = true;
  ++graph_executions;
  std::lock_guard<std::mutex> l(s.mu);
  s.ran.insert(ran_key(k.family, plan->engine));
  return true;
}

bool graph_conv_engine_parses(const std::string& text) { return parse_engine(text).ok; }

void cudnn_conv_graph_provide(const std::string& problem, const std::string& value, int device) {
  const Engine e = parse_engine(value);
  if (!e.ok) return;
  const std::string key = std::to_string(device) + '|' + problem;
  std::lock_guard<std::mutex> l(store().mu);
  store().chosen.try_emplace(key, e);
  const size_t bar = key.rfind("|n");
  try {
    const int64_t batch = bar == std::string::npos ? 0 : std::stoll(key.substr(bar + 2));
    if (batch > 0) store().families[key.substr(0, bar)].try_emplace(batch, e);
  } catch (const std::exception&) {
  }
}

#else  // no cuDNN frontend: every convolution takes the legacy calls

bool graph_conv_takes(DType, bool) { return false; }
int64_t graph_conv_executions() { return 0; }
size_t graph_conv_plans_kept(size_t) { return 0; }
bool graph_conv_declined(const GraphConvKeys&) { return true; }
bool graph_conv_cold(const GraphConvKeys&, int, bool) { return false; }
void graph_conv_drop_provisional(const std::string&) {}
bool graph_conv_run(const GraphConv&, const GraphConvKeys&, cudnnHandle_t, cudaStream_t, int, void*, void*,
                    void*, bool, bool*) {
  return false;
}
bool graph_conv_engine_parses(const std::string&) { return false; }
void cudnn_conv_graph_provide(const std::string&, const std::string&, int) {}

#endif

}  // namespace tg::detail
