// The graph half of the TGRAPH PluggableDevice (grappler C API, TF_InitGraph).
//
// TensorFlow calls Optimize once per graph it runs (each tf.function body, after placement,
// twice: grappler's meta optimizer iterates), whenever a TGRAPH device exists. What it does now:
//   - clears _XlaMustCompile on nodes placed on TGRAPH: Keras 3's jit_compile="auto" turns XLA
//     on as soon as any non-CPU device is listed, and XLA has no TGRAPH JIT device ("No JIT
//     device registered for TGRAPH"), so model.fit would fail with the model code unchanged.
//   - moves to the CPU a node on TGRAPH whose op has no TGRAPH kernel (ours, or TensorFlow's
//     DEVICE_DEFAULT ones): grappler's own passes run after placement and put the ops they make
//     on the device of the ops they replace (the arithmetic optimizer's AddN for a chain of
//     adds), and such a node failed the run with "No registered 'X' OpKernel for 'TGRAPH'".
//   - rebuilds lowered conditionals and while loops as tgraph's control flow (functionalize.h)
//   - then forms clusters (cluster.cpp): each connected group of TGRAPH nodes tgraph converts
//     becomes one TgraphCluster node, compiled by the plugin's kernel into one executable.
//     TGRAPH_TF_NO_CLUSTERS=1 leaves every op its own kernel.
//
// The GraphDef classes are the wheel's own (tensorflow/core/framework/graph.pb.h) and resolve
// to the protobuf runtime inside libtensorflow_framework.so.2: no second protobuf here.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cluster.h"
#include "convert.h"
#include "fold_updates.h"
#include "functionalize.h"
#include "nodes.h"
#include "plugin.h"
#include "tensorflow/c/c_api.h"
#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/framework/kernel_def.pb.h"

namespace {

// The kernels TensorFlow holds for `op` on TGRAPH: the plugin's, and DEVICE_DEFAULT's, which
// every PluggableDevice gets; null when the registry cannot be read.
const std::vector<tensorflow::KernelDef>* tgraph_kernels(const std::string& op) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<std::vector<tensorflow::KernelDef>>> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(op);
  if (it != known.end()) return it->second.get();
  std::unique_ptr<std::vector<tensorflow::KernelDef>> found;
  TF_Status* s = TF_NewStatus();
  TF_Buffer* b = TF_GetRegisteredKernelsForOp(op.c_str(), s);
  tensorflow::KernelList kernels;
  if (TF_GetCode(s) == TF_OK && b && kernels.ParseFromArray(b->data, static_cast<int>(b->length))) {
    found = std::make_unique<std::vector<tensorflow::KernelDef>>();
    for (const tensorflow::KernelDef& k : kernels.kernel())
      if (k.device_type() == tgraph_tf::kDeviceType || k.device_type() == "DEFAULT") found->push_back(k);
  }
  if (b) TF_DeleteBuffer(b);
  TF_DeleteStatus(s);
  return (known[op] = std::move(found)).get();
}

// Whether one of those kernels takes node `n` (its type attributes among each constraint's
// allowed types). Unknown (the registry cannot be read): true, so the node stays.
bool has_tgraph_kernel(const tensorflow::NodeDef& n) {
  const std::vector<tensorflow::KernelDef>* kernels = tgraph_kernels(n.op());
  if (!kernels) return true;
  for (const tensorflow::KernelDef& k : *kernels) {
    bool fits = true;
    for (const auto& c : k.constraint()) {
      auto a = n.attr().find(c.name());
      if (a == n.attr().end() || a->second.value_case() != tensorflow::AttrValue::kType) continue;
      bool allowed = false;
      for (int t : c.allowed_values().list().type()) allowed = allowed || t == a->second.type();
      fits = fits && allowed;
    }
    if (fits) return true;
  }
  return false;
}

// The node's device with TGRAPH replaced by the CPU ("/job:.../device:TGRAPH:0" -> "/device:CPU:0").
std::string on_cpu(const std::string& device) {
  const std::string from = std::string("device:") + tgraph_tf::kDeviceType + ":";
  const size_t at = device.find(from);
  if (at == std::string::npos) return device;
  const size_t end = device.find_first_not_of("0123456789", at + from.size());
  return device.substr(0, at) + "device:CPU:0" + (end == std::string::npos ? "" : device.substr(end));
}

void* optimizer_create() { return nullptr; }
void optimizer_destroy(void*) {}
void free_buffer(void* data, size_t) { delete[] static_cast<char*>(data); }

// The names of the nodes grappler says must stay as they are (fetches, feeds ...).
std::set<std::string> nodes_to_preserve(const TF_GrapplerItem* item) {
  std::set<std::string> names;
  if (!item) return names;
  TF_Status* s = TF_NewStatus();
  int count = 0;
  size_t bytes = 0;
  TF_GetNodesToPreserveListSize(item, &count, &bytes, s);
  if (TF_GetCode(s) == TF_OK && count > 0) {
    std::vector<char*> values(static_cast<size_t>(count));
    std::vector<size_t> lengths(static_cast<size_t>(count));
    std::vector<char> storage(bytes);
    TF_GetNodesToPreserveList(item, values.data(), lengths.data(), count, storage.data(), bytes, s);
    if (TF_GetCode(s) == TF_OK)
      for (int i = 0; i < count; ++i) names.emplace(values[static_cast<size_t>(i)], lengths[static_cast<size_t>(i)]);
  }
  TF_DeleteStatus(s);
  return names;
}

// Says once per process, in one line, which ops of a graph that uses TGRAPH run on
// TensorFlow's CPU because tgraph has no converter for them: the stateless ops (math, shapes),
// not the stateful ones TensorFlow keeps anyway (variables, iterators, random state) nor
// function calls; with TGRAPH_TF_LOG=1, again whenever a graph adds new ones.
void report_cpu_ops(const tensorflow::GraphDef& g, const std::set<std::string>& functions) {
  static std::mutex mu;
  static std::set<std::string> reported;
  static bool said = false;
  bool uses_tgraph = false;
  std::set<std::string> cpu;
  for (const tensorflow::NodeDef& n : g.node()) {
    if (tgraph_tf::on_tgraph(n)) {
      uses_tgraph = uses_tgraph || tgraph_tf::has_converter(n.op());  // math on tgraph, not just variables
      continue;
    }
    const tensorflow::OpDef* d = tgraph_tf::op_def(n.op());
    if (n.device().find("device:CPU:") == std::string::npos || functions.count(n.op()) || !d || d->is_stateful() ||
        n.op()[0] == '_' || n.op() == "Const" || tgraph_tf::has_converter(n.op()))
      continue;
    cpu.insert(n.op());
  }
  if (!uses_tgraph || cpu.empty()) return;
  std::lock_guard<std::mutex> lock(mu);
  std::string fresh;
  for (const std::string& op : cpu)
    if (reported.insert(op).second) fresh += (fresh.empty() ? "" : ", ") + op;
  if (fresh.empty() || (said && !tgraph_tf::tf_log())) return;
  said = true;
  std::fprintf(stderr, "[tgraph-tf] no tgraph converter, so on TensorFlow's CPU: %s\n", fresh.c_str());
}

// TGRAPH_TF_DUMP=DIR: each graph the optimizer receives and returns, as text GraphDefs
// (DIR/graph_N_in.pbtxt, DIR/graph_N_out.pbtxt), to see what TensorFlow hands over.
void dump(const char* stage, const tensorflow::GraphDef& g) {
  const char* dir = std::getenv("TGRAPH_TF_DUMP");
  if (!dir || !*dir) return;
  static std::mutex mu;
  static int count = 0;
  std::lock_guard<std::mutex> lock(mu);
  const int k = std::string(stage) == "in" ? count++ : count - 1;
  const std::string path = std::string(dir) + "/graph_" + std::to_string(k) + "_" + stage + ".pbtxt";
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    const std::string text = g.DebugString();
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
}

bool clusters_off() {
  const char* v = std::getenv("TGRAPH_TF_NO_CLUSTERS");
  return v && std::string(v) != "0" && std::string(v) != "";
}

void optimizer_optimize(void*, const TF_Buffer* in, const TF_GrapplerItem* item, TF_Buffer* out,
                        TF_Status* status) {
  tensorflow::GraphDef g;
  if (!g.ParseFromArray(in->data, static_cast<int>(in->length))) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "tgraph: the GraphDef from TensorFlow does not parse");
    return;
  }
  std::set<std::string> functions;  // a node whose op is a library function is a call, no kernel
  for (const tensorflow::FunctionDef& f : g.library().function()) functions.insert(f.signature().name());
  for (tensorflow::NodeDef& n : *g.mutable_node()) {
    if (!tgraph_tf::on_tgraph(n)) continue;
    auto it = n.mutable_attr()->find("_XlaMustCompile");
    if (it != n.mutable_attr()->end() && it->second.b()) it->second.set_b(false);
    if (!functions.count(n.op()) && !has_tgraph_kernel(n)) n.set_device(on_cpu(n.device()));
  }
  dump("in", g);
  if (clusters_off()) report_cpu_ops(g, functions);
  else {
    // Innermost first: a conditional inside a loop's body, then the loop, then a conditional
    // holding that loop, until nothing changes.
    int conds = 0, loops = 0;
    for (int more = 1; more > 0;) {
      const std::set<std::string> keep = nodes_to_preserve(item);
      const int c = tgraph_tf::functionalize_conds(g, keep);
      const int l = tgraph_tf::functionalize_loops(g, keep);
      conds += c, loops += l, more = c + l;
    }
    if (conds > 0 && tgraph_tf::tf_log())
      std::fprintf(stderr, "[tgraph-tf] %d conditionals rebuilt as tgraph if_else\n", conds);
    if (loops > 0 && tgraph_tf::tf_log())
      std::fprintf(stderr, "[tgraph-tf] %d while loops rebuilt as tgraph while_loop\n", loops);
    report_cpu_ops(g, functions);  // after the rebuilding, which takes some ops off the CPU
    const int updates = tgraph_tf::fold_variable_updates(g);
    const int made = tgraph_tf::form_clusters(g, nodes_to_preserve(item));
    if (updates > 0 && tgraph_tf::tf_log())
      std::fprintf(stderr, "[tgraph-tf] %d variable updates folded into the clusters\n", updates);
    if (made > 0 && tgraph_tf::tf_log())
      std::fprintf(stderr, "[tgraph-tf] %d clusters formed in a graph of %d nodes\n", made, g.node_size());
  }
  dump("out", g);
  std::string bytes;
  if (!g.SerializeToString(&bytes)) {
    TF_SetStatus(status, TF_INTERNAL, "tgraph: the rewritten GraphDef does not serialize");
    return;
  }
  char* data = new char[bytes.size() ? bytes.size() : 1];
  bytes.copy(data, bytes.size());
  out->data = data;
  out->length = bytes.size();
  out->data_deallocator = free_buffer;
  TF_SetStatus(status, TF_OK, "");
}

}  // namespace

TGRAPH_TF_EXPORT void TF_InitGraph(TP_OptimizerRegistrationParams* params, TF_Status* status) {
  params->struct_size = TP_OPTIMIZER_REGISTRATION_PARAMS_STRUCT_SIZE;
  params->optimizer_configs->struct_size = TP_OPTIMIZER_CONFIGS_STRUCT_SIZE;
  params->optimizer->struct_size = TP_OPTIMIZER_STRUCT_SIZE;
  params->device_type = tgraph_tf::kDeviceType;
  params->optimizer->create_func = optimizer_create;
  params->optimizer->optimize_func = optimizer_optimize;
  params->optimizer->destroy_func = optimizer_destroy;
  TF_SetStatus(status, TF_OK, "");
}
