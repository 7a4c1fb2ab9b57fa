// Builders of random ops: the Philox state is an explicit tensor threaded through them.
#include "ops/builder.h"

namespace tg {
using namespace detail;

Tensor Graph::random_state(int64_t seed) { return make(*this, OpKind::RandomState, {}, SeedDesc{seed}); }

std::pair<Tensor, Tensor> Graph::random(Tensor state, const RandomDesc& d) {
  auto out = make_multi(*this, OpKind::Random, {state}, d);
  return {out[0], out[1]};
}

std::pair<Tensor, Tensor> Graph::dropout(Tensor x, Tensor state, double rate) {
  auto out = make_multi(*this, OpKind::Dropout, {x, state}, DropoutDesc{rate});
  return {out[0], out[1]};
}

}  // namespace tg
