// Converters of ops whose output size depends on the data: NonMaxSuppression and Unique. Each
// computes a fixed-size mask at run time and takes its true positions with non_zero_indices,
// whose length (the first dim, -1 while building) is known only when the graph runs.
#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// Slice [lo, hi) of the last dim.
Tensor last(Graph& g, Tensor x, int64_t lo, int64_t hi) {
  std::vector<int64_t> b(static_cast<size_t>(x.rank()), 0), e(static_cast<size_t>(x.rank()), -1);
  b.back() = lo;
  e.back() = hi;
  return g.slice(x, b, e);
}

// Per batch and class, boxes in descending score order (ties: the lower index first) are
// selected greedily unless one selected before overlaps them by IoU > iou_threshold; only
// scores > score_threshold compete, at most max_output_boxes_per_class are kept. The greedy
// pass is a fixed point over the [N, N] "suppresses" matrix of the sorted boxes: keep =
// candidate & !any(earlier & kept & overlapping), iterated in a while_loop until nothing
// changes (after iteration t the first t boxes are final, so it ends within N + 1 passes; in
// practice after the longest chain of suppressions). Output [selected, 3] i64: (batch, class, box).
void non_max_suppression(Ctx& c) {
  Graph& g = c.g;
  Tensor boxes = c.in(0), scores = c.in(1);
  const std::vector<int64_t> bd = static_dims(c, boxes, "boxes"), sd = static_dims(c, scores, "scores");
  if (bd.size() != 3 || bd[2] != 4 || sd.size() != 3 || sd[0] != bd[0] || sd[2] != bd[1])
    c.fail("boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]; got " +
           boxes.shape().str() + " and " + scores.shape().str());
  const int64_t nb = bd[0], nc = sd[1], n = bd[1];
  require_size(c, static_cast<double>(nb) * static_cast<double>(nc) * static_cast<double>(n) * static_cast<double>(n),
               "the [batches, classes, boxes, boxes] overlap matrix");
  const int64_t center = c.attr_i("center_point_box", 0);
  if (center != 0 && center != 1) c.fail("center_point_box must be 0 or 1, not " + std::to_string(center));
  const DType f = boxes.dtype();
  // The optional scalar inputs; an empty tensor counts as absent (ONNX's reference).
  auto given = [&](int i) { return c.has_input(i) && c.in(i).shape().num_elements() != 0; };
  auto scalar_in = [&](int i, DType t) {
    if (c.in(i).shape().num_elements() != 1)
      c.fail("input " + std::to_string(i) + " must hold one value, not " + c.in(i).shape().str());
    return g.cast(g.reshape(c.in(i), {}), t);
  };
  if (!given(2) || n == 0) {  // no max_output_boxes_per_class: nothing is selected
    c.out(0, g.constant(TensorData::zeros(Shape({0, 3}), DType::i64)));
    return;
  }
  Tensor max_out = scalar_in(2, DType::i64);
  Tensor iou_thr = given(3) ? scalar_in(3, f) : g.scalar(0, f);
  Tensor order = g.cast(g.argsort(scores, 2, true), DType::i64);  // [B, C, N]
  Tensor cand = g.constant(TensorData::full(Shape({nb, nc, n}), 1.0, DType::boolean));
  if (given(4)) cand = g.greater(g.gather_along_axis(scores, order, 2), scalar_in(4, scores.dtype()));
  // The sorted boxes' corners [B, C, N, 1] each.
  Tensor sorted = g.gather_along_axis(g.broadcast_to(g.expand_dims(boxes, {1}), {nb, nc, n, 4}),
                                      g.broadcast_to(g.expand_dims(order, {3}), {nb, nc, n, 4}), 2);
  Tensor x0, x1, y0, y1;
  if (center) {
    Tensor half_w = g.div(last(g, sorted, 2, 3), g.scalar(2, f)),
           half_h = g.div(last(g, sorted, 3, 4), g.scalar(2, f));
    x0 = g.sub(last(g, sorted, 0, 1), half_w);
    x1 = g.add(last(g, sorted, 0, 1), half_w);
    y0 = g.sub(last(g, sorted, 1, 2), half_h);
    y1 = g.add(last(g, sorted, 1, 2), half_h);
  } else {
    Tensor ya = last(g, sorted, 0, 1), xa = last(g, sorted, 1, 2), yb = last(g, sorted, 2, 3),
           xb = last(g, sorted, 3, 4);
    x0 = g.minimum(xa, xb), x1 = g.maximum(xa, xb), y0 = g.minimum(ya, yb), y1 = g.maximum(ya, yb);
  }
  auto row = [&](Tensor v) { return g.transpose(v, {0, 1, 3, 2}); };  // [B, C, 1, N]
  Tensor ix0 = g.maximum(x0, row(x0)), ix1 = g.minimum(x1, row(x1));
  Tensor iy0 = g.maximum(y0, row(y0)), iy1 = g.minimum(y1, row(y1));
  Tensor inter = g.mul(g.sub(ix1, ix0), g.sub(iy1, iy0));
  Tensor area = g.mul(g.sub(x1, x0), g.sub(y1, y0));
  Tensor uni = g.sub(g.add(area, row(area)), inter);
  Tensor zero = g.scalar(0, f);
  Tensor overlap = g.logical_and(
      g.logical_and(g.greater(ix1, ix0), g.greater(iy1, iy0)),
      g.logical_and(g.logical_and(g.greater(area, zero), g.greater(row(area), zero)), g.greater(uni, zero)));
  overlap = g.logical_and(overlap, g.greater(g.div(inter, g.select(overlap, uni, g.scalar(1, f))), iou_thr));
  // Only an earlier box (q < p) suppresses box p.
  Tensor pos = g.arange(0, static_cast<double>(n), 1, DType::i32);
  Tensor lower = g.less(g.reshape(pos, {1, n}), g.reshape(pos, {n, 1}));
  Tensor sup = g.logical_and(overlap, lower);  // [B, C, N(p), N(q)]
  Tensor keep = g.while_loop(
      {cand},
      [&](Graph& b, std::vector<Tensor> a) {
        Tensor hit =
            b.reduce_any(b.logical_and(sup, b.expand_dims(a[0], {2})), {3});  // kept q over [B, C, 1, N]
        Tensor next = b.logical_and(cand, b.logical_not(hit));
        return std::pair{b.reduce_any(b.not_equal(next, a[0])), std::vector<Tensor>{next}};
      },
      [](Graph&, std::vector<Tensor> r) { return r; })[0];
  Tensor rank = g.cumsum(g.cast(keep, DType::i64), 2);
  keep = g.logical_and(keep, g.less_equal(rank, max_out));
  Tensor nz = g.non_zero_indices(keep);  // [selected, 3]: batch, class, sorted position
  Tensor box = g.expand_dims(g.gather_nd(order, nz), {1});
  c.out(0, g.concat({g.slice(nz, {0, 0}, {-1, 2}), box}, 1));
}

// Unique: the distinct values (or slices along `axis`) sorted, or in order of first occurrence;
// their first indices, the inverse map and the counts. A stable sort of the elements (a
// lexicographic one of the slices, by one stable argsort per key column from the last) puts
// equal ones together in input order; run starts and ends come from non_zero_indices.
void unique(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const std::vector<int64_t> xd = static_dims(c, x, "X");
  const bool sorted = c.attr_i("sorted", 1) != 0;
  const bool has_axis = c.has_attr("axis");
  const int64_t axis = has_axis ? norm_axis(c, c.attr_i("axis", 0), x.rank()) : 0;
  // rows [n, k]: the elements (k = 1) or the slices along axis, flattened.
  Tensor rows;
  int64_t n, k;
  if (!has_axis) {
    n = x.shape().num_elements();
    k = 1;
    rows = g.reshape(x, {n, 1});
  } else {
    std::vector<int64_t> perm = {axis};
    for (int64_t i = 0; i < x.rank(); ++i)
      if (i != axis) perm.push_back(i);
    n = xd[static_cast<size_t>(axis)];
    k = n ? x.shape().num_elements() / n : 0;
    rows = g.reshape(g.transpose(x, perm), {n, k});
  }
  if (n == 0 || k == 0) c.fail("X " + x.shape().str() + " has no elements to take unique values of");
  if (k > 4096)
    c.fail("slices of " + std::to_string(k) + " elements are over the limit 4096 (one sort per element)");
  // perm [n]: the stable lexicographic order of the rows.
  Tensor perm = g.arange(0, static_cast<double>(n), 1, DType::i64);
  for (int64_t j = k - 1; j >= 0; --j) {
    Tensor key = g.gather(g.reshape(g.slice(rows, {0, j}, {n, j + 1}), {n}), perm, 0);
    perm = g.gather(perm, g.cast(g.argsort(key, 0, false), DType::i64), 0);
  }
  Tensor srt = g.gather(rows, perm, 0);  // [n, k]
  Tensor differs;                        // [n - 1]: row i + 1 differs from row i
  if (n > 1)
    differs = g.reduce_any(g.not_equal(g.slice(srt, {1, 0}, {n, k}), g.slice(srt, {0, 0}, {n - 1, k})), {1});
  Tensor yes = g.constant(TensorData::full(Shape({1}), 1.0, DType::boolean));
  Tensor first = n > 1 ? g.concat({yes, differs}, 0) : yes;  // starts a run
  Tensor lastm = n > 1 ? g.concat({differs, yes}, 0) : yes;  // ends a run
  Tensor starts = g.reshape(g.non_zero_indices(first), {-1}),
         ends = g.reshape(g.non_zero_indices(lastm), {-1});
  Tensor counts = g.add(g.sub(ends, starts), g.scalar(1, DType::i64));
  Tensor firsts = g.gather(perm, starts, 0);  // first index of each value
  Tensor run_id = g.sub(g.cumsum(g.cast(first, DType::i64), 0), g.scalar(1, DType::i64));  // per sorted row
  Tensor inverse = g.scatter(g.constant(TensorData::zeros(Shape({n}), DType::i64)), perm, run_id, 0);
  if (!sorted) {  // the values in order of first occurrence
    Tensor by_first = g.cast(g.argsort(firsts, 0, false), DType::i64);
    Tensor rank = g.cast(g.argsort(by_first, 0, false), DType::i64);  // old run id -> new
    starts = g.gather(starts, by_first, 0);
    counts = g.gather(counts, by_first, 0);
    firsts = g.gather(firsts, by_first, 0);
    inverse = g.gather(rank, inverse, 0);
  }
  Tensor y = g.gather(srt, starts, 0);  // [u, k]
  if (!has_axis) {
    y = g.reshape(y, {-1});
  } else {
    std::vector<int64_t> shp = {-1};
    for (int64_t i = 0; i < x.rank(); ++i)
      if (i != axis) shp.push_back(xd[static_cast<size_t>(i)]);
    y = g.reshape(y, shp);
    if (axis != 0) {
      std::vector<int64_t> back;
      for (int64_t i = 1; i <= axis; ++i) back.push_back(i);
      back.push_back(0);
      for (int64_t i = axis + 1; i < x.rank(); ++i) back.push_back(i);
      y = g.transpose(y, back);
    }
  }
  c.out(0, y);
  c.out(1, firsts);
  c.out(2, inverse);
  c.out(3, counts);
}

}  // namespace

const std::vector<Converter>& dynamic_converters() {
  static const std::vector<Converter> t = {
      {"NonMaxSuppression", 10, kNewestOpset, non_max_suppression},
      {"Unique", 11, kNewestOpset, unique},
  };
  return t;
}

}  // namespace tg::onnx_import
