// What a cuDNN convolution costs on the host through the graph API (cudnn_frontend): building
// its plan (heuristics, or a known engine and knobs at a new batch size), then each execute of
// the built plan, and plans built on four threads at once: the counterpart of
// bench/cudnn_call_cost.cpp's legacy calls, for the same ResNet-50-like problems.
// Build and run on the GPU machine (frontend headers from .devdeps):
//   g++ -O2 -std=c++17 bench/cudnn_plan_cost.cpp -o /tmp/pc -I.devdeps/cudnn_frontend/include \
//     -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudnn -lnvrtc -lcuda -lcudart && /tmp/pc
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace fe = cudnn_frontend;

namespace {
struct Problem {
  int64_t n, c, h, k, r, pad, stride;
};
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void check(fe::error_t e, const char* what) {
  if (!e.is_good()) {
    std::fprintf(stderr, "%s: %s\n", what, e.get_message().c_str());
    std::exit(1);
  }
}
void* xbuf;
void* ybuf;
void* wbuf;
void* wsbuf;

struct Built {
  std::shared_ptr<fe::graph::Graph> g;
  std::shared_ptr<fe::graph::Tensor_attributes> x, w, y;
  int64_t ws = 0;
  int64_t engine = -1;
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  double t_graph = 0, t_heur = 0, t_build = 0;
};

// NHWC strides of [n, c, h, w] dims.
std::vector<int64_t> nhwc(const std::vector<int64_t>& d) { return {d[1] * d[2] * d[3], 1, d[1] * d[3], d[1]}; }

// The problem's graph and plan: the heuristics' first buildable plan (engine < 0), or the given
// engine and knobs.
Built build(cudnnHandle_t h, const Problem& p, int64_t engine, const std::unordered_map<fe::KnobType_t, int64_t>& knobs) {
  Built b;
  double t0 = now_ms();
  b.g = std::make_shared<fe::graph::Graph>();
  b.g->set_io_data_type(fe::DataType_t::HALF).set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t oh = (p.h + 2 * p.pad - p.r) / p.stride + 1;
  std::vector<int64_t> xd = {p.n, p.c, p.h, p.h}, wd = {p.k, p.c, p.r, p.r}, yd = {p.n, p.k, oh, oh};
  b.x = b.g->tensor(fe::graph::Tensor_attributes().set_name("x").set_uid(1).set_dim(xd).set_stride(nhwc(xd)));
  b.w = b.g->tensor(fe::graph::Tensor_attributes().set_name("w").set_uid(2).set_dim(wd).set_stride(nhwc(wd)));
  auto opts = fe::graph::Conv_fprop_attributes()
                  .set_pre_padding({p.pad, p.pad})
                  .set_post_padding({p.pad, p.pad})
                  .set_stride({p.stride, p.stride})
                  .set_dilation({1, 1});
  b.y = b.g->conv_fprop(b.x, b.w, opts);
  b.y->set_output(true).set_uid(3).set_dim(yd).set_stride(nhwc(yd));
  check(b.g->validate(), "validate");
  check(b.g->build_operation_graph(h), "operation graph");
  double t1 = now_ms();
  if (engine < 0) {
    check(b.g->create_execution_plans({fe::HeurMode_t::A}), "heuristics");
    b.g->deselect_behavior_notes({fe::BehaviorNote_t::RUNTIME_COMPILATION});
  } else {
    check(b.g->create_execution_plan(engine, knobs), "engine");
  }
  check(b.g->check_support(h), "support");
  double t2 = now_ms();
  check(b.g->build_plans(h, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "build");
  double t3 = now_ms();
  check(b.g->get_workspace_size(b.ws), "workspace");
  int64_t idx = 0;
  check(b.g->get_engine_and_knobs_at_index(idx, b.engine, b.knobs), "engine and knobs");
  b.t_graph = t1 - t0;
  b.t_heur = t2 - t1;
  b.t_build = t3 - t2;
  return b;
}

double exec(cudnnHandle_t h, cudaStream_t s, Built& b) {
  double t0 = now_ms();
  cudnnSetStream(h, s);
  std::unordered_map<int64_t, void*> pack = {{1, xbuf}, {2, wbuf}, {3, ybuf}};
  check(b.g->execute(h, pack, wsbuf), "execute");
  return now_ms() - t0;
}
std::string fmt(const std::vector<double>& v) {
  std::string r;
  char buf[32];
  for (double x : v) {
    std::snprintf(buf, sizeof buf, "%.3f ", x);
    r += buf;
  }
  return r;
}
}  // namespace

int main() {
  std::printf("cuDNN %zu, frontend %d\n", cudnnGetVersion(), CUDNN_FRONTEND_VERSION);
  cudaMalloc(&xbuf, size_t(512) << 20);
  cudaMalloc(&ybuf, size_t(512) << 20);
  cudaMalloc(&wbuf, size_t(64) << 20);
  cudaMalloc(&wsbuf, size_t(256) << 20);
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudnnHandle_t h;
  cudnnCreate(&h);
  const std::vector<Problem> base = {{8, 64, 56, 64, 3, 1, 1}, {8, 128, 28, 128, 3, 1, 1},
                                     {8, 64, 56, 256, 1, 0, 1}, {8, 128, 56, 128, 3, 1, 2}};
  std::vector<Built> b8;
  for (const Problem& p : base) {
    b8.push_back(build(h, p, -1, {}));
    Built& b = b8.back();
    double first = exec(h, s, b);
    cudaStreamSynchronize(s);
    std::printf("batch 8: graph %.3f heuristics %.3f build %.3f ms, first execute %.3f ms (engine %lld, %zu knobs, ws %lld)\n",
                b.t_graph, b.t_heur, b.t_build, first, (long long)b.engine, b.knobs.size(), (long long)b.ws);
  }
  {
    std::vector<double> t;
    for (int r = 0; r < 3; ++r)
      for (auto& b : b8) t.push_back(exec(h, s, b));
    cudaStreamSynchronize(s);
    std::printf("executes in turn: %s\n", fmt(t).c_str());
  }
  // A new batch size with the known engines and knobs, then with the heuristics.
  for (int64_t n : {32, 7}) {
    for (size_t i = 0; i < base.size(); ++i) {
      Problem p = base[i];
      p.n = n;
      Built k = build(h, p, b8[i].engine, b8[i].knobs);
      double first = exec(h, s, k);
      double second = exec(h, s, k);
      cudaStreamSynchronize(s);
      Built q = build(h, p, -1, {});
      std::printf("batch %lld problem %zu: known engine: graph %.3f build %.3f ms, executes %.3f %.3f; heuristics "
                  "%.3f build %.3f (engine %lld vs %lld)\n",
                  (long long)n, i, k.t_graph, k.t_heur + k.t_build, first, second, q.t_heur, q.t_build,
                  (long long)q.engine, (long long)k.engine);
    }
  }
  // Batch 64: plans built on four threads, a handle each; executed here on h.
  {
    std::vector<cudnnHandle_t> hs(base.size());
    for (auto& x : hs) cudnnCreate(&x);
    std::vector<Built> b64(base.size());
    double t0 = now_ms();
    std::vector<std::thread> th;
    for (size_t i = 0; i < base.size(); ++i)
      th.emplace_back([&, i] {
        Problem p = base[i];
        p.n = 64;
        b64[i] = build(hs[i], p, b8[i].engine, b8[i].knobs);
      });
    for (auto& x : th) x.join();
    double wall = now_ms() - t0;
    std::vector<double> t;
    for (int r = 0; r < 2; ++r)
      for (auto& b : b64) t.push_back(exec(h, s, b));
    cudaStreamSynchronize(s);
    std::printf("batch 64: 4 plans on 4 threads in %.3f ms; executed on another handle: %s\n", wall, fmt(t).c_str());
  }
  return 0;
}
