// ONNX models exported with dynamic axes whose shape operands are arithmetic on Shape(x) that no
// single input dim names (a padding up to a window's multiple, a product of floor divisions, a
// grid's Range, a Resize by scales or to a skip connection's size): imported once as sized_ops
// and run at several sizes, against the same model imported at each size (the static path, which
// the ONNX node tests check).
#include <gtest/gtest.h>

#include "onnx_test_util.h"
#include "test_util.h"

using namespace onnxtest;
using tg::TensorData;

namespace {

// `b`'s model (one dynamic input "x" of rank `rank`) imported dynamic once, run at each shape,
// against the model imported at that shape; `first`: the dynamic model's first output type.
void expect_like_static(const ModelBuilder& b, const std::vector<tg::Shape>& shapes, double tol = 0,
                        tg::TensorType* first = nullptr) {
  tg::OnnxModel dyn = b.import();
  if (first) *first = dyn.outputs[0].type();
  tg::Executable exe = dyn.compile({.device = tg::Device::cpu()});
  uint64_t seed = 11;
  for (const tg::Shape& s : shapes) {
    SCOPED_TRACE(s.str());
    TensorData x = TensorData::uniform(s, -2, 2, tg::f32, seed++);
    tg::OnnxImportOptions o;
    o.input_shapes["x"] = s;
    std::vector<TensorData> want = run(b.import(o), {x});
    std::vector<TensorData> got = exe.run({x});
    EXPECT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size() && k < got.size(); ++k) {
      ASSERT_EQ(got[k].shape(), want[k].shape()) << "output " << k;
      for (int64_t i = 0; i < want[k].num_elements(); ++i)
        ASSERT_NEAR(got[k].at(i), want[k].at(i), tol) << "output " << k << " element " << i;
    }
  }
}

void scalar_i64(ModelBuilder& b, const std::string& name, int64_t v) {
  auto* t = b.g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(v);
}

// dim i of x as a 1-element vector named `out`.
void dim_of(ModelBuilder& b, const std::string& shape, int64_t i, const std::string& out) {
  scalar_i64(b, out + "_i", i);
  b.node("Gather", {shape, out + "_i"}, {out + "_s"});
  b.node("Unsqueeze", {out + "_s", "axes0"}, {out});
}

}  // namespace

// Swin's window padding, as torch.onnx exports it: (7 - W % 7) % 7 through Mod, into Pad.
TEST(OnnxSized, APaddingUpToAWindowMultiple) {
  ModelBuilder b(18);
  b.input("x", {-1, -1, -1, 3});
  b.init_i64("axes0", {0});
  b.init_i64("seven", {7});
  b.init_i64("zero", {0});
  b.node("Shape", {"x"}, {"shp"});
  dim_of(b, "shp", 1, "h");
  dim_of(b, "shp", 2, "w");
  for (const char* d : {"h", "w"}) {
    const std::string s(d);
    ModelBuilder::attr_i(b.node("Mod", {s, "seven"}, {s + "m"}), "fmod", 0);
    b.node("Sub", {"seven", s + "m"}, {s + "r"});
    ModelBuilder::attr_i(b.node("Mod", {s + "r", "seven"}, {s + "p"}), "fmod", 0);
  }
  ModelBuilder::attr_i(b.node("Concat", {"zero", "zero", "zero", "zero", "zero", "hp", "wp", "zero"}, {"pads"}), "axis", 0);
  b.node("Pad", {"x", "pads"}, {"y"});
  b.output("y");
  tg::TensorType t;
  expect_like_static(b, {tg::Shape({1, 10, 13, 3}), tg::Shape({2, 14, 7, 3}), tg::Shape({1, 5, 22, 3})}, 0, &t);
  EXPECT_EQ(t.shape, tg::Shape({-1, -1, -1, 3})) << "the channels, known when imported, stay known";
}

// ShuffleNet's channel shuffle through torch.onnx's dynamo exporter: the view's spatial sizes
// are (h + 1) // 2 products the importer cannot name by one input dim; then a Split in two.
TEST(OnnxSized, AReshapeToSizesComputedByFloorDivision) {
  ModelBuilder b(18);
  b.input("x", {-1, 4, -1, -1});
  b.init_i64("axes0", {0});
  b.init_i64("two", {2});
  b.init_i64("one", {1});
  b.init_i64("c2", {2});
  b.node("Shape", {"x"}, {"shp"});
  dim_of(b, "shp", 0, "n");
  dim_of(b, "shp", 2, "h");
  dim_of(b, "shp", 3, "w");
  ModelBuilder::attr_i(b.node("Concat", {"n", "two", "c2", "h", "w"}, {"s5"}), "axis", 0);
  b.node("Reshape", {"x", "s5"}, {"v"});
  ModelBuilder::attr_ints(b.node("Transpose", {"v"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  // A pooled view: h' = (h + 1) // 2, w' = (w + 1) // 2, flattened with the channels.
  b.node("Add", {"h", "one"}, {"h1"});
  b.node("Div", {"h1", "two"}, {"hh"});
  b.node("Add", {"w", "one"}, {"w1"});
  b.node("Div", {"w1", "two"}, {"wh"});
  b.init_i64("shp_c", {4});
  ModelBuilder::attr_i(b.node("Concat", {"n", "shp_c", "h", "w"}, {"s4_full"}), "axis", 0);
  b.node("Reshape", {"t", "s4_full"}, {"u"});
  auto* pool = b.node("MaxPool", {"u"}, {"p"});
  ModelBuilder::attr_ints(pool, "kernel_shape", {2, 2});
  ModelBuilder::attr_ints(pool, "strides", {2, 2});
  ModelBuilder::attr_i(pool, "ceil_mode", 1);
  b.node("Mul", {"hh", "wh"}, {"hw"});
  ModelBuilder::attr_i(b.node("Concat", {"n", "shp_c", "hw"}, {"s3"}), "axis", 0);
  b.node("Reshape", {"p", "s3"}, {"flat"});
  ModelBuilder::attr_i(b.node("Split", {"flat"}, {"a", "c"}), "axis", 1);
  ModelBuilder::attr_i(b.g->mutable_node(b.g->node_size() - 1), "num_outputs", 2);
  b.output("a");
  b.output("c");
  tg::TensorType t;
  expect_like_static(b, {tg::Shape({2, 4, 6, 5}), tg::Shape({1, 4, 3, 8})}, 0, &t);
  EXPECT_EQ(t.shape, tg::Shape({-1, 2, -1}));
}

// A detection head's grid: Range over the feature map's height and width, and a Resize by
// scales (nearest, as torch exports Upsample) and to another tensor's size (linear).
TEST(OnnxSized, ARangeAndResizesOverADynamicImage) {
  ModelBuilder b(18);
  b.input("x", {-1, 2, -1, -1});
  b.init_i64("axes0", {0});
  scalar_i64(b, "s0", 0);
  scalar_i64(b, "s1", 1);
  b.node("Shape", {"x"}, {"shp"});
  scalar_i64(b, "i2", 2);
  b.node("Gather", {"shp", "i2"}, {"h"});
  b.node("Range", {"s0", "h", "s1"}, {"gy"});
  b.node("Cast", {"gy"}, {"gyf"});
  ModelBuilder::attr_i(b.g->mutable_node(b.g->node_size() - 1), "to", onnx::TensorProto::FLOAT);
  b.init_i64("gshape", {1, 1, -1, 1});
  b.node("Reshape", {"gyf", "gshape"}, {"gy4"});
  b.node("Add", {"x", "gy4"}, {"xg"});
  b.init_f("scales", {4}, {1, 1, 2, 3});
  auto* up = b.node("Resize", {"xg", "", "scales"}, {"up"});
  ModelBuilder::attr_s(up, "mode", "nearest");
  ModelBuilder::attr_s(up, "coordinate_transformation_mode", "asymmetric");
  ModelBuilder::attr_s(up, "nearest_mode", "floor");
  b.node("Shape", {"up"}, {"ushp"});
  b.init_i64("st", {0});
  b.init_i64("mid", {2});
  b.init_i64("en", {4});
  b.node("Slice", {"shp", "st", "mid"}, {"nc"});
  b.node("Slice", {"ushp", "mid", "en"}, {"uhw"});
  ModelBuilder::attr_i(b.node("Concat", {"nc", "uhw"}, {"sizes"}), "axis", 0);
  auto* lin = b.node("Resize", {"x", "", "", "sizes"}, {"back"});
  ModelBuilder::attr_s(lin, "mode", "linear");
  ModelBuilder::attr_s(lin, "coordinate_transformation_mode", "half_pixel");
  b.output("up");
  b.output("back");
  b.output("gy");
  expect_like_static(b, {tg::Shape({2, 2, 3, 4}), tg::Shape({1, 2, 5, 2})}, 1e-5);
}

// Slice bounds computed from sizes: the second half of the width, the last rows reversed.
TEST(OnnxSized, ASliceByComputedBounds) {
  ModelBuilder b(18);
  b.input("x", {-1, -1});
  b.init_i64("axes0", {0});
  b.init_i64("two", {2});
  b.init_i64("one", {1});
  b.init_i64("ax1", {1});
  b.init_i64("big", {INT64_MAX});
  b.init_i64("far", {-100});
  b.init_i64("back", {-1});
  b.node("Shape", {"x"}, {"shp"});
  dim_of(b, "shp", 1, "w");
  dim_of(b, "shp", 0, "n");
  b.node("Div", {"w", "two"}, {"half"});
  b.node("Slice", {"x", "half", "big", "ax1"}, {"right"});
  b.node("Sub", {"n", "one"}, {"last"});
  b.node("Slice", {"x", "last", "far", "axes0", "back"}, {"rev"});
  b.output("right");
  b.output("rev");
  expect_like_static(b, {tg::Shape({3, 7}), tg::Shape({5, 2})});
}

// Sizes from a tensor's values, not only from sizes, are still refused at import.
TEST(OnnxSized, SizesFromValuesAreRefused) {
  ModelBuilder b(18);
  b.input("x", {-1, 4});
  b.input("n", {2}, onnx::TensorProto::INT64);
  b.node("Reshape", {"x", "n"}, {"y"});
  b.output("y");
  EXPECT_TG_ERROR(b.import(), "Reshape", "must be known at import time");
}
