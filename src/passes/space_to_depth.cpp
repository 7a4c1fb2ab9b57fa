#include "passes/space_to_depth.h"

#include <algorithm>

#include "ops/builder.h"
#include "ops/op_def.h"
#include "passes/rewrite.h"

namespace tg::detail {
namespace {

constexpr int64_t kMaxChannels = 7;  // from 8 on, cuDNN's tensor-core kernels apply as they are

// How one convolution maps onto its space-to-depth form; ok false when it does not apply.
struct Plan {
  bool ok = false;
  int64_t s = 0, C = 0, Cp = 0, K = 0;
  int64_t k[2]{}, kb[2]{};          // kernel, kernel in blocks of s
  int64_t before[2]{}, after[2]{};  // padding of x: the conv's own, then the rows the blocks need
  bool oihw = false;
};

// x: the NHWC input, wdims: the weights' dims in `d.weights_layout`.
Plan plan(const ConvDesc& d, const Shape& x, const std::vector<int64_t>& wdims) {
  Plan p;
  if (d.data_layout != Layout::nhwc || d.groups != 1 || !x.ranked() || !x.is_static() || x.rank() != 4 ||
      wdims.size() != 4)
    return p;
  if (d.weights_layout != Layout::hwio && d.weights_layout != Layout::oihw) return p;
  if (d.padding != PaddingStyle::explicit_ && d.padding != PaddingStyle::valid) return p;
  if (d.stride.size() != 2 || d.stride[0] != d.stride[1] || d.stride[0] < 2) return p;
  for (int64_t v : d.dilation)
    if (v != 1) return p;
  p.oihw = d.weights_layout == Layout::oihw;
  p.s = d.stride[0];
  p.k[0] = p.oihw ? wdims[2] : wdims[0];
  p.k[1] = p.oihw ? wdims[3] : wdims[1];
  p.C = p.oihw ? wdims[1] : wdims[2];
  p.K = p.oihw ? wdims[0] : wdims[3];
  if (p.C != x[3] || p.C > kMaxChannels || p.C < 1 || p.K < 1) return p;
  // Channels padded so that one block's s*s*Cp values are whole 16-byte vectors of 16-bit data.
  p.Cp = p.C;
  while ((p.s * p.s * p.Cp) % 8 != 0) ++p.Cp;
  for (int i = 0; i < 2; ++i) {
    const int64_t in = x[1 + i], k = p.k[i], s = p.s;
    const bool expl = d.padding == PaddingStyle::explicit_ && !d.explicit_padding.empty();
    if (expl && d.explicit_padding.size() != 4) return p;
    const int64_t pb = expl ? d.explicit_padding[2 * i] : 0, pe = expl ? d.explicit_padding[2 * i + 1] : 0;
    const int64_t span = in + pb + pe - k;
    if (span < 0 || k < 1) return p;
    const int64_t out = span / s + 1;
    p.kb[i] = (k + s - 1) / s;
    // Blocks out-1+kb of s rows from the padded start; rows past the conv's own end padding
    // meet only the zero taps; a negative `after` cuts off rows the conv never reads.
    const int64_t rows = s * (out - 1 + p.kb[i]);
    p.before[i] = pb;
    p.after[i] = rows - in - pb;
    if (in + p.after[i] < 1) return p;
  }
  p.ok = true;
  return p;
}

// x [N,H,W,C] -> [N,H'/s,W'/s,s*s*Cp].
Tensor fold_input(Graph& g, const Tensor& x, const Plan& p) {
  const Shape& xs = x.shape();
  Tensor xc = x;
  if (p.after[0] < 0 || p.after[1] < 0)
    xc = g.slice(x, {0, 0, 0, 0}, {xs[0], xs[1] + std::min<int64_t>(p.after[0], 0), xs[2] + std::min<int64_t>(p.after[1], 0), xs[3]});
  Tensor xp = g.pad(xc, {0, p.before[0], p.before[1], 0},
                    {0, std::max<int64_t>(p.after[0], 0), std::max<int64_t>(p.after[1], 0), p.Cp - p.C});
  const int64_t N = xs[0], Hb = (xs[1] + p.before[0] + p.after[0]) / p.s, Wb = (xs[2] + p.before[1] + p.after[1]) / p.s;
  Tensor r = g.reshape(xp, {N, Hb, p.s, Wb, p.s, p.Cp});
  return g.reshape(g.transpose(r, {0, 1, 3, 2, 4, 5}), {N, Hb, Wb, p.s * p.s * p.Cp});
}

// w (hwio or oihw) -> hwio [k'h, k'w, s*s*Cp, K].
Tensor fold_weights(Graph& g, Tensor w, const Plan& p) {
  if (p.oihw) w = g.transpose(w, {2, 3, 1, 0});
  Tensor wp = g.pad(w, {0, 0, 0, 0}, {p.s * p.kb[0] - p.k[0], p.s * p.kb[1] - p.k[1], p.Cp - p.C, 0});
  Tensor r = g.reshape(wp, {p.kb[0], p.s, p.kb[1], p.s, p.Cp, p.K});
  return g.reshape(g.transpose(r, {0, 2, 1, 3, 4, 5}), {p.kb[0], p.kb[1], p.s * p.s * p.Cp, p.K});
}

// The inverse of fold_weights for a gradient: [k'h, k'w, s*s*Cp, K] -> the weights' shape.
Tensor unfold_weights(Graph& g, const Tensor& dw, const Plan& p) {
  Tensor r = g.reshape(dw, {p.kb[0], p.kb[1], p.s, p.s, p.Cp, p.K});
  Tensor hw = g.reshape(g.transpose(r, {0, 2, 1, 3, 4, 5}), {p.s * p.kb[0], p.s * p.kb[1], p.Cp, p.K});
  Tensor cut = g.slice(hw, {0, 0, 0, 0}, {p.k[0], p.k[1], p.C, p.K});
  return p.oihw ? g.transpose(cut, {3, 2, 0, 1}) : cut;
}

ConvDesc folded_desc(const ConvDesc& d) {
  ConvDesc f = d;
  f.stride = {1, 1};
  f.dilation = {1, 1};
  f.padding = PaddingStyle::explicit_;
  f.explicit_padding = {0, 0, 0, 0};
  f.weights_layout = Layout::hwio;
  return f;
}

std::vector<Tensor> rewrite(Graph& g, const Node& n, const std::vector<Tensor>& in) {
  if (n.kind == OpKind::Conv2d) {
    const auto& d = std::get<ConvDesc>(n.attr);
    if (!in[1].shape().ranked() || !in[1].shape().is_static()) return {};
    Plan p = plan(d, in[0].shape(), in[1].shape().dims());
    if (!p.ok) return {};
    return {g.conv2d(fold_input(g, in[0], p), fold_weights(g, in[1], p), folded_desc(d))};
  }
  if (n.kind == OpKind::Conv2dWeightGrad) {  // inputs dy, x
    const auto& d = std::get<ConvGradDesc>(n.attr);
    Plan p = plan(d.conv, in[1].shape(), d.result_shape);
    if (!p.ok) return {};
    Tensor dw = g.conv2d_weight_grad(in[0], fold_input(g, in[1], p),
                                     Shape({p.kb[0], p.kb[1], p.s * p.s * p.Cp, p.K}), folded_desc(d.conv));
    return {unfold_weights(g, dw, p)};
  }
  return {};
}

}  // namespace

bool SpaceToDepthConv::run(Module& m) { return rewrite_nodes(m, {0}, rewrite); }

}  // namespace tg::detail
