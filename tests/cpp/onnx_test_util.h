#pragma once
// Shared by the ONNX importer tests (onnx_importer_test.cpp, onnx_new_ops_test.cpp,
// onnx_sequence_ml_test.cpp): a builder of small models with the onnx protobuf classes, and
// running an imported model on the CPU.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <functional>
#include <string>
#include <vector>

#include "tgraph/onnx.h"
#include "tgraph/tgraph.h"

namespace onnxtest {

using tg::TensorData;

struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  explicit ModelBuilder(int opset) {
    m.set_ir_version(8);
    m.set_producer_name("tgraph-test");
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g = m.mutable_graph();
    g->set_name("test");
  }
  void value(onnx::ValueInfoProto* v, const std::string& name, int type, const std::vector<int64_t>& dims,
             const std::string& sym = "") {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(type);
    auto* s = t->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = s->add_dim();
      if (d < 0) dim->set_dim_param(sym.empty() ? "N" : sym);
      else dim->set_dim_value(d);
    }
  }
  void input(const std::string& name, const std::vector<int64_t>& dims, int type = onnx::TensorProto::FLOAT,
             const std::string& sym = "") {
    value(g->add_input(), name, type, dims, sym);
  }
  void output(const std::string& name) {
    auto* v = g->add_output();
    v->set_name(name);
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void attr_i(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr_s(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void attr_f(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void fill(onnx::TensorProto* t, const std::string& name, const std::vector<int64_t>& dims,
                   const std::vector<float>& v) {
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  void init_f(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& v) {
    fill(g->add_initializer(), name, dims, v);
  }
  void init_i64(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  std::string bytes() const { return m.SerializeAsString(); }
  tg::OnnxModel import(const tg::OnnxImportOptions& o = {}) const { return tg::import_onnx_bytes(bytes(), o); }
};

inline std::vector<TensorData> run(const tg::OnnxModel& m, const std::vector<TensorData>& in) {
  return m.compile({.device = tg::Device::cpu()}).run(in);
}

inline void expect_values(const TensorData& t, const std::vector<double>& want, double tol = 1e-5) {
  auto got = t.to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tg::Error& e) {
    return e.what();
  }
  return "";
}

// A (mutated) model imported and, when it imports, run on random data: an error is fine, a
// crash is not. Whether it imported.
inline bool imports_and_runs(const onnx::ModelProto& m, uint64_t seed) {
  tg::OnnxModel om;
  try {
    om = tg::import_onnx_bytes(m.SerializeAsString());
  } catch (const tg::Error&) {
    return false;
  }
  try {
    std::vector<TensorData> in;
    for (const auto& t : om.input_types) in.push_back(TensorData::uniform(t.shape, -3, 3, t.dtype, seed));
    run(om, in);
  } catch (const tg::Error&) {
  }
  return true;
}

}  // namespace onnxtest
