// The ONNX importer: ONNX 1.22's operators added by composition (issue 26), on small models.
#ifdef TGRAPH_HAVE_ONNX
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "core/float8.h"
#include "frontends/onnx/importer.h"
#include "ir/graph_impl.h"
#include "tgraph/tgraph.h"
#include "tgraph/onnx.h"
#include "onnx_test_util.h"

using namespace onnxtest;

namespace {

// ---- ONNX 1.22's operators added by composition (issue 26) --------------------------------------

// NonMaxSuppression's and Unique's output sizes depend on the data: one compiled executable
// gives a different number of rows per run.
TEST(OnnxImport, NonMaxSuppressionSizeIsKnownOnlyAtRunTime) {
  ModelBuilder b(11);
  b.input("boxes", {1, 3, 4});
  b.input("scores", {1, 1, 3});
  b.input("max", {1}, onnx::TensorProto::INT64);
  b.init_f("iou", {1}, {0.5f});
  b.node("NonMaxSuppression", {"boxes", "scores", "max", "iou"}, {"sel"});
  b.output("sel");
  tg::Executable exe = b.import().compile({.device = tg::Device::cpu()});
  // Boxes 0 and 1 overlap by IoU 0.81; box 2 is apart. Box 1 scores highest.
  TensorData boxes = TensorData::from_floats({1, 3, 4}, {0, 0, 10, 10, 0, 0, 10, 9, 20, 20, 30, 30});
  TensorData scores = TensorData::from_floats({1, 1, 3}, {0.8f, 0.9f, 0.1f});
  auto r = exe.run({boxes, scores, TensorData::from_vector(tg::Shape({1}), tg::DType::i64, {10})});
  EXPECT_EQ(r[0].shape(), tg::Shape({2, 3}));
  expect_values(r[0], {0, 0, 1, 0, 0, 2});
  r = exe.run({boxes, scores, TensorData::from_vector(tg::Shape({1}), tg::DType::i64, {1})});
  EXPECT_EQ(r[0].shape(), tg::Shape({1, 3}));
  expect_values(r[0], {0, 0, 1});
  TensorData apart = TensorData::from_floats({1, 3, 4}, {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5});
  r = exe.run({apart, scores, TensorData::from_vector(tg::Shape({1}), tg::DType::i64, {10})});
  EXPECT_EQ(r[0].shape(), tg::Shape({3, 3}));
  expect_values(r[0], {0, 0, 1, 0, 0, 0, 0, 0, 2});
}

TEST(OnnxImport, UniqueSizeIsKnownOnlyAtRunTime) {
  ModelBuilder b(11);
  b.input("x", {6}, onnx::TensorProto::INT64);
  auto* n = b.node("Unique", {"x"}, {"y", "first", "inverse", "counts"});
  ModelBuilder::attr_i(n, "sorted", 0);
  for (const char* o : {"y", "first", "inverse", "counts"}) b.output(o);
  tg::Executable exe = b.import().compile({.device = tg::Device::cpu()});
  auto r = exe.run({TensorData::from_vector(tg::Shape({6}), tg::DType::i64, {5, 2, 5, 7, 2, 5})});
  expect_values(r[0], {5, 2, 7});
  expect_values(r[1], {0, 1, 3});
  expect_values(r[2], {0, 1, 0, 2, 1, 0});
  expect_values(r[3], {3, 2, 1});
  r = exe.run({TensorData::from_vector(tg::Shape({6}), tg::DType::i64, {4, 4, 4, 4, 4, 4})});
  expect_values(r[0], {4});
  expect_values(r[3], {6});
}

// Pad's wrap mode repeats the data as often as the pads need, past the dim's size.
TEST(OnnxImport, WrapPadLongerThanTheDim) {
  ModelBuilder b(19);
  b.input("x", {3});
  b.init_i64("pads", {4, 2});
  auto* n = b.node("Pad", {"x", "pads"}, {"y"});
  ModelBuilder::attr_s(n, "mode", "wrap");
  b.output("y");
  auto y = run(b.import(), {TensorData::from_floats({3}, {1, 2, 3})});
  expect_values(y[0], {3, 1, 2, 3, 1, 2, 3, 1, 2});
}

// BitwiseNot of a UINT16 input (held in i32) flips its 16 bits only.
TEST(OnnxImport, BitwiseNotOfWidenedUint16) {
  ModelBuilder b(18);
  b.input("x", {3}, onnx::TensorProto::UINT16);
  b.node("BitwiseNot", {"x"}, {"y"});
  b.output("y");
  auto y = run(b.import(), {TensorData::from_vector(tg::Shape({3}), tg::DType::i32, {0, 3034, 65535})});
  expect_values(y[0], {65535, 62501, 0});
}

// LinearAttention over a sequence past the unrolling bound runs in a for_loop: the gated-delta
// recurrence written out here, with grouped heads (2 query heads on 1 KV head).
TEST(OnnxImport, LinearAttentionLongSequenceLoops) {
  const int64_t T = 80, dk = 2, dv = 3;
  ModelBuilder b(27);
  b.input("q", {1, T, 2 * dk});
  b.input("k", {1, T, dk});
  b.input("v", {1, T, dv});
  b.input("decay", {1, T, 1});
  b.input("beta", {1, T, 1});
  auto* n = b.node("LinearAttention", {"q", "k", "v", "", "decay", "beta"}, {"o", "state"});
  ModelBuilder::attr_i(n, "q_num_heads", 2);
  ModelBuilder::attr_i(n, "kv_num_heads", 1);
  ModelBuilder::attr_f(n, "scale", 0.5f);
  b.output("o");
  b.output("state");
  TensorData q = TensorData::uniform(tg::Shape({1, T, 2 * dk}), -1, 1, tg::DType::f32, 1);
  TensorData k = TensorData::uniform(tg::Shape({1, T, dk}), -0.5, 0.5, tg::DType::f32, 2);
  TensorData v = TensorData::uniform(tg::Shape({1, T, dv}), -1, 1, tg::DType::f32, 3);
  TensorData decay = TensorData::uniform(tg::Shape({1, T, 1}), -0.3, 0, tg::DType::f32, 4);
  TensorData beta = TensorData::uniform(tg::Shape({1, T, 1}), 0, 1, tg::DType::f32, 5);
  auto r = run(b.import(), {q, k, v, decay, beta});
  std::vector<double> S(dk * dv, 0.0), want_o;
  for (int64_t t = 0; t < T; ++t) {
    const double g = std::exp(decay.at(t)), be = beta.at(t);
    for (double& x : S) x *= g;
    std::vector<double> u(dv);
    for (int64_t m = 0; m < dv; ++m) {
      double ret = 0;
      for (int64_t d = 0; d < dk; ++d) ret += S[d * dv + m] * k.at(t * dk + d);
      u[m] = be * (v.at(t * dv + m) - ret);
    }
    for (int64_t d = 0; d < dk; ++d)
      for (int64_t m = 0; m < dv; ++m) S[d * dv + m] += k.at(t * dk + d) * u[m];
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t m = 0; m < dv; ++m) {
        double o = 0;
        for (int64_t d = 0; d < dk; ++d) o += q.at(t * 2 * dk + h * dk + d) * S[d * dv + m];
        want_o.push_back(0.5 * o);
      }
  }
  EXPECT_EQ(r[0].shape(), tg::Shape({1, T, 2 * dv}));
  expect_values(r[0], want_o, 1e-4);
  expect_values(r[1], S, 1e-4);
}

// Bad shapes and attributes of the new ops are errors naming the node, the op and the shapes.
TEST(OnnxImport, NewOpsRefuseBadShapesClearly) {
  auto expect_error = [](const ModelBuilder& b, const std::vector<std::string>& parts) {
    std::string e = error_of([&] { b.import(); });
    ASSERT_FALSE(e.empty()) << "imported";
    for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << e;
  };
  {
    ModelBuilder b(27);
    b.input("q", {1, 2, 12});
    b.input("k", {1, 2, 8});
    b.input("v", {1, 2, 8});
    auto* n = b.node("LinearAttention", {"q", "k", "v"}, {"o"});
    ModelBuilder::attr_i(n, "q_num_heads", 3);
    ModelBuilder::attr_i(n, "kv_num_heads", 2);
    ModelBuilder::attr_s(n, "update_rule", "linear");
    b.output("o");
    expect_error(
        b, {"LinearAttention, opset 27", "q_num_heads (3) must be a positive multiple of kv_num_heads (2)"});
  }
  {
    ModelBuilder b(27);
    b.input("q", {1, 2, 8});
    b.input("k", {1, 2, 8});
    b.input("v", {1, 2, 8});
    auto* n = b.node("LinearAttention", {"q", "k", "v"}, {"o"});
    ModelBuilder::attr_i(n, "q_num_heads", 2);
    ModelBuilder::attr_i(n, "kv_num_heads", 2);
    b.output("o");  // the default rule gated_delta needs decay and beta
    expect_error(b, {"LinearAttention", "update_rule 'gated_delta' requires the decay input"});
  }
  {
    ModelBuilder b(27);
    b.input("x", {2, 4, 8});
    b.input("w", {3, 1, 4});
    b.node("CausalConvWithState", {"x", "w"}, {"y"});
    b.output("y");
    expect_error(b, {"CausalConvWithState", "[2,4,8]", "[3,1,4]"});
  }
  {
    ModelBuilder b(18);
    b.input("x", {1, 6, 5});
    b.init_i64("image", {4, 4});
    b.init_i64("block", {2, 2});
    b.node("Col2Im", {"x", "image", "block"}, {"y"});
    b.output("y");
    expect_error(b, {"Col2Im", "input [1,6,5] must be [N, C * 4, 9]"});
  }
  {
    ModelBuilder b(22);
    b.input("x", {1, 2, 5, 5});
    b.input("w", {2, 2, 3, 3});
    b.input("off", {1, 9, 3, 3});
    b.node("DeformConv", {"x", "w", "off"}, {"y"});
    b.output("y");
    expect_error(b, {"DeformConv", "offset is [1,9,3,3], expected [1,18,3,3]"});
  }
  {
    ModelBuilder b(11);
    b.input("boxes", {1, 3, 5});
    b.input("scores", {1, 1, 3});
    b.node("NonMaxSuppression", {"boxes", "scores"}, {"sel"});
    b.output("sel");
    expect_error(b, {"NonMaxSuppression", "[1,3,5]", "[1,1,3]"});
  }
  {
    ModelBuilder b(18);
    b.input("x", {4, 5});
    b.init_i64("shape", {3});
    b.node("CenterCropPad", {"x", "shape"}, {"y"});
    b.output("y");
    expect_error(b, {"CenterCropPad", "shape has 1 values for 2 axes of [4,5]"});
  }
  {
    ModelBuilder b(20);
    b.input("theta", {2, 2, 3});
    b.init_i64("size", {2, 1, 4, 4, 4});
    b.node("AffineGrid", {"theta", "size"}, {"grid"});
    b.output("grid");
    expect_error(b, {"AffineGrid", "theta is [2,2,3], expected [N, 3, 4]"});
  }
  {
    ModelBuilder b(22);
    b.input("x", {1, 1, 3, 3, 3});
    b.input("grid", {1, 2, 2, 2, 3});
    auto* n = b.node("GridSample", {"x", "grid"}, {"y"});
    ModelBuilder::attr_s(n, "mode", "cubic");
    b.output("y");
    expect_error(b, {"GridSample", "cubic mode is only defined for 4-D inputs"});
  }
}

// The new ops' models with random attribute values and input dims import or fail with an
// error, never crash.
TEST(OnnxImport, NewOpsWithMutatedAttributesFailCleanly) {
  std::vector<ModelBuilder> models;
  {
    ModelBuilder b(27);
    for (const char* i : {"q", "k", "v"}) b.input(i, {2, 3, 8});
    b.input("past", {2, 2, 4, 4});
    b.input("decay", {2, 3, 2});
    b.input("beta", {2, 3, 2});
    auto* n = b.node("LinearAttention", {"q", "k", "v", "past", "decay", "beta"}, {"o", "s"});
    ModelBuilder::attr_i(n, "q_num_heads", 2);
    ModelBuilder::attr_i(n, "kv_num_heads", 2);
    b.output("o");
    models.push_back(b);
  }
  {
    ModelBuilder b(27);
    b.input("x", {2, 4, 8});
    b.input("w", {4, 1, 3});
    b.input("bias", {4});
    b.input("past", {2, 4, 2});
    b.node("CausalConvWithState", {"x", "w", "bias", "past"}, {"y", "s"});
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(22);
    b.input("x", {1, 4, 6, 6});
    b.input("w", {4, 2, 3, 3});
    b.input("off", {1, 36, 4, 4});
    b.input("mask", {1, 18, 4, 4});
    auto* n = b.node("DeformConv", {"x", "w", "off", "", "mask"}, {"y"});
    ModelBuilder::attr_i(n, "group", 2);
    ModelBuilder::attr_i(n, "offset_group", 2);
    ModelBuilder::attr_ints(n, "strides", {1, 1});
    ModelBuilder::attr_ints(n, "pads", {0, 0, 0, 0});
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(18);
    b.input("x", {1, 8, 9});
    b.init_i64("image", {4, 4});
    b.init_i64("block", {2, 2});
    auto* n = b.node("Col2Im", {"x", "image", "block"}, {"y"});
    ModelBuilder::attr_ints(n, "strides", {1, 1});
    ModelBuilder::attr_ints(n, "dilations", {1, 1});
    ModelBuilder::attr_ints(n, "pads", {0, 0, 0, 0});
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(18);
    b.input("x", {4, 5, 3});
    b.init_i64("shape", {3, 7});
    auto* n = b.node("CenterCropPad", {"x", "shape"}, {"y"});
    ModelBuilder::attr_ints(n, "axes", {0, 1});
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(20);
    b.input("theta", {2, 2, 3});
    b.init_i64("size", {2, 1, 4, 4});
    auto* n = b.node("AffineGrid", {"theta", "size"}, {"grid"});
    ModelBuilder::attr_i(n, "align_corners", 1);
    b.output("grid");
    models.push_back(b);
  }
  {
    ModelBuilder b(11);
    b.input("boxes", {2, 5, 4});
    b.input("scores", {2, 3, 5});
    b.init_i64("max", {3});
    auto* n = b.node("NonMaxSuppression", {"boxes", "scores", "max"}, {"sel"});
    ModelBuilder::attr_i(n, "center_point_box", 1);
    b.output("sel");
    models.push_back(b);
  }
  {
    ModelBuilder b(11);
    b.input("x", {3, 4, 2});
    auto* n = b.node("Unique", {"x"}, {"y", "i", "v", "c"});
    ModelBuilder::attr_i(n, "axis", 1);
    ModelBuilder::attr_i(n, "sorted", 1);
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(22);
    b.input("x", {1, 2, 3, 4, 5});
    b.input("grid", {1, 2, 3, 2, 3});
    auto* n = b.node("GridSample", {"x", "grid"}, {"y"});
    ModelBuilder::attr_i(n, "align_corners", 1);
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(22);
    b.input("x", {1, 2, 4, 5, 6});
    auto* n = b.node("LpPool", {"x"}, {"y"});
    ModelBuilder::attr_ints(n, "kernel_shape", {2, 2, 2});
    ModelBuilder::attr_ints(n, "strides", {1, 2, 1});
    ModelBuilder::attr_ints(n, "pads", {1, 0, 1, 0, 1, 1});
    ModelBuilder::attr_i(n, "p", 3);
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(19);
    b.input("x", {1, 1, 8, 8});
    b.init_i64("sizes", {1, 1, 3, 5});
    auto* n = b.node("Resize", {"x", "", "", "sizes"}, {"y"});
    ModelBuilder::attr_s(n, "mode", "cubic");
    ModelBuilder::attr_i(n, "antialias", 1);
    b.output("y");
    models.push_back(b);
  }
  {
    ModelBuilder b(19);
    b.input("x", {3, 4});
    b.init_i64("pads", {2, 1, 5, 3});
    auto* n = b.node("Pad", {"x", "pads"}, {"y"});
    ModelBuilder::attr_s(n, "mode", "wrap");
    b.output("y");
    models.push_back(b);
  }
  std::mt19937 rng(26);
  int imported = 0, total = 0;
  for (const ModelBuilder& base : models) {
    // Unmutated, each imports and compiles.
    EXPECT_NO_THROW(base.import().compile({.device = tg::Device::cpu()})) << base.g->node(0).op_type();
    for (int k = 0; k < 60; ++k) {
      onnx::ModelProto m = base.m;
      auto* g = m.mutable_graph();
      for (auto& n : *g->mutable_node())
        for (auto& a : *n.mutable_attribute()) {
          if (rng() % 2) a.set_i(static_cast<int64_t>(rng() % 9) - 4);
          for (int i = 0; i < a.ints_size(); ++i)
            if (rng() % 2) a.set_ints(i, static_cast<int64_t>(rng() % 9) - 4);
        }
      for (auto& t : *g->mutable_initializer())
        for (int i = 0; i < t.int64_data_size(); ++i)
          if (rng() % 2) t.set_int64_data(i, static_cast<int64_t>(rng() % 11) - 3);
      for (auto& in : *g->mutable_input()) {
        auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
        for (auto& d : *shape->mutable_dim())
          if (rng() % 3 == 0) d.set_dim_value(static_cast<int64_t>(rng() % 6));
      }
      ++total;
      imported += imports_and_runs(m, static_cast<uint64_t>(k));
    }
  }
  std::printf("%d of %d mutated models of the new ops imported\n", imported, total);
}


}  // namespace
#endif  // TGRAPH_HAVE_ONNX

// A QDQ model in FP8 (activations quantized by QuantizeLinear, weights stored as FLOAT8E4M3FN):
// Gemm and MatMul of the dequantized values become tgraph's scaled_matmul (FP8 tensor cores on
// CUDA) and give the dequantized product.
TEST(OnnxFloat8, DequantizedMatmulsBecomeScaledMatmuls) {
  constexpr int kE4M3 = 17;
  const int64_t m = 4, k = 32, n = 16;
  onnxtest::ModelBuilder b(21);
  b.input("x", {m, k});
  b.init_f("sx", {}, {0.05f});
  b.init_f("sw", {}, {0.02f});
  std::mt19937 rng(4);
  auto fp8_init = [&](const std::string& name, std::vector<int64_t> dims) {
    auto* t = b.g->add_initializer();
    t->set_name(name);
    t->set_data_type(kE4M3);
    int64_t count = 1;
    for (int64_t d : dims) t->add_dims(d), count *= d;
    std::string raw;
    for (int64_t i = 0; i < count; ++i) {
      uint8_t c = static_cast<uint8_t>(rng() & 0xff);
      if ((c & 0x7f) == 0x7f) c = 0x10;  // no NaN
      raw.push_back(static_cast<char>(c));
    }
    t->set_raw_data(raw);
    return raw;
  };
  const std::string zp = fp8_init("zp", {});
  b.g->mutable_initializer(b.g->initializer_size() - 1)->set_raw_data(std::string(1, '\0'));
  const std::string w1 = fp8_init("w1", {n, k}), w2 = fp8_init("w2", {k, n});
  b.node("QuantizeLinear", {"x", "sx", "zp"}, {"q"});
  b.node("DequantizeLinear", {"q", "sx", "zp"}, {"xd"});
  b.node("DequantizeLinear", {"w1", "sw"}, {"w1d"});
  b.node("DequantizeLinear", {"w2", "sw"}, {"w2d"});
  auto* gemm = b.node("Gemm", {"xd", "w1d"}, {"y1"});
  onnxtest::ModelBuilder::attr_i(gemm, "transB", 1);
  b.node("MatMul", {"xd", "w2d"}, {"y2"});
  b.output("y1");
  b.output("y2");
  tg::OnnxModel model = b.import();
  EXPECT_NE(model.graph.str().find("scaled_matmul"), std::string::npos);
  TensorData x(tg::Shape{m, k}, tg::f32);
  std::uniform_real_distribution<double> u(-10, 10);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.set(i, u(rng));
  auto out = onnxtest::run(model, {x});
  const auto& f = tg::detail::kE4M3;
  auto wv = [&](const std::string& raw, int64_t i) { return tg::detail::float8_to_float(static_cast<uint8_t>(raw[i]), f) * 0.02; };
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double y1 = 0, y2 = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double xq = tg::detail::float8_to_float(tg::detail::float_to_float8(static_cast<float>(x.at(i * k + p) / 0.05f), f), f) * 0.05;
        y1 += xq * wv(w1, j * k + p);
        y2 += xq * wv(w2, p * n + j);
      }
      EXPECT_NEAR(out[0].at(i * n + j), y1, 1e-4 * (1 + std::fabs(y1))) << i << "," << j;
      EXPECT_NEAR(out[1].at(i * n + j), y2, 1e-4 * (1 + std::fabs(y2))) << i << "," << j;
    }
}
