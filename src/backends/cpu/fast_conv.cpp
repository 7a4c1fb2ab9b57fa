// Fast f32 conv2d through oneDNN's convolution_forward. The user's tensors are described as
// they lie (nhwc / nchw activations; hwio / oihw weights as strides over oneDNN's
// [groups,] O, I, kh, kw order); the primitive picks its own layouts and reorders convert in
// and out where they differ. Padding is computed exactly as the inference rule does
// (src/ops/infer_conv.cpp): same = ceil(in / stride) outputs, the odd unit after (same) or
// before (same_lower).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>
#include <mutex>
#include <optional>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/packed_weights.h"
#include "backends/cpu/kernels.h"
#include "core/env.h"

namespace tg::detail::fast {
namespace {

using dnnl::memory;

struct ConvEntry {
  dnnl::convolution_forward prim;
  memory::desc user_src, user_wei, user_dst;  // the tensors as tgraph stores them
  memory::desc src, wei, dst;                 // what the primitive wants
  std::optional<dnnl::reorder> src_in, wei_in, dst_out, dst_in;  // dst_in: a sum's operand
  memory::dims dst_shape;                     // tgraph's output dims
  memory::desc scratch;                       // per-execution scratchpad (thread safety)
  std::vector<memory::desc> post_src1;        // per post-op: a binary op's operand, else empty
  int sum = -1;                               // the post-op that is oneDNN's sum, if any
  bool bias = false;                          // post-op 0 is the primitive's bias
};

PrimitiveCache<ConvEntry>& cache() {
  static PrimitiveCache<ConvEntry> c;
  return c;
}

// TGRAPH_CPU_CONV_PLAIN=1 keeps activations in the user's layout (no reorders of src/dst).
// Otherwise the primitive chooses: on AVX-512 it keeps nhwc and reorders nchw to nhwc and back,
// except for an unpadded 1x1 stride-1 conv, which on nchw is one GEMM per image and is faster
// in place than after two reorders (measured: bench/RESULTS.md).
bool plain_env() {
  static const bool plain = env_flag("TGRAPH_CPU_CONV_PLAIN");
  return plain;
}

// The operand of a binary post-op as oneDNN's logical (N, C, H, W) dims over its own dense
// memory: rank <= 4, right-aligned to the result, a scalar, per channel or the result's own
// dims (for a sum); nullopt otherwise.
std::optional<memory::desc> operand_desc(const TensorData& t, const memory::dims& dst_dims, bool last) {
  if (t.dtype() != DType::f32 || t.shape().rank() > 4) return std::nullopt;
  std::vector<int64_t> d(4, 1);
  const auto& td = t.shape().dims();
  std::copy(td.begin(), td.end(), d.begin() + static_cast<long>(4 - td.size()));
  std::vector<int64_t> st(4, 1);  // row-major strides in tgraph's order
  for (int i = 2; i >= 0; --i) st[static_cast<size_t>(i)] = st[static_cast<size_t>(i) + 1] * d[static_cast<size_t>(i) + 1];
  // tgraph order -> oneDNN's N, C, H, W
  const int map[4] = {0, last ? 3 : 1, last ? 1 : 2, last ? 2 : 3};
  memory::dims dims(4), strides(4);
  for (int i = 0; i < 4; ++i) {
    dims[static_cast<size_t>(i)] = d[static_cast<size_t>(map[i])];
    strides[static_cast<size_t>(i)] = st[static_cast<size_t>(map[i])];
    if (dims[static_cast<size_t>(i)] != 1 && dims[static_cast<size_t>(i)] != dst_dims[static_cast<size_t>(i)])
      return std::nullopt;
  }
  const bool scalar_or_channel = dims[0] == 1 && dims[2] == 1 && dims[3] == 1;
  if (!scalar_or_channel && dims != dst_dims) return std::nullopt;
  return memory::desc(dims, memory::data_type::f32, strides);
}

}  // namespace


bool conv2d(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out, const GraphImpl* g,
            const std::vector<PostOp>* post) {
  if (in.size() != 2 || in[0].dtype() != DType::f32 || in[1].dtype() != DType::f32) return false;
  const auto* d = std::get_if<ConvDesc>(&n.attr);
  if (!d) return false;
  const auto &xd = in[0].shape().dims(), &wd = in[1].shape().dims();
  if (xd.size() != 4 || wd.size() != 4) return false;
  bool last;
  if (d->data_layout == Layout::nhwc) last = true;
  else if (d->data_layout == Layout::nchw) last = false;
  else return false;
  bool sfirst;
  if (d->weights_layout == Layout::hwio) sfirst = true;
  else if (d->weights_layout == Layout::oihw) sfirst = false;
  else return false;
  if (!d->output_padding.empty() &&
      std::any_of(d->output_padding.begin(), d->output_padding.end(), [](int64_t v) { return v != 0; }))
    return false;

  const int64_t N = xd[0], C = last ? xd[3] : xd[1];
  const int64_t sp[2] = {last ? xd[1] : xd[2], last ? xd[2] : xd[3]};
  const int64_t O = sfirst ? wd[3] : wd[0], I = sfirst ? wd[2] : wd[1];
  const int64_t k[2] = {sfirst ? wd[0] : wd[2], sfirst ? wd[1] : wd[3]};
  const int64_t G = d->groups;
  if (G < 1 || C % G != 0 || O % G != 0 || I * G != C) return false;
  for (int64_t v : {N, C, sp[0], sp[1], O, I, k[0], k[1]})
    if (v <= 0) return false;
  auto two = [](const std::vector<int64_t>& v, int64_t dflt, int64_t out[2]) {
    if (v.empty()) {
      out[0] = out[1] = dflt;
      return true;
    }
    if (v.size() != 2 || v[0] < 1 || v[1] < 1) return false;
    out[0] = v[0];
    out[1] = v[1];
    return true;
  };
  int64_t stride[2], dil[2];
  if (!two(d->stride, 1, stride) || !two(d->dilation, 1, dil)) return false;

  int64_t pl[2], pr[2], os[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t ke = (k[i] - 1) * dil[i] + 1;
    switch (d->padding) {
      case PaddingStyle::explicit_:
        if (d->explicit_padding.empty()) {
          pl[i] = pr[i] = 0;
        } else {
          if (d->explicit_padding.size() != 4) return false;
          pl[i] = d->explicit_padding[2 * i];
          pr[i] = d->explicit_padding[2 * i + 1];
          if (pl[i] < 0 || pr[i] < 0) return false;
        }
        break;
      case PaddingStyle::valid:
        pl[i] = pr[i] = 0;
        break;
      case PaddingStyle::same:
      case PaddingStyle::same_lower: {
        const int64_t o = (sp[i] + stride[i] - 1) / stride[i];
        const int64_t total = std::max<int64_t>((o - 1) * stride[i] + ke - sp[i], 0);
        pl[i] = d->padding == PaddingStyle::same ? total / 2 : (total + 1) / 2;
        pr[i] = total - pl[i];
        break;
      }
      default:
        return false;
    }
    const int64_t span = sp[i] + pl[i] + pr[i] - ke;
    if (span < 0) return false;
    os[i] = span / stride[i] + 1;
    // A window must start inside the input or its padding-before, as oneDNN checks.
    if (pl[i] >= ke || pr[i] >= ke) {
      // still valid math (windows of only padding give 0), but keep oneDNN on ground it owns
      return false;
    }
  }

  const bool pointwise = k[0] == 1 && k[1] == 1 && stride[0] == 1 && stride[1] == 1 && pl[0] == 0 &&
                         pl[1] == 0 && pr[0] == 0 && pr[1] == 0;
  const bool plain = plain_env() || (!last && pointwise);
  std::vector<int64_t> key{last, sfirst, G, N, C, sp[0], sp[1], O, k[0], k[1], stride[0], stride[1],
                           dil[0], dil[1], pl[0], pl[1], pr[0], pr[1], plain};
  // Post-ops: each one's kind, parameter and operand dims are part of the key.
  const memory::dims dst_dims{N, O, os[0], os[1]};
  std::vector<std::optional<memory::desc>> operands;
  int sum = -1;
  for (const PostOp& p : post ? *post : std::vector<PostOp>{}) {
    if (!post_op_supported(p.kind)) return false;
    const bool unary = post_is_unary(p.kind);
    if (unary == (p.operand != nullptr)) return false;
    operands.push_back(unary ? std::nullopt : operand_desc(*p.operand, dst_dims, last));
    if (!unary && !operands.back()) return false;
    if (!unary && operands.back()->dims() == dst_dims) {
      if (p.kind != OpKind::Add || sum >= 0) return false;
      sum = static_cast<int>(operands.size()) - 1;
    }
  }
  // A first add of one value per output channel is the convolution's own bias (every
  // implementation takes one; Winograd's take no binary post-op).
  const bool bias = post && !post->empty() && (*post)[0].kind == OpKind::Add && operands[0] &&
                    operands[0]->dims() == memory::dims{1, O, 1, 1} && sum != 0;
  key.push_back(bias);
  // Winograd only for constant weights, packed once: its weight transform took 27 ms for a
  // 512x512x3x3 filter, per call where the weights change (a training step: Keras ResNet-50
  // through the TensorFlow plugin spent 0.87 s of a 1 s step in it).
  const bool no_winograd = env_flag("TGRAPH_CPU_NO_WINOGRAD") || !(g && constant_input(*g, n, in, 1));
  key.push_back(no_winograd);
  for (size_t i = 0; post && i < post->size(); ++i) {
    post_key(key, (*post)[i]);
    if (operands[i])
      for (int64_t v : operands[i]->dims()) key.push_back(v);
  }
  auto e = cache().get(key, [&] {
    using tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    auto entry = std::make_shared<ConvEntry>();
    const tag act = last ? tag::nhwc : tag::nchw;
    entry->user_src = memory::desc({N, C, sp[0], sp[1]}, f32, act);
    entry->user_dst = memory::desc({N, O, os[0], os[1]}, f32, act);
    entry->dst_shape = last ? memory::dims{N, os[0], os[1], O} : memory::dims{N, O, os[0], os[1]};
    // Weights element (g, o, i, kh, kw), o within the group, lies at:
    //   hwio: ((kh * KW + kw) * I + i) * O + g * OG + o
    //   oihw: (((g * OG + o) * I + i) * KH + kh) * KW + kw
    const int64_t OG = O / G, KH = k[0], KW = k[1];
    memory::dims wdims, wstr;
    if (sfirst) {
      wdims = {OG, I, KH, KW};
      wstr = {1, O, KW * I * O, I * O};
      if (G > 1) {
        wdims.insert(wdims.begin(), G);
        wstr.insert(wstr.begin(), OG);
      }
    } else {
      wdims = {OG, I, KH, KW};
      wstr = {I * KH * KW, KH * KW, KW, 1};
      if (G > 1) {
        wdims.insert(wdims.begin(), G);
        wstr.insert(wstr.begin(), OG * I * KH * KW);
      }
    }
    entry->user_wei = memory::desc(wdims, f32, wstr);
    memory::desc src_any({N, C, sp[0], sp[1]}, f32, plain ? act : tag::any);
    memory::desc dst_any({N, O, os[0], os[1]}, f32, plain ? act : tag::any);
    memory::desc wei_any(wdims, f32, tag::any);
    const memory::desc bias_desc = bias ? memory::desc({O}, f32, tag::a) : memory::desc();
    auto conv_desc = [&](dnnl::algorithm alg) {
      return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_any, wei_any, bias_desc,
                                             dst_any, {stride[0], stride[1]}, {dil[0] - 1, dil[1] - 1},
                                             {pl[0], pl[1]}, {pr[0], pr[1]});
    };
    auto& eng = dnnl_cpu_engine();
    // A scratchpad per execution: with oneDNN's shared one, concurrent runs of one primitive
    // were seen to hang (see fast_conv_grad.cpp).
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (post) {
      dnnl::post_ops po;
      entry->bias = bias;
      if (bias) entry->post_src1.emplace_back();
      for (size_t i = bias ? 1 : 0; i < post->size(); ++i) {
        if (static_cast<int>(i) == sum) {
          po.append_sum(1.f);
          entry->post_src1.emplace_back();
          entry->sum = sum;
        } else {
          entry->post_src1.push_back(operands[i] ? *operands[i] : memory::desc());
          append_post_op(po, (*post)[i], entry->post_src1.back());
        }
      }
      attr.set_post_ops(po);
    }
    // 3x3 stride-1 windows through Winograd where oneDNN has it (F(2x2, 3x3): 2.25x fewer
    // multiplications; ResNet-50's 3x3 convolutions at batch 1 on two AVX-512 cores ran 1.5x
    // faster), else direct. TGRAPH_CPU_NO_WINOGRAD=1: direct always.
    const bool wino = k[0] == 3 && k[1] == 3 && stride[0] == 1 && stride[1] == 1 && dil[0] == 1 && dil[1] == 1 &&
                      G == 1 && !plain && !no_winograd;
    std::optional<dnnl::convolution_forward::primitive_desc> made;
    if (wino) {
      try {
        made.emplace(conv_desc(dnnl::algorithm::convolution_winograd), attr, eng);
      } catch (const dnnl::error&) {
      }
    }
    if (!made) made.emplace(conv_desc(dnnl::algorithm::convolution_direct), attr, eng);
    const dnnl::convolution_forward::primitive_desc& pd = *made;
    entry->scratch = pd.scratchpad_desc();
    entry->src = pd.src_desc();
    entry->wei = pd.weights_desc();
    entry->dst = pd.dst_desc();
    entry->prim = dnnl::convolution_forward(pd);
    if (entry->src != entry->user_src)
      entry->src_in = dnnl::reorder(dnnl::reorder::primitive_desc(eng, entry->user_src, eng, entry->src));
    if (entry->wei != entry->user_wei)
      entry->wei_in = dnnl::reorder(dnnl::reorder::primitive_desc(eng, entry->user_wei, eng, entry->wei));
    if (entry->dst != entry->user_dst) {
      entry->dst_out = dnnl::reorder(dnnl::reorder::primitive_desc(eng, entry->dst, eng, entry->user_dst));
      if (sum >= 0)
        entry->dst_in = dnnl::reorder(dnnl::reorder::primitive_desc(eng, entry->user_dst, eng, entry->dst));
    }
    return std::shared_ptr<const ConvEntry>(entry);
  });
  if (!e) return false;

  TensorData y = cpu_output(0, Shape(std::vector<int64_t>(e->dst_shape.begin(), e->dst_shape.end())), DType::f32);
  if (y.data() == in[0].data() || y.data() == in[1].data()) return false;  // never planned so; be sure
  auto& eng = dnnl_cpu_engine();
  auto& s = dnnl_thread_stream();
  memory usrc(e->user_src, eng, const_cast<void*>(in[0].data()));
  memory uwei(e->user_wei, eng, const_cast<void*>(in[1].data()));
  memory udst(e->user_dst, eng, y.data());
  try {
    memory src = usrc, wei = uwei, dst = udst;
    if (e->src_in) {
      src = dnnl_thread_memory(e->src, 1);
      e->src_in->execute(s, usrc, src);
    }
    if (e->wei_in) {
      const memory* p = g && constant_input(*g, n, in, 1) ? packed_weights(in[1], e->user_wei, e->wei, s)
                                                             : nullptr;
      if (p) {
        wei = *p;
      } else {
        wei = dnnl_thread_memory(e->wei, 2);
        e->wei_in->execute(s, uwei, wei);
      }
    }
    if (e->dst_out) dst = dnnl_thread_memory(e->dst, 3);
    if (e->sum >= 0) {  // the sum accumulates into the output: the operand goes there first
      const TensorData& r = *(*post)[static_cast<size_t>(e->sum)].operand;
      if (e->dst_in) {
        memory ur(e->user_dst, eng, const_cast<void*>(r.data()));
        e->dst_in->execute(s, ur, dst);
      } else if (r.data() != y.data()) {
        std::memcpy(y.data(), r.data(), y.nbytes());
      }
    }
    memory scratch = dnnl_thread_memory(e->scratch, 0);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch}};
    const int first = e->bias ? 1 : 0;  // post-op 0 is then the primitive's bias
    if (e->bias)
      args.emplace(DNNL_ARG_BIAS, memory(memory::desc({O}, memory::data_type::f32, memory::format_tag::a), eng,
                                         const_cast<void*>((*post)[0].operand->data())));
    add_post_operands(args, *post, e->post_src1, static_cast<size_t>(first));
    e->prim.execute(s, args);
    if (e->dst_out) e->dst_out->execute(s, dst, udst);
    s.wait();
  } catch (const dnnl::error&) {
    return false;  // e.g. out of memory for a reordered copy: the reference still gives the answer
  }
  out.clear();
  out.push_back(std::move(y));
  return true;
}

}  // namespace tg::detail::fast
