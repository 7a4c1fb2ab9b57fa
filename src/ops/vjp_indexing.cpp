// Gradient rules of the shape ops beyond the core, gather/scatter and stencil.
#include "ops/vjp.h"

namespace tg::detail {

void register_indexing_vjps(VjpTable& t) { (void)t; }

}  // namespace tg::detail
