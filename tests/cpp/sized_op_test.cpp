// Shape ops whose sizes are tensors computed in the graph (sized_op): built from shape_of and
// integer arithmetic, run at several sizes of one dynamic executable (each size's copy turns
// them into the plain ops; TGRAPH_NO_SPECIALIZE runs them through the reference), against the
// plain op built at each size.
#include <functional>

#include "grad_check.h"
#include "ir/graph_impl.h"
#include "test_util.h"
#include "tgraph/tgraph.h"

using namespace tg;

namespace {

using Build = std::function<Tensor(Graph&, Tensor)>;

// Element i of shape_of(x), as a 1-element i64 tensor.
Tensor dim(Graph& g, Tensor x, int64_t i) { return g.slice(g.shape_of(x), {i}, {i + 1}); }
Tensor num(Graph& g, int64_t v) { return g.constant(TensorData::from_vector(Shape({1}), i64, {double(v)})); }

// `sized` built once over a dynamic feed of x's rank, compiled once, run at each size (and
// dynamic without copies), against `plain` built for each size.
void expect_same(const std::string& what, const Build& sized, const std::function<Tensor(Graph&, Tensor, const Shape&)>& plain,
                 const std::vector<Shape>& sizes, DType t = f32) {
  SCOPED_TRACE(what);
  const Shape dyn(std::vector<int64_t>(static_cast<size_t>(sizes[0].rank()), -1));
  Graph g;
  Tensor x = g.placeholder(dyn, t, "x");
  Tensor y = sized(g, x);
  bool sized_op = false;
  for (const detail::Node& n : g.impl().nodes) sized_op |= n.kind == detail::OpKind::SizedOp;
  EXPECT_TRUE(sized_op) << "sizes of a dynamic feed are not known when built";
  Executable exe = g.compile({{x, TensorType(dyn, t)}}, {y}, {}, {.device = Device::cpu()});
  Executable unspecialised = [&] {
    WithSwitches s{{"TGRAPH_NO_SPECIALIZE", "1"}};
    return g.compile({{x, TensorType(dyn, t)}}, {y}, {}, {.device = Device::cpu()});
  }();
  uint64_t seed = 5;
  for (const Shape& s : sizes) {
    SCOPED_TRACE(s.str());
    TensorData in = TensorData::uniform(s, -2, 2, t, seed++);
    Graph p;
    Tensor px = p.placeholder(s, t, "x");
    Tensor want_t = plain(p, px, s);
    TensorData want = p.compile({{px, TensorType(s, t)}}, {want_t}, {}, {.device = Device::cpu()}).run({in})[0];
    for (Executable* e : {&exe, &unspecialised}) {
      TensorData got = e->run({in})[0];
      ASSERT_EQ(got.shape(), want.shape());
      for (int64_t i = 0; i < want.num_elements(); ++i) ASSERT_EQ(got.at(i), want.at(i)) << "element " << i;
    }
  }
}

int64_t up_to(int64_t n, int64_t k) { return (k - n % k) % k; }

}  // namespace

// Swin's window padding: H and W padded up to multiples of 7 (amounts (7 - H % 7) % 7).
TEST(SizedOp, APaddingUpToAMultipleOfAWindow) {
  auto pads = [](Graph& g, Tensor x) {
    Tensor seven = num(g, 7), zero = num(g, 0);
    auto up = [&](Tensor d) { return g.floor_mod(g.sub(seven, g.floor_mod(d, seven)), seven); };
    return g.concat({zero, zero, zero, zero, zero, up(dim(g, x, 1)), up(dim(g, x, 2)), zero}, 0);
  };
  expect_same(
      "constant", [&](Graph& g, Tensor x) { return g.pad_sized(x, pads(g, x), PadMode::constant, 0.5); },
      [](Graph& g, Tensor x, const Shape& s) {
        return g.pad(x, {0, 0, 0, 0}, {0, up_to(s[1], 7), up_to(s[2], 7), 0}, PadMode::constant, 0.5);
      },
      {Shape({1, 10, 13, 3}), Shape({2, 14, 7, 3}), Shape({1, 5, 20, 2})});
  expect_same(
      "edge", [&](Graph& g, Tensor x) { return g.pad_sized(x, pads(g, x), PadMode::edge); },
      [](Graph& g, Tensor x, const Shape& s) {
        return g.pad(x, {0, 0, 0, 0}, {0, up_to(s[1], 7), up_to(s[2], 7), 0}, PadMode::edge);
      },
      {Shape({1, 9, 8, 2}), Shape({2, 3, 15, 1})});
}

// A flatten whose product the graph computes (two dynamic dims in one).
TEST(SizedOp, AReshapeToAProductOfSizes) {
  expect_same(
      "product",
      [](Graph& g, Tensor x) {
        return g.reshape_sized(x, g.concat({g.mul(dim(g, x, 0), dim(g, x, 1)), dim(g, x, 2)}, 0));
      },
      [](Graph& g, Tensor x, const Shape& s) { return g.reshape(x, {s[0] * s[1], s[2]}); },
      {Shape({2, 3, 4}), Shape({5, 1, 3})});
}

// A range over a feature map's height: positions added to every row.
TEST(SizedOp, ARangeOverADim) {
  expect_same(
      "positions",
      [](Graph& g, Tensor x) {
        Tensor h = g.reshape(g.cast(dim(g, x, 1), f32), {});
        Tensor pos = g.arange_sized(g.scalar(0.0, f32), h, g.scalar(1.0, f32), f32);
        return g.add(x, g.reshape_sized(pos, g.concat({num(g, 1), dim(g, x, 1), num(g, 1)}, 0)));
      },
      [](Graph& g, Tensor x, const Shape& s) {
        return g.add(x, g.reshape(g.arange(0, double(s[1]), 1, f32), {1, s[1], 1}));
      },
      {Shape({2, 5, 3}), Shape({1, 9, 2})});
}

// numpy slicing by computed bounds: the second half, a reversed run, past-the-end clamping.
TEST(SizedOp, ASliceByComputedBounds) {
  expect_same(
      "second half",
      [](Graph& g, Tensor x) {
        Tensor half = g.div(dim(g, x, 1), num(g, 2));
        return g.slice_sized(x, half, num(g, INT64_MAX), num(g, 1), {1});
      },
      [](Graph& g, Tensor x, const Shape& s) { return g.slice(x, {0, s[1] / 2}, {-1, -1}); }, {Shape({2, 7}), Shape({3, 4})});
  expect_same(
      "reversed, from the end",
      [](Graph& g, Tensor x) {
        return g.slice_sized(x, g.sub(dim(g, x, 0), num(g, 2)), num(g, -100), num(g, -1), {0});
      },
      [](Graph& g, Tensor x, const Shape& s) {
        SliceDesc d{{s[0] - 2, 0}, {0, 0}, {-1, 1}, 2, 3, 0};
        return g.strided_slice(x, d);
      },
      {Shape({5, 3}), Shape({2, 4})});
}

// Upsampling to another tensor's size (a skip connection's), tiling and a bidirectional broadcast.
TEST(SizedOp, AResizeTileAndBroadcastBySizes) {
  ResizeDesc r;
  r.mode = ResizeMode::nearest;
  r.data_layout = Layout::nchw;
  expect_same(
      "resize to double",
      [&](Graph& g, Tensor x) {
        Tensor hw = g.mul(g.slice(g.shape_of(x), {2}, {4}), num(g, 2));
        return g.resize_sized(x, hw, r);
      },
      [&](Graph& g, Tensor x, const Shape& s) {
        ResizeDesc d = r;
        d.size = {2 * s[2], 2 * s[3]};
        return g.resize(x, d);
      },
      {Shape({1, 2, 3, 5}), Shape({2, 1, 4, 4})});
  expect_same(
      "tile by the batch",
      [](Graph& g, Tensor x) { return g.tile_sized(x, g.concat({num(g, 1), dim(g, x, 0)}, 0)); },
      [](Graph& g, Tensor x, const Shape& s) { return g.tile(x, {1, s[0]}); }, {Shape({2, 3}), Shape({3, 1})});
  expect_same(
      "expand",
      [](Graph& g, Tensor x) { return g.broadcast_to_sized(x, g.concat({num(g, 3), num(g, 1), dim(g, x, 1)}, 0)); },
      [](Graph& g, Tensor x, const Shape& s) { return g.broadcast_to(x, {3, s[0], s[1]}); }, {Shape({2, 4}), Shape({1, 1})});
}

// Sizes known when built give the plain op; sizes from a tensor's values are refused.
TEST(SizedOp, KnownSizesBuildThePlainOpAndValuesAreRefused) {
  Graph g;
  Tensor x = g.placeholder(Shape({2, 6}), f32, "x");
  Tensor y = g.reshape_sized(x, g.concat({dim(g, x, 1), dim(g, x, 0)}, 0));
  EXPECT_EQ(y.shape(), Shape({6, 2}));
  EXPECT_EQ(g.impl().nodes[static_cast<size_t>(g.impl().values[static_cast<size_t>(y.id())].node)].kind,
            detail::OpKind::Reshape);
  Tensor n = g.placeholder(Shape({2}), i64, "n");
  EXPECT_TG_ERROR(g.reshape_sized(x, n), "[sized_op] (reshape)", "depends on tensor values",
                  "data-dependent shapes are not supported");
  EXPECT_TG_ERROR(g.pad_sized(x, g.constant(TensorData::from_vector(Shape({2}), f32, {1, 1}))), "[sized_op] (pad)",
                  "integer");
  // Sizes that do not fit the op at the run's size: the op's own error, with its shapes.
  Graph h;
  Tensor z = h.placeholder(Shape({-1, 4}), f32, "z");
  Tensor bad = h.reshape_sized(z, h.concat({h.add(dim(h, z, 0), num(h, 1)), num(h, 4)}, 0));
  Executable exe = h.compile({{z, TensorType(Shape({-1, 4}), f32)}}, {bad}, {}, {.device = Device::cpu()});
  EXPECT_TG_ERROR(exe.run({TensorData::uniform(Shape({3, 4}), -1, 1, f32, 1)}), "[reshape]", "[3,4]", "[4,4]");
}

// Gradients flow through a computed reshape, broadcast and constant padding.
TEST(SizedOp, Gradients) {
  gradcheck::check(
      "pad and reshape",
      [](Graph& g, const std::vector<Tensor>& x) {
        Tensor four = num(g, 4), zero = num(g, 0);
        Tensor up = g.floor_mod(g.sub(four, g.floor_mod(dim(g, x[0], 1), four)), four);
        Tensor p = g.pad_sized(g.tanh(x[0]), g.concat({zero, num(g, 1), zero, up}, 0));
        Tensor flat = g.reshape_sized(p, g.concat({g.mul(g.add(dim(g, x[0], 0), zero), g.add(dim(g, p, 1), zero))}, 0));
        return std::vector<Tensor>{g.mul(flat, flat)};
      },
      {gradcheck::u(Shape({2, 3}), -1, 1, 3)}, 1e-5, 1e-6, true);
  gradcheck::check(
      "broadcast",
      [](Graph& g, const std::vector<Tensor>& x) {
        return std::vector<Tensor>{g.sin(g.broadcast_to_sized(x[0], g.concat({num(g, 3), num(g, 1)}, 0)))};
      },
      {gradcheck::u(Shape({1, 4}), -1, 1, 4)}, 1e-5, 1e-6, true);
}

// A saved dynamic executable keeps its sized_ops: loaded, it runs at sizes it never saw.
TEST(SizedOp, SurvivesSaveAndLoad) {
  Graph g;
  Tensor x = g.placeholder(Shape({-1, -1}), f32, "x");
  Tensor pads = g.concat({num(g, 0), num(g, 0), num(g, 0), g.floor_mod(g.sub(num(g, 4), g.floor_mod(dim(g, x, 1), num(g, 4))), num(g, 4))}, 0);
  Tensor y = g.pad_sized(x, pads);
  Executable exe = g.compile({{x, TensorType(Shape({-1, -1}), f32)}}, {y}, {}, {.device = Device::cpu()});
  const std::string path = testing::TempDir() + "/sized_op.tgx";
  exe.save(path);
  Executable loaded = Executable::load(path);
  TensorData in = TensorData::uniform(Shape({2, 5}), -1, 1, f32, 9);
  TensorData out = loaded.run({in})[0];
  ASSERT_EQ(out.shape(), Shape({2, 8}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(out.at(r * 8 + c), c < 5 ? in.at(r * 5 + c) : 0.0);
}
