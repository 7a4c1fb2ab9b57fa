// Gradients of reductions, scans, matmul and core shape ops against finite differences.
#include "grad_check.h"

using namespace tg;
using gradcheck::check;
using gradcheck::u;

TEST(GradReduce, Reductions) {
  auto x = u({2, 3, 4}, -1, 1, 11);
  check("sum", [](Graph& g, auto& a) { return std::vector{g.reduce_sum(a[0], {1})}; }, {x});
  check("sum all keep", [](Graph& g, auto& a) { return std::vector{g.reduce_sum(a[0], {}, true)}; }, {x});
  check("mean", [](Graph& g, auto& a) { return std::vector{g.reduce_mean(a[0], {0, -1})}; }, {x});
  check("variance", [](Graph& g, auto& a) { return std::vector{g.reduce_variance(a[0], {2}, true)}; }, {x});
  check("max", [](Graph& g, auto& a) { return std::vector{g.reduce_max(a[0], {1})}; }, {x});
  check("min", [](Graph& g, auto& a) { return std::vector{g.reduce_min(a[0], {2})}; }, {x});
  check("prod", [](Graph& g, auto& a) { return std::vector{g.reduce_prod(a[0], {2})}; }, {u({2, 3, 4}, 0.5, 1.5, 3)});
  check("logsumexp", [](Graph& g, auto& a) { return std::vector{g.reduce_logsumexp(a[0], {1})}; }, {x});
  check("cumsum", [](Graph& g, auto& a) { return std::vector{g.cumsum(a[0], 1)}; }, {x});
  check("cumsum excl rev", [](Graph& g, auto& a) { return std::vector{g.cumsum(a[0], 2, true, true)}; }, {x});
}

TEST(GradReduce, Matmul) {
  check("mm", [](Graph& g, auto& a) { return std::vector{g.matmul(a[0], a[1])}; }, {u({2, 3}, -1, 1, 1), u({3, 4}, -1, 1, 2)});
  check("mm ta", [](Graph& g, auto& a) { return std::vector{g.matmul(a[0], a[1], true)}; }, {u({3, 2}, -1, 1, 1), u({3, 4}, -1, 1, 2)});
  check("mm tb", [](Graph& g, auto& a) { return std::vector{g.matmul(a[0], a[1], false, true)}; }, {u({2, 3}, -1, 1, 1), u({4, 3}, -1, 1, 2)});
  check("mm ta tb", [](Graph& g, auto& a) { return std::vector{g.matmul(a[0], a[1], true, true)}; }, {u({3, 2}, -1, 1, 1), u({4, 3}, -1, 1, 2)});
  check("batched broadcast", [](Graph& g, auto& a) { return std::vector{g.matmul(a[0], a[1])}; },
        {u({2, 2, 3}, -1, 1, 1), u({3, 2}, -1, 1, 2)});
  check("band_part", [](Graph& g, auto& a) { return std::vector{g.band_part(a[0], 1, 0)}; }, {u({3, 3}, -1, 1, 4)});
}

TEST(GradReduce, CoreShapeOps) {
  auto x = u({2, 3, 4}, -1, 1, 21);
  check("reshape", [](Graph& g, auto& a) { return std::vector{g.reshape(a[0], {6, -1})}; }, {x});
  check("transpose", [](Graph& g, auto& a) { return std::vector{g.transpose(a[0], {2, 0, 1})}; }, {x});
  check("broadcast_to", [](Graph& g, auto& a) { return std::vector{g.broadcast_to(a[0], {5, 2, 3, 4})}; }, {x});
  check("expand/squeeze", [](Graph& g, auto& a) { return std::vector{g.squeeze(g.expand_dims(a[0], {1}), {1})}; }, {x});
  check("concat", [](Graph& g, auto& a) { return std::vector{g.concat({a[0], a[1]}, 1)}; }, {x, u({2, 1, 4}, -1, 1, 5)});
  check("split", [](Graph& g, auto& a) { return g.split(a[0], {1, 3}, 2); }, {x});
  check("stack", [](Graph& g, auto& a) { return std::vector{g.stack({a[0], a[0]}, 0)}; }, {x});
}
