// Fast f32 matmul through oneDNN's matmul primitive: batch dims are right-aligned and
// broadcast (a size-1 dim stretches), transposes are strides on the operand's memory
// descriptor, so no operand is copied; a constant 2-D B is packed once into the primitive's
// own layout (packed_weights.h). One primitive per problem, cached.
#include <algorithm>
#include <unordered_map>

#include "backends/cpu/fast_kernels.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/packed_weights.h"

namespace tg::detail::fast {
namespace {

using dnnl::memory;

struct MatmulEntry {
  dnnl::matmul prim;
  memory::desc a, b, c;
  memory::desc b_user;  // B as stored, when the primitive takes it packed (b: its layout)
  memory::desc scratch;  // per-execution scratchpad: runs from several threads share nothing
  std::vector<memory::desc> post_src1;  // per post-op: a binary op's operand, else empty
};

PrimitiveCache<MatmulEntry>& cache() {
  static PrimitiveCache<MatmulEntry> c;
  return c;
}

// Row-major strides of a stored shape.
memory::dims strides_of(const memory::dims& d) {
  memory::dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

// Logical [batch..., rows, cols] descriptor of an operand stored as `stored` (rank r, padded
// with leading 1s), read transposed when `t` (the last two stored dims are swapped).
memory::desc operand_md(const memory::dims& stored, bool t) {
  memory::dims dims = stored, st = strides_of(stored);
  if (t) {
    size_t r = dims.size();
    std::swap(dims[r - 2], dims[r - 1]);
    std::swap(st[r - 2], st[r - 1]);
  }
  return memory::desc(dims, memory::data_type::f32, st);
}

}  // namespace

bool matmul(const Node& n, const std::vector<TensorData>& in, std::vector<TensorData>& out, const GraphImpl* g,
            const std::vector<PostOp>* post) {
  if (in.size() != 2 || in[0].dtype() != DType::f32 || in[1].dtype() != DType::f32) return false;
  const auto* d = std::get_if<MatmulDesc>(&n.attr);
  if (!d) return false;
  const auto &ad = in[0].shape().dims(), &bd = in[1].shape().dims();
  if (ad.size() < 2 || bd.size() < 2) return false;
  if (std::max(ad.size(), bd.size()) > DNNL_MAX_NDIMS) return false;
  for (int64_t x : ad)
    if (x <= 0) return false;  // empty operands: the reference handles them
  for (int64_t x : bd)
    if (x <= 0) return false;
  const bool ta = d->transpose_a, tb = d->transpose_b;
  // A shared 2-D weight under a batched A ([1,128,768] x [768,3072], a transformer's linear
  // layers): A's batch dims fold into its rows and the product is one 2-D gemm, which oneDNN
  // runs faster than the broadcast batched form (BERT-base's linears 15-20% on 2 AVX2 cores).
  // The result's memory is the same [batch..., m, n] either way.
  std::vector<int64_t> fa(ad.begin(), ad.end());
  if (!ta && bd.size() == 2 && ad.size() > 2) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < ad.size(); ++i) rows *= ad[i];
    fa = {rows, ad.back()};
  }
  const size_t r = std::max(fa.size(), bd.size());
  memory::dims as(r - fa.size(), 1), bs(r - bd.size(), 1);
  as.insert(as.end(), fa.begin(), fa.end());
  bs.insert(bs.end(), bd.begin(), bd.end());
  const int64_t m = ta ? as[r - 1] : as[r - 2], ka = ta ? as[r - 2] : as[r - 1];
  const int64_t kb = tb ? bs[r - 1] : bs[r - 2], nn = tb ? bs[r - 2] : bs[r - 1];
  if (ka != kb) return false;
  memory::dims cs(r);
  for (size_t i = 0; i + 2 < r; ++i) {
    if (as[i] != bs[i] && as[i] != 1 && bs[i] != 1) return false;
    cs[i] = std::max(as[i], bs[i]);
  }
  cs[r - 2] = m;
  cs[r - 1] = nn;

  // A constant 2-D B (a layer's weights) lets the primitive choose B's layout: it is packed
  // once (packed_weights.h) instead of per call.
  const bool pack_b = g && bd.size() == 2 && constant_input(*g, n, in, 1);
  std::vector<int64_t> key{ta, tb, static_cast<int64_t>(r), pack_b};
  key.insert(key.end(), as.begin(), as.end());
  key.insert(key.end(), bs.begin(), bs.end());
  // Post-ops (fast_kernels.h): activations, and binary ops with a scalar or one value per
  // column (a bias); their kinds, parameters and operand dims are part of the key.
  std::vector<memory::desc> operands;
  for (const PostOp& p : post ? *post : std::vector<PostOp>{}) {
    if (!post_op_supported(p.kind) || (post_is_unary(p.kind) != (p.operand == nullptr))) return false;
    memory::dims od(r, 1);
    if (p.operand) {
      const auto& td = p.operand->shape().dims();
      if (p.operand->dtype() != DType::f32 || td.size() > r) return false;
      std::copy(td.begin(), td.end(), od.begin() + static_cast<long>(r - td.size()));
      for (size_t i = 0; i + 1 < r; ++i)
        if (od[i] != 1) return false;
      if (od[r - 1] != 1 && od[r - 1] != nn) return false;
    }
    operands.push_back(p.operand ? memory::desc(od, memory::data_type::f32, strides_of(od)) : memory::desc());
    post_key(key, p);
    key.push_back(p.operand ? od[r - 1] : -1);
  }
  auto e = cache().get(key, [&] {
    auto entry = std::make_shared<MatmulEntry>();
    entry->a = operand_md(as, ta);
    entry->b = operand_md(bs, tb);
    if (pack_b) entry->b_user = entry->b;
    entry->c = memory::desc(cs, memory::data_type::f32, strides_of(cs));
    const memory::desc b_any(entry->b.dims(), memory::data_type::f32, memory::format_tag::any);
    dnnl::matmul::desc md(entry->a, pack_b ? b_any : entry->b, entry->c);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (post && !post->empty()) {
      dnnl::post_ops po;
      for (size_t i = 0; i < post->size(); ++i) append_post_op(po, (*post)[i], operands[i]);
      attr.set_post_ops(po);
      entry->post_src1 = operands;
    }
    dnnl::matmul::primitive_desc pd(md, attr, dnnl_cpu_engine());
    if (pack_b) {
      entry->b = pd.weights_desc();
      if (entry->b == entry->b_user) entry->b_user = memory::desc();  // its own layout: nothing to pack
    }
    entry->scratch = pd.scratchpad_desc();
    entry->prim = dnnl::matmul(pd);
    return std::shared_ptr<const MatmulEntry>(entry);
  });
  if (!e) return false;

  // The output keeps A's batch dims (the folded gemm writes the same memory).
  std::vector<int64_t> out_dims(cs.begin(), cs.end());
  if (fa.size() != ad.size()) {
    out_dims.assign(ad.begin(), ad.end() - 1);
    out_dims.push_back(nn);
  }
  TensorData c = cpu_output(0, Shape(std::move(out_dims)), DType::f32);
  auto& eng = dnnl_cpu_engine();
  memory ma(e->a, eng, const_cast<void*>(in[0].data()));
  memory mb(e->b_user.is_zero() ? e->b : e->b_user, eng, const_cast<void*>(in[1].data()));
  memory mc(e->c, eng, c.data());
  try {
    auto& s = dnnl_thread_stream();
    if (!e->b_user.is_zero()) {  // packed B: the kept copy, else one for this call
      const memory* p = packed_weights(in[1], e->b_user, e->b, s);
      if (p) {
        mb = *p;
      } else {
        memory user(e->b_user, eng, const_cast<void*>(in[1].data()));
        mb = dnnl_thread_memory(e->b, 2);
        dnnl::reorder(dnnl::reorder::primitive_desc(eng, e->b_user, eng, e->b)).execute(s, user, mb);
      }
    }
    memory scratch = dnnl_thread_memory(e->scratch, 0);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, scratch}};
    if (post) add_post_operands(args, *post, e->post_src1, 0);
    e->prim.execute(s, args);
    s.wait();
  } catch (const dnnl::error&) {
    return false;  // e.g. out of scratch memory: the reference still gives the answer
  }
  out.clear();
  out.push_back(std::move(c));
  return true;
}

}  // namespace tg::detail::fast
