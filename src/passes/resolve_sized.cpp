// sized_ops become their plain ops once the compile's feed types fix their sizes (sized_op.h).
// In place: the outputs keep their value ids, so nothing that reads them moves; the nodes that
// computed the sizes are left for dce.
#include "passes/resolve_sized.h"

#include <unordered_map>

#include "ops/sized_op.h"
#include "passes/module.h"

namespace tg::detail {

bool resolve_sized_ops(GraphImpl& g) {
  bool any = false;
  for (;;) {
    bool changed = false;
    std::unordered_map<int32_t, std::optional<TensorData>> memo;  // valid while the types stay
    for (Block& b : g.blocks)
      for (int32_t id : b.nodes) {
        Node& n = g.nodes[static_cast<size_t>(id)];
        if (n.kind != OpKind::SizedOp) continue;
        const size_t data = sized_data_inputs(std::get<SizedDesc>(n.attr));
        std::vector<TensorType> types;
        bool known = true;
        for (size_t i = 0; i < data && i < n.inputs.size(); ++i) {
          types.push_back(g.type(n.inputs[i]));
          known &= types.back().shape.is_static();
        }
        std::vector<TensorData> sizes;
        for (size_t i = data; known && i < n.inputs.size(); ++i) {
          std::optional<TensorData> t = known_size_value(g, n.inputs[i], memo);
          if (t) sizes.push_back(std::move(*t));
          else known = false;
        }
        if (!known) continue;
        PlainOp p = sized_as_plain(n, sizes, types);
        n.kind = p.kind;
        n.attr = std::move(p.attr);
        n.inputs = std::move(p.inputs);
        changed = true;
      }
    if (!changed) return any;
    any = true;
    reinfer(g);  // the plain ops' static types flow on (and may fix another sized_op's sizes)
  }
}

}  // namespace tg::detail
