// Converters of the opset-27 ops that carry a recurrent state between decode steps:
// LinearAttention (linear, gated, delta and gated-delta recurrences) and CausalConvWithState
// (a causal depthwise 1-D convolution with its carried left context).
#include <cmath>
#include <functional>

#include "frontends/onnx/importer.h"

namespace tg::onnx_import {

namespace {

// Sequences up to this length run unrolled (one small graph per step); longer ones in a
// for_loop whose body reads step i with a gather and writes its output with a scatter.
constexpr int64_t kUnrollSteps = 64;

// [B, T, H * D] -> [B, H, T, D].
Tensor heads_first(Ctx& c, Tensor x, int64_t heads, const char* what) {
  const std::vector<int64_t> d = static_dims(c, x, what);
  if (x.rank() != 3) c.fail(std::string(what) + " must be of rank 3 (B, T, H*D), got " + x.shape().str());
  if (heads <= 0 || d[2] % heads)
    c.fail(std::string(what) + "'s last dim " + std::to_string(d[2]) + " is not divisible by its " +
           std::to_string(heads) + " heads (" + x.shape().str() + ")");
  return c.g.transpose(c.g.reshape(x, {d[0], d[1], heads, d[2] / heads}), {0, 2, 1, 3});
}

// The spec's sequential recurrence in f32, per step t: S *= exp(g_t) (gated); v_t = beta_t (v_t -
// S^T k_t) (delta); S += k_t v_t^T; o_t = scale q_t^T S, each KV head's state read by its
// q_num_heads / kv_num_heads query heads.
void linear_attention(Ctx& c) {
  Graph& g = c.g;
  const std::string rule = c.attr_s("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    c.fail("update_rule must be linear, gated, delta or gated_delta, not '" + rule + "'");
  const bool gating = rule == "gated" || rule == "gated_delta",
             delta = rule == "delta" || rule == "gated_delta";
  const int64_t hq = c.attr_i("q_num_heads", 0), hkv = c.attr_i("kv_num_heads", 0);
  if (hq <= 0 || hkv <= 0 || hq % hkv)
    c.fail("q_num_heads (" + std::to_string(hq) + ") must be a positive multiple of kv_num_heads (" +
           std::to_string(hkv) + ")");
  if (gating != c.has_input(4))
    c.fail("update_rule '" + rule + (gating ? "' requires" : "' forbids") + " the decay input");
  if (delta != c.has_input(5))
    c.fail("update_rule '" + rule + (delta ? "' requires" : "' forbids") + " the beta input");
  const DType out_t = c.in(0).dtype();
  auto f32 = [&](Tensor x) { return x.dtype() == DType::f32 ? x : g.cast(x, DType::f32); };
  Tensor q = f32(heads_first(c, c.in(0), hq, "query"));
  Tensor k = f32(heads_first(c, c.in(1), hkv, "key"));
  Tensor v = f32(heads_first(c, c.in(2), hkv, "value"));
  const std::vector<int64_t> qd = q.shape().dims(), kd = k.shape().dims(), vd = v.shape().dims();
  const int64_t b = qd[0], t = qd[2], dk = qd[3], dv = vd[3];
  if (kd[0] != b || kd[2] != t || kd[3] != dk || vd[0] != b || vd[2] != t)
    c.fail("query " + c.in(0).shape().str() + ", key " + c.in(1).shape().str() + " and value " +
           c.in(2).shape().str() + " disagree on batch, length or head size");
  const std::vector<int64_t> sd = {b, hkv, dk, dv};
  Tensor state = g.constant(TensorData::zeros(Shape(sd), DType::f32));
  DType state_t = out_t;
  if (c.has_input(3)) {
    if (c.in(3).shape() != Shape(sd))
      c.fail("past_state is " + c.in(3).shape().str() + ", expected " + Shape(sd).str());
    state_t = c.in(3).dtype();
    state = f32(c.in(3));
  }
  // decay -> [B, H_kv, T, 1 or d_k]; beta -> [B, H_kv or 1, T, 1].
  Tensor decay, beta;
  if (gating) {
    const std::vector<int64_t> gd = static_dims(c, c.in(4), "decay");
    if (gd.size() != 3 || gd[0] != b || gd[1] != t || (gd[2] != hkv && gd[2] != hkv * dk))
      c.fail("decay is " + c.in(4).shape().str() +
             ", expected [B, T, kv_num_heads] or [B, T, kv_num_heads * d_k]");
    decay = f32(heads_first(c, c.in(4), hkv, "decay"));
  }
  if (delta) {
    const std::vector<int64_t> bd = static_dims(c, c.in(5), "beta");
    if (bd.size() != 3 || bd[0] != b || bd[1] != t || (bd[2] != hkv && bd[2] != 1))
      c.fail("beta is " + c.in(5).shape().str() + ", expected [B, T, kv_num_heads] or [B, T, 1]");
    beta = f32(heads_first(c, c.in(5), bd[2], "beta"));
  }
  const float sattr = c.attr_f("scale", 0.0f);
  Tensor scale = g.scalar(sattr == 0.0f ? 1.0 / std::sqrt(static_cast<double>(dk)) : sattr, DType::f32);
  const int64_t group = hq / hkv;
  // One step of the recurrence in graph gb; at(x) reads step t's [B, H, 1, D] slice of x.
  auto advance = [&](Graph& gb, Tensor s, const std::function<Tensor(Tensor)>& at) {
    Tensor kt = at(k), vt = at(v);
    if (gating) {  // [B, H_kv, 1, X] -> [B, H_kv, X, 1], X = 1 or d_k: broadcast over d_v
      Tensor gt = at(decay);
      s = gb.mul(s, gb.exp(gb.reshape(gt, {b, hkv, gt.shape().dim(3), 1})));
    }
    if (delta) vt = gb.mul(at(beta), gb.sub(vt, gb.matmul(kt, s)));
    s = gb.add(s, gb.matmul(kt, vt, true, false));
    Tensor qt = gb.reshape(at(q), {b, hkv, group, dk});
    return std::pair{s, gb.reshape(gb.mul(gb.matmul(qt, s), scale), {b, hq, 1, dv})};
  };
  Tensor o;
  if (t <= kUnrollSteps) {
    std::vector<Tensor> outs;
    for (int64_t i = 0; i < t; ++i) {
      auto [s, oi] = advance(g, state, [&](Tensor x) {  // x[:, :, i:i+1, :]
        std::vector<int64_t> d = x.shape().dims(), lo(4, 0);
        lo[2] = i;
        d[2] = i + 1;
        return g.slice(x, lo, d);
      });
      state = s;
      outs.push_back(oi);
    }
    o = t == 1 ? outs[0] : g.concat(outs, 2);
  } else {
    require_size(c, static_cast<double>(b * hq) * static_cast<double>(t * dv), "the output");
    Tensor all = g.broadcast_to(g.scalar(0, DType::f32), {b, hq, t, dv});
    auto r = g.for_loop(g.scalar(static_cast<double>(t), DType::i32), {state, all},
                        [&](Graph& gb, Tensor i, std::vector<Tensor> a) {
                          Tensor idx = gb.reshape(gb.cast(i, DType::i64), {1});
                          auto [s, oi] = advance(gb, a[0], [&](Tensor x) { return gb.gather(x, idx, 2); });
                          return std::vector<Tensor>{s, gb.scatter(a[1], idx, oi, 2)};
                        });
    state = r[0];
    o = r[1];
  }
  o = g.reshape(g.transpose(o, {0, 2, 1, 3}), {b, t, hq * dv});
  c.out(0, o.dtype() == out_t ? o : g.cast(o, out_t));
  if (c.wants_output(1)) c.out(1, state_t == DType::f32 ? state : g.cast(state, state_t));
}

// padded = [past_state or zeros, input] along the length; y[.., l] = bias + sum_j w[c, 0, j]
// padded[.., l + j] (one multiply-add per tap); present_state = padded's last k - 1 positions.
void causal_conv_with_state(Ctx& c) {
  Graph& g = c.g;
  Tensor x = c.in(0), w = c.in(1);
  const std::string act = c.attr_s("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    c.fail("activation must be none, silu or swish, not '" + act + "'");
  const std::vector<int64_t> xd = static_dims(c, x, "input"), wd = static_dims(c, w, "weight");
  if (xd.size() != 3 || wd.size() != 3 || wd[0] != xd[1] || wd[1] != 1 || wd[2] < 1)
    c.fail("input must be [batch, channels, length] and weight [channels, 1, k]; got " + x.shape().str() +
           " and " + w.shape().str());
  const int64_t n = xd[0], ch = xd[1], len = xd[2], kk = wd[2];
  Tensor padded = x;
  if (kk > 1) {
    Tensor past;
    if (c.has_input(3)) {
      past = c.in(3);
      if (past.shape() != Shape({n, ch, kk - 1}))
        c.fail("past_state is " + past.shape().str() + ", expected " + Shape({n, ch, kk - 1}).str());
    } else {
      past = g.constant(TensorData::zeros(Shape({n, ch, kk - 1}), x.dtype()));
    }
    padded = g.concat({past, x}, 2);
  }
  // 16-bit floats accumulate, and go through the activation, in f32 (the reference's rounding).
  const bool narrow = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  auto wide = [&](Tensor v) { return narrow ? g.cast(v, DType::f32) : v; };
  auto back = [&](Tensor v) { return narrow ? g.cast(v, x.dtype()) : v; };
  Tensor xp = wide(padded), ww = wide(w), y;
  for (int64_t j = 0; j < kk; ++j) {
    Tensor tap = g.mul(g.slice(xp, {0, 0, j}, {n, ch, j + len}),
                       g.reshape(g.slice(ww, {0, 0, j}, {ch, 1, j + 1}), {ch, 1}));
    y = j == 0 ? tap : g.add(y, tap);
  }
  if (c.has_input(2)) y = bias_nchw(g, y, wide(c.in(2)));
  y = back(y);
  if (act != "none") y = back(g.silu(wide(y)));
  c.out(0, y);
  if (c.wants_output(1)) {
    const int64_t total = len + kk - 1;
    c.out(1, g.slice(padded, {0, 0, total - (kk - 1)}, {n, ch, total}));
  }
}

}  // namespace

const std::vector<Converter>& state_converters() {
  static const std::vector<Converter> t = {
      {"LinearAttention", 27, kNewestOpset, linear_attention},
      {"CausalConvWithState", 27, kNewestOpset, causal_conv_with_state},
  };
  return t;
}

}  // namespace tg::onnx_import
