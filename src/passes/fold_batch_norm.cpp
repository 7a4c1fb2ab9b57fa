#include "passes/fold_batch_norm.h"

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

#include "core/element.h"
#include "passes/fold_memo.h"
#include "passes/rewrite.h"

namespace tg::detail {
namespace {

// The constant data of value v, or null.
const TensorData* constant_of(const GraphImpl& g, int32_t v) {
  const int32_t p = g.values[static_cast<size_t>(v)].node;
  if (p < 0) return nullptr;
  const Node& n = g.nodes[static_cast<size_t>(p)];
  return n.kind == OpKind::Constant && !n.data.empty() ? &n.data : nullptr;
}

// w scaled by s[c] along its output-channel axis (element i's c is (i / inner) % C), in its own
// type, each product in float or double and rounded once: the per-element accessors (through
// double) took 0.7 s for ResNet-50's filters. `load` / `store` read and write one element.
template <class T, class Load, class Store>
TensorData scaled(const TensorData& w, const std::vector<double>& s, int64_t inner, Load load, Store store) {
  if (w.num_elements() == 0 || s.empty() || inner <= 0) return w.clone();  // nothing to scale
  TensorData out(w.shape(), w.dtype());
  const T* src = w.ptr<T>();
  T* dst = out.ptr<T>();
  const int64_t C = static_cast<int64_t>(s.size()), rows = w.num_elements() / inner;
  // Threaded: a half filter's conversions cost ~15 ns an element in software (ResNet-50 f16:
  // 0.4 s of its first compile on one core).
#pragma omp parallel for schedule(static) if (rows * inner > (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r) {  // row r: output channel r % C
    const double sc = s[static_cast<size_t>(r % C)];
    for (int64_t k = r * inner, end = k + inner; k < end; ++k) dst[k] = store(load(src[k]) * sc);
  }
  return out;
}

TensorData scaled_filters(const TensorData& w, const std::vector<double>& s, int64_t inner) {
  const auto same = [](auto v) { return v; };
  switch (w.dtype()) {
    case DType::f32: return scaled<float>(w, s, inner, same, [](double v) { return static_cast<float>(v); });
    case DType::f64: return scaled<double>(w, s, inner, same, same);
    case DType::f16:
      return scaled<uint16_t>(w, s, inner, [](uint16_t h) { return static_cast<double>(half_to_float(h)); },
                              [](double v) { return float_to_half(static_cast<float>(v)); });
    default:  // bf16
      return scaled<uint16_t>(w, s, inner, [](uint16_t h) { return static_cast<double>(bf16_to_float(h)); },
                              [](double v) { return float_to_bf16(static_cast<float>(v)); });
  }
}

// The batch norm's per-channel scale gamma / sqrt(var + eps) and shift beta - mean * scale, in
// double, read through the parameters' own type (one switch per tensor: at() per element took
// 30% of a ResNet-50 copy's fold).
void scale_shift(const TensorData& mean, const TensorData& var, const TensorData& gamma, const TensorData& beta,
                 double epsilon, std::vector<double>& s, std::vector<double>& shift) {
  std::vector<double> m(s.size()), v(s.size()), g(s.size()), b(s.size());
  const std::pair<const TensorData*, std::vector<double>*> reads[] = {{&mean, &m}, {&var, &v}, {&gamma, &g}, {&beta, &b}};
  for (const auto& [t, to] : reads)
    for (size_t c = 0; c < s.size(); ++c) (*to)[c] = load_element(t->data(), t->dtype(), static_cast<int64_t>(c));
  for (size_t c = 0; c < s.size(); ++c) {
    s[c] = g[c] / std::sqrt(v[c] + epsilon);
    shift[c] = b[c] - m[c] * s[c];
  }
}

// The shift as a [C] constant of `dt`.
TensorData column(const std::vector<double>& values, DType dt) {
  TensorData out(Shape{static_cast<int64_t>(values.size())}, dt);
  for (size_t c = 0; c < values.size(); ++c) store_element(out.data(), dt, static_cast<int64_t>(c), values[c]);
  return out;
}

// What a fold of w depends on beyond w's bytes (FoldMemo's step): w's type, the axis, epsilon
// (its exact bits) and the batch norm's parameters, by a hash of their bytes.
std::string fold_step(const TensorData& w, const std::vector<const TensorData*>& params, double epsilon,
                      int64_t o_axis) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, a word at a time
  for (const TensorData* t : params) {
    const auto* b = static_cast<const unsigned char*>(t->data());
    const size_t n = t->nbytes();
    size_t i = 0;
    for (uint64_t w; i + 8 <= n; i += 8) {
      std::memcpy(&w, b + i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  char eps[32];
  std::snprintf(eps, sizeof eps, "%a", epsilon);
  return "fold_batch_norm " + w.type().str() + " axis=" + std::to_string(o_axis) + " eps=" + eps + " params=" +
         std::to_string(h);
}

}  // namespace

bool FoldBatchNorm::run(Module& m) {
  GraphImpl& gi = m.graph;
  // Readers of each value (any block) and the targets: the convolution's result must have the
  // batch norm as its only reader.
  std::vector<int> reads(gi.values.size(), 0);
  for (const Node& n : gi.nodes)
    for (int32_t v : n.inputs) ++reads[static_cast<size_t>(v)];
  for (const Block& b : gi.blocks)
    for (int32_t v : b.results) ++reads[static_cast<size_t>(v)];
  for (int32_t v : m.targets) ++reads[static_cast<size_t>(v)];

  return rewrite_nodes(m, [&](Graph& g, const Node& bn, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const GraphImpl& G = g.impl();
    if (bn.kind != OpKind::BatchNorm || in.size() != 5 || bn.outputs.size() != 1) return {};
    const int32_t y = bn.inputs[0];
    const int32_t cp = G.values[static_cast<size_t>(y)].node;
    if (cp < 0 || y >= static_cast<int32_t>(reads.size()) || reads[static_cast<size_t>(y)] != 1) return {};
    const Node& conv = G.nodes[static_cast<size_t>(cp)];
    if (conv.kind != OpKind::Conv2d || conv.inputs.size() != 2 || !conv.control_deps.empty()) return {};
    const auto& cd = std::get<ConvDesc>(conv.attr);
    const auto& nd = std::get<NormDesc>(bn.attr);
    const TensorType& yt = G.type(y);
    if (!yt.shape.ranked() || yt.shape.rank() != 4) return {};
    int64_t channel;
    if (cd.data_layout == Layout::nchw) channel = 1;
    else if (cd.data_layout == Layout::nhwc) channel = 3;
    else return {};
    if ((nd.axis < 0 ? nd.axis + 4 : nd.axis) != channel) return {};
    int64_t o_axis;
    if (cd.weights_layout == Layout::oihw) o_axis = 0;
    else if (cd.weights_layout == Layout::hwio) o_axis = 3;
    else return {};
    const TensorData* w = constant_of(G, conv.inputs[1]);
    const TensorData *mean = constant_of(G, bn.inputs[1]), *var = constant_of(G, bn.inputs[2]),
                     *gamma = constant_of(G, bn.inputs[3]), *beta = constant_of(G, bn.inputs[4]);
    if (!w || !mean || !var || !gamma || !beta) return {};
    const DType dt = w->dtype();
    // Half filters too: the scale is computed in double and each product rounded once, as
    // PyTorch's own conv-bn folding does in the filters' type. Unfolded, a half batch norm is
    // decomposed, its scale computed in half, and a dynamic executable's copy per size carried
    // its ~800 nodes through every pass (ResNet-50 f16: 8 ms of a copy's 14 on the H200's
    // host; session 40).
    if (dt != DType::f32 && dt != DType::f64 && dt != DType::f16 && dt != DType::bf16) return {};
    const int64_t C = w->shape().dims()[static_cast<size_t>(o_axis)];
    for (const TensorData* t : {mean, var, gamma, beta})
      if (t->num_elements() != C || t->dtype() != dt) return {};
    if (G.type(bn.outputs[0]).dtype != dt || G.type(conv.inputs[0]).dtype != dt) return {};

    std::vector<double> s(static_cast<size_t>(C)), bias(static_cast<size_t>(C));
    scale_shift(*mean, *var, *gamma, *beta, nd.epsilon, s, bias);
    // Filters scaled along their output-channel axis (stride: the product of the dims after it).
    const auto& wd = w->shape().dims();
    int64_t inner = 1;
    for (size_t i = static_cast<size_t>(o_axis) + 1; i < wd.size(); ++i) inner *= wd[i];
    // A dynamic executable's copy per size folds the same filters again: remembered by the
    // filters' buffer (fold_memo.h), the copies share the scaled ones.
    const std::string step = fold_step(*w, {mean, var, gamma, beta}, nd.epsilon, o_axis);
    TensorData w2;
    if (!FoldMemo::get().find(*w, step, w2)) {
      w2 = scaled_filters(*w, s, inner);
      FoldMemo::get().add(*w, step, w2);
    }
    FoldKeep::note(w2.storage());  // kept by a dynamic executable for its copies (fold_memo.h)
    const TensorData b = column(bias, dt);

    // Copies first: adding nodes may move the graph's node storage (conv, cd point into it).
    const ConvDesc desc = cd;
    const Tensor x(&g.impl(), conv.inputs[0]);
    Tensor filters = g.constant(w2);
    Tensor folded = g.conv2d(x, filters, desc);
    // NCHW: the bias as ONNX importers write it, a [1, C, 1, 1] view of [C] (the channels-last
    // pass moves such a view past its transposes; a [C, 1, 1] constant it would not).
    Tensor bias_t = g.constant(b);
    if (channel == 1) bias_t = g.reshape(bias_t, {1, C, 1, 1});
    return {g.add(folded, bias_t)};
  });
}

}  // namespace tg::detail
