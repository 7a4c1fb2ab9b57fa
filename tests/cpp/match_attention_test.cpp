// MatchAttention (passes/match_attention.h): attention written out as matmul, scale, mask,
// softmax, matmul becomes one scaled_dot_product_attention node that computes the same values;
// what is not attention (the scores read elsewhere, a softmax over another axis) is left alone.
#include "passes/match_attention.h"

#include <gtest/gtest.h>

#include <map>

#include "backends/cpu/reference.h"
#include "module_util.h"
#include "passes/dce.h"
#include "tgraph/tgraph.h"

using namespace tg;
using namespace tg::detail;

namespace {

int count(const Module& m, OpKind k) {
  int c = 0;
  for (const Block& b : m.graph.blocks)
    for (int32_t id : b.nodes) c += m.graph.nodes[static_cast<size_t>(id)].kind == k;
  return c;
}

// The module's targets by the reference interpreter (one block, no state).
std::vector<TensorData> eval(const Module& m, const std::map<int32_t, TensorData>& feeds) {
  std::map<int32_t, TensorData> vals = feeds;
  for (int32_t id : m.graph.blocks[0].nodes) {
    const Node& n = m.graph.nodes[static_cast<size_t>(id)];
    if (n.kind == OpKind::Placeholder) continue;
    if (n.kind == OpKind::Constant) {
      vals[n.outputs[0]] = n.data;
      continue;
    }
    std::vector<TensorData> in;
    for (int32_t v : n.inputs) in.push_back(vals.at(v));
    std::vector<TensorData> out = reference_eval(m.graph, n, in);
    for (size_t i = 0; i < out.size(); ++i) vals[n.outputs[i]] = out[i];
  }
  std::vector<TensorData> r;
  for (int32_t t : m.targets) r.push_back(vals.at(t));
  return r;
}

// Hugging Face's eager BERT attention as tgraph.torch converts it: q, k, v [B, H, L, D]
// flattened to [B*H, L, D] for bmm, k transposed, scores viewed back to 4-D, divided by
// sqrt(D), a [B, 1, 1, Lk] padding mask added, softmax, bmm with v, viewed back.
struct Eager {
  Graph g;
  Tensor q, k, v, mask, y, scores;
  Eager(bool transpose_b, bool divide) {
    const int64_t B = 2, H = 3, L = 10, Lk = 12, D = 16;
    q = g.placeholder({B, H, L, D}, DType::f32, "q");
    k = g.placeholder({B, H, Lk, D}, DType::f32, "k");
    v = g.placeholder({B, H, Lk, D}, DType::f32, "v");
    mask = g.placeholder({B, 1, 1, Lk}, DType::f32, "mask");
    Tensor q3 = g.reshape(q, {B * H, L, D});
    Tensor s = transpose_b ? g.matmul(q3, g.reshape(k, {B * H, Lk, D}), false, true)
                           : g.matmul(q3, g.reshape(g.transpose(k, {0, 1, 3, 2}), {B * H, D, Lk}));
    scores = g.reshape(s, {B, H, L, Lk});
    Tensor scaled = divide ? g.div(scores, g.broadcast_to(g.scalar(4.0), {B, H, L, Lk}))
                           : g.mul(g.scalar(0.25), scores);
    Tensor p = g.softmax(g.add(scaled, g.broadcast_to(mask, {B, H, L, Lk})), -1);
    Tensor o = g.matmul(g.reshape(p, {B * H, L, Lk}), g.reshape(v, {B * H, Lk, D}));
    y = g.reshape(o, {B, H, L, D});
  }
  std::map<int32_t, TensorData> feeds() const {
    TensorData m = TensorData::uniform({2, 1, 1, 12}, -3, 1, DType::f32, 4);
    m.set(11, -1e30);  // a padded key
    return {{q.id(), TensorData::uniform({2, 3, 10, 16}, -1, 1, DType::f32, 1)},
            {k.id(), TensorData::uniform({2, 3, 12, 16}, -1, 1, DType::f32, 2)},
            {v.id(), TensorData::uniform({2, 3, 12, 16}, -1, 1, DType::f32, 3)},
            {mask.id(), m}};
  }
};

}  // namespace

TEST(PassMatchAttention, WrittenOutAttentionBecomesOneNodeWithTheSameValues) {
  for (bool transpose_b : {false, true})
    for (bool divide : {false, true}) {
      SCOPED_TRACE(std::string(transpose_b ? "k^T by the matmul" : "k transposed") + (divide ? ", divided" : ", scaled"));
      Eager e(transpose_b, divide);
      Module m = passtest::module_of(e.g, {e.y});
      const std::vector<TensorData> want = eval(m, e.feeds());
      ASSERT_TRUE(MatchAttention().run(m));
      DeadCodeElimination().run(m);
      EXPECT_EQ(count(m, OpKind::Attention), 1);
      EXPECT_EQ(count(m, OpKind::Softmax), 0);
      EXPECT_EQ(count(m, OpKind::MatMul), 0);
      const TensorData got = eval(m, e.feeds())[0];
      ASSERT_EQ(got.shape(), want[0].shape());
      for (int64_t i = 0; i < got.num_elements(); ++i) ASSERT_NEAR(got.at(i), want[0].at(i), 1e-5) << i;
    }
}

TEST(PassMatchAttention, ScoresReadElsewhereOrAnotherAxisAreLeftAlone) {
  {
    Eager e(true, true);
    Module m = passtest::module_of(e.g, {e.y, e.scores});  // the scores are an output too
    EXPECT_FALSE(MatchAttention().run(m));
  }
  {
    Graph g;
    Tensor q = g.placeholder({4, 8, 16}, DType::f32, "q"), k = g.placeholder({4, 8, 16}, DType::f32, "k");
    Tensor p = g.softmax(g.matmul(q, k, false, true), 1);  // over the queries
    Module m = passtest::module_of(g, {g.matmul(p, k)});
    EXPECT_FALSE(MatchAttention().run(m));
  }
}
