// The kernel half of the TGRAPH PluggableDevice (kernel and op C API, TF_InitKernel).
//
// Registers the op a cluster becomes, TgraphCluster (no kernel yet: the graph optimizer does
// not form clusters yet), and one kernel per op with a converter (convert.h): that kernel
// builds a one-node tgraph graph from the node's NodeDef, compiles it once per input signature
// and runs it. So the placer puts those ops on TGRAPH (priority 220, above the CPU's) and eager
// code and tf.function graphs run them on tgraph. Variables need no kernel of ours: TensorFlow
// 2.19.1 registers VarHandleOp, ReadVariableOp, AssignVariableOp, AssignAdd/SubVariableOp (and
// Const, Identity, _Arg ...) for DEVICE_DEFAULT, which every PluggableDevice gets
// (docs/tensorflow-plugin.md). The device's memory is host memory (device.cpp): the inputs are
// read where they are and tgraph's CPU backend runs the op.
#include "tensorflow/c/kernels.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "plugin.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"
#include "tgraph/tgraph.h"

namespace {

// TensorFlow's dtypes that tgraph has, and tgraph's name for each.
constexpr std::pair<TF_DataType, tg::DType> kDTypes[] = {
    {TF_FLOAT, tg::DType::f32}, {TF_DOUBLE, tg::DType::f64}, {TF_HALF, tg::DType::f16},
    {TF_BFLOAT16, tg::DType::bf16}, {TF_INT32, tg::DType::i32}, {TF_INT64, tg::DType::i64},
    {TF_INT8, tg::DType::i8}, {TF_UINT8, tg::DType::u8}, {TF_BOOL, tg::DType::boolean}};

bool tg_dtype(TF_DataType t, tg::DType& out) {
  for (const auto& [tf, tg] : kDTypes)
    if (tf == t) {
      out = tg;
      return true;
    }
  return false;
}

TF_DataType tf_dtype(tg::DType t) {
  for (const auto& [tf, tg] : kDTypes)
    if (tg == t) return tf;
  return TF_FLOAT;  // not reached: tgraph's results have their inputs' dtypes, or these
}

// One node's kernel: its NodeDef, and an executable per input signature (compiled at the first
// call with those types; a Keras model's last, smaller batch compiles once more).
struct NodeKernel {
  tensorflow::NodeDef node;
  std::mutex mu;
  struct Compiled {
    std::shared_ptr<tg::Graph> graph;
    tg::Executable exe;
  };
  std::map<std::string, Compiled> compiled;  // by signature_key
};

// The inputs' dtypes and shapes as a map key.
std::string signature_key(const std::vector<tg::TensorType>& types) {
  std::string k;
  for (const tg::TensorType& t : types) {
    k += tg::dtype_name(t.dtype);
    for (int64_t d : t.shape.dims()) k += "," + std::to_string(d);
    k += ";";
  }
  return k;
}

void* create(TF_OpKernelConstruction* ctx) {
  auto k = std::make_unique<NodeKernel>();
  TF_Status* s = TF_NewStatus();
  TF_Buffer* def = TF_OpKernelConstruction_GetNodeDef(ctx, s);
  if (TF_GetCode(s) == TF_OK && !k->node.ParseFromArray(def->data, static_cast<int>(def->length)))
    TF_SetStatus(s, TF_INTERNAL, "tgraph: the node's NodeDef does not parse");
  if (def) TF_DeleteBuffer(def);
  if (TF_GetCode(s) != TF_OK) {
    TF_OpKernelConstruction_Failure(ctx, s);
    TF_DeleteStatus(s);
    return nullptr;
  }
  TF_DeleteStatus(s);
  return k.release();
}

void destroy(void* kernel) { delete static_cast<NodeKernel*>(kernel); }

void fail(TF_OpKernelContext* ctx, TF_Code code, const std::string& what) {
  TF_Status* s = TF_NewStatus();
  TF_SetStatus(s, code, what.c_str());
  TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteStatus(s);
}

void compute(void* kernel, TF_OpKernelContext* ctx) {
  auto* k = static_cast<NodeKernel*>(kernel);
  if (!k) return;
  TF_Status* s = TF_NewStatus();
  std::vector<tg::TensorData> inputs;
  std::vector<tg::TensorType> types;
  std::vector<std::vector<int64_t>> values(static_cast<size_t>(TF_NumInputs(ctx)));  // value inputs
  std::vector<bool> is_value(values.size(), false);
  for (int i : tgraph_tf::value_inputs(k->node.op()))
    if (i < static_cast<int>(values.size())) is_value[static_cast<size_t>(i)] = true;
  for (int i = 0; i < TF_NumInputs(ctx); ++i) {
    TF_Tensor* t = nullptr;
    TF_GetInput(ctx, i, &t, s);
    if (TF_GetCode(s) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, s);
      TF_DeleteStatus(s);
      return;
    }
    if (is_value[static_cast<size_t>(i)]) {  // a shape or axes: read now, part of the signature
      const int64_t n = TF_TensorElementCount(t);
      std::vector<int64_t>& v = values[static_cast<size_t>(i)];
      if (TF_TensorType(t) == TF_INT32)
        for (int64_t e = 0; e < n; ++e) v.push_back(static_cast<const int32_t*>(TF_TensorData(t))[e]);
      else if (TF_TensorType(t) == TF_INT64)
        for (int64_t e = 0; e < n; ++e) v.push_back(static_cast<const int64_t*>(TF_TensorData(t))[e]);
      TF_DeleteTensor(t);
      continue;
    }
    tg::DType d;
    if (!tg_dtype(TF_TensorType(t), d)) {
      TF_DeleteTensor(t);
      TF_DeleteStatus(s);
      return fail(ctx, TF_UNIMPLEMENTED, "tgraph: node '" + k->node.name() + "' (" + k->node.op() +
                                             "): input " + std::to_string(i) + " has a dtype tgraph lacks");
    }
    std::vector<int64_t> dims;
    for (int a = 0; a < TF_NumDims(t); ++a) dims.push_back(TF_Dim(t, a));
    tg::Shape shape(dims);
    // TensorFlow's buffer, read in place; the TF_Tensor is released with the last reference.
    std::shared_ptr<std::byte> data(static_cast<std::byte*>(TF_TensorData(t)), [t](std::byte*) { TF_DeleteTensor(t); });
    inputs.push_back(tg::TensorData::wrap(shape, d, std::move(data)));
    types.push_back(tg::TensorType{shape, d});
  }
  TF_DeleteStatus(s);
  std::vector<tg::TensorData> results;
  try {
    tg::Executable exe;
    {
      std::lock_guard<std::mutex> lock(k->mu);
      std::string key = signature_key(types);
      for (const std::vector<int64_t>& v : values) {
        key += "|";
        for (int64_t x : v) key += std::to_string(x) + ",";
      }
      auto it = k->compiled.find(key);
      if (it == k->compiled.end()) {
        auto g = std::make_shared<tg::Graph>();
        std::vector<std::pair<tg::Tensor, tg::TensorType>> feeds;
        std::vector<tgraph_tf::Input> in;
        size_t fed = 0;
        for (size_t i = 0; i < values.size(); ++i) {
          if (is_value[i]) {
            in.push_back({tg::Tensor(), values[i]});
            continue;
          }
          const tg::TensorType& t = types[fed++];
          in.push_back({g->placeholder(t.shape, t.dtype), {}});
          feeds.emplace_back(in.back().t, t);
        }
        std::vector<tg::Tensor> outs = tgraph_tf::convert_node(*g, k->node, in);
        tg::Executable e = g->compile(feeds, outs, {}, tg::CompileOptions{.device = tg::Device::cpu()});
        it = k->compiled.emplace(key, NodeKernel::Compiled{g, e}).first;
        // TGRAPH_TF_LOG=1: a line per compile, so a test can tell tgraph ran an op (a fallback
        // to TensorFlow's CPU kernels gives the same numbers).
        if (const char* log = std::getenv("TGRAPH_TF_LOG"); log && std::string(log) != "0")
          std::fprintf(stderr, "[tgraph-tf] compiled %s (node %s) for %s\n", k->node.op().c_str(),
                       k->node.name().c_str(), key.c_str());
      }
      exe = it->second.exe;
    }
    results = exe.run(inputs);
  } catch (const std::exception& e) {
    return fail(ctx, TF_INVALID_ARGUMENT, e.what());
  }
  if (static_cast<int>(results.size()) != TF_NumOutputs(ctx))
    return fail(ctx, TF_INTERNAL, "tgraph: node '" + k->node.name() + "' made " + std::to_string(results.size()) +
                                      " outputs, TensorFlow expects " + std::to_string(TF_NumOutputs(ctx)));
  for (size_t o = 0; o < results.size(); ++o) {
    const tg::TensorData& r = results[o];
    std::vector<int64_t> dims(r.shape().dims().begin(), r.shape().dims().end());
    TF_Status* st = TF_NewStatus();
    TF_Tensor* out = TF_AllocateOutput(ctx, static_cast<int>(o), tf_dtype(r.dtype()), dims.data(),
                                       static_cast<int>(dims.size()), r.nbytes(), st);
    if (TF_GetCode(st) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, st);
      TF_DeleteStatus(st);
      return;
    }
    if (r.nbytes()) std::memcpy(TF_TensorData(out), r.data(), r.nbytes());
    TF_DeleteTensor(out);
    TF_DeleteStatus(st);
  }
}

// Ops whose kernels TensorFlow already registers for every PluggableDevice (DEVICE_DEFAULT):
// a second kernel for them would make their placement ambiguous.
bool has_default_kernel(const std::string& op) { return op == "Identity"; }

}  // namespace

TGRAPH_TF_EXPORT void TF_InitKernel() {
  TF_Status* s = TF_NewStatus();
  // One node per cluster: `body` holds the cluster's subgraph (a serialized GraphDef), the
  // inputs and outputs are plain tensors (variables are read before and assigned after).
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder("TgraphCluster");
  TF_OpDefinitionBuilderAddAttr(op, "Tin: list(type) >= 0");
  TF_OpDefinitionBuilderAddAttr(op, "Tout: list(type) >= 0");
  TF_OpDefinitionBuilderAddAttr(op, "body: string");
  TF_OpDefinitionBuilderAddInput(op, "args: Tin");
  TF_OpDefinitionBuilderAddOutput(op, "results: Tout");
  TF_OpDefinitionBuilderSetIsStateful(op, true);  // never folded or pruned as a constant
  TF_RegisterOpDefinition(op, s);
  if (TF_GetCode(s) != TF_OK)
    std::fprintf(stderr, "[tgraph-tf] registering TgraphCluster failed: %s\n", TF_Message(s));
  // The per-op kernels, for f32 and f64 (TensorFlow's CPU kernels keep the other dtypes).
  for (const std::string& name : tgraph_tf::converted_ops()) {
    if (has_default_kernel(name)) continue;
    for (TF_DataType t : {TF_FLOAT, TF_DOUBLE}) {
      TF_KernelBuilder* b = TF_NewKernelBuilder(name.c_str(), tgraph_tf::kDeviceType, create, compute, destroy);
      TF_KernelBuilder_TypeConstraint(b, "T", t, s);
      if (TF_GetCode(s) == TF_OK) TF_RegisterKernelBuilder((name + "_tgraph").c_str(), b, s);
      if (TF_GetCode(s) != TF_OK) {
        std::fprintf(stderr, "[tgraph-tf] registering the %s kernel failed: %s\n", name.c_str(), TF_Message(s));
        TF_SetStatus(s, TF_OK, "");
      }
    }
  }
  TF_DeleteStatus(s);
}
