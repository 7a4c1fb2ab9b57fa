// Converters of the ops ONNX added for transformer models in opsets 23 and 24: Attention,
// RMSNormalization, RotaryEmbedding, TensorScatter (a KV-cache update) and Swish, each
// decomposed into tgraph ops as the operator's reference function in the ONNX spec computes it.
#include <cmath>
#include <limits>
#include <optional>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// y = x / sqrt(mean(x^2 over the dims from axis on) + epsilon) * scale, in f32 for narrower
// floats when stash_type is 1 (the default).
void rms_norm(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const int64_t axis = norm_axis(c, c.attr_i("axis", -1), x.rank());
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < x.rank(); ++i) axes.push_back(i);
  Tensor xs = x;
  if (x.dtype() != DType::f64 && x.dtype() != DType::f32 && c.attr_i("stash_type", 1) == 1) xs = g.cast(x, DType::f32);
  Tensor ms = g.reduce_mean(g.square(xs), axes, true);
  Tensor n = g.mul(xs, g.rsqrt(g.add(ms, scalar_like(g, c.attr_f("epsilon", 1e-5f), ms))));
  c.out(0, g.mul(g.cast(n, x.dtype()), c.in(1)));
}

void swish(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  c.out(0, g.mul(x, g.sigmoid(g.mul(x, scalar_like(g, c.attr_f("alpha", 1.0f), x)))));
}

// present = past with update written along `axis` from write_indices[b] (0 without them) for
// each batch b, modulo the cache length in circular mode.
void tensor_scatter(Ctx& c) {
  Graph& g = c.g;
  Tensor past = c.in(0), upd = c.in(1);
  if (past.rank() < 2 || upd.rank() != past.rank()) c.fail("past_cache and update need the same rank, at least 2");
  const int64_t axis = norm_axis(c, c.attr_i("axis", -2), past.rank());
  if (axis == 0) c.fail("axis must not be the batch dim");
  const std::string mode = c.attr_s("mode", "linear");
  if (mode != "linear" && mode != "circular") c.fail("mode must be linear or circular, not '" + mode + "'");
  const std::vector<int64_t> ud = static_dims(c, upd, "update"), pd = static_dims(c, past, "past_cache");
  const int64_t rank = past.rank();
  std::vector<int64_t> along(static_cast<size_t>(rank), 1), per_batch(static_cast<size_t>(rank), 1);
  along[static_cast<size_t>(axis)] = ud[static_cast<size_t>(axis)];
  per_batch[0] = ud[0];
  Tensor idx = g.reshape(g.arange(0, static_cast<double>(ud[static_cast<size_t>(axis)]), 1, DType::i64), along);
  if (c.has_input(2)) idx = g.add(idx, g.reshape(g.cast(c.in(2), DType::i64), per_batch));
  if (mode == "circular") idx = g.floor_mod(idx, g.scalar(static_cast<double>(pd[static_cast<size_t>(axis)]), DType::i64));
  c.out(0, g.scatter_along_axis(past, g.broadcast_to(idx, ud), upd, axis));
}

// The spec's reference: x as [batch, seq, heads, head] (from [batch, heads, seq, head], or
// [batch, seq, hidden] with num_heads), its first rotary_embedding_dim features rotated by the
// cos / sin caches (gathered at position_ids when given), halves or interleaved pairs.
void rotary_embedding(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0);
  const std::vector<int64_t> xd = static_dims(c, x, "X");
  if (x.rank() != 3 && x.rank() != 4) c.fail("X must be of rank 3 or 4, not " + std::to_string(x.rank()));
  if (x.rank() == 4) {
    x = g.transpose(x, {0, 2, 1, 3});
  } else {
    const int64_t heads = c.attr_i("num_heads", 0);
    if (heads <= 0 || xd[2] % heads) c.fail("a rank-3 X needs num_heads dividing its hidden size");
    x = g.reshape(x, {xd[0], xd[1], heads, xd[2] / heads});
  }
  const std::vector<int64_t> d = x.shape().dims();  // [batch, seq, heads, head]
  const int64_t head = d[3];
  int64_t rot = c.attr_i("rotary_embedding_dim", 0);
  if (rot == 0) rot = head;
  if (rot < 2 || rot > head || rot % 2) c.fail("rotary_embedding_dim must be even and at most the head size");
  Tensor cosv = c.in(1), sinv = c.in(2);
  if (c.has_input(3)) {
    Tensor pos = g.cast(c.in(3), DType::i64);
    cosv = g.gather(cosv, pos, 0);
    sinv = g.gather(sinv, pos, 0);
  }
  if (cosv.rank() != 3 || cosv.shape().dim(-1) != rot / 2 || sinv.shape() != cosv.shape())
    c.fail("the cos / sin caches must give [batch, seq, rotary_embedding_dim / 2]");
  cosv = g.expand_dims(g.cast(cosv, x.dtype()), {2});
  sinv = g.expand_dims(g.cast(sinv, x.dtype()), {2});
  Tensor xr = rot == head ? x : g.slice(x, {0, 0, 0, 0}, {d[0], d[1], d[2], rot});
  const bool interleaved = c.attr_i("interleaved", 0) != 0;
  Tensor x1, x2;
  if (interleaved) {
    x1 = g.strided_slice(xr, {.begin = {0, 0, 0, 0}, .end = {d[0], d[1], d[2], rot}, .strides = {1, 1, 1, 2}});
    x2 = g.strided_slice(xr, {.begin = {0, 0, 0, 1}, .end = {d[0], d[1], d[2], rot}, .strides = {1, 1, 1, 2}});
  } else {
    auto halves = g.split(xr, {rot / 2, rot / 2}, 3);
    x1 = halves[0], x2 = halves[1];
  }
  Tensor real = g.sub(g.mul(cosv, x1), g.mul(sinv, x2));
  Tensor imag = g.add(g.mul(sinv, x1), g.mul(cosv, x2));
  Tensor y = interleaved ? g.reshape(g.concat({g.expand_dims(real, {4}), g.expand_dims(imag, {4})}, 4),
                                     {d[0], d[1], d[2], rot})
                         : g.concat({real, imag}, 3);
  if (rot < head) y = g.concat({y, g.slice(x, {0, 0, 0, rot}, {d[0], d[1], d[2], head})}, 3);
  c.out(0, c.in(0).rank() == 4 ? g.transpose(y, {0, 2, 1, 3}) : g.reshape(y, xd));
}

// [batch, seq, heads * head] -> [batch, heads, seq, head].
Tensor split_heads(Ctx& c, Tensor x, int64_t heads, const char* what) {
  const std::vector<int64_t> d = static_dims(c, x, what);
  if (heads <= 0 || d[2] % heads) c.fail(std::string("a rank-3 ") + what + " needs q_num_heads / kv_num_heads dividing its hidden size");
  return c.g.transpose(c.g.reshape(x, {d[0], d[1], heads, d[2] / heads}), {0, 2, 1, 3});
}

// Attention-23/24: softmax((Q sqrt(scale)) (K sqrt(scale))^T [softcapped] + bias) V, with the
// bias from attn_mask (bool: -inf where false; float: added), is_causal (-inf above the diagonal
// shifted by the past's length), nonpad_kv_seqlen (-inf past each batch's length); K and V
// after the past ones (present_key / present_value), their heads repeated for grouped queries.
void attention(Ctx& c) {
  Graph& g = c.g;
  Tensor q = c.in(0), k = c.in(1), v = c.in(2);
  if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4))
    c.fail("Q, K and V must all be of rank 3 or all of rank 4");
  const bool three = q.rank() == 3;
  if (three) {
    q = split_heads(c, q, c.attr_i("q_num_heads", 0), "Q");
    k = split_heads(c, k, c.attr_i("kv_num_heads", 0), "K");
    v = split_heads(c, v, c.attr_i("kv_num_heads", 0), "V");
  }
  const std::vector<int64_t> qd = static_dims(c, q, "Q");
  if (c.has_input(4) != c.has_input(5)) c.fail("past_key and past_value go together");
  const int64_t past = c.has_input(4) ? static_dims(c, c.in(4), "past_key")[2] : 0;
  if (c.has_input(4)) {
    k = g.concat({c.in(4), k}, 2);
    v = g.concat({c.in(5), v}, 2);
  }
  c.out(1, k);
  c.out(2, v);
  const std::vector<int64_t> kd = static_dims(c, k, "K");
  const int64_t sq = qd[2], skv = kd[2];
  const DType t = q.dtype();
  const double inf = std::numeric_limits<double>::infinity();
  // The bias, [sq, skv] or broadcasting to [batch, heads, sq, skv]; none when nothing masks.
  std::optional<Tensor> bias;
  auto add_bias = [&](Tensor b) { bias = bias ? g.add(*bias, b) : b; };
  if (c.has_input(3)) {
    Tensor m = c.in(3);
    if (m.dtype() == DType::boolean) m = g.select(m, scalar_like(g, 0, q), scalar_like(g, -inf, q));
    else m = g.cast(m, t);
    const int64_t short_by = skv - m.shape().dim(-1);
    if (short_by < 0) c.fail("attn_mask is longer than the key sequence");
    if (short_by > 0) {  // the missing columns are masked out
      std::vector<int64_t> before(static_cast<size_t>(m.rank()), 0), after(before);
      after.back() = short_by;
      m = g.pad(m, before, after, PadMode::constant, -inf);
    }
    add_bias(m);
  }
  if (c.attr_i("is_causal", 0)) {
    Tensor i = g.reshape(g.arange(0, static_cast<double>(sq), 1, DType::i64), {sq, 1});
    Tensor j = g.reshape(g.arange(0, static_cast<double>(skv), 1, DType::i64), {1, skv});
    Tensor above = g.greater(g.sub(j, g.scalar(static_cast<double>(past), DType::i64)), i);
    add_bias(g.select(above, scalar_like(g, -inf, q), scalar_like(g, 0, q)));
  }
  if (c.has_input(6)) {
    Tensor len = g.reshape(g.cast(c.in(6), DType::i64), {qd[0], 1, 1, 1});
    Tensor j = g.reshape(g.arange(0, static_cast<double>(skv), 1, DType::i64), {1, 1, 1, skv});
    add_bias(g.select(g.less(j, len), scalar_like(g, 0, q), scalar_like(g, -inf, q)));
  }
  const int64_t hq = qd[1], hkv = kd[1];
  if (hq != hkv) {  // grouped queries: each key / value head serves hq / hkv query heads in a row
    if (hkv <= 0 || hq % hkv) c.fail("q_num_heads must be a multiple of kv_num_heads");
    auto repeat = [&](Tensor x) {
      std::vector<int64_t> d = x.shape().dims();
      Tensor e = g.broadcast_to(g.expand_dims(x, {2}), {d[0], hkv, hq / hkv, d[2], d[3]});
      return g.reshape(e, {d[0], hq, d[2], d[3]});
    };
    k = repeat(k);
    v = repeat(v);
  }
  const double scale = c.has_attr("scale") ? c.attr_f("scale", 1.0f) : 1.0 / std::sqrt(static_cast<double>(qd[3]));
  Tensor rs = scalar_like(g, std::sqrt(scale), q);
  Tensor qk = g.matmul(g.mul(q, rs), g.mul(k, rs), false, true);
  const double cap = c.attr_f("softcap", 0.0f);
  if (cap > 0) qk = g.mul(g.tanh(g.div(qk, scalar_like(g, cap, qk))), scalar_like(g, cap, qk));
  Tensor biased = bias ? g.add(qk, *bias) : qk;
  Tensor s = biased;
  if (const int64_t p = c.attr_i("softmax_precision", 0)) s = g.cast(s, dtype_from_onnx(static_cast<int32_t>(p)));
  Tensor sm = g.softmax(s, -1);
  const int64_t mode = c.attr_i("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) c.fail("qk_matmul_output_mode must be 0 to 3");
  c.out(3, g.cast(mode == 2 ? biased : mode == 3 ? sm : qk, t));
  Tensor y = g.cast(g.matmul(sm, g.cast(v, sm.dtype())), t);
  if (three) {
    const std::vector<int64_t> yd = y.shape().dims();
    y = g.reshape(g.transpose(y, {0, 2, 1, 3}), {yd[0], yd[2], yd[1] * yd[3]});
  }
  c.out(0, y);
}

}  // namespace

const std::vector<Converter>& llm_converters() {
  static const std::vector<Converter> t = {
      {"Attention", 23, kNewestOpset, attention},
      {"RMSNormalization", 23, kNewestOpset, rms_norm},
      {"RotaryEmbedding", 23, kNewestOpset, rotary_embedding},
      {"TensorScatter", 24, kNewestOpset, tensor_scatter},
      {"Swish", 24, kNewestOpset, swish},
  };
  return t;
}

}  // namespace tg::onnx_import
