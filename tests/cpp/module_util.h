#pragma once
// Pass tests: a Module over a copy of a graph with the given targets.
#include <vector>

#include "passes/module.h"
#include "tgraph/graph.h"

namespace passtest {

inline tg::detail::Module module_of(const tg::Graph& g, const std::vector<tg::Tensor>& targets,
                                    const std::vector<tg::Operation>& ops = {}) {
  tg::detail::Module m;
  m.graph = g.impl();
  for (const tg::Tensor& t : targets) m.targets.push_back(t.id());
  for (const tg::Operation& o : ops) m.target_ops.push_back(o.id());
  return m;
}

}  // namespace passtest
