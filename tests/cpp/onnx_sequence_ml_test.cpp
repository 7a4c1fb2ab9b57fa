// The ONNX importer: sequences and optionals held at import time, and the ai.onnx.ml operators
// (issue 26), on small models.
#ifdef TGRAPH_HAVE_ONNX
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "frontends/onnx/importer.h"
#include "ir/graph_impl.h"
#include "tgraph/tgraph.h"
#include "tgraph/onnx.h"
#include "onnx_test_util.h"

using namespace onnxtest;

namespace {

// ---- sequences and optionals (held by the importer), ai.onnx.ml (issue 26) ----

onnx::NodeProto* ml_node(ModelBuilder& b, const std::string& op, const std::vector<std::string>& ins,
                         const std::vector<std::string>& outs, int ml_opset = 3) {
  bool has = false;
  for (const auto& o : b.m.opset_import()) has = has || o.domain() == "ai.onnx.ml";
  if (!has) {
    auto* o = b.m.add_opset_import();
    o->set_domain("ai.onnx.ml");
    o->set_version(ml_opset);
  }
  auto* n = b.node(op, ins, outs);
  n->set_domain("ai.onnx.ml");
  return n;
}

void attr_floats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}

void attr_strings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const auto& x : v) a->add_strings(x);
}

void attr_tensor(onnx::NodeProto* n, const std::string& name, int type, const std::vector<double>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  t->set_data_type(type);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (double x : v) {
    if (type == onnx::TensorProto::FLOAT)
      t->add_float_data(static_cast<float>(x));
    else
      t->add_int32_data(static_cast<int32_t>(x));  // UINT8 codes
  }
}

// A graph input or output of type sequence(tensor(float)), optional(sequence(...)) or
// optional(tensor(float)).
void seq_value(onnx::ValueInfoProto* v, const std::string& name, bool optional = false,
               bool of_tensor = false) {
  v->set_name(name);
  onnx::TypeProto* t = v->mutable_type();
  if (optional) t = t->mutable_optional_type()->mutable_elem_type();
  if (of_tensor)
    t->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  else
    t->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
}

tg::OnnxValueForm sequence_of(size_t n) {
  tg::OnnxValueForm f;
  f.kind = tg::OnnxValueForm::Kind::sequence;
  f.elements.resize(n);
  return f;
}

// Split, insert, erase, read back and concatenate: the sequence is a list of values while
// importing; its length and the positions are constants.
ModelBuilder sequence_ops_model() {
  ModelBuilder b(17);
  b.input("x", {2, 6});
  b.input("y", {2, 2});
  b.init_i64("split", {2, 4});
  b.init_i64("zero", {0});
  b.init_i64("minus1", {-1});
  ModelBuilder::attr_i(b.node("SplitToSequence", {"x", "split"}, {"s"}), "axis", 1);
  b.node("SequenceInsert", {"s", "y", "zero"}, {"s2"});  // [y, x[:, :2], x[:, 2:]]
  b.node("SequenceErase", {"s2", "minus1"}, {"s3"});     // [y, x[:, :2]]
  b.node("SequenceLength", {"s3"}, {"len"});
  b.node("SequenceAt", {"s3", "minus1"}, {"last"});
  ModelBuilder::attr_i(b.node("ConcatFromSequence", {"s3"}, {"cat"}), "axis", 1);
  auto* st = b.node("ConcatFromSequence", {"s3"}, {"stacked"});
  ModelBuilder::attr_i(st, "axis", 0);
  ModelBuilder::attr_i(st, "new_axis", 1);
  for (const char* o : {"len", "last", "cat", "stacked"}) b.output(o);
  return b;
}

TEST(OnnxImport, SequenceOpsAreHeldAtImportTime) {
  auto m = sequence_ops_model().import();
  TensorData x = TensorData::from_floats({2, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  TensorData y = TensorData::from_floats({2, 2}, {-1, -2, -3, -4});
  auto r = run(m, {x, y});
  expect_values(r[0], {2});
  expect_values(r[1], {0, 1, 6, 7});
  expect_values(r[2], {-1, -2, 0, 1, -3, -4, 6, 7});
  EXPECT_EQ(r[3].shape(), tg::Shape({2, 2, 2}));
  expect_values(r[3], {-1, -2, -3, -4, 0, 1, 6, 7});
}

// A sequence input is fed as its elements (NAME[i]); a sequence output comes back the same way.
TEST(OnnxImport, SequenceInputsAndOutputsCrossTheApiAsTheirTensors) {
  ModelBuilder b(17);
  seq_value(b.g->add_input(), "xs");
  b.input("t", {3});
  b.node("SequenceInsert", {"xs", "t"}, {"ys"});
  seq_value(b.g->add_output(), "ys");
  b.node("SequenceLength", {"xs"}, {"n"});
  b.output("n");
  EXPECT_NE(error_of([&] { b.import(); }).find("input 'xs' is a sequence; give what it holds"),
            std::string::npos);
  tg::OnnxImportOptions o;
  o.input_forms["xs"] = sequence_of(2);
  o.input_shapes_in_order = {tg::Shape({2}), tg::Shape({1})};
  auto m = b.import(o);
  EXPECT_EQ(m.input_names, (std::vector<std::string>{"xs[0]", "xs[1]", "t"}));
  EXPECT_EQ(m.output_names, (std::vector<std::string>{"ys[0]", "ys[1]", "ys[2]", "n"}));
  ASSERT_EQ(m.output_forms.size(), 2u);
  EXPECT_EQ(m.output_forms[0].second, sequence_of(3));
  EXPECT_EQ(m.output_forms[0].second.num_tensors(), 3u);
  auto r = run(m, {TensorData::from_floats({2}, {1, 2}), TensorData::from_floats({1}, {3}),
                   TensorData::from_floats({3}, {4, 5, 6})});
  expect_values(r[0], {1, 2});
  expect_values(r[1], {3});
  expect_values(r[2], {4, 5, 6});
  expect_values(r[3], {2});
  // An empty sequence is no feed at all.
  o.input_forms["xs"] = sequence_of(0);
  o.input_shapes_in_order = {tg::Shape({3})};
  auto e = b.import(o);
  EXPECT_EQ(e.input_names, (std::vector<std::string>{"t"}));
  expect_values(run(e, {TensorData::from_floats({3}, {4, 5, 6})})[1], {0});
}

// An optional input is empty (no feed) or holds its tensor (one feed), decided at import time.
TEST(OnnxImport, OptionalInputIsEmptyOrHoldsATensor) {
  ModelBuilder b(18);
  seq_value(b.g->add_input(), "opt", true, true);
  b.node("OptionalHasElement", {"opt"}, {"has"});
  b.output("has");
  tg::OnnxImportOptions o;
  o.input_forms["opt"].kind = tg::OnnxValueForm::Kind::optional;
  auto empty = b.import(o);
  EXPECT_TRUE(empty.inputs.empty());
  expect_values(run(empty, {})[0], {0});
  o.input_forms["opt"].elements.emplace_back();
  o.input_shapes_in_order = {tg::Shape({2})};
  auto full = b.import(o);
  EXPECT_EQ(full.input_names, (std::vector<std::string>{"opt"}));
  expect_values(run(full, {TensorData::from_floats({2}, {1, 2})})[0], {1});
  o.input_forms["opt"] = sequence_of(1);
  EXPECT_NE(error_of([&] { b.import(o); }).find("input 'opt' is a optional, given as a sequence"),
            std::string::npos);
}

// Whatever would make a sequence's length depend on run-time data is refused clearly.
TEST(OnnxImport, DynamicSequencePositionsAreClearErrors) {
  ModelBuilder b(17);
  b.input("x", {4});
  b.input("pos", {}, onnx::TensorProto::INT64);
  b.node("SplitToSequence", {"x"}, {"s"});
  b.node("SequenceAt", {"s", "pos"}, {"y"});
  b.output("y");
  EXPECT_NE(error_of([&] {
              b.import();
            }).find("(SequenceAt, opset 17): input 1 ('pos') must be known at import time"),
            std::string::npos);
  ModelBuilder c(17);
  c.input("x", {4});
  c.init_i64("pos", {7});
  c.node("SplitToSequence", {"x"}, {"s"});
  c.node("SequenceAt", {"s", "pos"}, {"y"});
  c.output("y");
  EXPECT_NE(error_of([&] { c.import(); }).find("position 7 is out of range for a sequence of 4"),
            std::string::npos);
  ModelBuilder d(17);
  d.input("x", {4});
  d.node("SplitToSequence", {"x"}, {"s"});
  d.node("Relu", {"s"}, {"y"});
  d.output("y");
  EXPECT_NE(error_of([&] { d.import(); }).find("input 0 ('s') is a sequence; the op takes a tensor"),
            std::string::npos);
}

// Two trees (legacy encoding), SUM with a base value; NaN follows missing_value_tracks_true.
ModelBuilder tree_regressor_model() {
  ModelBuilder b(17);
  b.input("X", {4, 2});
  auto* n = ml_node(b, "TreeEnsembleRegressor", {"X"}, {"Y"});
  // Tree 0: node 0 (x0 <= 0.5) -> 1 / 2; node 1 (x1 < 0) -> 3 / 4; leaves 2, 3, 4. Tree 1: a leaf.
  ModelBuilder::attr_ints(n, "nodes_treeids", {0, 0, 0, 0, 0, 1});
  ModelBuilder::attr_ints(n, "nodes_nodeids", {0, 1, 2, 3, 4, 0});
  ModelBuilder::attr_ints(n, "nodes_featureids", {0, 1, 0, 0, 0, 0});
  attr_floats(n, "nodes_values", {0.5f, 0.f, 0, 0, 0, 0});
  attr_strings(n, "nodes_modes", {"BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "LEAF"});
  ModelBuilder::attr_ints(n, "nodes_truenodeids", {1, 3, 0, 0, 0, 0});
  ModelBuilder::attr_ints(n, "nodes_falsenodeids", {2, 4, 0, 0, 0, 0});
  ModelBuilder::attr_ints(n, "nodes_missing_value_tracks_true", {1, 0, 0, 0, 0, 0});
  ModelBuilder::attr_ints(n, "target_treeids", {0, 0, 0, 1});
  ModelBuilder::attr_ints(n, "target_nodeids", {2, 3, 4, 0});
  ModelBuilder::attr_ints(n, "target_ids", {0, 0, 0, 0});
  attr_floats(n, "target_weights", {3, 1, 2, 0.5f});
  attr_floats(n, "base_values", {0.25f});
  b.output("Y");
  return b;
}

TEST(OnnxImport, TreeEnsembleRegressorWalksEveryTree) {
  auto r =
      run(tree_regressor_model().import(), {TensorData::from_floats({4, 2}, {0, -1, 0, 1, 1, 0, NAN, 5})});
  EXPECT_EQ(r[0].shape(), tg::Shape({4, 1}));
  expect_values(r[0], {1.75, 2.75, 3.75, 2.75});
}

// TreeEnsemble (ai.onnx.ml 5): a set-membership node, leaves in their own list.
ModelBuilder tree_ensemble_model() {
  ModelBuilder b(21);
  b.input("X", {4, 2});
  auto* n = ml_node(b, "TreeEnsemble", {"X"}, {"Y"}, 5);
  ModelBuilder::attr_ints(n, "tree_roots", {0});
  attr_tensor(n, "nodes_modes", onnx::TensorProto::UINT8, {6, 0});  // x0 in {1, 3}; x1 <= 0.5
  ModelBuilder::attr_ints(n, "nodes_featureids", {0, 1});
  attr_tensor(n, "nodes_splits", onnx::TensorProto::FLOAT, {0, 0.5});
  attr_tensor(n, "membership_values", onnx::TensorProto::FLOAT, {1, 3, NAN});
  ModelBuilder::attr_ints(n, "nodes_truenodeids", {0, 1});
  ModelBuilder::attr_ints(n, "nodes_trueleafs", {1, 1});
  ModelBuilder::attr_ints(n, "nodes_falsenodeids", {1, 2});
  ModelBuilder::attr_ints(n, "nodes_falseleafs", {0, 1});
  ModelBuilder::attr_ints(n, "leaf_targetids", {0, 0, 0});
  attr_tensor(n, "leaf_weights", onnx::TensorProto::FLOAT, {10, 20, 30});
  b.output("Y");
  return b;
}

TEST(OnnxImport, TreeEnsembleWithSetMembership) {
  auto r = run(tree_ensemble_model().import(), {TensorData::from_floats({4, 2}, {1, 9, 3, 0, 2, 0, 2, 1})});
  expect_values(r[0], {10, 10, 20, 30});
}

// LinearClassifier labels and scores; Normalizer; numeric LabelEncoder.
ModelBuilder sklearn_model() {
  ModelBuilder b(17);
  b.input("X", {3, 2});
  b.input("K", {3}, onnx::TensorProto::INT64);
  auto* lc = ml_node(b, "LinearClassifier", {"X"}, {"label", "scores"});
  attr_floats(lc, "coefficients", {1, 0, 0, 1, -1, -1});
  attr_floats(lc, "intercepts", {0, 0, 0});
  ModelBuilder::attr_ints(lc, "classlabels_ints", {10, 20, 30});
  ModelBuilder::attr_s(ml_node(b, "Normalizer", {"X"}, {"l2"}), "norm", "L2");
  auto* le = ml_node(b, "LabelEncoder", {"K"}, {"mapped"});
  ModelBuilder::attr_ints(le, "keys_int64s", {1, 2});
  attr_floats(le, "values_floats", {0.5f, 1.5f});
  ModelBuilder::attr_f(le, "default_float", 9.f);
  for (const char* o : {"label", "scores", "l2", "mapped"}) b.output(o);
  return b;
}

TEST(OnnxImport, ScikitLearnStyleModels) {
  auto r =
      run(sklearn_model().import(), {TensorData::from_floats({3, 2}, {2, 1, 0, 3, 0, 0}),
                                     TensorData::from_vector(tg::Shape({3}), tg::DType::i64, {2, 1, 7})});
  expect_values(r[0], {10, 20, 10});  // the last row's scores tie at 0: the first class
  expect_values(r[1], {2, 1, -3, 0, 3, -3, 0, 0, 0});
  expect_values(r[2], {2 / std::sqrt(5.0), 1 / std::sqrt(5.0), 0, 1, 0, 0});
  expect_values(r[3], {1.5, 0.5, 9});
}

// The sequence and ai.onnx.ml models above with random integer attributes (child and feature
// ids, target ids, positions, axes...) and random data: an error is fine, a crash is not.
TEST(OnnxImport, SequenceAndMlModelsWithMutatedAttributesFailCleanly) {
  std::mt19937 rng(26);
  int imported = 0, total = 0;
  for (auto make : {sequence_ops_model, tree_regressor_model, tree_ensemble_model, sklearn_model}) {
    const std::string bytes = make().bytes();
    for (int k = 0; k < 60; ++k) {
      onnx::ModelProto m;
      ASSERT_TRUE(m.ParseFromString(bytes));
      for (auto& n : *m.mutable_graph()->mutable_node())
        for (auto& a : *n.mutable_attribute()) {
          if (rng() % 3 == 0) a.set_i(static_cast<int64_t>(rng() % 9) - 4);
          for (int i = 0; i < a.ints_size(); ++i)
            if (rng() % 3 == 0) a.set_ints(i, static_cast<int64_t>(rng() % 9) - 4);
          if (a.ints_size() && rng() % 8 == 0) a.mutable_ints()->RemoveLast();
        }
      ++total;
      imported += imports_and_runs(m, static_cast<uint64_t>(k));
    }
  }
  std::printf("%d of %d mutated sequence / ai.onnx.ml models imported\n", imported, total);
}

// Imputer replaces NaN per feature; OneHotEncoder marks categories; ZipMap (maps) is refused
// with a hint.
TEST(OnnxImport, ImputerOneHotEncoderAndZipMap) {
  ModelBuilder b(17);
  b.input("X", {2, 2});
  b.input("K", {3}, onnx::TensorProto::INT64);
  auto* im = ml_node(b, "Imputer", {"X"}, {"filled"});
  attr_floats(im, "imputed_value_floats", {7, 8});
  ModelBuilder::attr_f(im, "replaced_value_float", NAN);
  auto* oh = ml_node(b, "OneHotEncoder", {"K"}, {"hot"});
  ModelBuilder::attr_ints(oh, "cats_int64s", {4, 2});
  b.output("filled");
  b.output("hot");
  auto r = run(b.import(), {TensorData::from_floats({2, 2}, {NAN, 1, 2, NAN}),
                            TensorData::from_vector(tg::Shape({3}), tg::DType::i64, {2, 4, 5})});
  expect_values(r[0], {7, 1, 2, 8});
  EXPECT_EQ(r[1].shape(), tg::Shape({3, 2}));
  expect_values(r[1], {0, 1, 1, 0, 0, 0});
  ModelBuilder z(17);
  z.input("S", {2, 3});
  ModelBuilder::attr_ints(ml_node(z, "ZipMap", {"S"}, {"maps"}), "classlabels_int64s", {0, 1, 2});
  z.output("maps");
  EXPECT_NE(error_of([&] { z.import(); }).find("(ZipMap, opset 3): ZipMap returns a sequence of maps"),
            std::string::npos);
}

// Strings: tgraph has no string dtype; the op that needs them is named.
TEST(OnnxImport, StringsAreRefusedNamingTheOp) {
  ModelBuilder b(17);
  b.input("s", {3}, onnx::TensorProto::STRING);
  auto* n = ml_node(b, "LabelEncoder", {"s"}, {"y"}, 2);
  attr_strings(n, "keys_strings", {"a", "b"});
  ModelBuilder::attr_ints(n, "values_int64s", {1, 2});
  b.output("y");
  EXPECT_NE(error_of([&] {
              b.import();
            }).find("(LabelEncoder): input 's' is a string tensor; tgraph has no string dtype"),
            std::string::npos);
  ModelBuilder c(17);
  c.input("k", {3}, onnx::TensorProto::INT64);
  auto* m = ml_node(c, "LabelEncoder", {"k"}, {"y"}, 2);
  ModelBuilder::attr_ints(m, "keys_int64s", {1, 2});
  attr_strings(m, "values_strings", {"a", "b"});
  c.output("y");
  EXPECT_NE(
      error_of([&] { c.import(); }).find("(LabelEncoder, opset 2): the LabelEncoder's values are strings"),
      std::string::npos);
}


}  // namespace
#endif  // TGRAPH_HAVE_ONNX
