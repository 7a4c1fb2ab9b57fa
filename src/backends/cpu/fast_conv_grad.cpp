// Fast f32 conv2d gradients through oneDNN: conv2d_data_grad (dy, w) -> dx with
// convolution_backward_data and conv2d_weight_grad (dy, x) -> dw with
// convolution_backward_weights. Layouts, padding, groups and dilation as in fast_conv.cpp (the
// geometry is fast_conv_util.h's); tensors are described as they lie. nhwc activations are
// used in place; for others the primitives pick their own layouts, with reorders in and out
// where they differ. Each execution gets its own scratchpad (scratchpad_mode::user, in the
// calling thread's reused buffer): with the library's shared scratchpad, concurrent runs of
// the weight-gradient primitive (which synchronises its threads through the scratchpad) were
// seen to hang.
#include <cstdlib>
#include <optional>

#include "core/env.h"
#include "backends/cpu/fast_conv_util.h"
#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"

namespace tg::detail::fast {
namespace {

using dnnl::memory;

// One backward primitive: operands a (diff_dst), b (weights or src) and the result r.
struct GradEntry {
  dnnl::primitive prim;
  int arg_a, arg_b, arg_r;
  memory::desc user_a, user_b, user_r;
  memory::desc a, b, r;
  memory::desc scratch;
  std::optional<dnnl::reorder> a_in, b_in, r_out;
};

// TGRAPH_CPU_CONV_PLAIN=1 (as for the forward conv) keeps activations in the user's layout.
bool plain_env() {
  static const bool plain = env_flag("TGRAPH_CPU_CONV_PLAIN");
  return plain;
}

PrimitiveCache<GradEntry>& cache() {
  static PrimitiveCache<GradEntry> c;
  return c;
}

bool run(const GradEntry& e, const TensorData& a, const TensorData& b, TensorData& r) {
  auto& eng = dnnl_cpu_engine();
  auto& s = dnnl_thread_stream();
  memory ua(e.user_a, eng, const_cast<void*>(a.data()));
  memory ub(e.user_b, eng, const_cast<void*>(b.data()));
  memory ur(e.user_r, eng, r.data());
  try {
    memory ma = ua, mb = ub, mr = ur;
    if (e.a_in) {
      ma = dnnl_thread_memory(e.a, 1);
      e.a_in->execute(s, ua, ma);
    }
    if (e.b_in) {
      mb = dnnl_thread_memory(e.b, 2);
      e.b_in->execute(s, ub, mb);
    }
    if (e.r_out) mr = dnnl_thread_memory(e.r, 3);
    memory pad = dnnl_thread_memory(e.scratch, 0);
    e.prim.execute(s, {{e.arg_a, ma}, {e.arg_b, mb}, {e.arg_r, mr}, {DNNL_ARG_SCRATCHPAD, pad}});
    if (e.r_out) e.r_out->execute(s, mr, ur);
    s.wait();
  } catch (const dnnl::error&) {
    return false;
  }
  return true;
}

void add_reorders(GradEntry& e) {
  auto& eng = dnnl_cpu_engine();
  if (e.a != e.user_a) e.a_in = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e.user_a, eng, e.a));
  if (e.b != e.user_b) e.b_in = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e.user_b, eng, e.b));
  if (e.r != e.user_r) e.r_out = dnnl::reorder(dnnl::reorder::primitive_desc(eng, e.r, eng, e.user_r));
}

}  // namespace

bool conv2d_grad(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out) {
  if (in.size() != 2 || in[0].dtype() != DType::f32 || in[1].dtype() != DType::f32) return false;
  const auto* d = std::get_if<ConvGradDesc>(&n.attr);
  if (!d) return false;
  const bool data = n.kind == OpKind::Conv2dDataGrad;
  if (!data && n.kind != OpKind::Conv2dWeightGrad) return false;
  const std::vector<int64_t>& rs = d->result_shape;
  for (int64_t v : rs)
    if (v <= 0) return false;  // a dynamic result shape: leave it to the reference
  const auto& xd = data ? rs : in[1].shape().dims();
  const auto& wd = data ? in[1].shape().dims() : rs;
  ConvGeom geo;
  if (!conv_geometry(d->conv, xd, wd, geo)) return false;
  if (in[0].shape().dims() != geo.y_shape()) return false;

  std::vector<int64_t> key = geo.key();
  key.push_back(data);
  key.push_back(plain_env());
  auto e = cache().get(key, [&] {
    using tag = memory::format_tag;
    const auto f32 = memory::data_type::f32;
    auto& eng = dnnl_cpu_engine();
    auto entry = std::make_shared<GradEntry>();
    memory::dims wdims, wstr;
    geo.weights(wdims, wstr);
    memory::desc user_x(geo.x_dims(), f32, geo.act_tag()), user_y(geo.y_dims(), f32, geo.act_tag());
    memory::desc user_w(wdims, f32, wstr);
    // nhwc activations stay as they are: with oneDNN 2.x the blocked backward kernels it
    // would pick cost more in reorders of dy, x and dx than they gain (measured on AVX-512).
    const tag act = plain_env() || geo.last ? geo.act_tag() : tag::any;
    memory::desc x_any(geo.x_dims(), f32, act), y_any(geo.y_dims(), f32, act), w_any(wdims, f32, tag::any);
    const memory::dims strides{geo.stride[0], geo.stride[1]}, dil{geo.dil[0] - 1, geo.dil[1] - 1},
        pl{geo.pl[0], geo.pl[1]}, pr{geo.pr[0], geo.pr[1]};
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       x_any, w_any, y_any, strides, dil, pl, pr);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::primitive_desc fpd(fd, attr, eng);
    entry->user_a = user_y;
    entry->arg_a = DNNL_ARG_DIFF_DST;
    if (data) {
      dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, x_any, w_any, y_any,
                                               strides, dil, pl, pr);
      dnnl::convolution_backward_data::primitive_desc pd(bd, attr, eng, fpd);
      entry->scratch = pd.scratchpad_desc();
      entry->user_b = user_w;
      entry->user_r = user_x;
      entry->arg_b = DNNL_ARG_WEIGHTS;
      entry->arg_r = DNNL_ARG_DIFF_SRC;
      entry->a = pd.diff_dst_desc();
      entry->b = pd.weights_desc();
      entry->r = pd.diff_src_desc();
      entry->prim = dnnl::convolution_backward_data(pd);
    } else {
      dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, x_any, w_any, y_any,
                                                  strides, dil, pl, pr);
      dnnl::convolution_backward_weights::primitive_desc pd(bd, attr, eng, fpd);
      entry->scratch = pd.scratchpad_desc();
      entry->user_b = user_x;
      entry->user_r = user_w;
      entry->arg_b = DNNL_ARG_SRC;
      entry->arg_r = DNNL_ARG_DIFF_WEIGHTS;
      entry->a = pd.diff_dst_desc();
      entry->b = pd.src_desc();
      entry->r = pd.diff_weights_desc();
      entry->prim = dnnl::convolution_backward_weights(pd);
    }
    add_reorders(*entry);
    return std::shared_ptr<const GradEntry>(entry);
  });
  if (!e) return false;
  TensorData r = cpu_output(0, Shape(rs), DType::f32);
  if (!run(*e, in[0], in[1], r)) return false;
  out.clear();
  out.push_back(std::move(r));
  return true;
}

}  // namespace tg::detail::fast
