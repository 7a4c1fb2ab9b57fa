// Gradients through control flow (if_else, for_loop) against finite differences (f64), and
// the refusal for while_loop.
#include "grad_check.h"

using namespace tg;
using gradcheck::check;
using gradcheck::u;

namespace {
using Ts = std::vector<Tensor>;

TensorData flag(bool v) { return TensorData::scalar(v ? 1 : 0, DType::boolean); }
TensorData trips(int n) { return TensorData::scalar(n, DType::i32); }

// h = tanh(h @ w + b): the body of the loop tests, reading the outer weight w and bias b.
Tensor rnn_step(Graph& g, Tensor h, Tensor w, Tensor b) { return g.tanh(g.add(g.matmul(h, w), b)); }
}  // namespace

TEST(GradControl, IfElseBothBranches) {
  // Branches read different outer values; the else branch returns an outer tensor itself.
  auto build = [](Graph& g, const Ts& a) {
    return g.if_else(
        a[2],
        [&](Graph& b) {
          return Ts{b.mul(a[0], a[1]), b.sin(a[0])};
        },
        [&](Graph& b) {
          return Ts{b.exp(a[1]), a[1]};
        });
  };
  auto x = u({2, 3}, -1, 1, 1), y = u({2, 3}, -1, 1, 2);
  check("if_else then", build, {x, y, flag(true)});
  check("if_else else", build, {x, y, flag(false)});
}

TEST(GradControl, IfElseBranchOnlyOneReads) {
  // Only the then branch reads w (broadcast against x): the else branch gives w zeros.
  auto build = [](Graph& g, const Ts& a) {
    return g.if_else(
        a[2], [&](Graph& b) { return Ts{b.mul(b.tanh(a[0]), a[1])}; },
        [&](Graph& b) { return Ts{b.square(a[0])}; });
  };
  auto x = u({3, 4}, -1, 1, 3), w = u({4}, -1, 1, 4);
  check("then reads w", build, {x, w, flag(true)});
  check("else does not", build, {x, w, flag(false)});
}

TEST(GradControl, NestedIfElse) {
  auto build = [](Graph& g, const Ts& a) {
    Tensor pre = g.mul(a[0], a[1]);  // computed outside, read inside the nested branches
    return g.if_else(
        a[2],
        [&](Graph& b) {
          Tensor t = b.sin(pre);
          return b.if_else(
              a[3], [&](Graph& c) { return Ts{c.mul(t, a[1])}; }, [&](Graph& c) { return Ts{c.exp(t)}; });
        },
        [&](Graph& b) { return Ts{b.sub(a[0], a[1])}; });
  };
  auto x = u({2, 2}, -1, 1, 5), y = u({2, 2}, -1, 1, 6);
  for (bool p : {true, false})
    for (bool q : {true, false}) check("nested if", build, {x, y, flag(p), flag(q)});
}

TEST(GradControl, ForLoopTripCounts) {
  // a: h0 [2, 3], w [3, 3], b [3], n (i32)
  auto build = [](Graph& g, const Ts& a) {
    return g.for_loop(a[3], {a[0]},
                      [&](Graph& b, Tensor, Ts s) { return Ts{rnn_step(b, s[0], a[1], a[2])}; });
  };
  auto h0 = u({2, 3}, -1, 1, 7), w = u({3, 3}, -0.8, 0.8, 8), bias = u({3}, -0.5, 0.5, 9);
  for (int n : {0, 1, 5}) check("for_loop n=" + std::to_string(n), build, {h0, w, bias, trips(n)});
}

TEST(GradControl, ForLoopStepAndIndex) {
  // i = 1, 4, 7 (step 3); the body uses the index and carries two values, one an integer.
  auto build = [](Graph& g, const Ts& a) {
    auto r = g.for_loop(g.scalar(1, DType::i32), a[2], g.scalar(3, DType::i32),
                        {a[0], g.scalar(0, DType::i32), a[0]}, [&](Graph& b, Tensor i, Ts s) {
                          Tensor fi = b.mul(b.cast(i, DType::f64), b.scalar(0.1, DType::f64));
                          Tensor h = b.tanh(b.add(b.matmul(s[0], a[1]), fi));
                          return Ts{h, b.add(s[1], b.scalar(1, DType::i32)), b.mul(s[2], b.cos(h))};
                        });
    return Ts{r[0], r[2]};
  };
  auto h0 = u({2, 2}, -1, 1, 10), w = u({2, 2}, -0.9, 0.9, 11);
  check("for_loop step 3", build, {h0, w, trips(8)});
  check("for_loop step 3, empty range", build, {h0, w, trips(1)});
}

TEST(GradControl, ForLoopInsideIfElse) {
  auto build = [](Graph& g, const Ts& a) {
    return g.if_else(
        a[3],
        [&](Graph& b) {
          return b.for_loop(b.scalar(3, DType::i32), {a[0]},
                            [&](Graph& c, Tensor, Ts s) { return Ts{rnn_step(c, s[0], a[1], a[2])}; });
        },
        [&](Graph& b) { return Ts{b.mul(a[0], b.reduce_sum(a[2]))}; });
  };
  auto h0 = u({2, 3}, -1, 1, 12), w = u({3, 3}, -0.8, 0.8, 13), bias = u({3}, -0.5, 0.5, 14);
  check("for inside if (then)", build, {h0, w, bias, flag(true)});
  check("for inside if (else)", build, {h0, w, bias, flag(false)});
}

TEST(GradControl, IfElseAndForLoopInsideForLoop) {
  // The body branches on the parity of i and runs an inner loop over a captured weight.
  auto build = [](Graph& g, const Ts& a) {
    return g.for_loop(g.scalar(4, DType::i32), {a[0]}, [&](Graph& b, Tensor i, Ts s) {
      Tensor even = b.equal(b.floor_mod(i, b.scalar(2, DType::i32)), b.scalar(0, DType::i32));
      Tensor h = b.if_else(
          even, [&](Graph& c) { return Ts{c.tanh(c.matmul(s[0], a[1]))}; },
          [&](Graph& c) { return Ts{c.mul(s[0], a[2])}; })[0];
      return b.for_loop(b.scalar(2, DType::i32), {h},
                        [&](Graph& c, Tensor, Ts t) { return Ts{c.sin(c.add(t[0], a[2]))}; });
    });
  };
  check("if and for inside for", build,
        {u({2, 3}, -1, 1, 15), u({3, 3}, -0.8, 0.8, 16), u({3}, -0.5, 0.5, 17)});
}

TEST(GradControl, ForLoopGradientsTwiceReuseTheTape) {
  Graph g;
  Tensor h0 = g.placeholder({2, 3}, DType::f64, "h0");
  Tensor w = g.placeholder({3, 3}, DType::f64, "w");
  Tensor h = g.for_loop(g.scalar(3, DType::i32), {h0},
                        [&](Graph& b, Tensor, Ts s) { return Ts{b.tanh(b.matmul(s[0], w))}; })[0];
  Tensor l1 = g.reduce_sum(h), l2 = g.reduce_sum(g.square(h));
  auto g1 = g.gradients(l1, {w});
  int64_t after_first = g.num_nodes();
  auto g2 = g.gradients(l2, {w});
  // One tape: the loop's outputs did not grow a second time.
  EXPECT_EQ(h.op().num_outputs(), 2);
  EXPECT_GT(g.num_nodes(), after_first);
  TensorData hv = u({2, 3}, -1, 1, 18), wv = u({3, 3}, -1, 1, 19);
  auto r = g.run({{h0, hv}, {w, wv}}, {g1.at(w), g2.at(w), h});
  // Forward-only runs still work on the recorded loop.
  auto f = g.run({{h0, hv}, {w, wv}}, {h});
  for (int64_t e = 0; e < f[0].num_elements(); ++e) EXPECT_DOUBLE_EQ(f[0].at(e), r[2].at(e));
  // d sum(h^2) = 2 h * d sum(h): differs from g1 but has its shape.
  EXPECT_EQ(r[0].shape(), r[1].shape());
}

TEST(GradControl, WhileLoopIsRefused) {
  Graph g;
  Tensor x = g.placeholder({2}, DType::f32, "x");
  auto out = g.while_loop(
      {x},
      [](Graph& b, Ts a) {
        return std::pair{b.less(b.reduce_sum(a[0]), b.scalar(10)), a};
      },
      [](Graph& b, Ts a) { return Ts{b.mul(a[0], b.scalar(2))}; });
  try {
    g.gradients(g.reduce_sum(out[0]), {x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[while_loop] gradients through while_loop are not supported"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("use for_loop"), std::string::npos) << e.what();
  }
}

TEST(GradControl, ForLoopDynamicShapes) {
  // Every dim fed as -1: the tape's rows and the accumulators take their shapes at run time.
  auto build = [](Graph& g, const Ts& a) {
    return g.for_loop(a[3], {a[0]},
                      [&](Graph& b, Tensor, Ts s) { return Ts{rnn_step(b, s[0], a[1], a[2])}; });
  };
  check("for_loop dynamic", build,
        {u({2, 3}, -1, 1, 20), u({3, 3}, -0.8, 0.8, 21), u({3}, -0.5, 0.5, 22), trips(3)}, 1e-5, 1e-6, true);
  auto branch = [](Graph& g, const Ts& a) {
    return g.if_else(
        a[2], [&](Graph& b) { return Ts{b.mul(a[0], a[1])}; }, [&](Graph& b) { return Ts{b.tanh(a[0])}; });
  };
  check("if_else dynamic", branch, {u({2, 3}, -1, 1, 23), u({2, 3}, -1, 1, 24), flag(true)}, 1e-5, 1e-6,
        true);
}
