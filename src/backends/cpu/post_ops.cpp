// Elementwise ops applied by oneDNN primitives to their results (fast_kernels.h's PostOp): the
// mapping to oneDNN's algorithms and the pieces the convolution and the matmul share.
#include <cstring>

#include "backends/cpu/fast_kernels.h"

namespace tg::detail::fast {
namespace {

// oneDNN's algorithm for a post-op kind; the second is false for binary ops.
std::pair<dnnl::algorithm, bool> post_algorithm(OpKind k) {
  using A = dnnl::algorithm;
  switch (k) {
    case OpKind::Relu: case OpKind::LeakyRelu: return {A::eltwise_relu, true};
    case OpKind::Elu: return {A::eltwise_elu, true};
    case OpKind::Sigmoid: return {A::eltwise_logistic, true};
    case OpKind::Tanh: return {A::eltwise_tanh, true};
    case OpKind::Gelu: return {A::eltwise_gelu_erf, true};
    case OpKind::Silu: return {A::eltwise_swish, true};
    case OpKind::Add: return {A::binary_add, false};
    case OpKind::Sub: return {A::binary_sub, false};
    case OpKind::Mul: return {A::binary_mul, false};
    case OpKind::Div: return {A::binary_div, false};
    default: return {A::undef, false};
  }
}

// oneDNN's swish is x * sigmoid(alpha x): silu is alpha 1.
float alpha_of(const PostOp& p) { return static_cast<float>(p.kind == OpKind::Silu ? 1.0 : p.alpha); }

}  // namespace

bool post_op_supported(OpKind k) { return post_algorithm(k).first != dnnl::algorithm::undef; }
bool post_is_unary(OpKind k) { return post_algorithm(k).second; }

void post_key(std::vector<int64_t>& key, const PostOp& p) {
  key.push_back(static_cast<int64_t>(p.kind));
  const double alpha = alpha_of(p);
  int64_t bits;
  std::memcpy(&bits, &alpha, sizeof bits);
  key.push_back(bits);
}

void append_post_op(dnnl::post_ops& po, const PostOp& p, const dnnl::memory::desc& operand) {
  const auto [alg, unary] = post_algorithm(p.kind);
  if (unary) po.append_eltwise(1.f, alg, alpha_of(p), 0.f);
  else po.append_binary(alg, operand);
}

void add_post_operands(std::unordered_map<int, dnnl::memory>& args, const std::vector<PostOp>& post,
                       const std::vector<dnnl::memory::desc>& descs, size_t first) {
  for (size_t i = first; i < descs.size() && i < post.size(); ++i)
    if (post[i].operand && !descs[i].is_zero())
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i - first)) | DNNL_ARG_SRC_1,
                   dnnl::memory(descs[i], dnnl_cpu_engine(), const_cast<void*>(post[i].operand->data())));
}

}  // namespace tg::detail::fast
