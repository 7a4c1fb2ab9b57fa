// The kernel half of the TGRAPH PluggableDevice (kernel and op C API, TF_InitKernel).
//
// Two kinds of kernel, one code path (a Body compiled per input signature and run):
//   - TgraphCluster: what the graph optimizer makes of each connected group of converted nodes
//     (cluster.cpp); its body is those nodes (and the small constants they read), compiled into
//     one tgraph executable, so tgraph fuses across them.
//   - one kernel per op with a converter (convert.h): a body of that one node. These make the
//     placer put the ops on TGRAPH (priority 220, above the CPU's), so the optimizer finds them
//     there; they also run eager code and any node left outside a cluster.
// Shape and axes inputs are read as values, part of the signature. Variables need no kernel of
// ours: TensorFlow 2.19.1 registers VarHandleOp, ReadVariableOp, AssignVariableOp,
// AssignAdd/SubVariableOp (and Const, Identity, _Arg ...) for DEVICE_DEFAULT, which every
// PluggableDevice gets (docs/tensorflow-plugin.md). The inputs are read where they are, in
// the device's memory (device.cpp): tgraph's CPU backend runs the body on the host device, its
// CUDA backend on TensorFlow's compute stream where the devices are GPUs.
#include "tensorflow/c/kernels.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cluster.h"
#include "convert.h"
#include "device_cuda.h"
#include "functionalize.h"
#include "nodes.h"
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

// What a kernel compiles: one node, or a cluster's body.
struct Body {
  std::vector<tensorflow::NodeDef> nodes;  // each after the nodes it reads
  std::vector<std::string> args;           // the tensors ("node:k") the kernel's inputs are, in order
  std::vector<bool> value_arg;             // read as integer values (shapes, axes)
  std::vector<std::string> outs;           // the tensors returned; empty: every output of nodes[0]
  std::string what;                        // names it in messages
};

struct Kernel {
  Body body;
  std::mutex mu;
  struct Compiled {
    std::shared_ptr<tg::Graph> graph;
    tg::Executable exe;
  };
  std::map<std::string, Compiled> compiled;  // by input signature
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

// A Const node's value: a tgraph constant, and its integers when it has them (a shape read by
// the node that takes it as values).
tgraph_tf::Input const_input(tg::Graph& g, const tensorflow::NodeDef& n) {
  const tensorflow::TensorProto& p = n.attr().at("value").tensor();
  std::vector<int64_t> dims;
  for (const auto& d : p.tensor_shape().dim()) dims.push_back(d.size());
  tg::DType dt;
  if (!tg_dtype(static_cast<TF_DataType>(p.dtype()), dt))
    throw tg::Error("[tensorflow] constant '" + n.name() + "' has a dtype tgraph lacks");
  tg::TensorData t(tg::Shape(dims), dt);
  const int64_t count = t.num_elements();
  const std::string& raw = p.tensor_content();
  if (!raw.empty()) {
    if (raw.size() != t.nbytes()) throw tg::Error("[tensorflow] constant '" + n.name() + "': content size mismatch");
    std::memcpy(t.data(), raw.data(), raw.size());
  } else {  // typed values; fewer than the elements repeat the last one (none: zeros)
    auto fill = [&](const auto& vals) {
      for (int64_t i = 0; i < count; ++i)
        t.set(i, vals.empty() ? 0.0 : static_cast<double>(vals[std::min<int>(static_cast<int>(i), vals.size() - 1)]));
    };
    if (dt == tg::DType::f32) fill(p.float_val());
    else if (dt == tg::DType::f64) fill(p.double_val());
    else if (dt == tg::DType::i64) fill(p.int64_val());
    else fill(p.int_val());
  }
  tgraph_tf::Input in{g.constant(t), {}};
  in.known = dt == tg::DType::i32 || dt == tg::DType::i64;
  if (in.known)
    for (int64_t i = 0; i < count; ++i) in.values.push_back(static_cast<int64_t>(t.at(i)));
  return in;
}

using Env = std::map<std::string, tgraph_tf::Input>;

std::vector<tg::Tensor> convert_nodes(tg::Graph& g, const std::vector<tensorflow::NodeDef>& nodes, Env& env,
                                      const std::string& what);

// A TgraphIf (functionalize.h) as tgraph's if_else: each branch's nodes converted inside its
// region, reading the conditional's inputs (`in`, after the predicate) as "_if_arg:k" and the
// values outside as captures.
std::vector<tg::Tensor> convert_if(tg::Graph& g, const tensorflow::NodeDef& n, const std::vector<tgraph_tf::Input>& in,
                                   const std::string& what) {
  const auto& a = n.attr();
  tensorflow::GraphDef bodies[2];
  if (in.empty() || !in[0].t.valid() || !a.count("then_body") || !a.count("else_body") ||
      !bodies[1].ParseFromString(a.at("then_body").s()) || !bodies[0].ParseFromString(a.at("else_body").s()))
    throw tg::Error("[tensorflow] " + what + ": conditional '" + n.name() + "' has no readable branches");
  auto branch = [&](int side) {
    const char* outs = side ? "then_outs" : "else_outs";
    return [&, side, outs](tg::Graph& r) {
      Env env;
      for (size_t k = 1; k < in.size(); ++k) env[tgraph_tf::if_arg(k - 1)] = in[k];
      std::vector<tensorflow::NodeDef> nodes(bodies[side].node().begin(), bodies[side].node().end());
      convert_nodes(r, nodes, env, what + ", branch of '" + n.name() + "'");
      std::vector<tg::Tensor> results;
      for (const std::string& o : a.at(outs).list().s()) {
        auto it = env.find(o);
        if (it == env.end() || !it->second.t.valid())
          throw tg::Error("[tensorflow] " + what + ": conditional '" + n.name() + "' returns " + o + ", not computed");
        results.push_back(r.identity(it->second.t));  // a value of this region, even when captured
      }
      return results;
    };
  };
  tg::Tensor pred = in[0].t;
  if (pred.rank() != 0) pred = g.reshape(pred, {});
  return g.if_else(pred, branch(1), branch(0));
}

// A TgraphWhile (functionalize.h) as tgraph's while_loop: the condition's nodes in `before`
// (which passes the variables on), the body's in `after`; invariants read as captures.
std::vector<tg::Tensor> convert_while(tg::Graph& g, const tensorflow::NodeDef& n, const std::vector<tgraph_tf::Input>& in,
                                      const std::string& what) {
  const auto& a = n.attr();
  tensorflow::GraphDef cond, body;
  if (!a.count("cond_body") || !a.count("body_body") || !a.count("Tout") || !a.count("cond_out") ||
      !a.count("body_outs") || !cond.ParseFromString(a.at("cond_body").s()) || !body.ParseFromString(a.at("body_body").s()))
    throw tg::Error("[tensorflow] " + what + ": loop '" + n.name() + "' has no readable condition or body");
  const size_t vars = static_cast<size_t>(a.at("Tout").list().type_size());
  if (in.size() < vars) throw tg::Error("[tensorflow] " + what + ": loop '" + n.name() + "' lacks its initial values");
  std::vector<tg::Tensor> init;
  for (size_t i = 0; i < vars; ++i) {
    if (!in[i].t.valid()) throw tg::Error("[tensorflow] " + what + ": loop '" + n.name() + "' reads a value input");
    init.push_back(in[i].t);
  }
  const std::string where = what + ", loop '" + n.name() + "'";
  auto region_env = [&](const std::vector<tg::Tensor>& vars_now) {
    Env env;
    for (size_t k = vars; k < in.size(); ++k) env[tgraph_tf::if_arg(k - vars)] = in[k];
    for (size_t i = 0; i < vars_now.size(); ++i) env[tgraph_tf::loop_var(i)] = {vars_now[i], {}};
    return env;
  };
  auto lookup = [&](Env& env, const std::string& t) {
    auto it = env.find(t);
    if (it == env.end() || !it->second.t.valid()) throw tg::Error("[tensorflow] " + where + ": " + t + " is not computed");
    return it->second.t;
  };
  std::vector<tensorflow::NodeDef> cond_nodes(cond.node().begin(), cond.node().end());
  std::vector<tensorflow::NodeDef> body_nodes(body.node().begin(), body.node().end());
  return g.while_loop(
      init,
      [&](tg::Graph& r, std::vector<tg::Tensor> args) {
        Env env = region_env(args);
        convert_nodes(r, cond_nodes, env, where);
        tg::Tensor pred = lookup(env, a.at("cond_out").s());
        if (pred.rank() != 0) pred = r.reshape(pred, {});
        std::vector<tg::Tensor> results;
        for (const tg::Tensor& t : args) results.push_back(r.identity(t));
        return std::make_pair(pred, results);
      },
      [&](tg::Graph& r, std::vector<tg::Tensor> args) {
        Env env = region_env(args);
        convert_nodes(r, body_nodes, env, where);
        std::vector<tg::Tensor> next;
        for (const std::string& o : a.at("body_outs").list().s()) next.push_back(r.identity(lookup(env, o)));
        return next;
      });
}

// Converts `nodes` (inputs first) on g, reading and adding tensors by name in env; returns the
// last node's results.
std::vector<tg::Tensor> convert_nodes(tg::Graph& g, const std::vector<tensorflow::NodeDef>& nodes, Env& env,
                                      const std::string& what) {
  std::vector<tg::Tensor> last;
  for (const tensorflow::NodeDef& n : nodes) {
    if (n.op() == "Const") {
      env[n.name() + ":0"] = const_input(g, n);
      continue;
    }
    std::vector<tgraph_tf::Input> in;
    for (const std::string& s : n.input()) {
      if (s.empty() || s[0] == '^') continue;
      auto it = env.find(tgraph_tf::tensor_name(s));
      if (it == env.end()) throw tg::Error("[tensorflow] " + what + ": node '" + n.name() + "' reads " + s + ", which the body lacks");
      in.push_back(it->second);
    }
    if (n.op() == "Identity" && in.size() == 1) {  // a branch's pivot: no op
      env[n.name() + ":0"] = in[0];
      last = {in[0].t};
      continue;
    }
    last = n.op() == tgraph_tf::kIfOp      ? convert_if(g, n, in, what)
           : n.op() == tgraph_tf::kWhileOp ? convert_while(g, n, in, what)
                                           : tgraph_tf::convert_node(g, n, in);
    for (size_t k = 0; k < last.size(); ++k) env[n.name() + ":" + std::to_string(k)] = {last[k], {}};
  }
  return last;
}

// Builds the body on a graph: placeholders for the fed args, values for the others.
std::vector<tg::Tensor> build(tg::Graph& g, const Body& b, const std::vector<tg::TensorType>& types,
                              const std::vector<std::vector<int64_t>>& values,
                              std::vector<std::pair<tg::Tensor, tg::TensorType>>& feeds) {
  Env env;
  size_t fed = 0;
  for (size_t i = 0; i < b.args.size(); ++i) {
    if (b.value_arg[i]) {
      env[b.args[i]] = {tg::Tensor(), values[i], true};
      continue;
    }
    const tg::TensorType& t = types[fed++];
    env[b.args[i]] = {g.placeholder(t.shape, t.dtype), {}};
    feeds.emplace_back(env[b.args[i]].t, t);
  }
  std::vector<tg::Tensor> last = convert_nodes(g, b.nodes, env, b.what);
  if (b.outs.empty()) return last;
  std::vector<tg::Tensor> outs;
  for (const std::string& o : b.outs) {
    auto it = env.find(o);
    if (it == env.end() || !it->second.t.valid())
      throw tg::Error("[tensorflow] " + b.what + ": output " + o + " is not computed by the body");
    outs.push_back(it->second.t);
  }
  return outs;
}

void* create(TF_OpKernelConstruction* ctx) {
  auto k = std::make_unique<Kernel>();
  tensorflow::NodeDef node;
  TF_Status* s = TF_NewStatus();
  TF_Buffer* def = TF_OpKernelConstruction_GetNodeDef(ctx, s);
  if (TF_GetCode(s) == TF_OK && !node.ParseFromArray(def->data, static_cast<int>(def->length)))
    TF_SetStatus(s, TF_INTERNAL, "tgraph: the node's NodeDef does not parse");
  if (def) TF_DeleteBuffer(def);
  Body& b = k->body;
  if (TF_GetCode(s) == TF_OK && node.op() == tgraph_tf::kClusterOp) {
    tensorflow::GraphDef body;
    const auto& a = node.attr();
    if (!a.count("body") || !body.ParseFromString(a.at("body").s()) || !a.count("inputs") || !a.count("outputs")) {
      TF_SetStatus(s, TF_INVALID_ARGUMENT, ("tgraph: cluster '" + node.name() + "' has no readable body").c_str());
    } else {
      b.nodes.assign(body.node().begin(), body.node().end());
      b.args.assign(a.at("inputs").list().s().begin(), a.at("inputs").list().s().end());
      b.outs.assign(a.at("outputs").list().s().begin(), a.at("outputs").list().s().end());
      b.value_arg.assign(b.args.size(), false);
      if (a.count("value_args"))
        for (int64_t i : a.at("value_args").list().i())
          if (i >= 0 && static_cast<size_t>(i) < b.args.size()) b.value_arg[static_cast<size_t>(i)] = true;
      b.what = "cluster '" + node.name() + "' (" + std::to_string(b.nodes.size()) + " nodes)";
    }
  } else if (TF_GetCode(s) == TF_OK) {
    const std::vector<int>& values = tgraph_tf::value_inputs(node.op());
    for (const std::string& in : node.input()) {
      if (in.empty() || in[0] == '^') continue;
      b.value_arg.push_back(std::find(values.begin(), values.end(), static_cast<int>(b.args.size())) != values.end());
      b.args.push_back("arg" + std::to_string(b.args.size()) + ":0");
    }
    // The body's node reads the kernel's inputs by these names.
    node.clear_input();
    for (const std::string& a : b.args) node.add_input(a);
    b.what = "node '" + node.name() + "' (" + node.op() + ")";
    b.nodes.push_back(std::move(node));
  }
  if (TF_GetCode(s) != TF_OK) {
    TF_OpKernelConstruction_Failure(ctx, s);
    TF_DeleteStatus(s);
    return nullptr;
  }
  TF_DeleteStatus(s);
  return k.release();
}

void destroy(void* kernel) { delete static_cast<Kernel*>(kernel); }

void fail(TF_OpKernelContext* ctx, TF_Code code, const std::string& what) {
  TF_Status* s = TF_NewStatus();
  TF_SetStatus(s, code, what.c_str());
  TF_OpKernelContext_Failure(ctx, s);
  TF_DeleteStatus(s);
}

// One input of a run: TensorFlow's buffer as tgraph's, read in place (the TF_Tensor is
// released with the last reference). On CUDA a buffer in host memory (TensorFlow keeps int32
// tensors of GPU-like devices there) is copied to the device first.
tg::DeviceTensor device_input(TF_Tensor* t, const tg::TensorType& type, tg::Device device) {
  void* data = TF_TensorData(t);
  std::shared_ptr<void> owner(t, [](void* p) { TF_DeleteTensor(static_cast<TF_Tensor*>(p)); });
  if (device.kind == tg::Device::Kind::cuda && !tgraph_tf::device_memory(data)) {
    std::shared_ptr<std::byte> host(static_cast<std::byte*>(data), [owner](std::byte*) {});
    return tg::DeviceTensor::from_host(tg::TensorData::wrap(type.shape, type.dtype, std::move(host)), device);
  }
  return tg::DeviceTensor(std::make_shared<tg::DeviceTensor::Storage>(
      tg::DeviceTensor::Storage{type, device, data, std::move(owner)}));
}

void compute(void* kernel, TF_OpKernelContext* ctx) {
  auto* k = static_cast<Kernel*>(kernel);
  if (!k) return;
  const Body& b = k->body;
  if (static_cast<size_t>(TF_NumInputs(ctx)) != b.args.size())
    return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + " takes " + std::to_string(b.args.size()) + " inputs, got " +
                                      std::to_string(TF_NumInputs(ctx)));
  // Where it runs: on CUDA, the device TensorFlow runs this kernel on, in the order of its
  // compute stream (tgraph's work is queued there; nothing here waits for the GPU).
  const bool cuda = tgraph_tf::on_cuda();
  const tg::Device device = cuda ? tg::Device::cuda(TF_GetDeviceId(ctx)) : tg::Device::cpu();
  TF_Status* s = TF_NewStatus();
  void* stream = nullptr;
  if (cuda) {
    stream = tgraph_tf::cuda_stream(TF_GetStream(ctx, s));
    if (TF_GetCode(s) != TF_OK || !stream) {
      TF_DeleteStatus(s);
      return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + ": TensorFlow gave no stream");
    }
  }
  std::vector<tg::DeviceTensor> inputs;
  std::vector<tg::TensorType> types;
  std::vector<std::vector<int64_t>> values(b.args.size());
  for (int i = 0; i < TF_NumInputs(ctx); ++i) {
    TF_Tensor* t = nullptr;
    TF_GetInput(ctx, i, &t, s);
    if (TF_GetCode(s) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, s);
      TF_DeleteStatus(s);
      return;
    }
    if (b.value_arg[static_cast<size_t>(i)]) {  // a shape or axes: read now, part of the signature
      const int64_t n = TF_TensorElementCount(t);
      const size_t width = TF_TensorType(t) == TF_INT64 ? 8 : 4;
      std::vector<std::byte> bytes(static_cast<size_t>(n) * width);
      const void* src = TF_TensorData(t);
      if (cuda && n && tgraph_tf::device_memory(src)) {  // a few bytes, waited for
        std::string error;
        if (!tgraph_tf::copy_on_stream(bytes.data(), src, bytes.size(), stream, error) ||
            !tgraph_tf::sync_stream(stream, error)) {
          TF_DeleteTensor(t);
          TF_DeleteStatus(s);
          return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + ": reading input " + std::to_string(i) + ": " + error);
        }
        src = bytes.data();
      }
      std::vector<int64_t>& v = values[static_cast<size_t>(i)];
      if (TF_TensorType(t) == TF_INT32)
        for (int64_t e = 0; e < n; ++e) v.push_back(static_cast<const int32_t*>(src)[e]);
      else if (TF_TensorType(t) == TF_INT64)
        for (int64_t e = 0; e < n; ++e) v.push_back(static_cast<const int64_t*>(src)[e]);
      TF_DeleteTensor(t);
      continue;
    }
    tg::DType d;
    if (!tg_dtype(TF_TensorType(t), d)) {
      TF_DeleteTensor(t);
      TF_DeleteStatus(s);
      return fail(ctx, TF_UNIMPLEMENTED, "tgraph: " + b.what + ": input " + std::to_string(i) + " has a dtype tgraph lacks");
    }
    std::vector<int64_t> dims;
    for (int a = 0; a < TF_NumDims(t); ++a) dims.push_back(TF_Dim(t, a));
    const tg::TensorType type{tg::Shape(dims), d};
    try {
      inputs.push_back(device_input(t, type, device));
    } catch (const std::exception& e) {
      TF_DeleteStatus(s);
      return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + ": input " + std::to_string(i) + ": " + e.what());
    }
    types.push_back(type);
  }
  TF_DeleteStatus(s);
  std::vector<tg::DeviceTensor> results;
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
        std::vector<tg::Tensor> outs = build(*g, b, types, values, feeds);
        tg::Executable e = g->compile(feeds, outs, {}, tg::CompileOptions{.device = device});
        it = k->compiled.emplace(key, Kernel::Compiled{g, e}).first;
        // TGRAPH_TF_LOG=1: a line per compile and per op compiled in it, so a test can tell
        // tgraph ran an op (a fallback to TensorFlow's CPU kernels gives the same numbers).
        if (tgraph_tf::tf_log())
          for (const tensorflow::NodeDef& n : b.nodes)
            if (n.op() != "Const")
              std::fprintf(stderr, "[tgraph-tf] compiled %s (node %s, %s) for %s\n", n.op().c_str(), n.name().c_str(),
                           b.what.c_str(), key.c_str());
      }
      exe = it->second.exe;
    }
    results = cuda ? exe.run_device(inputs, stream) : exe.run_device(inputs);
  } catch (const std::exception& e) {
    return fail(ctx, TF_INVALID_ARGUMENT, e.what());
  }
  if (static_cast<int>(results.size()) != TF_NumOutputs(ctx))
    return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + " made " + std::to_string(results.size()) +
                                      " outputs, TensorFlow expects " + std::to_string(TF_NumOutputs(ctx)));
  bool wait = false;  // an output TensorFlow wants in host memory, copied from the GPU
  for (size_t o = 0; o < results.size(); ++o) {
    const tg::DeviceTensor& r = results[o];
    if (tf_dtype(r.dtype()) != TF_ExpectedOutputDataType(ctx, static_cast<int>(o)))
      return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + ": output " + std::to_string(o) + " is " +
                                        tg::dtype_name(r.dtype()) + ", not the dtype TensorFlow expects");
    std::vector<int64_t> dims(r.shape().dims().begin(), r.shape().dims().end());
    TF_Status* st = TF_NewStatus();
    TF_Tensor* out = TF_AllocateOutput(ctx, static_cast<int>(o), tf_dtype(r.dtype()), dims.data(),
                                       static_cast<int>(dims.size()), r.nbytes(), st);
    if (TF_GetCode(st) != TF_OK) {
      TF_OpKernelContext_Failure(ctx, st);
      TF_DeleteStatus(st);
      return;
    }
    TF_DeleteStatus(st);
    // Copied into TensorFlow's buffer: on CUDA in the stream's order, so tgraph's memory may go
    // back to its pool now (its next run on this stream starts after the copy).
    std::string error;
    if (!r.nbytes()) {
    } else if (!cuda) {
      std::memcpy(TF_TensorData(out), r.data(), r.nbytes());
    } else if (!tgraph_tf::copy_on_stream(TF_TensorData(out), r.data(), r.nbytes(), stream, error)) {
      TF_DeleteTensor(out);
      return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + ": output " + std::to_string(o) + ": " + error);
    } else {
      wait = wait || !tgraph_tf::device_memory(TF_TensorData(out));
    }
    TF_DeleteTensor(out);
  }
  std::string error;
  if (wait && !tgraph_tf::sync_stream(stream, error)) return fail(ctx, TF_INTERNAL, "tgraph: " + b.what + ": " + error);
}

// Ops whose kernels TensorFlow already registers for every PluggableDevice (DEVICE_DEFAULT):
// a second kernel for them would make their placement ambiguous.
bool has_default_kernel(const std::string& op) { return op == "Identity"; }

// Registers op `name`: stateful (never folded or pruned as a constant), "args: Tin" in,
// "results: Tout" out, plus `attrs`; says so on stderr if TensorFlow refuses.
void register_body_op(const char* name, std::initializer_list<const char*> attrs, TF_Status* s) {
  TF_OpDefinitionBuilder* op = TF_NewOpDefinitionBuilder(name);
  for (const char* a : attrs) TF_OpDefinitionBuilderAddAttr(op, a);
  TF_OpDefinitionBuilderAddInput(op, "args: Tin");
  TF_OpDefinitionBuilderAddOutput(op, "results: Tout");
  TF_OpDefinitionBuilderSetIsStateful(op, true);
  TF_RegisterOpDefinition(op, s);
  if (TF_GetCode(s) != TF_OK) std::fprintf(stderr, "[tgraph-tf] registering %s failed: %s\n", name, TF_Message(s));
  TF_SetStatus(s, TF_OK, "");
}

// Registers the plugin's kernel for `op` on TGRAPH, for T = `t` where given.
void register_kernel(const std::string& op, TF_Status* s, const TF_DataType* t = nullptr) {
  TF_KernelBuilder* b = TF_NewKernelBuilder(op.c_str(), tgraph_tf::kDeviceType, create, compute, destroy);
  if (t) TF_KernelBuilder_TypeConstraint(b, "T", *t, s);
  if (TF_GetCode(s) == TF_OK) TF_RegisterKernelBuilder((op + "_tgraph").c_str(), b, s);
  if (TF_GetCode(s) != TF_OK) std::fprintf(stderr, "[tgraph-tf] registering the %s kernel failed: %s\n", op.c_str(), TF_Message(s));
  TF_SetStatus(s, TF_OK, "");
}

}  // namespace

TGRAPH_TF_EXPORT void TF_InitKernel() {
  TF_Status* s = TF_NewStatus();
  // One node per cluster (cluster.cpp): `body` holds its nodes (a serialized GraphDef), the
  // inputs and outputs are plain tensors (variables are read before and assigned after).
  register_body_op(tgraph_tf::kClusterOp,
                   {"Tin: list(type) >= 0", "Tout: list(type) >= 0", "body: string",
                    "inputs: list(string) >= 0",     // the tensors the args are, in the body
                    "outputs: list(string) >= 0",    // the body's tensors returned
                    "value_args: list(int) >= 0"},   // args read as shapes / axes
                   s);
  // Control flow rebuilt from TensorFlow's lowered frames (functionalize.h): one node holding
  // its regions; inside a cluster it is part of the cluster's body, alone a body of its own.
  register_body_op(tgraph_tf::kIfOp,
                   {"Tin: list(type) >= 1", "Tout: list(type) >= 0", "then_body: string", "else_body: string",
                    "then_outs: list(string) >= 0", "else_outs: list(string) >= 0"},
                   s);
  register_body_op(tgraph_tf::kWhileOp,
                   {"Tin: list(type) >= 1", "Tout: list(type) >= 1", "cond_body: string", "body_body: string",
                    "cond_out: string", "body_outs: list(string) >= 1"},
                   s);
  for (const char* op : {tgraph_tf::kClusterOp, tgraph_tf::kIfOp, tgraph_tf::kWhileOp}) register_kernel(op, s);
  // The per-op kernels, for f32 and f64 (TensorFlow's CPU kernels keep the other dtypes); the
  // logical ops take bool alone, with no type attribute to constrain.
  for (const std::string& name : tgraph_tf::converted_ops()) {
    if (has_default_kernel(name)) continue;
    if (name.rfind("Logical", 0) == 0) {
      register_kernel(name, s);
      continue;
    }
    for (TF_DataType t : {TF_FLOAT, TF_DOUBLE}) register_kernel(name, s, &t);
  }
  TF_DeleteStatus(s);
}
