// Builders of control flow: each body is built into its own block (region) of the graph.
#include "ops/builder.h"
#include "ops/infer.h"
#include "tgraph/error.h"

namespace tg {
using namespace detail;

namespace {

// Builds one region: params of the given types, then fn's results as the block's results.
template <class Fn>
int32_t build_region(Graph& g, OpKind k, const std::vector<TensorType>& params, Fn&& fn) {
  GraphImpl& impl = g.impl();
  int32_t b = impl.add_block(g.current_block());
  std::vector<Tensor> args;
  for (const TensorType& t : params) args.emplace_back(&impl, impl.add_param(b, t));
  Graph rg = GraphAccess::region_graph(g, b);
  std::vector<Tensor> results = fn(rg, args);
  for (const Tensor& t : results)
    impl.blocks[static_cast<size_t>(b)].results.push_back(use(rg, t, k, "region result"));
  return b;
}

std::vector<Tensor> finish(Graph& g, OpKind k, const std::vector<Tensor>& inputs,
                           std::vector<int32_t> regions) {
  GraphImpl& impl = g.impl();
  std::vector<int32_t> ids;
  for (const Tensor& t : inputs) ids.push_back(use(g, t, k, "input"));
  int32_t n = impl.add_node(g.current_block(), k, std::move(ids), NoDesc{}, {}, std::move(regions));
  std::vector<Tensor> out;
  for (int32_t v : impl.nodes[static_cast<size_t>(n)].outputs) out.emplace_back(&impl, v);
  return out;
}

std::vector<TensorType> types_of(const std::vector<Tensor>& ts) {
  std::vector<TensorType> out;
  for (const Tensor& t : ts) out.push_back(t.type());
  return out;
}

}  // namespace

std::vector<Tensor> Graph::if_else(Tensor pred, const RegionFn& then_fn, const RegionFn& else_fn) {
  use(*this, pred, OpKind::IfElse, "pred");
  if (!then_fn) throw Error("[if_else] needs a then branch");
  int32_t tb = build_region(*this, OpKind::IfElse, {}, [&](Graph& rg, auto&) { return then_fn(rg); });
  int32_t eb = build_region(*this, OpKind::IfElse, {}, [&](Graph& rg, auto&) {
    return else_fn ? else_fn(rg) : std::vector<Tensor>{};
  });
  if (!else_fn && !impl_->blocks[static_cast<size_t>(tb)].results.empty())
    throw Error("[if_else] the then branch returns tensors, so an else branch is required");
  return finish(*this, OpKind::IfElse, {pred}, {tb, eb});
}

std::vector<Tensor> Graph::for_loop(Tensor lower, Tensor upper, Tensor step,
                                    std::vector<Tensor> init, const ForBody& body) {
  std::vector<TensorType> params{TensorType(Shape{}, DType::i32)};
  for (const Tensor& t : init) {
    use(*this, t, OpKind::ForLoop, "init");
    params.push_back(t.type());
  }
  int32_t b = build_region(*this, OpKind::ForLoop, params, [&](Graph& rg, std::vector<Tensor>& a) {
    return body(rg, a[0], std::vector<Tensor>(a.begin() + 1, a.end()));
  });
  std::vector<Tensor> inputs{lower, upper, step};
  inputs.insert(inputs.end(), init.begin(), init.end());
  return finish(*this, OpKind::ForLoop, inputs, {b});
}

std::vector<Tensor> Graph::for_loop(Tensor n, std::vector<Tensor> init, const ForBody& body) {
  use(*this, n, OpKind::ForLoop, "n");
  return for_loop(scalar(0, DType::i32), cast(n, DType::i32), scalar(1, DType::i32), std::move(init),
                  body);
}

std::vector<Tensor> Graph::while_loop(std::vector<Tensor> init, const WhileBefore& before,
                                      const WhileAfter& after) {
  for (const Tensor& t : init) use(*this, t, OpKind::WhileLoop, "init");
  int32_t bb = build_region(*this, OpKind::WhileLoop, types_of(init),
                            [&](Graph& rg, std::vector<Tensor>& a) {
                              auto [pred, results] = before(rg, a);
                              std::vector<Tensor> out{pred};
                              out.insert(out.end(), results.begin(), results.end());
                              return out;
                            });
  std::vector<TensorType> result_types;
  const auto& br = impl_->blocks[static_cast<size_t>(bb)].results;
  for (size_t i = 1; i < br.size(); ++i) result_types.push_back(impl_->type(br[i]));
  int32_t ab = build_region(*this, OpKind::WhileLoop, result_types,
                            [&](Graph& rg, std::vector<Tensor>& a) { return after(rg, a); });
  return finish(*this, OpKind::WhileLoop, init, {bb, ab});
}

}  // namespace tg
