// The graph half of the TGRAPH PluggableDevice (grappler C API, TF_InitGraph).
//
// TensorFlow calls Optimize once per graph it runs (each tf.function body, after placement,
// twice: grappler's meta optimizer iterates), whenever a TGRAPH device exists. What it does now:
//   - clears _XlaMustCompile on nodes placed on TGRAPH: Keras 3's jit_compile="auto" turns XLA
//     on as soon as any non-CPU device is listed, and XLA has no TGRAPH JIT device ("No JIT
//     device registered for TGRAPH"), so model.fit would fail with the model code unchanged.
// Next (docs/tensorflow-plugin.md): cluster the TGRAPH nodes tgraph supports into one
// TgraphCluster node each, whose kernel compiles the cluster into a tgraph executable.
//
// The GraphDef classes are the wheel's own (tensorflow/core/framework/graph.pb.h) and resolve
// to the protobuf runtime inside libtensorflow_framework.so.2: no second protobuf here.
#include <string>

#include "plugin.h"
#include "tensorflow/c/experimental/grappler/grappler.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/core/framework/graph.pb.h"

namespace {

bool on_tgraph(const tensorflow::NodeDef& n) {
  return n.device().find(std::string("device:") + tgraph_tf::kDeviceType + ":") != std::string::npos;
}

void* optimizer_create() { return nullptr; }
void optimizer_destroy(void*) {}
void free_buffer(void* data, size_t) { delete[] static_cast<char*>(data); }

void optimizer_optimize(void*, const TF_Buffer* in, const TF_GrapplerItem*, TF_Buffer* out,
                        TF_Status* status) {
  tensorflow::GraphDef g;
  if (!g.ParseFromArray(in->data, static_cast<int>(in->length))) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "tgraph: the GraphDef from TensorFlow does not parse");
    return;
  }
  for (tensorflow::NodeDef& n : *g.mutable_node()) {
    if (!on_tgraph(n)) continue;
    auto it = n.mutable_attr()->find("_XlaMustCompile");
    if (it != n.mutable_attr()->end() && it->second.b()) it->second.set_b(false);
  }
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
